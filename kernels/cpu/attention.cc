// Scaled dot-product attention on CPU, flash-attention style: queries are processed in blocks of
// kBlock rows, so a thread only ever holds kBlock x Tk scores; the backward recomputes the
// probabilities of each block from the saved log-sum-exp instead of storing them.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/vec_math.h"
#include "merak/core/parallel.h"
#include "merak/core/philox.h"
#include "merak/ops/op_util.h"

#include "kernels/cpu/eigen.h"

namespace merak::cpu {
namespace {

using ops::Attrs;

constexpr int64_t kBlock = 64;  // query rows per block


// Row reductions. A single running max or sum is a dependency chain the compiler may not
// reorder (no -ffast-math), so the max uses Eigen's packet reduction and the sum keeps kLanes
// independent partial sums.
template <typename T>
T row_max(const T* x, int64_t n) {
  if (n == 0) return -std::numeric_limits<T>::infinity();
  return Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>(x, n).maxCoeff();
}

constexpr int kLanes = 16;

// x[j] = exp(x[j] - shift) in place; returns the sum.
template <typename T>
T exp_shifted_sum(T* x, int64_t n, T shift) {
  T acc[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; ++l) {
      x[j + l] = exp_bounded(x[j + l] - shift);
      acc[l] += x[j + l];
    }
  for (; j < n; ++j) {
    x[j] = exp_bounded(x[j] - shift);
    acc[0] += x[j];
  }
  T sum = 0;
  for (int l = 0; l < kLanes; ++l) sum += acc[l];
  return sum;
}

// Scores a query row may not use become -inf: keys past its causal limit `n`, padded keys.
template <typename T>
void mask_row(T* s, int64_t n, int64_t kn, const bool* mask) {
  const T neg_inf = -std::numeric_limits<T>::infinity();
  if (mask)
    for (int64_t j = 0; j < n; ++j) s[j] = mask[j] ? s[j] : neg_inf;
  std::fill(s + n, s + kn, neg_inf);
}

// Dropout of the probabilities as the sdpa def draws it (merak/ops/defs/attention.cc): element
// (b, h, i, j) of the unsplit [B, heads, Tq, Tk] is word i % 4 of one Philox block per four
// query rows and key.
template <typename T>
struct ProbDropout {
  double p = 0;  // 0: none
  uint64_t key = 0, stream = 0;
  int64_t head_start = 0, heads = 0;  // this call's heads within the unsplit attention's
  int64_t first_row = 0;              // the global batch's row this call's sample 0 is
  uint32_t threshold = 0;             // keep_threshold(p)
  T scale = 1;                        // 1 / (1 - p)

  // Keep factors of query rows [i, i + 4) (i a multiple of 4; rows at or past Tq ignored) of
  // head bh, keys [0, n): keep[w * n + j] = scale or 0 for row i + w. draws: scratch of n
  // blocks.
  void draw(int64_t bh, int64_t H, int64_t Tq, int64_t Tk, int64_t i, int64_t n, T* keep,
            std::array<uint32_t, 4>* draws) const {
    const int64_t head = (first_row + bh / H) * heads + head_start + bh % H;
    philox_run(key, uint64_t((head * ((Tq + 3) / 4) + i / 4) * Tk), stream, n, draws);
    for (int w = 0; w < 4; ++w)
      for (int64_t j = 0; j < n; ++j)
        keep[w * n + j] = (draws[j][size_t(w)] >> 8) >= threshold ? scale : T(0);
  }
};

// Shapes and pointers of one call; a head is one (batch, head) pair.
template <typename T>
struct Problem {
  int64_t B = 0, H = 0, Tq = 0, Tk = 0, D = 0, Dv = 0;
  bool causal = false;
  T scale = 0;
  const T *q = nullptr, *k = nullptr, *v = nullptr;
  const bool* mask = nullptr;  // [B, Tk], null when absent
  ProbDropout<T> dropout;

