// C++ side of the PyTorch parity test. For a small GPT and a small BERT it materialises the
// model from a seed, builds a fixed batch, and writes into DIR (safetensors, plus a JSON config
// that tells compare.py how to rebuild the same model and optimizer):
//   <family>_config.json        model shape and optimizer settings
//   <family>_init.safetensors   every parameter before training
//   <family>_batch.safetensors  the batch
//   <family>_grads.safetensors  the loss and every parameter's gradient (before clipping)
//   <family>_after.safetensors  every parameter after the AdamW steps, with the per-step losses,
//                               gradient norms (before clipping) and learning rates
// Usage: parity_dump DIR [--perturb]. --perturb nudges one weight after writing the initial
// values, so the outputs no longer match them: the test uses it to show compare.py can fail.
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "merak/autograd/engine.h"
#include "merak/checkpoint/safetensors.h"
#include "merak/optim/adamw.h"
#include "models/model.h"

namespace {

using merak::Tensor;
using merak::models::Batch;
using merak::models::ModelOptions;
using Named = std::vector<std::pair<std::string, Tensor>>;

// The optimizer settings both sides use. The clip threshold is far below every step's gradient
// norm (2 to 4 here; compare.py checks that it clipped each time), so each step's gradients are
// scaled by a different factor, which AdamW does not cancel: skipping the clip fails the test.
// With warmup 2 of 3 steps the learning rates are lr/2, lr, lr (the cosine decay starts from lr
// at the end of warmup).
struct OptimSettings {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
  double clip = 0.05, min_lr = 1e-4;
  int64_t steps = 3, total_steps = 3, warmup_steps = 2;
  std::string decay = "cosine";
};

struct Case {
  ModelOptions model;
  Batch batch;
};

Tensor i64_tensor(const std::vector<int64_t>& v, const merak::Shape& shape) {
  return Tensor::from_vector(v, shape);
}

// GPT: random tokens; targets are the next token of one stream of seq + 1 tokens per row.
Case gpt_case() {
  Case c;
  c.model.family = "gpt";
  c.model.layers = 2, c.model.hidden = 64, c.model.heads = 4, c.model.max_seq = 32;
  c.model.vocab = 96;
  const int64_t b = 2, t = 32;
  std::mt19937_64 rng(7);
  std::vector<int64_t> tokens, targets;
  for (int64_t r = 0; r < b; ++r) {
    std::vector<int64_t> stream;
    for (int64_t i = 0; i <= t; ++i) stream.push_back(int64_t(rng() % uint64_t(c.model.vocab)));
    tokens.insert(tokens.end(), stream.begin(), stream.end() - 1);
    targets.insert(targets.end(), stream.begin() + 1, stream.end());
  }
  c.batch.tokens = i64_tensor(tokens, {b, t});
  c.batch.targets = i64_tensor(targets, {b, t});
  return c;
}

// BERT: row 0 is all real tokens, row 1 has `real1` real tokens then padding (id 0, segment 0,
// mask false). Segment 1 covers the second half of the real tokens. About one real non-[CLS]
// position in five is an MLM target (always at least one per row); -100 elsewhere.
Case bert_case() {
  Case c;
  c.model.family = "bert";
  c.model.layers = 2, c.model.hidden = 64, c.model.heads = 4, c.model.max_seq = 32;
  c.model.vocab = 100;
  const int64_t b = 2, t = 32, real[2] = {32, 21};
  std::mt19937_64 rng(11);
  std::vector<int64_t> tokens, segments, mlm;
  std::vector<bool> mask_bits;
  for (int64_t r = 0; r < b; ++r)
    for (int64_t i = 0; i < t; ++i) {
      const bool is_real = i < real[r];
      tokens.push_back(is_real ? 1 + int64_t(rng() % uint64_t(c.model.vocab - 1)) : 0);
      segments.push_back(is_real && i >= real[r] / 2 ? 1 : 0);
      mask_bits.push_back(is_real);
      const bool predicted = is_real && i > 0 && (i == 1 || rng() % 5 == 0);
      mlm.push_back(predicted ? int64_t(rng() % uint64_t(c.model.vocab)) : -100);
    }
  c.batch.tokens = i64_tensor(tokens, {b, t});
  c.batch.segment_ids = i64_tensor(segments, {b, t});
  c.batch.mlm_targets = i64_tensor(mlm, {b, t});
  c.batch.attention_mask = Tensor::empty({b, t}, merak::DType::Bool);
  for (int64_t i = 0; i < b * t; ++i) c.batch.attention_mask.data<bool>()[i] = mask_bits[size_t(i)];
  c.batch.nsp_labels = i64_tensor({1, 0}, {b});
  return c;
}

Named batch_tensors(const Batch& b) {
  Named out;
  auto put = [&out](const char* name, const Tensor& t) {
    if (t.defined()) out.emplace_back(name, t);
  };
  put("tokens", b.tokens);
  put("targets", b.targets);
  put("segment_ids", b.segment_ids);
  put("attention_mask", b.attention_mask);
  put("mlm_targets", b.mlm_targets);
  put("nsp_labels", b.nsp_labels);
  return out;
}

Tensor f64_vector(const std::vector<double>& v) {
  return Tensor::from_vector(v, {int64_t(v.size())});
}

void write_config(const std::string& path, const ModelOptions& m, const OptimSettings& o) {
  std::ofstream f(path);
  MERAK_CHECK(f, "parity_dump: cannot write ", path);
  f.precision(17);
  f << "{\"family\": \"" << m.family << "\",\n"
    << " \"model\": {\"layers\": " << m.layers << ", \"hidden\": " << m.hidden
    << ", \"heads\": " << m.heads << ", \"ffn_hidden\": " << m.ffn() << ", \"max_seq\": "
    << m.max_seq << ", \"vocab\": " << m.vocab << ", \"type_vocab\": " << m.type_vocab
    << ", \"ln_eps\": " << m.ln_eps << "},\n"
    << " \"optim\": {\"lr\": " << o.lr << ", \"beta1\": " << o.beta1 << ", \"beta2\": " << o.beta2
    << ", \"eps\": " << o.eps << ", \"weight_decay\": " << o.weight_decay << ", \"clip\": "
    << o.clip << ", \"min_lr\": " << o.min_lr << ", \"steps\": " << o.steps
    << ", \"total_steps\": " << o.total_steps << ", \"warmup_steps\": " << o.warmup_steps
    << ", \"decay\": \"" << o.decay << "\"}}\n";
}

void run(const std::string& dir, Case c, bool perturb) {
  namespace ck = merak::checkpoint;
  const std::string prefix = dir + "/" + c.model.family + "_";
  const OptimSettings o;
  c.model.dropout = 0;  // parity needs the deterministic path
  write_config(prefix + "config.json", c.model, o);

  auto model = merak::models::make_model(c.model);
  model->materialize(1234);
  model->train(true);
  const Named params = model->named_parameters();
  Named init;
  for (const auto& [name, p] : params) init.emplace_back(name, p.clone());
  ck::save_safetensors(prefix + "init.safetensors", init);
  ck::save_safetensors(prefix + "batch.safetensors", batch_tensors(c.batch));
  if (perturb) {
    // One element of the first MLP weight, by 1e-3 (its values are ~0.02): a change this small
    // must still show, or the tolerance is too loose.
    for (const auto& [name, w] : params)
      if (name.find("mlp.fc.weight") != std::string::npos) {
        w.data<float>()[w.numel() / 3] += 1e-3f;
        std::printf("parity_dump: perturbed %s\n", name.c_str());
        break;
      }
  }

  merak::optim::AdamWOptions ao;
  ao.lr = o.lr, ao.beta1 = o.beta1, ao.beta2 = o.beta2, ao.eps = o.eps;
  ao.weight_decay = o.weight_decay;
  merak::optim::AdamW opt(merak::optim::make_params(params), ao);
  std::vector<double> losses, norms, lrs;
  for (int64_t step = 0; step < o.steps; ++step) {
    opt.zero_grad();
    const Tensor loss = model->loss(c.batch);
    merak::autograd::backward(loss);
    losses.push_back(loss.item());
    if (step == 0) {
      Named grads{{"loss", loss.detach()}};
      for (const auto& [name, p] : params) {
        MERAK_CHECK(p.grad().defined(), "parity_dump: no gradient reached ", name);
        grads.emplace_back(name, p.grad());
      }
      ck::save_safetensors(prefix + "grads.safetensors", grads);
    }
    norms.push_back(merak::optim::clip_grad_norm(opt.params(), o.clip));
    lrs.push_back(merak::optim::scheduled_lr(step, o.total_steps, o.lr, o.warmup_steps, o.decay,
                                             o.min_lr));
    opt.step(lrs.back());
  }
  Named after = params;
  after.emplace_back("step_losses", f64_vector(losses));
  after.emplace_back("grad_norms", f64_vector(norms));
  after.emplace_back("lrs", f64_vector(lrs));
  ck::save_safetensors(prefix + "after.safetensors", after);
  std::printf("parity_dump: %s losses", c.model.family.c_str());
  for (double l : losses) std::printf(" %.6f", l);
  std::printf(", grad norms");
  for (double n : norms) std::printf(" %.4f", n);
  std::printf(" (clip %g)\n", o.clip);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: parity_dump DIR [--perturb]\n");
    return 2;
  }
  const bool perturb = argc > 2 && std::string(argv[2]) == "--perturb";
  try {
    run(argv[1], gpt_case(), perturb);
    run(argv[1], bert_case(), perturb);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "parity_dump: %s\n", e.what());
    return 1;
  }
  return 0;
}
