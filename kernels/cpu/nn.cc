// CPU kernels of the neural-network ops (defs in merak/ops/defs/nn.cc): softmax and
// log-softmax, layer norm, embedding, cross entropy, dropout, and their fused gradients.
// Rows are independent, so the work is split over rows; the inner loops run over contiguous
// memory and vectorise (kernels/cpu/nn.h). Every reduction has a fixed order, so results do not
// depend on the thread count.
#include "kernels/cpu/nn.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "merak/core/parallel.h"
#include "merak/core/philox.h"
#include "merak/ops/op_util.h"
#include "merak/ops/sharding.h"

namespace merak::cpu::nn {
namespace {

using ops::Attrs;

// A tensor seen as [outer, len, inner] around one dim.
struct Dims {
  int64_t outer = 1, len = 1, inner = 1;
};
Dims dims_around(const Shape& shape, int64_t dim) {
  Dims d;
  for (int64_t i = 0; i < int64_t(shape.size()); ++i) {
    if (i < dim) d.outer *= shape[i];
    else if (i == dim) d.len = shape[i];
    else d.inner *= shape[i];
  }
  return d;
}

// Runs rows(lo, hi) over ranges of contiguous rows when the dim is the last one (inner == 1),
// else slab(o) for every [len, inner] block, whose loops then vectorise across `inner`.
template <typename Rows, typename Slab>
void over_dim(const Dims& d, Rows rows, Slab slab) {
  if (d.outer * d.len * d.inner == 0) return;
  if (d.inner == 1) {
    parallel_for(0, d.outer, grain_rows(d.len), rows);
  } else {
    parallel_for(0, d.outer, grain_rows(d.len * d.inner), [&](int64_t lo, int64_t hi) {
      for (int64_t o = lo; o < hi; ++o) slab(o);
    });
  }
}

// ---- softmax / log_softmax: y = exp(x - m) / s, or x - m - log(s), with m the max and s the
// sum of exp(x - m) along dim (subtracting the max keeps exp from overflowing).

template <typename T, bool kLog>
void softmax_forward(const T* x, T* y, const Dims& d) {
  const int64_t n = d.len, in = d.inner;
  auto rows = [&](int64_t lo, int64_t hi) {
    T m = row_max(x + lo * n, n);  // later rows' maxima come with the previous row's exp pass
    for (int64_t r = lo; r < hi; ++r) {
      const T* xr = x + r * n;
      T* yr = y + r * n;
      if (kLog) {
        const T c = m + std::log(row_sum_exp(xr, m, n));
        for (int64_t i = 0; i < n; ++i) yr[i] = xr[i] - c;
        if (r + 1 < hi) m = row_max(xr + n, n);
      } else {
        T m_next = 0;
        if (r + 1 < hi) m_next = exp_shifted_max_next(xr, m, yr, xr + n, n);
        else exp_shifted(xr, m, yr, n);
        const T inv = T(1) / row_sum(yr, n);
        for (int64_t i = 0; i < n; ++i) yr[i] *= inv;
        m = m_next;
      }
    }
  };
  auto slab = [&](int64_t o) {
    const T* xs = x + o * n * in;
    T* ys = y + o * n * in;
    std::vector<T> m(xs, xs + in), s(in, T(0));
    for (int64_t l = 1; l < n; ++l)
      for (int64_t k = 0; k < in; ++k) m[k] = m[k] < xs[l * in + k] ? xs[l * in + k] : m[k];
    for (int64_t l = 0; l < n; ++l)
      for (int64_t k = 0; k < in; ++k) {
        const T e = exp_bounded(xs[l * in + k] - m[k]);
        if (!kLog) ys[l * in + k] = e;
        s[k] += e;
      }
    if (kLog) {
      for (int64_t k = 0; k < in; ++k) m[k] += std::log(s[k]);
      for (int64_t l = 0; l < n; ++l)
        for (int64_t k = 0; k < in; ++k) ys[l * in + k] = xs[l * in + k] - m[k];
    } else {
      for (int64_t k = 0; k < in; ++k) s[k] = T(1) / s[k];
      for (int64_t l = 0; l < n; ++l)
        for (int64_t k = 0; k < in; ++k) ys[l * in + k] *= s[k];
    }
  };
  over_dim(d, rows, slab);
}

// softmax:     dx = y * (dy - sum(dy * y))
// log_softmax: dx = dy - exp(y) * sum(dy)
template <typename T, bool kLog>
void softmax_backward(const T* dy, const T* y, T* dx, const Dims& d) {
  const int64_t n = d.len, in = d.inner;
  auto rows = [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const T* dyr = dy + r * n;
      const T* yr = y + r * n;
      T* dxr = dx + r * n;
      if (kLog) {
        const T s = row_sum(dyr, n);
        for (int64_t i = 0; i < n; ++i) dxr[i] = dyr[i] - exp_bounded(yr[i]) * s;
      } else {
        const T s = row_dot(dyr, yr, n);
        for (int64_t i = 0; i < n; ++i) dxr[i] = yr[i] * (dyr[i] - s);
      }
    }
  };
  auto slab = [&](int64_t o) {
    const int64_t base = o * n * in;
    std::vector<T> s(in, T(0));
    for (int64_t l = 0; l < n; ++l)
      for (int64_t k = 0; k < in; ++k) {
        const int64_t e = base + l * in + k;
        s[k] += kLog ? dy[e] : dy[e] * y[e];
      }
    for (int64_t l = 0; l < n; ++l)
      for (int64_t k = 0; k < in; ++k) {
        const int64_t e = base + l * in + k;
        dx[e] = kLog ? dy[e] - exp_bounded(y[e]) * s[k] : y[e] * (dy[e] - s[k]);
      }
  };
  over_dim(d, rows, slab);
}

template <bool kLog>
void softmax_kernel(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& a) {
  const Tensor& x = in[0];
  const Dims d = dims_around(x.shape(), normalize_dim(a.i("dim"), x.dim()));
  MERAK_DISPATCH_FLOAT(x.dtype(), kLog ? "log_softmax" : "softmax", [&] {
    softmax_forward<scalar_t, kLog>(x.data<scalar_t>(), out[0].data<scalar_t>(), d);
  });
}

template <bool kLog>
void softmax_grad_kernel(const std::vector<Tensor>& in, const std::vector<Tensor>& out,
                         const Attrs& a) {
  const Tensor& y = in[1];
  const Dims d = dims_around(y.shape(), normalize_dim(a.i("dim"), y.dim()));
  MERAK_DISPATCH_FLOAT(y.dtype(), kLog ? "log_softmax_grad" : "softmax_grad", [&] {
    softmax_backward<scalar_t, kLog>(in[0].data<scalar_t>(), y.data<scalar_t>(),
                                     out[0].data<scalar_t>(), d);
  });
}

// ---- layer_norm over the last dim: y = (x - mean) * rstd * weight + bias,
// rstd = 1 / sqrt(var + eps) with the biased variance.

template <typename T>
void layer_norm_forward(const T* x, const T* w, const T* b, T eps, T* y, T* mean, T* rstd,
                        int64_t rows, int64_t D) {
  parallel_for(0, rows, grain_rows(D), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const T* xr = x + r * D;
      T* yr = y + r * D;
      // Two passes (mean, then squared deviations) avoid E[x^2] - E[x]^2 cancellation.
      const T m = row_sum(xr, D) / T(D);
      const T rs = T(1) / std::sqrt(row_sq_dev(xr, m, D) / T(D) + eps);
      mean[r] = m;
      rstd[r] = rs;
      if (w && b) {
        for (int64_t i = 0; i < D; ++i) yr[i] = (xr[i] - m) * rs * w[i] + b[i];
      } else if (w) {
        for (int64_t i = 0; i < D; ++i) yr[i] = (xr[i] - m) * rs * w[i];
      } else if (b) {
        for (int64_t i = 0; i < D; ++i) yr[i] = (xr[i] - m) * rs + b[i];
      } else {
        for (int64_t i = 0; i < D; ++i) yr[i] = (xr[i] - m) * rs;
      }
    }
  });
}

