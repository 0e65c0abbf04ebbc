// The basic layers. Each forward is a few registry ops, so autograd, the tracer and every device
// get them for free; their backward is the ops' backward.
#pragma once

#include <string>

#include "merak/nn/module.h"

namespace merak::nn {

// y = x W^T + b, W [out, in] (PyTorch's layout, so weights exchange without transposes).
class Linear : public Module {
 public:
  Linear(int64_t in, int64_t out, bool bias = true, double init_std = 0.02);
  Tensor forward(const Tensor& x) const;
  // gelu(forward(x)) as one op (linear_gelu), GELU "tanh" or "none" (erf).
  Tensor forward_gelu(const Tensor& x, const std::string& approximate) const;
  Tensor& weight;
  Tensor* bias;  // null without bias
};

class Embedding : public Module {
 public:
  Embedding(int64_t num, int64_t dim, double init_std = 0.02);
  Tensor forward(const Tensor& ids) const;
  Tensor& weight;
};

// Normalises the last dim; weight 1, bias 0 at init.
class LayerNorm : public Module {
 public:
  explicit LayerNorm(int64_t dim, double eps = 1e-5);
  Tensor forward(const Tensor& x) const;
  Tensor& weight;
  Tensor& bias;
  double eps;
};

// Inverted dropout in training mode, identity in eval mode. The mask is Philox keyed by the
// module's path and the current rng_stream(), so it is re-derived, never stored.
class Dropout : public Module {
 public:
  explicit Dropout(double p);
  Tensor forward(const Tensor& x) const;

 protected:
  void on_materialize(uint64_t seed) override;

 private:
  double p_;
  uint64_t key_ = 0;
};

}  // namespace merak::nn
