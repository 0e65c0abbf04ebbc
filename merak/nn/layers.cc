#include "merak/nn/layers.h"

#include "merak/core/philox.h"
#include "merak/ops/dispatch.h"
#include "merak/ops/functional.h"

namespace merak::nn {

Linear::Linear(int64_t in, int64_t out, bool has_bias, double init_std)
    : weight(parameter("weight", {out, in}, Init::normal(init_std))),
      bias(has_bias ? &parameter("bias", {out}, Init::zeros()) : nullptr) {}

Tensor Linear::forward(const Tensor& x) const {
  const ops::ScopeGuard scope(path());
  return ops::linear(x, weight, bias ? *bias : Tensor());
}

Tensor Linear::forward_gelu(const Tensor& x, const std::string& approximate) const {
  const ops::ScopeGuard scope(path());
  return ops::linear_gelu(x, weight, bias ? *bias : Tensor(), approximate);
}

Embedding::Embedding(int64_t num, int64_t dim, double init_std)
    : weight(parameter("weight", {num, dim}, Init::normal(init_std))) {}

Tensor Embedding::forward(const Tensor& ids) const {
  const ops::ScopeGuard scope(path());
  return ops::embedding(weight, ids);
}

LayerNorm::LayerNorm(int64_t dim, double eps_)
    : weight(parameter("weight", {dim}, Init::ones())),
      bias(parameter("bias", {dim}, Init::zeros())),
      eps(eps_) {}

Tensor LayerNorm::forward(const Tensor& x) const {
  const ops::ScopeGuard scope(path());
  return ops::layer_norm(x, weight, bias, eps);
}

Dropout::Dropout(double p) : p_(p) {
  MERAK_CHECK(p >= 0 && p < 1, "dropout probability ", p, " is outside [0, 1)");
}

void Dropout::on_materialize(uint64_t seed) { key_ = philox_key(seed, "dropout:" + path()); }

Tensor Dropout::forward(const Tensor& x) const {
  const ops::ScopeGuard scope(path());
  if (!training() || p_ == 0) return x;
  return ops::dropout(x, p_, key_, rng_stream());
}

}  // namespace merak::nn
