// CPU reductions (sum, mean, max, min, prod). The input (contiguous) is viewed as alternating
// groups of kept and reduced dims, adjacent dims of one kind merged and size-1 dims dropped; each
// reduced group, innermost first, is then an [outer, R, inner] reduction over R:
//   inner == 1: contiguous rows (the last-dim case): multi-lane accumulators, pairwise above a
//               block, so f32 sums stay accurate and vectorise without -ffast-math;
//   inner > 1:  strided rows added elementwise (the leading-dims case, e.g. a bias gradient),
//               vectorised over columns, accumulated in blocks of rows.
// f32 accumulates in f32, f64 in f64. min and prod (rare: constants ONNX import folds) take plain
// loops, without the lanes of sum and max.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "merak/core/parallel.h"
#include "merak/ops/op_util.h"

namespace merak::ops {
namespace {

enum class Reduce { Sum, Max, Min, Prod };

constexpr int64_t kGrain = 32768;    // elements below which a reduction stays single-threaded
constexpr int64_t kCols = 512;       // columns per task in the strided case (fits L1)
constexpr int64_t kRowBlock = 64;    // rows summed together before joining the running total
constexpr int64_t kPairBlock = 4096;  // contiguous elements summed directly before splitting

// Sum of p[0, n): independent lanes (4 vector registers, or 1 for short rows) the compiler
// vectorises, pairwise recursion above kPairBlock; f32 rounding error grows like log(n), not n.
template <typename T>
T sum_contig(const T* p, int64_t n) {
  constexpr int64_t kLanes = 256 / sizeof(T);
  if (n > kPairBlock) {
    const int64_t half = (n / 2 + kLanes - 1) / kLanes * kLanes;
    return sum_contig(p, half) + sum_contig(p + half, n - half);
  }
  constexpr int64_t kVec = 64 / sizeof(T);  // one AVX-512 register: short rows use one
  T acc[kLanes] = {};
  int64_t i = 0;
  if (n >= 2 * kLanes) {
    for (; i + kLanes <= n; i += kLanes)
      for (int64_t j = 0; j < kLanes; ++j) acc[j] += p[i + j];
    for (int64_t j = 0; j < kVec; ++j)
      acc[j] += acc[j + kVec] + acc[j + 2 * kVec] + acc[j + 3 * kVec];
  }
  for (; i + kVec <= n; i += kVec)
    for (int64_t j = 0; j < kVec; ++j) acc[j] += p[i + j];
  T tail = 0;
  for (; i < n; ++i) tail += p[i];
  for (int64_t w = kVec / 2; w > 0; w /= 2)
    for (int64_t j = 0; j < w; ++j) acc[j] += acc[j + w];
  return acc[0] + tail;
}

// max that lets a NaN through (std::max would drop it when it comes second).
template <typename T>
inline T max_nan(T a, T b) {
  return (b > a || b != b) ? b : a;
}

template <typename T>
inline T min_nan(T a, T b) {
  return (b < a || b != b) ? b : a;
}

// a and b combined by `op`; NaN propagates through max and min.
template <typename T>
inline T combine(Reduce op, T a, T b) {
  switch (op) {
    case Reduce::Sum: return a + b;
    case Reduce::Max: return max_nan(a, b);
    case Reduce::Min: return min_nan(a, b);
    case Reduce::Prod: return a * b;
  }
  return a;
}

// Min or product of p[0, n), n >= 1, left to right.
template <typename T, typename F>
T fold_contig(const T* p, int64_t n, const F& f) {
  T acc = p[0];
  for (int64_t i = 1; i < n; ++i) acc = f(acc, p[i]);
  return acc;
}

// dst[c] = f over r < rows of x[r * ld + c], for c < ncols (rows >= 1).
template <typename T, typename F>
void fold_strided(const T* x, int64_t rows, int64_t ld, int64_t ncols, T* dst, const F& f) {
  std::copy(x, x + ncols, dst);
  for (int64_t r = 1; r < rows; ++r) {
    const T* row = x + r * ld;
    for (int64_t c = 0; c < ncols; ++c) dst[c] = f(dst[c], row[c]);
  }
}

// Max of p[0, n), n >= 1; NaN propagates. Same lane layout as sum_contig.
template <typename T>
T max_contig(const T* p, int64_t n) {
  constexpr int64_t kLanes = 256 / sizeof(T), kVec = 64 / sizeof(T);
  T best = p[0];
  int64_t i = 0;
  if (n >= kVec) {
    T acc[kLanes];
    if (n >= 2 * kLanes) {
      std::copy(p, p + kLanes, acc);
      for (i = kLanes; i + kLanes <= n; i += kLanes)
        for (int64_t j = 0; j < kLanes; ++j) acc[j] = max_nan(acc[j], p[i + j]);
      for (int64_t j = 0; j < kVec; ++j)
        acc[j] = max_nan(max_nan(acc[j], acc[j + kVec]),
                         max_nan(acc[j + 2 * kVec], acc[j + 3 * kVec]));
    } else {
      std::copy(p, p + kVec, acc);
      i = kVec;
    }
    for (; i + kVec <= n; i += kVec)
      for (int64_t j = 0; j < kVec; ++j) acc[j] = max_nan(acc[j], p[i + j]);
    for (int64_t w = kVec / 2; w > 0; w /= 2)
      for (int64_t j = 0; j < w; ++j) acc[j] = max_nan(acc[j], acc[j + w]);
    best = acc[0];
  }
  for (; i < n; ++i) best = max_nan(best, p[i]);
  return best;
}

// dst[c] = reduce over r < rows of x[r * ld + c], for c < ncols.
template <typename T>
void reduce_strided(const T* x, int64_t rows, int64_t ld, int64_t ncols, T* dst, Reduce op) {
  switch (op) {
    // Lambdas, not function pointers, so that the loops inline and vectorise.
    case Reduce::Max:
      return fold_strided(x, rows, ld, ncols, dst, [](T a, T b) { return max_nan(a, b); });
    case Reduce::Min:
      return fold_strided(x, rows, ld, ncols, dst, [](T a, T b) { return min_nan(a, b); });
    case Reduce::Prod: return fold_strided(x, rows, ld, ncols, dst, [](T a, T b) { return a * b; });
    case Reduce::Sum: break;
  }
  T part[kCols];
  std::fill(dst, dst + ncols, T(0));
  for (int64_t r0 = 0; r0 < rows; r0 += kRowBlock) {
    const int64_t r1 = std::min(rows, r0 + kRowBlock);
    std::copy(x + r0 * ld, x + r0 * ld + ncols, part);
    for (int64_t r = r0 + 1; r < r1; ++r) {
      const T* row = x + r * ld;
      for (int64_t c = 0; c < ncols; ++c) part[c] += row[c];
    }
    for (int64_t c = 0; c < ncols; ++c) dst[c] += part[c];
  }
}

// Reduces rows [r0, r1) of x viewed as [outer, R, inner] into dst [outer, inner], for the
// (outer index, column chunk) tasks [t0, t1).
template <typename T>
void reduce_tasks(const T* x, int64_t R, int64_t inner, int64_t r0, int64_t r1, T* dst,
                  int64_t t0, int64_t t1, Reduce op) {
  const int64_t chunks = (inner + kCols - 1) / kCols;
  for (int64_t t = t0; t < t1; ++t) {
    const int64_t o = t / chunks, c0 = (t % chunks) * kCols;
    const T* src = x + (o * R + r0) * inner + c0;
    if (inner == 1) {
      switch (op) {
        case Reduce::Sum: dst[o] = sum_contig(src, r1 - r0); break;
        case Reduce::Max: dst[o] = max_contig(src, r1 - r0); break;
        case Reduce::Min:
          dst[o] = fold_contig(src, r1 - r0, [](T a, T b) { return min_nan(a, b); });
          break;
        case Reduce::Prod:
          dst[o] = fold_contig(src, r1 - r0, [](T a, T b) { return a * b; });
          break;
      }
    } else {
      reduce_strided(src, r1 - r0, inner, std::min(kCols, inner - c0), dst + o * inner + c0, op);
    }
  }
}

// out [outer, inner] = reduce of x [outer, R, inner] over R (R >= 1).
template <typename T>
void reduce3(const T* x, T* out, int64_t outer, int64_t R, int64_t inner, Reduce op) {
  const int64_t total = outer * R * inner;
  const int64_t tasks = outer * ((inner + kCols - 1) / kCols);
  const int64_t threads = num_threads();
  if (total < 2 * kGrain || tasks >= threads || R < 2 * threads) {
    const int64_t per_task = R * std::min(inner, kCols);
    parallel_for(0, tasks, std::max<int64_t>(1, kGrain / per_task), [&](int64_t lo, int64_t hi) {
      reduce_tasks(x, R, inner, 0, R, out, lo, hi, op);
    });
    return;
  }
  // Few, long reductions (a full sum, a bias gradient): each thread reduces a band of R into its
  // own partial result, then the partials are combined.
  const int64_t parts = std::min(threads, total / kGrain);
  const int64_t n = outer * inner;
  std::vector<T> partial(size_t(parts * n));
  parallel_for(0, parts, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t p = lo; p < hi; ++p)
      reduce_tasks(x, R, inner, R * p / parts, R * (p + 1) / parts, partial.data() + p * n, 0,
                   tasks, op);
  });
  std::copy(partial.begin(), partial.begin() + n, out);
  for (int64_t p = 1; p < parts; ++p) {
    const T* q = partial.data() + p * n;
    for (int64_t i = 0; i < n; ++i) out[i] = combine(op, out[i], q[i]);
  }
}

