// GPT-2: token + learned position embeddings, pre-LN blocks (causal attention, GELU-tanh MLP),
// a final LayerNorm, and the LM head tied to the token embedding. Parameter names follow the
// module tree: wte.weight, wpe.weight, blocks.{i}.{ln_1,attn.qkv,attn.proj,ln_2,mlp.fc,mlp.proj},
// ln_f. Init is GPT-2's: N(0, 0.02), residual projections N(0, 0.02 / sqrt(2 * layers)).
#pragma once

#include <string>

#include "merak/nn/layers.h"
#include "merak/nn/transformer.h"
#include "models/model.h"

namespace merak::models {

class Gpt : public Model {
 public:
  explicit Gpt(const ModelOptions& o);
  Tensor logits(const Tensor& tokens) const;  // [B, T] -> [B, T, vocab]
  Tensor loss(const Batch& batch) const override;
  Tensor loss_from_outputs(const std::vector<Tensor>& outputs, const Batch& batch) const override;
  std::vector<std::string> output_names() const override;
  // 6 N + 6 L T C: every parameter in a matmul (forward 2, backward 4 FLOPs), plus causal
  // attention's QK^T and PV (half the T x T scores are masked, so 6, not 12).
  double flops_per_token(int64_t seq) const override;
  const ModelOptions& options() const override { return options_; }

  nn::Embedding& wte;
  nn::Embedding& wpe;
  nn::ModuleList& blocks;
  nn::LayerNorm& ln_f;

 private:
  Tensor hidden_states(const Tensor& tokens) const;
  ModelOptions options_;
  nn::Dropout& drop_;
};

// A GPT parameter under Hugging Face GPT-2's names (transformer.h.0.attn.c_attn.weight, ...),
// and whether its weight is stored transposed there (GPT-2's Conv1D keeps [in, out], our Linear
// [out, in]); an empty name for a parameter GPT-2 does not have. The LM head is the token
// embedding in both (tied), so it has no name of its own.
struct ExternalName {
  std::string name;
  bool transpose = false;
};
ExternalName hf_gpt2_name(const std::string& name);

}  // namespace merak::models
