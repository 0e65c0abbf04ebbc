#include <algorithm>
#include <cmath>
#include <vector>

#include "merak/core/parallel.h"
#include "merak/optim/adamw.h"
#include "merak/optim/device_optim.h"

namespace merak::optim {
namespace {

// Squares are summed per fixed-size block, in parallel, and the block sums are added in order,
// so the norm does not depend on the thread count.
constexpr int64_t kBlock = int64_t(1) << 14;

// Sum of squares of g[begin, end), in kLanes independent f64 sums: one serial chain would be
// bound by add latency, not by memory (GCC does not reorder a floating-point reduction without
// -ffast-math). The lanes are added in a fixed order at the end.
constexpr int kLanes = 16;
struct BlockSum {
  double lane[kLanes] = {};
  double tail = 0;
  double total() const {
    double s = tail;
    for (double l : lane) s += l;
    return s;
  }
};

void add_squares(const float* g, int64_t begin, int64_t end, BlockSum& sum) {
  int64_t i = begin;
  for (; i + kLanes <= end; i += kLanes)
    for (int l = 0; l < kLanes; ++l) sum.lane[l] += double(g[i + l]) * double(g[i + l]);
  for (; i < end; ++i) sum.tail += double(g[i]) * double(g[i]);
}

double sum_of_squares_of(const float* g, int64_t n) {
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<double> partial(size_t(blocks), 0.0);
  parallel_for(0, blocks, 1, [&](int64_t lo, int64_t hi) {
    // One read stream per thread is bound by memory latency (15 GB/s on this machine's 2
    // cores); reading kStreams blocks side by side keeps more lines in flight. Each block's sum
    // is still its own, so the result does not change.
    constexpr int64_t kStreams = 4, kStep = 256;
    int64_t b = lo;
    for (; b + kStreams <= hi && (b + kStreams) * kBlock <= n; b += kStreams) {
      BlockSum sums[kStreams];
      for (int64_t at = 0; at < kBlock; at += kStep)
        for (int64_t s = 0; s < kStreams; ++s) {
          const int64_t base = (b + s) * kBlock + at;
          add_squares(g, base, base + kStep, sums[s]);
        }
      for (int64_t s = 0; s < kStreams; ++s) partial[size_t(b + s)] = sums[s].total();
    }
    for (; b < hi; ++b) {
      BlockSum sum;
      add_squares(g, b * kBlock, std::min(n, (b + 1) * kBlock), sum);
      partial[size_t(b)] = sum.total();
    }
  });
  double total = 0;
  for (double s : partial) total += s;
  return total;
}

}  // namespace

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

double sum_of_squares(const Tensor& t) {
  if (!t.device().is_cpu() && !t.is_meta())
    return device_optimizer(t.device().type, "sum_of_squares").sum_of_squares({t});
  MERAK_CHECK(t.dtype() == DType::F32 && t.device().is_cpu(), "sum_of_squares: expected an f32 ",
              "CPU tensor, got ", t.str());
  const Tensor c = t.contiguous();
  return sum_of_squares_of(c.data<float>(), c.numel());
}

double sum_of_squares(const std::vector<Tensor>& tensors) {
  double sq = 0;
  std::vector<Tensor> on_device;  // summed by one multi-tensor kernel
  for (const Tensor& t : tensors) {
    if (t.device().is_cpu()) sq += sum_of_squares(t);
    else on_device.push_back(t);
  }
  if (!on_device.empty())
    sq += device_optimizer(on_device[0].device().type, "gradient norm").sum_of_squares(on_device);
  return sq;
}

double grad_norm(const std::vector<Param>& params) {
  std::vector<Tensor> grads;
  for (const Param& p : params) {
    const Tensor g = p.value.grad();
    if (!g.defined()) continue;
    MERAK_CHECK(!g.device().is_cpu() || g.dtype() == DType::F32, "gradient norm: gradient of '",
                p.name, "' is ", g.str(), "; expected f32");
    grads.push_back(g);
  }
  return std::sqrt(sum_of_squares(grads));
}

float clip_coefficient(double norm, double max_norm) {
  if (max_norm <= 0) return 1.0f;
  // The epsilon keeps the coefficient finite at norm 0; a coefficient >= 1, or NaN from a NaN
  // norm, leaves the gradients untouched.
  const double coef = max_norm / (norm + 1e-6);
  return coef < 1 ? float(coef) : 1.0f;
}

double clip_grad_norm(const std::vector<Param>& params, double max_norm) {
  const double norm = grad_norm(params);
  const float coef = clip_coefficient(norm, max_norm);
  if (coef != 1.0f)
    for (const Param& p : params)
      if (p.value.grad().defined()) scale_in_place(p.value.grad(), coef);
  return norm;
}

}  // namespace merak::optim