// With xhat = (x - mean) * rstd and g = dy * weight:
//   dx = rstd * (g - mean(g) - xhat * mean(g * xhat)),  dweight = sum_rows dy * xhat,
//   dbias = sum_rows dy.
// dweight/dbias are summed per fixed block of rows (partials), then over blocks in order: one
// pass over dy and x, deterministic for any thread count.
template <typename T>
void layer_norm_backward(const T* dy, const T* x, const T* w, const T* mean, const T* rstd,
                         T* dx, T* dw, T* db, int64_t rows, int64_t D) {
  constexpr int64_t kBlockRows = 32;
  const int64_t blocks = (rows + kBlockRows - 1) / kBlockRows;
  std::vector<T> partial(size_t(blocks * 2 * D));
  parallel_for(0, blocks, grain_rows(kBlockRows * D), [&](int64_t lo, int64_t hi) {
    std::vector<T> xhat(D), g(w ? D : 0);
    for (int64_t blk = lo; blk < hi; ++blk) {
      T* pdw = partial.data() + blk * 2 * D;
      T* pdb = pdw + D;
      std::fill(pdw, pdw + 2 * D, T(0));
      const int64_t r_end = std::min(rows, (blk + 1) * kBlockRows);
      for (int64_t r = blk * kBlockRows; r < r_end; ++r) {
        const T* dyr = dy + r * D;
        const T* xr = x + r * D;
        T* dxr = dx + r * D;
        const T m = mean[r], rs = rstd[r];
        for (int64_t i = 0; i < D; ++i) xhat[i] = (xr[i] - m) * rs;
        const T* gr = dyr;
        if (w) {
          for (int64_t i = 0; i < D; ++i) g[i] = dyr[i] * w[i];
          gr = g.data();
        }
        const T g_mean = row_sum(gr, D) / T(D);
        const T gx_mean = row_dot(gr, xhat.data(), D) / T(D);
        for (int64_t i = 0; i < D; ++i) dxr[i] = rs * (gr[i] - g_mean - xhat[i] * gx_mean);
        for (int64_t i = 0; i < D; ++i) {
          pdw[i] += dyr[i] * xhat[i];
          pdb[i] += dyr[i];
        }
      }
    }
  });
  parallel_for(0, D, std::max<int64_t>(16, kGrainElems / std::max<int64_t>(1, blocks)),
               [&](int64_t lo, int64_t hi) {
                 std::fill(dw + lo, dw + hi, T(0));
                 std::fill(db + lo, db + hi, T(0));
                 for (int64_t blk = 0; blk < blocks; ++blk) {
                   const T* pdw = partial.data() + blk * 2 * D;
                   const T* pdb = pdw + D;
                   for (int64_t i = lo; i < hi; ++i) {
                     dw[i] += pdw[i];
                     db[i] += pdb[i];
                   }
                 }
               });
}

