#include "tools/train/trainer.h"

#include <chrono>

#include "merak/autograd/engine.h"
#include "merak/core/parallel.h"
#include "merak/core/philox.h"
#include "merak/cuda/runtime.h"
#include "merak/ops/functional.h"

namespace merak::train {
namespace {

[[noreturn]] void config_error(const config::Config& c, const std::string& key,
                               const std::string& what) {
  throw config::ConfigError(c.path + ": key '" + key + "': " + what);
}

}  // namespace

models::ModelOptions model_options(const config::ModelConfig& m) {
  models::ModelOptions o;
  o.family = m.family;
  o.layers = m.layers;
  o.hidden = m.hidden;
  o.heads = m.heads;
  o.ffn_hidden = m.ffn_hidden;
  o.max_seq = m.max_seq;
  o.vocab = m.vocab;
  o.type_vocab = m.type_vocab;
  o.dropout = m.dropout;
  o.ln_eps = m.ln_eps;
  o.init_std = m.init_std;
  o.recompute = m.recompute;
  return o;
}

Trainer::Trainer(const config::Config& config) : config_(config) {
  const auto& t = config_.train;
  if (t.threads > 0) set_num_threads(t.threads);
  if (t.device == "cuda") {
    std::string why;
    if (cuda::device_count(&why) == 0)
      config_error(config_, "train.device", "cuda, but no CUDA device was found (" + why + ")");
    config_error(config_, "train.device", "cuda: the CUDA kernels are built, but training on the "
                 "GPU is not wired into merak_train yet (use cpu)");
  }
  if (t.device != "cpu")
    config_error(config_, "train.device", "'" + t.device + "' is not available in this build");

  data_ = std::make_unique<BatchSource>(config_);

  model_ = models::make_model(model_options(config_.model));
  model_->materialize(t.seed);
  model_->train(true);

  optim::AdamWOptions o;
  o.lr = config_.optimizer.lr;
  o.beta1 = config_.optimizer.beta1;
  o.beta2 = config_.optimizer.beta2;
  o.eps = config_.optimizer.eps;
  o.weight_decay = config_.optimizer.weight_decay;
  optimizer_ = std::make_unique<optim::AdamW>(optim::make_params(model_->named_parameters()), o);
  norms_ = std::make_unique<optim::GradNormTracker>(optimizer_->params());
}

Trainer::~Trainer() = default;

models::Batch Trainer::batch(int64_t step, int64_t r0, int64_t r1) const {
  return data_->batch(step, r0, r1);
}

StepStats Trainer::step() {
  const auto& t = config_.train;
  const auto start = std::chrono::steady_clock::now();
  const int64_t step = optimizer_->steps_taken();
  // The parallel job's micro-batch size, so both compute the same per-micro-batch means.
  const int64_t micro = config::micro_batch_size(config_);
  const int64_t n_micro = t.batch / micro;

  StepStats s;
  s.lr = optim::scheduled_lr(step, t.steps, config_.optimizer.lr, config_.schedule.warmup_steps,
                             config_.schedule.decay, config_.schedule.min_lr);
  optimizer_->zero_grad();
  for (int64_t m = 0; m < n_micro; ++m) {
    set_rng_stream(uint64_t(step * n_micro + m));  // fresh dropout masks per micro-batch
    const Tensor loss = model_->loss(batch(step, m * micro, (m + 1) * micro));
    s.loss += loss.item() / double(n_micro);
    const Tensor scaled = ops::mul_scalar(loss, 1.0 / double(n_micro));
    // The last backward completes each gradient: its norm is taken then, while in cache.
    const Tensor seed = Tensor::ones(scaled.shape(), scaled.dtype(), scaled.device());
    autograd::backward({scaled}, {seed},
                       m + 1 == n_micro ? norms_->on_leaf_ready() : autograd::LeafReadyFn());
  }
  // Clipping rides in the optimizer's pass over the gradients.
  s.grad_norm = norms_->norm();
  optimizer_->step(s.lr, optim::clip_coefficient(s.grad_norm, config_.optimizer.grad_clip));

  s.step = optimizer_->steps_taken();
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  s.tokens = double(t.batch) * double(t.seq_len);
  s.model_flops = model_->flops_per_token(t.seq_len) * s.tokens;
  s.peak_mem_bytes = cpu_memory_stats().peak_bytes;
  return s;
}

}  // namespace merak::train