  Problem(const Tensor& tq, const Tensor& tk, const Tensor& tv, const Tensor& tmask,
          const Attrs& a) {
    B = tq.size(0);
    H = tq.size(1);
    Tq = tq.size(2);
    Tk = tk.size(2);
    D = tq.size(3);
    Dv = tv.size(3);
    causal = a.b("causal");
    const double s = a.f("scale");
    scale = T(s > 0 ? s : 1.0 / std::sqrt(double(D)));
    q = tq.data<T>();
    k = tk.data<T>();
    v = tv.data<T>();
    mask = tmask.defined() ? tmask.data<bool>() : nullptr;
    dropout.p = a.f("dropout");
    dropout.key = uint64_t(a.i("key"));
    dropout.stream = uint64_t(a.i("stream"));
    dropout.head_start = a.i("head_start");
    dropout.first_row = a.i("first_row");
    dropout.heads = a.i("heads") > 0 ? a.i("heads") : H;
    dropout.threshold = keep_threshold(dropout.p);
    dropout.scale = T(1.0 / (1.0 - dropout.p));
  }
  // Keys query row i may attend before masking: [0, visible(i)).
  int64_t visible(int64_t i) const {
    return causal ? std::min(Tk, std::max<int64_t>(0, i + Tk - Tq + 1)) : Tk;
  }
  const T* q_head(int64_t bh) const { return q + bh * Tq * D; }
  const T* k_head(int64_t bh) const { return k + bh * Tk * D; }
  const T* v_head(int64_t bh) const { return v + bh * Tk * Dv; }
  const bool* keys_mask(int64_t bh) const { return mask ? mask + (bh / H) * Tk : nullptr; }
};

// One block of query rows [i0, i1) of head bh: out rows and their lse. s: scratch of
// (i1 - i0) x Tk; keep (4 x Tk) and draws (Tk), used under dropout.
template <typename T>
void forward_block(const Problem<T>& p, int64_t bh, int64_t i0, int64_t i1, T* out, T* lse, T* s,
                   T* keep, std::array<uint32_t, 4>* draws) {
  const T neg_inf = -std::numeric_limits<T>::infinity();
  const int64_t rows = i1 - i0;
  const int64_t kn = p.visible(i1 - 1);  // columns any row of this block can see
  const bool* mask = p.keys_mask(bh);
  T* o = out + (bh * p.Tq + i0) * p.Dv;
  T* l = lse + bh * p.Tq + i0;
  if (kn == 0) {
    std::fill(o, o + rows * p.Dv, T(0));
    std::fill(l, l + rows, neg_inf);
    return;
  }
  gemm<T>(false, true, rows, kn, p.D, p.scale, p.q_head(bh) + i0 * p.D, p.D, p.k_head(bh), p.D,
          T(0), s, kn, false);
  T inv_sum[kBlock];  // rows are normalised after P V: Dv multiplies a row instead of kn
  for (int64_t r = 0; r < rows; ++r) {
    T* row = s + r * kn;
    mask_row(row, p.visible(i0 + r), kn, mask);
    const T m = row_max(row, kn);
    if (m == neg_inf) {  // every key masked: zero output, and lse -inf marks the row
      std::fill(row, row + kn, T(0));
      inv_sum[r] = 0;
      l[r] = neg_inf;
      continue;
    }
    const T sum = exp_shifted_sum(row, kn, m);
    inv_sum[r] = T(1) / sum;
    l[r] = m + std::log(sum);
  }
  // Dropout acts on the normalised probabilities, so the sums above are of every key.
  if (p.dropout.p > 0)
    for (int64_t r = 0; r < rows; r += 4) {  // i0 is a multiple of kBlock, so of 4
      p.dropout.draw(bh, p.H, p.Tq, p.Tk, i0 + r, kn, keep, draws);
      for (int64_t w = 0; w < std::min<int64_t>(4, rows - r); ++w)
        for (int64_t j = 0; j < kn; ++j) s[(r + w) * kn + j] *= keep[w * kn + j];
    }
  gemm<T>(false, false, rows, p.Dv, kn, T(1), s, kn, p.v_head(bh), p.Dv, T(0), o, p.Dv, false);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < p.Dv; ++c) o[r * p.Dv + c] *= inv_sum[r];
}

template <typename T>
void sdpa_forward(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& a) {
  const Problem<T> p(in[0], in[1], in[2], in.size() > 3 ? in[3] : Tensor(), a);
  T* o = out[0].data<T>();
  T* lse = out[1].data<T>();
  const int64_t blocks = (p.Tq + kBlock - 1) / kBlock;
  const int64_t items = p.B * p.H * blocks;
  // Forward blocks are independent, so the pool splits (head, block) pairs.
  const int64_t work = std::min(kBlock, p.Tq) * p.Tk * (p.D + p.Dv);
  const int64_t grain = std::max<int64_t>(1, (int64_t(1) << 18) / std::max<int64_t>(1, work));
  parallel_for(0, items, grain, [&](int64_t lo, int64_t hi) {
    std::vector<T> scratch(size_t(std::min(kBlock, p.Tq) * p.Tk));
    const bool drop = p.dropout.p > 0;
    std::vector<T> keep(drop ? size_t(4 * p.Tk) : 0);
    std::vector<std::array<uint32_t, 4>> draws(drop ? size_t(p.Tk) : 0);
    for (int64_t it = lo; it < hi; ++it) {
      const int64_t bh = it / blocks, i0 = (it % blocks) * kBlock;
      forward_block(p, bh, i0, std::min(p.Tq, i0 + kBlock), o, lse, scratch.data(), keep.data(),
                    draws.data());
    }
  });
}

// The gradients of one head. With P = softmax(S), S = scale * Q K^T, and Z = P * M the
// probabilities after dropout (M the keep factors, 1 without dropout):
//   dV = Z^T dO,  dP = (dO V^T) * M,  dS = P * (dP - rowsum(dO * O)),
//   dQ = scale dS K,  dK = scale dS^T Q.
// P is recomputed per query block as exp(S - lse); dK and dV accumulate over the blocks.
template <typename T>
void backward_head(const Problem<T>& p, int64_t bh, const T* dout, const T* out, const T* lse,
                   T* dq, T* dk, T* dv, T* ps, T* ds, T* keep,
                   std::array<uint32_t, 4>* draws) {
  const T neg_inf = -std::numeric_limits<T>::infinity();
  const bool* mask = p.keys_mask(bh);
  const T* q = p.q_head(bh);
  const T* k = p.k_head(bh);
  const T* v = p.v_head(bh);
  const T* dO = dout + bh * p.Tq * p.Dv;
  const T* O = out + bh * p.Tq * p.Dv;
  const T* L = lse + bh * p.Tq;
  dq += bh * p.Tq * p.D;
  dk += bh * p.Tk * p.D;
  dv += bh * p.Tk * p.Dv;
  std::fill(dk, dk + p.Tk * p.D, T(0));
  std::fill(dv, dv + p.Tk * p.Dv, T(0));
  T delta_of[kBlock];  // rowsum(dO * O) of the block's rows, kept for dropout's second pass
  for (int64_t i0 = 0; i0 < p.Tq; i0 += kBlock) {
    const int64_t i1 = std::min(p.Tq, i0 + kBlock), rows = i1 - i0;
    const int64_t kn = p.visible(i1 - 1);
    if (kn == 0) {
      std::fill(dq + i0 * p.D, dq + i1 * p.D, T(0));
      continue;
    }
    gemm<T>(false, true, rows, kn, p.D, p.scale, q + i0 * p.D, p.D, k, p.D, T(0), ps, kn, false);
    gemm<T>(false, true, rows, kn, p.Dv, T(1), dO + i0 * p.Dv, p.Dv, v, p.Dv, T(0), ds, kn, false);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t i = i0 + r;
      T* pr = ps + r * kn;
      T* dr = ds + r * kn;
      if (L[i] == neg_inf) {  // a fully masked row: no probabilities, no gradient
        std::fill(pr, pr + kn, T(0));
        std::fill(dr, dr + kn, T(0));
        continue;
      }
      T delta = 0;  // sum_j P_ij dP_ij, which equals dO_i . O_i
      for (int64_t c = 0; c < p.Dv; ++c) delta += dO[i * p.Dv + c] * O[i * p.Dv + c];
      mask_row(pr, p.visible(i), kn, mask);
      const T li = L[i];
      if (p.dropout.p > 0) {  // the keep factors come below, four rows at a time
        for (int64_t j = 0; j < kn; ++j) pr[j] = exp_bounded(pr[j] - li);
        delta_of[r] = delta;
        continue;
      }
      for (int64_t j = 0; j < kn; ++j) {
        const T e = exp_bounded(pr[j] - li);
        pr[j] = e;
        dr[j] = e * (dr[j] - delta);
      }
    }
    if (p.dropout.p > 0)
      for (int64_t r = 0; r < rows; r += 4) {
        p.dropout.draw(bh, p.H, p.Tq, p.Tk, i0 + r, kn, keep, draws);
        for (int64_t w = 0; w < std::min<int64_t>(4, rows - r); ++w) {
          if (L[i0 + r + w] == neg_inf) continue;  // zeros already
          T* pr = ps + (r + w) * kn;
          T* dr = ds + (r + w) * kn;
          const T* m = keep + w * kn;
          for (int64_t j = 0; j < kn; ++j) {
            dr[j] = pr[j] * (dr[j] * m[j] - delta_of[r + w]);
            pr[j] *= m[j];
          }
        }
      }
    gemm<T>(false, false, rows, p.D, kn, p.scale, ds, kn, k, p.D, T(0), dq + i0 * p.D, p.D, false);
    gemm<T>(true, false, kn, p.D, rows, p.scale, ds, kn, q + i0 * p.D, p.D, T(1), dk, p.D, false);
    gemm<T>(true, false, kn, p.Dv, rows, T(1), ps, kn, dO + i0 * p.Dv, p.Dv, T(1), dv, p.Dv, false);
  }
}