// ---- embedding: out[r, :] = weight[ids[r], :]; its gradient scatter-adds dy rows into [V, D].

template <typename I>
void check_ids(const I* ids, int64_t n, int64_t V, const char* op) {
  for (int64_t r = 0; r < n; ++r)
    MERAK_CHECK(ids[r] >= 0 && ids[r] < V, op, ": id ", int64_t(ids[r]), " (at flat position ", r,
                ") is out of range for ", V, " embeddings");
}

template <typename T, typename I>
void embedding_forward(const T* weight, const I* ids, T* out, int64_t n, int64_t V, int64_t D) {
  check_ids(ids, n, V, "embedding");
  parallel_for(0, n, grain_rows(D), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r)
      std::copy(weight + int64_t(ids[r]) * D, weight + (int64_t(ids[r]) + 1) * D, out + r * D);
  });
}

// Threads own disjoint column ranges and each walks all ids in order: no races, and every
// element sums its contributions in the order of the ids, whatever the thread count.
template <typename T, typename I>
void embedding_backward(const T* dy, const I* ids, T* dw, int64_t n, int64_t V, int64_t D) {
  check_ids(ids, n, V, "embedding_grad");
  // Zeroed in contiguous row ranges (the table is mostly zeros: a vocabulary's worth of rows
  // for a few hundred ids), then scattered by column ranges so no two threads add to one element.
  parallel_for(0, V, std::max<int64_t>(1, kGrainElems / std::max<int64_t>(1, D)),
               [&](int64_t lo, int64_t hi) { std::fill(dw + lo * D, dw + hi * D, T(0)); });
  parallel_for(0, D, std::max<int64_t>(16, kGrainElems / std::max<int64_t>(1, n)),
               [&](int64_t lo, int64_t hi) {
                 for (int64_t r = 0; r < n; ++r) {
                   T* dst = dw + int64_t(ids[r]) * D;
                   const T* src = dy + r * D;
                   for (int64_t i = lo; i < hi; ++i) dst[i] += src[i];
                 }
               });
}

// ---- cross_entropy over the last dim: per row lse = log(sum(exp(x))), loss_r = lse - x[t];
// loss = mean over rows whose target is not ignore_index (0 when there are none).

