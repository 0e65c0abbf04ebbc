#include <algorithm>
#include <cmath>
#include <vector>

#include "merak/core/parallel.h"
#include "merak/optim/adamw.h"

namespace merak::optim {
namespace {

// Squares are summed per fixed-size block, in parallel, and the block sums are added in order,
// so the norm does not depend on the thread count.
constexpr int64_t kBlock = int64_t(1) << 14;

double sum_of_squares(const float* g, int64_t n) {
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<double> partial(size_t(blocks), 0.0);
  parallel_for(0, blocks, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t b = lo; b < hi; ++b) {
      const int64_t begin = b * kBlock, end = std::min(n, (b + 1) * kBlock);
      // kLanes independent sums: one serial chain would be bound by add latency, not by memory
      // (GCC does not reorder a floating-point reduction without -ffast-math).
      constexpr int kLanes = 16;
      double lane[kLanes] = {};
      int64_t i = begin;
      for (; i + kLanes <= end; i += kLanes)
        for (int l = 0; l < kLanes; ++l) lane[l] += double(g[i + l]) * double(g[i + l]);
      double s = 0;
      for (; i < end; ++i) s += double(g[i]) * double(g[i]);
      for (int l = 0; l < kLanes; ++l) s += lane[l];
      partial[size_t(b)] = s;
    }
  });
  double total = 0;
  for (double s : partial) total += s;
  return total;
}

void scale_in_place(const Tensor& grad, float factor) {
  if (grad.is_contiguous()) {
    float* g = grad.data<float>();
    parallel_for(0, grad.numel(), kBlock, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) g[i] *= factor;
    });
    return;
  }
  float* base = static_cast<float*>(grad.impl().storage->data);
  for (int64_t off : element_offsets(grad)) base[off] *= factor;
}

}  // namespace

double clip_grad_norm(const std::vector<Param>& params, double max_norm) {
  std::vector<Tensor> grads;
  double sq = 0;
  for (const Param& p : params) {
    const Tensor g = p.value.grad();
    if (!g.defined()) continue;
    MERAK_CHECK(g.dtype() == DType::F32 && g.device().is_cpu(), "clip_grad_norm: gradient of '",
                p.name, "' is ", g.str(), "; expected an f32 CPU tensor");
    const Tensor c = g.contiguous();
    sq += sum_of_squares(c.data<float>(), c.numel());
    grads.push_back(g);
  }
  const double norm = std::sqrt(sq);
  if (max_norm <= 0) return norm;
  // As torch.nn.utils.clip_grad_norm_: the epsilon keeps the coefficient finite at norm 0, and
  // a coefficient >= 1 (or NaN, from a NaN norm) leaves the gradients untouched.
  const double coef = max_norm / (norm + 1e-6);
  if (coef < 1)
    for (const Tensor& g : grads) scale_in_place(g, float(coef));
  return norm;
}

}  // namespace merak::optim
