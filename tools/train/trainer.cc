#include "tools/train/trainer.h"

#include <chrono>

#include "merak/autograd/engine.h"
#include "merak/core/parallel.h"
#include "merak/core/philox.h"
#include "merak/cuda/caching_allocator.h"
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
    device_ = Device::cuda(0);
  } else if (t.device != "cpu") {
    config_error(config_, "train.device", "'" + t.device + "' is not available in this build");
  }

  data_ = std::make_unique<BatchSource>(config_);

  model_ = models::make_model(model_options(config_.model));
  // Drawn on the CPU and then moved: every device starts from the same weights.
  model_->materialize(t.seed);
  if (t.precision != "f32") {
    // Config validation allows 16-bit compute on cuda only.
    optim::LossScalerOptions scaling;
    scaling.dynamic = t.loss_scale.mode == "dynamic";
    scaling.initial = float(t.loss_scale.initial);
    scaling.growth = float(t.loss_scale.growth);
    scaling.backoff = float(t.loss_scale.backoff);
    scaling.growth_interval = t.loss_scale.growth_interval;
    scaling.hysteresis = t.loss_scale.hysteresis;
    scaling.min = float(t.loss_scale.min);
    mixed_ = std::make_unique<MixedPrecision>(*model_, device_, dtype_from_name(t.precision),
                                              scaling);
  } else if (!device_.is_cpu()) {
    model_->to(device_);
  }
  model_->train(true);

  optim::AdamWOptions o;
  o.lr = config_.optimizer.lr;
  o.beta1 = config_.optimizer.beta1;
  o.beta2 = config_.optimizer.beta2;
  o.eps = config_.optimizer.eps;
  o.weight_decay = config_.optimizer.weight_decay;
  optimizer_ = std::make_unique<optim::AdamW>(
      mixed_ ? mixed_->master_params() : optim::make_params(model_->named_parameters()), o);
  norms_ = std::make_unique<optim::GradNormTracker>(optimizer_->params());
}

Trainer::~Trainer() = default;

models::Batch Trainer::batch(int64_t step, int64_t r0, int64_t r1) const {
  return data_->batch(step, r0, r1);
}

models::Batch Trainer::device_batch(int64_t step, int64_t r0, int64_t r1) const {
  models::Batch b = batch(step, r0, r1);
  if (device_.is_cpu()) return b;
  for (Tensor* t : {&b.tokens, &b.targets, &b.segment_ids, &b.attention_mask, &b.mlm_targets,
                    &b.nsp_labels})
    if (t->defined()) *t = t->to(device_);
  return b;
}

StepStats Trainer::step() {
  const auto& t = config_.train;
  const auto start = std::chrono::steady_clock::now();
  const int64_t step = steps_;
  // The parallel job's micro-batch size, so both compute the same per-micro-batch means.
  const int64_t micro = config::micro_batch_size(config_);
  const int64_t n_micro = t.batch / micro;

  StepStats s;
  s.lr = optim::scheduled_lr(step, t.steps, config_.optimizer.lr, config_.schedule.warmup_steps,
                             config_.schedule.decay, config_.schedule.min_lr);
  optimizer_->zero_grad();
  if (mixed_) mixed_->zero_grad();
  // Under f16 the loss is scaled for backward; this step's gradients carry this factor.
  const double loss_scale = mixed_ ? mixed_->loss_scale() : 1.0;
  for (int64_t m = 0; m < n_micro; ++m) {
    set_rng_stream(uint64_t(step * n_micro + m));  // fresh dropout masks per micro-batch
    const Tensor loss = model_->loss(device_batch(step, m * micro, (m + 1) * micro));
    s.loss += loss.item() / double(n_micro);
    const Tensor scaled = ops::mul_scalar(loss, loss_scale / double(n_micro));
    // The last backward completes each gradient: its norm is taken then, while in cache.
    const Tensor seed = Tensor::ones(scaled.shape(), scaled.dtype(), scaled.device());
    autograd::backward({scaled}, {seed},
                       m + 1 == n_micro ? norms_->on_leaf_ready() : autograd::LeafReadyFn());
  }
  const bool apply = mixed_ ? mixed_->gradients_to_masters(&s.event) : true;
  // Clipping (and unscaling) rides in the optimizer's pass over the gradients.
  s.grad_norm = norms_->norm() / loss_scale;
  if (apply) {
    const float clip = optim::clip_coefficient(s.grad_norm, config_.optimizer.grad_clip);
    optimizer_->step(s.lr, float(double(clip) / loss_scale));
    if (mixed_) mixed_->masters_to_model();
  }
  s.skipped = !apply;
  ++steps_;

  // The device runs behind the host: the step ends when its work does.
  if (device_.is_cuda()) cuda::synchronize(device_.index);
  s.step = steps_;
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  s.tokens = double(t.batch) * double(t.seq_len);
  s.model_flops = model_->flops_per_token(t.seq_len) * s.tokens;
  s.peak_mem_bytes = device_.is_cpu() ? cpu_memory_stats().peak_bytes
                                       : cuda::caching_allocator().stats().peak_bytes;
  return s;
}

}  // namespace merak::train
