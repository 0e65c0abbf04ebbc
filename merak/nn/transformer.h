// Transformer building blocks: the MLP, the pre-LN block (GPT-2) and the post-LN layer (BERT).
#pragma once

#include <string>

#include "merak/nn/attention.h"

namespace merak::nn {

// fc -> GELU -> proj. approximate: "tanh" (GPT-2) or "none" (BERT's exact erf form).
class Mlp : public Module {
 public:
  Mlp(int64_t hidden, int64_t ffn_hidden, const std::string& approximate, double init_std,
      double proj_std);
  Tensor forward(const Tensor& x) const;
  Linear& fc;
  Linear& proj;

 private:
  std::string approximate_;
};

struct BlockOptions {
  int64_t hidden = 256, heads = 4, ffn_hidden = 1024;
  double dropout = 0.0, ln_eps = 1e-5, init_std = 0.02;
  double proj_std = 0.02;  // init of the two residual output projections
};

// GPT-2: x + attn(ln_1(x)), then + mlp(ln_2(.)), causal.
class PreLnBlock : public Module {
 public:
  explicit PreLnBlock(const BlockOptions& o);
  Tensor forward(const Tensor& x) const;
  LayerNorm& ln_1;
  SelfAttention& attn;
  LayerNorm& ln_2;
  Mlp& mlp;
  // One module per residual branch: a mask is a function of the module's key, so a shared
  // module would drop both branches at the same positions (PyTorch draws them independently).
  Dropout& attn_drop;
  Dropout& mlp_drop;
};

// BERT: ln_1(x + attn(x)), then ln_2(. + mlp(.)), bidirectional with a key padding mask.
class PostLnLayer : public Module {
 public:
  explicit PostLnLayer(const BlockOptions& o);
  Tensor forward(const Tensor& x, const Tensor& key_padding_mask) const;
  SelfAttention& attn;
  LayerNorm& ln_1;
  Mlp& mlp;
  LayerNorm& ln_2;
  Dropout& attn_drop;  // one per branch, as in PreLnBlock
  Dropout& mlp_drop;
};

}  // namespace merak::nn
