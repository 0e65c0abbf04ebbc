// Multi-head self-attention: one fused QKV projection, the registry's fused scaled-dot-product
// attention (no T x T matrix kept, its probabilities' dropout inside), an output projection.
#pragma once

#include "merak/nn/layers.h"

namespace merak::nn {

class SelfAttention : public Module {
 public:
  // proj_std: init of the output projection (GPT-2 scales it by 1/sqrt(2 * layers));
  // dropout: rate of the attention probabilities' dropout while training.
  SelfAttention(int64_t hidden, int64_t heads, bool causal, double init_std, double proj_std,
                double dropout = 0);
  // x [B, T, C]; key_padding_mask bool [B, T] (true = attend) may be undefined.
  Tensor forward(const Tensor& x, const Tensor& key_padding_mask = Tensor()) const;

  Linear& qkv;   // [3C, C]: rows are q, then k, then v; within each, heads of C/H rows
  Linear& proj;  // [C, C]

 protected:
  void on_materialize(uint64_t seed) override;

 private:
  int64_t hidden_, heads_;
  bool causal_;
  double dropout_;
  uint64_t dropout_key_ = 0;
};

}  // namespace merak::nn
