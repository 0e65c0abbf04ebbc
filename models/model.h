// What the trainer sees of a model: a Module that turns a batch into a scalar loss, plus its
// model FLOPs per token. Families register a factory by name (MERAK_REGISTER_MODEL), so configs
// refer to them as `model.family: gpt`.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "merak/config/config.h"
#include "merak/nn/module.h"
#include "merak/nn/transformer.h"

namespace merak::models {

// A family's options are the config's model section: one struct, not a copy of it.
using ModelOptions = config::ModelConfig;

// Inputs of one (micro-)batch; a family reads the fields it needs.
struct Batch {
  Tensor tokens;          // i64 [B, T]
  Tensor targets;         // GPT: i64 [B, T] next tokens
  Tensor segment_ids;     // BERT: i64 [B, T]
  Tensor attention_mask;  // BERT: bool [B, T], true = real token
  Tensor mlm_targets;     // BERT: i64 [B, T], -100 = not predicted
  Tensor nsp_labels;      // BERT: i64 [B]
  // BERT: f32 [B], each row's share of the weight that these rows' masked-LM loss (a mean over
  // their predicted tokens) takes: its predicted tokens n times M / N, N those of the global
  // batch and M its micro-batches. The mean over the step's micro-batches, which training takes,
  // is then the mean over all N, however the batch is cut (the rows of a micro-batch cut in
  // two still carry their halves' weights). Undefined: weight 1.
  Tensor mlm_weight;
};

class Model : public nn::Module {
 public:
  virtual Tensor loss(const Batch& batch) const = 0;
  // The loss from the network's outputs (what loss() computes after the forward), so that a
  // network imported from ONNX trains with the family's loss: `outputs` are what output_names()
  // describes, in that order; the labels come from `batch`.
  virtual Tensor loss_from_outputs(const std::vector<Tensor>& outputs,
                                   const Batch& batch) const = 0;
  virtual std::vector<std::string> output_names() const = 0;  // "logits [batch, seq, vocab]"
  // Training FLOPs (forward + backward) per token at sequence length `seq`.
  virtual double flops_per_token(int64_t seq) const = 0;
  virtual const ModelOptions& options() const = 0;

  // Eager training only: checkpoint every block, so backward rebuilds its activations. (The
  // runtime recomputes whole stages, as parallel.recompute says.)
  void set_recompute(bool on) { recompute_ = on; }
  bool recompute() const { return recompute_; }

 private:
  bool recompute_ = false;
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
