// CPU kernels of the tensor-parallel ops. The reductions go through the collectives of the
// thread's ops::TpScope (merak/ops/collectives.h).
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/cpu/nn.h"
#include "merak/core/parallel.h"
#include "merak/ops/collectives.h"
#include "merak/ops/op_util.h"

namespace merak::ops {
namespace {

int64_t rows_of(const Tensor& t) { return t.dim() == 0 ? 1 : t.numel() / t.size(-1); }

// Rows whose target is not ignored; a negative target other than ignore_index is an error
// (the whole vocabulary's size is known to no single member, so only the sign is checked).
template <typename I>
int64_t count_targets(const I* t, int64_t rows, int64_t ignore, const char* op) {
  int64_t count = 0;
  for (int64_t r = 0; r < rows; ++r) {
    if (int64_t(t[r]) == ignore) continue;
    MERAK_CHECK(t[r] >= 0, op, ": target ", int64_t(t[r]), " at row ", r,
                " is negative (ignore_index is ", ignore, ")");
    ++count;
  }
  return count;
}

void all_reduce_kernel(const std::vector<Tensor>& in, const std::vector<Tensor>& out,
                       const Attrs& a) {
  std::memcpy(out[0].raw_data(), in[0].raw_data(), size_t(in[0].nbytes()));
  tp_reduce_maybe_deferred("tp_all_reduce", out[0], TpReduce::Sum, a.s("group"), a.i("size"));
}

// Our part goes into its place of a zero tensor; summing over the group fills the rest.
void all_gather_kernel(const std::vector<Tensor>& in, const std::vector<Tensor>& out,
                       const Attrs& a) {
  const Tensor& x = in[0];
  const Tensor& y = out[0];
  const int64_t dim = normalize_dim(a.i("dim"), x.dim());
  const std::vector<int64_t>& sizes = a.ints("sizes");
  int64_t start = 0;
  for (int64_t i = 0; i < a.i("index"); ++i) start += sizes[size_t(i)];
  int64_t outer = 1, inner = int64_t(dtype_size(x.dtype()));
  for (int64_t d = 0; d < dim; ++d) outer *= x.size(d);
  for (int64_t d = dim + 1; d < x.dim(); ++d) inner *= x.size(d);
  const int64_t part = x.size(dim), total = y.size(dim);
  const char* src = static_cast<const char*>(x.raw_data());
  char* dst = static_cast<char*>(y.raw_data());
  std::memset(dst, 0, size_t(y.nbytes()));
  for (int64_t o = 0; o < outer; ++o)
    std::memcpy(dst + (o * total + start) * inner, src + o * part * inner, size_t(part * inner));
  tp_reduce("tp_all_gather", y, TpReduce::Sum, a.s("group"), a.i("size"));
}

template <typename T, typename I>
void embedding_kernel(const T* w, const I* ids, T* y, int64_t n, int64_t V, int64_t D,
                      int64_t start) {
  parallel_for(0, n, std::max<int64_t>(1, 4096 / std::max<int64_t>(D, 1)), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const int64_t row = int64_t(ids[r]) - start;
      if (row >= 0 && row < V) std::copy(w + row * D, w + (row + 1) * D, y + r * D);
      else std::fill(y + r * D, y + (r + 1) * D, T(0));
    }
  });
}

// Threads own disjoint column ranges and walk the ids in order: deterministic sums.
template <typename T, typename I>
void embedding_grad_kernel(const T* dy, const I* ids, T* dw, int64_t n, int64_t V, int64_t D,
                           int64_t start) {
  parallel_for(0, D, 16, [&](int64_t lo, int64_t hi) {
    for (int64_t v = 0; v < V; ++v) std::fill(dw + v * D + lo, dw + v * D + hi, T(0));
    for (int64_t r = 0; r < n; ++r) {
      const int64_t row = int64_t(ids[r]) - start;
      if (row < 0 || row >= V) continue;
      T* dst = dw + row * D;
      const T* src = dy + r * D;
      for (int64_t i = lo; i < hi; ++i) dst[i] += src[i];
    }
  });
}

// The group's row maxima, then sums of exponentials, then target logits: three reductions
// give every member lse and the loss of the whole vocabulary.
template <typename T, typename I>
void cross_entropy_kernel(const Tensor& logits, const Tensor& targets, const Tensor& loss,
                          const Tensor& lse, const Attrs& a) {
  const int64_t rows = rows_of(logits), V = logits.size(-1), start = a.i("start");
  const int64_t ignore = a.i("ignore_index");
  const T* x = logits.data<T>();
  const I* t = targets.data<I>();
  const int64_t count = count_targets(t, rows, ignore, "tp_cross_entropy");
  const Tensor m = Tensor::empty({rows}, logits.dtype());
  const Tensor s = Tensor::empty({rows}, logits.dtype());
  const Tensor tgt = Tensor::empty({rows}, logits.dtype());
  T* mp = m.data<T>();
  T* sp = s.data<T>();
  T* tp = tgt.data<T>();
  const int64_t grain = cpu::nn::grain_rows(V);
  parallel_for(0, rows, grain, [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r)
      mp[r] = V ? cpu::nn::row_max(x + r * V, V) : -std::numeric_limits<T>::infinity();
  });
  tp_reduce("tp_cross_entropy", m, TpReduce::Max, a.s("group"), a.i("size"));
  // The shard's sums of exp(x - max) in T, with the vectorised exp cross_entropy uses.
  parallel_for(0, rows, grain, [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const T* xr = x + r * V;
      sp[r] = cpu::nn::row_sum_exp(xr, mp[r], V);
      const int64_t c = int64_t(t[r]) - start;
      tp[r] = int64_t(t[r]) != ignore && c >= 0 && c < V ? xr[c] : T(0);
    }
  });
  tp_reduce("tp_cross_entropy", s, TpReduce::Sum, a.s("group"), a.i("size"));
  tp_reduce("tp_cross_entropy", tgt, TpReduce::Sum, a.s("group"), a.i("size"));
  T* lp = lse.data<T>();
  double total = 0;  // in row order, in double, as cross_entropy does
  for (int64_t r = 0; r < rows; ++r) {
    lp[r] = T(double(mp[r]) + std::log(double(sp[r])));
    if (int64_t(t[r]) != ignore) total += double(lp[r]) - double(tp[r]);
  }
  *loss.data<T>() = count ? T(total / double(count)) : T(0);
}

