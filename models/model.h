// What the trainer sees of a model: a Module that turns a batch into a scalar loss, plus its
// model FLOPs per token. Families register a factory by name (MERAK_REGISTER_MODEL), so configs
// refer to them as `model.family: gpt`.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "merak/nn/module.h"
#include "merak/nn/transformer.h"

namespace merak::models {

struct ModelOptions {
  std::string family = "gpt";
  int64_t layers = 4, hidden = 256, heads = 4;
  int64_t ffn_hidden = 0;  // 0 = 4 * hidden
  int64_t max_seq = 64, vocab = 256, type_vocab = 2;
  double dropout = 0.0, ln_eps = 1e-5, init_std = 0.02;
  bool recompute = false;  // checkpoint every block (activations rebuilt in backward)

  int64_t ffn() const { return ffn_hidden > 0 ? ffn_hidden : 4 * hidden; }
};

// Inputs of one (micro-)batch; a family reads the fields it needs.
struct Batch {
  Tensor tokens;          // i64 [B, T]
  Tensor targets;         // GPT: i64 [B, T] next tokens
  Tensor segment_ids;     // BERT: i64 [B, T]
  Tensor attention_mask;  // BERT: bool [B, T], true = real token
  Tensor mlm_targets;     // BERT: i64 [B, T], -100 = not predicted
  Tensor nsp_labels;      // BERT: i64 [B]
};

class Model : public nn::Module {
 public:
  virtual Tensor loss(const Batch& batch) const = 0;
  // Training FLOPs (forward + backward) per token at sequence length `seq`.
  virtual double flops_per_token(int64_t seq) const = 0;
  virtual const ModelOptions& options() const = 0;
};

// The transformer-block options a family's blocks share; proj_std initialises the residual
// output projections (GPT-2 scales it by 1/sqrt(2 * layers), BERT does not).
nn::BlockOptions block_options(const ModelOptions& o, double proj_std);

using ModelFactory = std::function<std::unique_ptr<Model>(const ModelOptions&)>;
void register_model(const std::string& family, ModelFactory factory);
// Builds an unmaterialised model (parameters on Meta); throws naming the family when unknown.
std::unique_ptr<Model> make_model(const ModelOptions& options);
std::vector<std::string> model_families();

#define MERAK_REGISTER_MODEL(id, ...)                                  \
  static const bool merak_model_registered_##id =                      \
      (::merak::models::register_model(#id, __VA_ARGS__), true)

}  // namespace merak::models