template <typename T>
void reduce_kernel(const Tensor& x, const Tensor& y, const std::vector<int64_t>& dims, Reduce op,
                   bool mean) {
  const Shape& s = x.shape();
  const int64_t rank = x.dim();
  std::vector<bool> reduced(size_t(rank), dims.empty());
  for (int64_t d : dims)
    if (rank > 0) reduced[size_t(normalize_dim(d, rank))] = true;
  int64_t count = 1;
  for (int64_t d = 0; d < rank; ++d)
    if (reduced[size_t(d)]) count *= s[size_t(d)];

  T* out = y.data<T>();
  const int64_t n_out = y.numel();
  if (n_out == 0) return;
  if (count == 0) {  // empty (max and min reject it at inference): sum 0, mean NaN, prod 1
    const T empty = mean ? std::numeric_limits<T>::quiet_NaN() : T(op == Reduce::Prod ? 1 : 0);
    std::fill(out, out + n_out, empty);
    return;
  }

  // Groups of (size, reduced), adjacent dims of a kind merged, size-1 dims dropped.
  std::vector<std::pair<int64_t, bool>> groups;
  for (int64_t d = 0; d < rank; ++d) {
    if (s[size_t(d)] == 1) continue;
    if (!groups.empty() && groups.back().second == reduced[size_t(d)])
      groups.back().first *= s[size_t(d)];
    else
      groups.push_back({s[size_t(d)], reduced[size_t(d)]});
  }

  const T* src = x.data<T>();
  std::vector<T> current;  // intermediate result between passes
  bool wrote_out = false;
  for (;;) {
    int64_t j = int64_t(groups.size()) - 1;
    while (j >= 0 && !groups[size_t(j)].second) --j;
    if (j < 0) break;
    int64_t outer = 1, inner = 1;
    bool more = false;  // another reduced group left of j: this pass writes an intermediate
    for (int64_t k = 0; k < j; ++k) {
      outer *= groups[size_t(k)].first;
      more = more || groups[size_t(k)].second;
    }
    for (size_t k = size_t(j) + 1; k < groups.size(); ++k) inner *= groups[k].first;
    std::vector<T> next;
    T* dst = out;
    if (more) {
      next.resize(size_t(outer * inner));
      dst = next.data();
    }
    reduce3(src, dst, outer, groups[size_t(j)].first, inner, op);
    wrote_out = !more;
    current = std::move(next);
    src = more ? current.data() : out;
    groups.erase(groups.begin() + j);
    // The kept groups on either side of the removed one are now adjacent: merge them.
    if (j > 0 && size_t(j) < groups.size()) {
      groups[size_t(j) - 1].first *= groups[size_t(j)].first;
      groups.erase(groups.begin() + j);
    }
  }
  if (!wrote_out) std::copy(src, src + n_out, out);  // nothing to reduce: every dim was kept or 1
  if (mean && count != 1) {
    const T c = T(count);
    for (int64_t i = 0; i < n_out; ++i) out[i] /= c;
  }
}