template <typename T>
void sdpa_backward(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& a) {
  const Problem<T> p(in[1], in[2], in[3], in[4], a);
  const T* dout = in[0].data<T>();
  const T* o = in[5].data<T>();
  const T* lse = in[6].data<T>();
  T* dq = out[0].data<T>();
  T* dk = out[1].data<T>();
  T* dv = out[2].data<T>();
  // dK and dV sum over every query block of a head, so the pool splits whole heads.
  const int64_t work = p.Tq * p.Tk * (p.D + p.Dv);
  const int64_t grain = std::max<int64_t>(1, (int64_t(1) << 17) / std::max<int64_t>(1, work));
  parallel_for(0, p.B * p.H, grain, [&](int64_t lo, int64_t hi) {
    const size_t block = size_t(std::min(kBlock, p.Tq) * p.Tk);
    std::vector<T> ps(block), ds(block);
    const bool drop = p.dropout.p > 0;
    std::vector<T> keep(drop ? size_t(4 * p.Tk) : 0);
    std::vector<std::array<uint32_t, 4>> draws(drop ? size_t(p.Tk) : 0);
    for (int64_t bh = lo; bh < hi; ++bh)
      backward_head(p, bh, dout, o, lse, dq, dk, dv, ps.data(), ds.data(), keep.data(),
                    draws.data());
  });
}

MERAK_REGISTER_KERNEL(sdpa, CPU, [](const std::vector<Tensor>& in, const std::vector<Tensor>& out,
                                    const Attrs& a) {
  MERAK_DISPATCH_FLOAT(in[0].dtype(), "sdpa", [&] { sdpa_forward<scalar_t>(in, out, a); });
});

MERAK_REGISTER_KERNEL(sdpa_grad, CPU,
                      [](const std::vector<Tensor>& in, const std::vector<Tensor>& out,
                         const Attrs& a) {
                        MERAK_DISPATCH_FLOAT(in[1].dtype(), "sdpa_grad",
                                             [&] { sdpa_backward<scalar_t>(in, out, a); });
                      });

}  // namespace
}  // namespace merak::cpu