// Checks targets and returns how many are not ignored.
template <typename I>
int64_t check_targets(const I* t, int64_t rows, int64_t V, int64_t ignore, const char* op) {
  int64_t count = 0;
  for (int64_t r = 0; r < rows; ++r) {
    if (int64_t(t[r]) == ignore) continue;
    MERAK_CHECK(t[r] >= 0 && t[r] < V, op, ": target ", int64_t(t[r]), " at row ", r,
                " is out of range for ", V, " classes (ignore_index is ", ignore, ")");
    ++count;
  }
  return count;
}

template <typename T, typename I>
void cross_entropy_forward(const T* x, const I* t, T* loss, T* lse, int64_t rows, int64_t V,
                           int64_t ignore) {
  const int64_t count = check_targets(t, rows, V, ignore, "cross_entropy");
  std::vector<double> row_loss(size_t(rows), 0.0);
  parallel_for(0, rows, grain_rows(V), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const T* xr = x + r * V;
      const T m = row_max(xr, V);
      lse[r] = m + std::log(row_sum_exp(xr, m, V));
      if (int64_t(t[r]) != ignore) row_loss[r] = double(lse[r]) - double(xr[t[r]]);
    }
  });
  double total = 0;  // in row order, in double: fixed and accurate
  for (double l : row_loss) total += l;
  *loss = count ? T(total / double(count)) : T(0);
}

// dlogits = (softmax(x) - onehot(t)) * dloss / count; zero rows where t == ignore_index.
template <typename T, typename I>
void cross_entropy_backward(T dloss, const T* x, const I* t, const T* lse, T* dx, int64_t rows,
                            int64_t V, int64_t ignore) {
  const int64_t count = check_targets(t, rows, V, ignore, "cross_entropy_grad");
  const T scale = count ? dloss / T(count) : T(0);
  parallel_for(0, rows, grain_rows(V), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      T* dxr = dx + r * V;
      if (int64_t(t[r]) == ignore) {
        std::fill(dxr, dxr + V, T(0));
        continue;
      }
      const T* xr = x + r * V;
      exp_shifted(xr, lse[r], dxr, V);
      for (int64_t i = 0; i < V; ++i) dxr[i] *= scale;
      dxr[t[r]] -= scale;
    }
  });
}

// ---- dropout: keep element i when philox_uniform(key, its unsplit index, stream) >= p, scaled
// by 1 / (1 - p). A whole tensor's indices run on; a tensor-parallel piece's run on to the end
// of each inner row.

template <typename T>
void dropout_forward(const T* x, T* y, int64_t n, double p, uint64_t key, uint64_t stream,
                     const ops::DropoutPiece& piece) {
  if (p == 0) {
    std::copy(x, x + n, y);
    return;
  }
  const T scale = T(1.0 / (1.0 - p));
  const uint32_t threshold = keep_threshold(p);  // word 0 of element i's block
  parallel_for(0, n, 4096, [&](int64_t lo, int64_t hi) {
    constexpr int64_t kRun = 256;
    std::array<uint32_t, 4> bits[kRun];
    for (int64_t i0 = lo; i0 < hi;) {
      const int64_t m = std::min(kRun, piece.consecutive(i0, hi));
      philox_run(key, uint64_t(piece.global(i0)), stream, m, bits);
      for (int64_t j = 0; j < m; ++j)
        y[i0 + j] = (bits[j][0] >> 8) >= threshold ? x[i0 + j] * scale : T(0);
      i0 += m;
    }
  });
}

}  // namespace

MERAK_REGISTER_KERNEL(softmax, CPU, softmax_kernel<false>);
MERAK_REGISTER_KERNEL(log_softmax, CPU, softmax_kernel<true>);
MERAK_REGISTER_KERNEL(softmax_grad, CPU, softmax_grad_kernel<false>);
MERAK_REGISTER_KERNEL(log_softmax_grad, CPU, softmax_grad_kernel<true>);

MERAK_REGISTER_KERNEL(layer_norm, CPU, [](const std::vector<Tensor>& in,
                                          const std::vector<Tensor>& out, const Attrs& a) {
  const Tensor& x = in[0];
  const int64_t D = x.size(-1), rows = x.numel() / D;
  MERAK_DISPATCH_FLOAT(x.dtype(), "layer_norm", [&] {
    using T = scalar_t;
    const T* w = in.size() > 1 && in[1].defined() ? in[1].data<T>() : nullptr;
    const T* b = in.size() > 2 && in[2].defined() ? in[2].data<T>() : nullptr;
    layer_norm_forward<T>(x.data<T>(), w, b, T(a.f("eps")), out[0].data<T>(), out[1].data<T>(),
                          out[2].data<T>(), rows, D);
  });
});