void run(const char* name, const std::vector<Tensor>& in, const std::vector<Tensor>& out,
         const Attrs& a, Reduce op, bool mean) {
  MERAK_DISPATCH_FLOAT(in[0].dtype(), name, [&] {
    reduce_kernel<scalar_t>(in[0], out[0], a.ints("dims"), op, mean);
  });
}

}  // namespace

MERAK_REGISTER_KERNEL(sum, CPU, [](const std::vector<Tensor>& in, const std::vector<Tensor>& out,
                                   const Attrs& a) { run("sum", in, out, a, Reduce::Sum, false); });
MERAK_REGISTER_KERNEL(mean, CPU, [](const std::vector<Tensor>& in, const std::vector<Tensor>& out,
                                    const Attrs& a) { run("mean", in, out, a, Reduce::Sum, true); });
MERAK_REGISTER_KERNEL(max, CPU, [](const std::vector<Tensor>& in, const std::vector<Tensor>& out,
                                   const Attrs& a) { run("max", in, out, a, Reduce::Max, false); });
MERAK_REGISTER_KERNEL(min, CPU, [](const std::vector<Tensor>& in, const std::vector<Tensor>& out,
                                   const Attrs& a) { run("min", in, out, a, Reduce::Min, false); });
MERAK_REGISTER_KERNEL(prod, CPU, [](const std::vector<Tensor>& in, const std::vector<Tensor>& out,
                                    const Attrs& a) {
  run("prod", in, out, a, Reduce::Prod, false);
});

}  // namespace merak::ops