template <typename T, typename I>
void cross_entropy_grad_kernel(const Tensor& dloss, const Tensor& logits, const Tensor& targets,
                               const Tensor& lse, const Tensor& dx, const Attrs& a) {
  const int64_t rows = rows_of(logits), V = logits.size(-1), start = a.i("start");
  const int64_t ignore = a.i("ignore_index");
  const T* x = logits.data<T>();
  const I* t = targets.data<I>();
  const T* lp = lse.data<T>();
  T* g = dx.data<T>();
  const int64_t count = count_targets(t, rows, ignore, "tp_cross_entropy_grad");
  const T scale = count ? *dloss.data<T>() / T(count) : T(0);
  const int64_t grain = cpu::nn::grain_rows(V);
  parallel_for(0, rows, grain, [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      T* gr = g + r * V;
      if (int64_t(t[r]) == ignore) {
        std::fill(gr, gr + V, T(0));
        continue;
      }
      const T* xr = x + r * V;
      cpu::nn::exp_shifted(xr, lp[r], gr, V);
      for (int64_t i = 0; i < V; ++i) gr[i] *= scale;
      const int64_t c = int64_t(t[r]) - start;
      if (c >= 0 && c < V) gr[c] -= scale;
    }
  });
}

}  // namespace

MERAK_REGISTER_KERNEL(tp_all_reduce, CPU, all_reduce_kernel);
MERAK_REGISTER_KERNEL(tp_all_gather, CPU, all_gather_kernel);

MERAK_REGISTER_KERNEL(tp_embedding, CPU,
                      [](const std::vector<Tensor>& in, const std::vector<Tensor>& out,
                         const Attrs& a) {
                        const Tensor &w = in[0], &ids = in[1];
                        MERAK_DISPATCH_FLOAT(w.dtype(), "tp_embedding", [&] {
                          MERAK_DISPATCH_INDEX(ids.dtype(), "tp_embedding", [&] {
                            embedding_kernel(w.data<scalar_t>(), ids.data<index_t>(),
                                             out[0].data<scalar_t>(), ids.numel(), w.size(0),
                                             w.size(1), a.i("start"));
                          });
                        });
                      });

MERAK_REGISTER_KERNEL(tp_embedding_grad, CPU,
                      [](const std::vector<Tensor>& in, const std::vector<Tensor>& out,
                         const Attrs& a) {
                        const Tensor &dy = in[0], &ids = in[1];
                        MERAK_DISPATCH_FLOAT(dy.dtype(), "tp_embedding_grad", [&] {
                          MERAK_DISPATCH_INDEX(ids.dtype(), "tp_embedding_grad", [&] {
                            embedding_grad_kernel(dy.data<scalar_t>(), ids.data<index_t>(),
                                                  out[0].data<scalar_t>(), ids.numel(),
                                                  out[0].size(0), out[0].size(1), a.i("start"));
                          });
                        });
                      });

MERAK_REGISTER_KERNEL(tp_cross_entropy, CPU,
                      [](const std::vector<Tensor>& in, const std::vector<Tensor>& out,
                         const Attrs& a) {
                        MERAK_DISPATCH_FLOAT(in[0].dtype(), "tp_cross_entropy", [&] {
                          MERAK_DISPATCH_INDEX(in[1].dtype(), "tp_cross_entropy", [&] {
                            cross_entropy_kernel<scalar_t, index_t>(in[0], in[1], out[0], out[1],
                                                                    a);
                          });
                        });
                      });

MERAK_REGISTER_KERNEL(tp_cross_entropy_grad, CPU,
                      [](const std::vector<Tensor>& in, const std::vector<Tensor>& out,
                         const Attrs& a) {
                        MERAK_DISPATCH_FLOAT(in[1].dtype(), "tp_cross_entropy_grad", [&] {
                          MERAK_DISPATCH_INDEX(in[2].dtype(), "tp_cross_entropy_grad", [&] {
                            cross_entropy_grad_kernel<scalar_t, index_t>(in[0], in[1], in[2],
                                                                         in[3], out[0], a);
                          });
                        });
                      });

}  // namespace merak::ops