// in: dy, x, weight?, mean, rstd; out: dx, dweight, dbias
MERAK_REGISTER_KERNEL(layer_norm_grad, CPU, [](const std::vector<Tensor>& in,
                                               const std::vector<Tensor>& out, const Attrs&) {
  const Tensor& x = in[1];
  const int64_t D = x.size(-1), rows = x.numel() / D;
  MERAK_DISPATCH_FLOAT(x.dtype(), "layer_norm_grad", [&] {
    using T = scalar_t;
    const T* w = in[2].defined() ? in[2].data<T>() : nullptr;
    layer_norm_backward<T>(in[0].data<T>(), x.data<T>(), w, in[3].data<T>(), in[4].data<T>(),
                           out[0].data<T>(), out[1].data<T>(), out[2].data<T>(), rows, D);
  });
});

MERAK_REGISTER_KERNEL(embedding, CPU, [](const std::vector<Tensor>& in,
                                         const std::vector<Tensor>& out, const Attrs&) {
  const Tensor &weight = in[0], &ids = in[1];
  const int64_t V = weight.size(0), D = weight.size(1);
  MERAK_DISPATCH_FLOAT(weight.dtype(), "embedding", [&] {
    MERAK_DISPATCH_INDEX(ids.dtype(), "embedding", [&] {
      embedding_forward(weight.data<scalar_t>(), ids.data<index_t>(), out[0].data<scalar_t>(),
                        ids.numel(), V, D);
    });
  });
});

MERAK_REGISTER_KERNEL(embedding_grad, CPU, [](const std::vector<Tensor>& in,
                                              const std::vector<Tensor>& out, const Attrs& a) {
  const Tensor &dy = in[0], &ids = in[1];
  const int64_t V = a.i("num_embeddings"), D = dy.size(-1);
  MERAK_DISPATCH_FLOAT(dy.dtype(), "embedding_grad", [&] {
    MERAK_DISPATCH_INDEX(ids.dtype(), "embedding_grad", [&] {
      embedding_backward(dy.data<scalar_t>(), ids.data<index_t>(), out[0].data<scalar_t>(),
                         ids.numel(), V, D);
    });
  });
});

// in: logits, targets; out: loss, lse
MERAK_REGISTER_KERNEL(cross_entropy, CPU, [](const std::vector<Tensor>& in,
                                             const std::vector<Tensor>& out, const Attrs& a) {
  const Tensor &x = in[0], &t = in[1];
  const int64_t V = x.size(-1), rows = x.numel() / V;
  MERAK_DISPATCH_FLOAT(x.dtype(), "cross_entropy", [&] {
    MERAK_DISPATCH_INDEX(t.dtype(), "cross_entropy", [&] {
      cross_entropy_forward(x.data<scalar_t>(), t.data<index_t>(), out[0].data<scalar_t>(),
                            out[1].data<scalar_t>(), rows, V, a.i("ignore_index"));
    });
  });
});

// in: dloss, logits, targets, lse; out: dlogits
MERAK_REGISTER_KERNEL(cross_entropy_grad, CPU, [](const std::vector<Tensor>& in,
                                                  const std::vector<Tensor>& out,
                                                  const Attrs& a) {
  const Tensor &x = in[1], &t = in[2];
  const int64_t V = x.size(-1), rows = x.numel() / V;
  MERAK_DISPATCH_FLOAT(x.dtype(), "cross_entropy_grad", [&] {
    MERAK_DISPATCH_INDEX(t.dtype(), "cross_entropy_grad", [&] {
      cross_entropy_backward(in[0].data<scalar_t>()[0], x.data<scalar_t>(), t.data<index_t>(),
                             in[3].data<scalar_t>(), out[0].data<scalar_t>(), rows, V,
                             a.i("ignore_index"));
    });
  });
});

MERAK_REGISTER_KERNEL(dropout, CPU, [](const std::vector<Tensor>& in,
                                       const std::vector<Tensor>& out, const Attrs& a) {
  const Tensor& x = in[0];
  MERAK_DISPATCH_FLOAT(x.dtype(), "dropout", [&] {
    dropout_forward(x.data<scalar_t>(), out[0].data<scalar_t>(), x.numel(), a.f("p"),
                    uint64_t(a.i("key")), uint64_t(a.i("stream")),
                    ops::dropout_piece(a, x.shape()));
  });
});

}  // namespace merak::cpu::nn
