// CPU kernels of the elementwise ops (merak/ops/defs/elementwise.cc).
// Broadcasting ops take one of three paths: equal shapes (one flat loop), the smaller input
// repeating as rows of the output (a bias/row suffix, or a scalar), or a general broadcast that
// walks the output in rows after merging the dims every input steps through uniformly.
#include "kernels/cpu/vec_math.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "merak/core/parallel.h"
#include "merak/ops/op_util.h"

namespace merak::cpu {
namespace {

using ops::Attrs;

// Elements per thread task: cheap ops are worth threading only on large tensors, ops that cost
// tens of cycles per element (transcendentals) sooner.
constexpr int64_t kGrain = 32768;
constexpr int64_t kGrainHeavy = 8192;

// Runs f(lo, hi) over [0, n) in chunks of at least `grain`, on the pool when there is more than
// one chunk.
template <typename F>
void run_chunks(int64_t n, int64_t grain, const F& f) {
  if (n <= 0) return;
  if (n <= grain) {
    f(int64_t(0), n);
    return;
  }
  parallel_for(0, n, grain, [&](int64_t lo, int64_t hi) { f(lo, hi); });
}

template <typename T>
const T* in_ptr(const Tensor& t) {
  return static_cast<const T*>(t.raw_data());
}
template <typename T>
T* out_ptr(const Tensor& t) {
  return static_cast<T*>(t.raw_data());
}

// --- broadcasting ---

// True when `small` (leading 1s aside) is a suffix of `out`: then, row-major, it repeats every
// numel(small) output elements, e.g. a bias [C] against [B, T, C].
bool repeats_as_rows(const Shape& small, const Shape& out) {
  size_t lead = 0;
  while (lead < small.size() && small[lead] == 1) ++lead;
  const size_t n = small.size() - lead;
  if (n > out.size()) return false;
  return std::equal(small.begin() + int64_t(lead), small.end(), out.end() - int64_t(n));
}

// N inputs broadcast to a contiguous output, described by the output's dims with size-1 dims
// dropped and neighbours merged wherever every input steps through them as one (so [B, T, C]
// against [C] becomes [B*T, C], and equal shapes one flat dim). Strides are in elements, 0 where
// an input is broadcast.
template <int N>
struct BroadcastLayout {
  Shape sizes;                                  // merged dims, outermost first; never empty
  std::vector<std::array<int64_t, N>> strides;  // per merged dim, each input's stride
};

template <int N>
BroadcastLayout<N> broadcast_layout(const Shape& out, const std::array<Shape, N>& in) {
  const int64_t rank = int64_t(out.size());
  std::vector<std::array<int64_t, N>> st(static_cast<size_t>(rank));
  for (int k = 0; k < N; ++k) {
    const Shape& s = in[k];
    const int64_t lead = rank - int64_t(s.size());
    int64_t stride = 1;
    for (int64_t d = rank - 1; d >= 0; --d) {
      const int64_t size = d >= lead ? s[d - lead] : 1;
      st[d][k] = size == 1 ? 0 : stride;
      stride *= size;
    }
  }
  BroadcastLayout<N> layout;
  for (int64_t d = 0; d < rank; ++d) {
    if (out[d] == 1) continue;
    if (!layout.sizes.empty()) {
      bool merge = true;
      for (int k = 0; k < N; ++k) merge = merge && layout.strides.back()[k] == st[d][k] * out[d];
      if (merge) {
        layout.sizes.back() *= out[d];
        layout.strides.back() = st[d];
        continue;
      }
    }
    layout.sizes.push_back(out[d]);
    layout.strides.push_back(st[d]);
  }
  if (layout.sizes.empty()) {  // a one-element output
    layout.sizes.push_back(1);
    layout.strides.push_back({});
  }
  return layout;
}

// Calls row(out_offset, offsets, n, strides) for each innermost row of a broadcast: the output
// row starts at out_offset, input k's at offsets[k] and steps by strides[k]. Rows are split
// over threads; each task finds its first row's offsets once, then steps like an odometer.
template <int N, typename Row>
void for_each_row(const Shape& out, const std::array<Shape, N>& in, int64_t grain,
                  const Row& row) {
  if (numel(out) == 0) return;
  const BroadcastLayout<N> L = broadcast_layout<N>(out, in);
  const int64_t outer = int64_t(L.sizes.size()) - 1;
  const int64_t inner = L.sizes.back();
  const std::array<int64_t, N> inner_strides = L.strides.back();
  const int64_t rows = numel(L.sizes) / inner;
  run_chunks(rows, std::max<int64_t>(1, grain / inner), [&](int64_t lo, int64_t hi) {
    std::vector<int64_t> idx(static_cast<size_t>(outer), 0);
    std::array<int64_t, N> off{};
    int64_t r = lo;
    for (int64_t d = outer - 1; d >= 0; --d) {
      idx[d] = r % L.sizes[d];
      r /= L.sizes[d];
      for (int k = 0; k < N; ++k) off[k] += idx[d] * L.strides[d][k];
    }
    for (int64_t i = lo; i < hi; ++i) {
      row(i * inner, off, inner, inner_strides);
      for (int64_t d = outer - 1; d >= 0; --d) {
        for (int k = 0; k < N; ++k) off[k] += L.strides[d][k];
        if (++idx[d] < L.sizes[d]) break;
        for (int k = 0; k < N; ++k) off[k] -= L.strides[d][k] * L.sizes[d];
        idx[d] = 0;
      }
    }
  });
}

// The row loops are flattened: every call in them (the functor, the special functions, their
// exp) is inlined, without which GCC's size heuristics leave exp as a call and nothing vectorises.
#define MERAK_FLATTEN __attribute__((flatten))

// out[j] = f(a[j * sa], b[j * sb]) for j < n, with the unit/zero strides as separate loops so
// that each one vectorises.
template <typename T, typename R, typename F>
MERAK_FLATTEN void binary_row(const T* __restrict a, int64_t sa, const T* __restrict b, int64_t sb,
                              R* __restrict out, int64_t n, const F& f) {
  if (sa == 1 && sb == 1) {
    for (int64_t j = 0; j < n; ++j) out[j] = f(a[j], b[j]);
  } else if (sa == 1 && sb == 0) {
    const T bv = *b;
    for (int64_t j = 0; j < n; ++j) out[j] = f(a[j], bv);
  } else if (sa == 0 && sb == 1) {
    const T av = *a;
    for (int64_t j = 0; j < n; ++j) out[j] = f(av, b[j]);
  } else {
    for (int64_t j = 0; j < n; ++j) out[j] = f(a[j * sa], b[j * sb]);
  }
}

// out = f(a, b) with NumPy broadcasting; T is the inputs' element type, R the output's.
template <typename T, typename R, typename F>
void binary_kernel(const Tensor& a, const Tensor& b, const Tensor& out, int64_t grain,
                   const F& f) {
  const T* pa = in_ptr<T>(a);
  const T* pb = in_ptr<T>(b);
  R* po = out_ptr<R>(out);
  const int64_t n = out.numel(), na = a.numel(), nb = b.numel();
  if (n == 0) return;
  auto flat = [&](int64_t sa, int64_t sb) {  // strides 1 (full) or 0 (scalar)
    run_chunks(n, grain, [&](int64_t lo, int64_t hi) {
      binary_row(pa + lo * sa, sa, pb + lo * sb, sb, po + lo, hi - lo, f);
    });
  };
  if (na == n && nb == n) return flat(1, 1);
  if (na == n && nb == 1) return flat(1, 0);
  if (na == 1 && nb == n) return flat(0, 1);
  if (na == n && repeats_as_rows(b.shape(), out.shape())) {
    run_chunks(n / nb, std::max<int64_t>(1, grain / nb), [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) binary_row(pa + r * nb, 1, pb, 1, po + r * nb, nb, f);
    });
    return;
  }
  if (nb == n && repeats_as_rows(a.shape(), out.shape())) {
    run_chunks(n / na, std::max<int64_t>(1, grain / na), [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) binary_row(pa, 1, pb + r * na, 1, po + r * na, na, f);
    });
    return;
  }
  for_each_row<2>(out.shape(), {a.shape(), b.shape()}, grain,
                  [&](int64_t o, const std::array<int64_t, 2>& off, int64_t len,
                      const std::array<int64_t, 2>& st) {
                    binary_row(pa + off[0], st[0], pb + off[1], st[1], po + o, len, f);
                  });
}

// y[i] = f(x[i]) for i < n.
template <typename T, typename F>
MERAK_FLATTEN void unary_row(const T* __restrict x, T* __restrict y, int64_t n, const F& f) {
  for (int64_t i = 0; i < n; ++i) y[i] = f(x[i]);
}

// y = f(x) over a flat range.
template <typename T, typename F>
void unary_kernel(const Tensor& x, const Tensor& y, int64_t grain, const F& f) {
  const T* px = in_ptr<T>(x);
  T* py = out_ptr<T>(y);
  run_chunks(x.numel(), grain,
             [&](int64_t lo, int64_t hi) { unary_row(px + lo, py + lo, hi - lo, f); });
}

// Registers a floating unary op; the functor may read the attributes `a` and use `scalar_t`.
#define MERAK_UNARY_KERNEL(name, grain, ...)                                           \
  MERAK_REGISTER_KERNEL(name, CPU, [](const std::vector<Tensor>& in,                   \
                                      const std::vector<Tensor>& out, const Attrs& a) { \
    (void)a;                                                                           \
    MERAK_DISPATCH_FLOAT(out[0].dtype(), #name, [&] {                                  \
      unary_kernel<scalar_t>(in[0], out[0], grain, __VA_ARGS__);                       \
    });                                                                                \
  })

}  // namespace

// --- arithmetic ---

namespace {

// i32/i64 arithmetic (the shape arithmetic ONNX import folds) wraps around like two's
// complement rather than reaching C++'s undefined signed overflow: a hostile file must not.
template <typename T>
T wrap_add(T x, T y) {
  return T(std::make_unsigned_t<T>(x) + std::make_unsigned_t<T>(y));
}
template <typename T>
T wrap_sub(T x, T y) {
  return T(std::make_unsigned_t<T>(x) - std::make_unsigned_t<T>(y));
}
template <typename T>
T wrap_mul(T x, T y) {
  return T(std::make_unsigned_t<T>(x) * std::make_unsigned_t<T>(y));
}

// A broadcasting arithmetic op: floating dtypes through `ff` (the path every float model takes,
// unchanged), i32 and i64 through `fi`.
template <typename FF, typename FI>
void arith_kernel(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const char* name,
                  const FF& ff, const FI& fi) {
  switch (out[0].dtype()) {
    case DType::I32: return binary_kernel<int32_t, int32_t>(in[0], in[1], out[0], kGrain, fi);
    case DType::I64: return binary_kernel<int64_t, int64_t>(in[0], in[1], out[0], kGrain, fi);
    default:
      MERAK_DISPATCH_FLOAT(out[0].dtype(), name, [&] {
        binary_kernel<scalar_t, scalar_t>(in[0], in[1], out[0], kGrain, ff);
      });
  }
}

// Integer a / b truncates toward zero (C++'s and ONNX's rule). A zero divisor and MIN / -1
// trap in hardware, so they are flagged inside the loop (threads may share the flag) and
// reported after it.
template <typename T>
void int_div(const Tensor& a, const Tensor& b, const Tensor& out) {
  std::atomic<bool> bad{false};
  binary_kernel<T, T>(a, b, out, kGrain, [&bad](T x, T y) {
    if (y == 0 || (y == -1 && x == std::numeric_limits<T>::min())) {
      bad.store(true, std::memory_order_relaxed);
      return T(0);
    }
    return T(x / y);
  });
  MERAK_CHECK(!bad.load(), "div: integer division by zero or of the minimum ",
              dtype_name(out.dtype()), " by -1");
}

}  // namespace

MERAK_REGISTER_KERNEL(add, CPU, [](const std::vector<Tensor>& in, const std::vector<Tensor>& out,
                                   const Attrs&) {
  arith_kernel(in, out, "add", [](auto x, auto y) { return x + y; },
               [](auto x, auto y) { return wrap_add(x, y); });
});
MERAK_REGISTER_KERNEL(sub, CPU, [](const std::vector<Tensor>& in, const std::vector<Tensor>& out,
                                   const Attrs&) {
  arith_kernel(in, out, "sub", [](auto x, auto y) { return x - y; },
               [](auto x, auto y) { return wrap_sub(x, y); });
});
MERAK_REGISTER_KERNEL(mul, CPU, [](const std::vector<Tensor>& in, const std::vector<Tensor>& out,
                                   const Attrs&) {
  arith_kernel(in, out, "mul", [](auto x, auto y) { return x * y; },
               [](auto x, auto y) { return wrap_mul(x, y); });
});
MERAK_REGISTER_KERNEL(div, CPU, [](const std::vector<Tensor>& in, const std::vector<Tensor>& out,
                                   const Attrs&) {
  switch (out[0].dtype()) {
    case DType::I32: return int_div<int32_t>(in[0], in[1], out[0]);
    case DType::I64: return int_div<int64_t>(in[0], in[1], out[0]);
    default:
      MERAK_DISPATCH_FLOAT(out[0].dtype(), "div", [&] {
        binary_kernel<scalar_t, scalar_t>(in[0], in[1], out[0], kGrain,
                                          [](auto x, auto y) { return x / y; });
      });
  }
});

MERAK_UNARY_KERNEL(add_scalar, kGrain,
                   [v = scalar_t(a.f("value"))](scalar_t x) { return x + v; });
MERAK_UNARY_KERNEL(mul_scalar, kGrain,
                   [v = scalar_t(a.f("value"))](scalar_t x) { return x * v; });

namespace {

// A unary op on floating dtypes through `ff` (unchanged for float models) and on i32/i64
// through `fi` (neg and relu of folded shape values).
template <typename FF, typename FI>
void signed_unary_kernel(const Tensor& x, const Tensor& y, const char* name, const FF& ff,
                         const FI& fi) {
  switch (y.dtype()) {
    case DType::I32: return unary_kernel<int32_t>(x, y, kGrain, fi);
    case DType::I64: return unary_kernel<int64_t>(x, y, kGrain, fi);
    default:
      MERAK_DISPATCH_FLOAT(y.dtype(), name, [&] { unary_kernel<scalar_t>(x, y, kGrain, ff); });
  }
}

}  // namespace

MERAK_REGISTER_KERNEL(neg, CPU, [](const std::vector<Tensor>& in, const std::vector<Tensor>& out,
                                   const Attrs&) {
  signed_unary_kernel(in[0], out[0], "neg", [](auto x) { return -x; },
                      [](auto x) { return wrap_sub(decltype(x)(0), x); });  // -MIN wraps to MIN
});

// |MIN| wraps to MIN, as -MIN does.
MERAK_REGISTER_KERNEL(abs, CPU, [](const std::vector<Tensor>& in, const std::vector<Tensor>& out,
                                   const Attrs&) {
  signed_unary_kernel(in[0], out[0], "abs", [](auto x) { return std::abs(x); },
                      [](auto x) { return x < 0 ? wrap_sub(decltype(x)(0), x) : x; });
});

MERAK_REGISTER_KERNEL(sign, CPU, [](const std::vector<Tensor>& in, const std::vector<Tensor>& out,
                                    const Attrs&) {
  signed_unary_kernel(
      in[0], out[0], "sign",
      [](auto x) { return x != x ? x : decltype(x)((x > 0) - (x < 0)); },  // NaN stays NaN
      [](auto x) { return decltype(x)((x > 0) - (x < 0)); });
});

// The larger (smaller) of a and b; a NaN on either side is the result. Integers compare exactly.
MERAK_REGISTER_KERNEL(maximum, CPU, [](const std::vector<Tensor>& in,
                                       const std::vector<Tensor>& out, const Attrs&) {
  arith_kernel(in, out, "maximum", [](auto x, auto y) { return x > y || x != x ? x : y; },
               [](auto x, auto y) { return std::max(x, y); });
});
MERAK_REGISTER_KERNEL(minimum, CPU, [](const std::vector<Tensor>& in,
                                       const std::vector<Tensor>& out, const Attrs&) {
  arith_kernel(in, out, "minimum", [](auto x, auto y) { return x < y || x != x ? x : y; },
               [](auto x, auto y) { return std::min(x, y); });
});

// --- unary math ---

// f32 results below e^-87.33 (subnormal) flush to 0.
MERAK_UNARY_KERNEL(exp, kGrainHeavy, [](scalar_t x) { return exp_sat(x); });
MERAK_UNARY_KERNEL(log, kGrainHeavy, [](scalar_t x) { return std::log(x); });
MERAK_UNARY_KERNEL(sqrt, kGrain, [](scalar_t x) { return std::sqrt(x); });
MERAK_UNARY_KERNEL(rsqrt, kGrain, [](scalar_t x) { return scalar_t(1) / std::sqrt(x); });
MERAK_UNARY_KERNEL(tanh, kGrainHeavy, [](scalar_t x) { return tanh_of(x); });
MERAK_UNARY_KERNEL(erf, kGrainHeavy, [](scalar_t x) { return erf_of(x); });

// Exponents that models use (squares, cubes, roots, reciprocals) get exact vectorisable loops;
// the rest call std::pow.
MERAK_REGISTER_KERNEL(pow, CPU, [](const std::vector<Tensor>& in, const std::vector<Tensor>& out,
                                   const Attrs& a) {
  const double e = a.f("exponent");
  MERAK_DISPATCH_FLOAT(out[0].dtype(), "pow", [&] {
    using T = scalar_t;
    const Tensor &x = in[0], &y = out[0];
    if (e == 1) return unary_kernel<T>(x, y, kGrain, [](T v) { return v; });
    if (e == 2) return unary_kernel<T>(x, y, kGrain, [](T v) { return v * v; });
    if (e == 3) return unary_kernel<T>(x, y, kGrain, [](T v) { return v * v * v; });
    if (e == 0.5) return unary_kernel<T>(x, y, kGrain, [](T v) { return std::sqrt(v); });
    if (e == -0.5) return unary_kernel<T>(x, y, kGrain, [](T v) { return T(1) / std::sqrt(v); });
    if (e == -1) return unary_kernel<T>(x, y, kGrain, [](T v) { return T(1) / v; });
    if (e == -2) return unary_kernel<T>(x, y, kGrain, [](T v) { return T(1) / (v * v); });
    unary_kernel<T>(x, y, kGrainHeavy / 4, [te = T(e)](T v) { return std::pow(v, te); });
  });
});

MERAK_REGISTER_KERNEL(pow_tensor, CPU, [](const std::vector<Tensor>& in,
                                          const std::vector<Tensor>& out, const Attrs&) {
  MERAK_DISPATCH_FLOAT(out[0].dtype(), "pow_tensor", [&] {
    binary_kernel<scalar_t, scalar_t>(in[0], in[1], out[0], kGrainHeavy / 4,
                                      [](scalar_t a, scalar_t b) { return std::pow(a, b); });
  });
});

MERAK_UNARY_KERNEL(floor, kGrain, [](scalar_t x) { return std::floor(x); });
MERAK_UNARY_KERNEL(ceil, kGrain, [](scalar_t x) { return std::ceil(x); });

// --- activations and their gradients ---

// NaN stays NaN (only x < 0 is replaced).
MERAK_REGISTER_KERNEL(relu, CPU, [](const std::vector<Tensor>& in, const std::vector<Tensor>& out,
                                    const Attrs&) {
  const auto f = [](auto x) { return x < 0 ? decltype(x)(0) : x; };
  signed_unary_kernel(in[0], out[0], "relu", f, f);
});

MERAK_REGISTER_KERNEL(relu_grad, CPU, [](const std::vector<Tensor>& in,
                                         const std::vector<Tensor>& out, const Attrs&) {
  MERAK_DISPATCH_FLOAT(out[0].dtype(), "relu_grad", [&] {
    binary_kernel<scalar_t, scalar_t>(in[0], in[1], out[0], kGrain, [](scalar_t dy, scalar_t y) {
      return y > 0 ? dy : scalar_t(0);
    });
  });
});

MERAK_REGISTER_KERNEL(gelu, CPU, [](const std::vector<Tensor>& in, const std::vector<Tensor>& out,
                                    const Attrs& a) {
  const bool exact = a.s("approximate") == "none";
  MERAK_DISPATCH_FLOAT(out[0].dtype(), "gelu", [&] {
    using T = scalar_t;
    if (exact) unary_kernel<T>(in[0], out[0], kGrainHeavy, [](T x) { return gelu_erf(x); });
    else unary_kernel<T>(in[0], out[0], kGrainHeavy, [](T x) { return gelu_tanh(x); });
  });
});

MERAK_REGISTER_KERNEL(gelu_grad, CPU, [](const std::vector<Tensor>& in,
                                         const std::vector<Tensor>& out, const Attrs& a) {
  const bool exact = a.s("approximate") == "none";
  MERAK_DISPATCH_FLOAT(out[0].dtype(), "gelu_grad", [&] {
    using T = scalar_t;
    if (exact) {
      binary_kernel<T, T>(in[0], in[1], out[0], kGrainHeavy,
                          [](T dy, T x) { return dy * gelu_erf_grad(x); });
    } else {
      binary_kernel<T, T>(in[0], in[1], out[0], kGrainHeavy,
                          [](T dy, T x) { return dy * gelu_tanh_grad(x); });
    }
  });
});

// --- comparison, logical ops and selection ---

namespace {

// A comparison: bool out, inputs of any dtype but the 16-bit ones, each in its own type
// (integers exactly, not through a float).
template <typename F>
void compare_kernel(const std::vector<Tensor>& in, const std::vector<Tensor>& out,
                    const char* name, const F& f) {
  switch (in[0].dtype()) {
    case DType::F32: return binary_kernel<float, bool>(in[0], in[1], out[0], kGrain, f);
    case DType::F64: return binary_kernel<double, bool>(in[0], in[1], out[0], kGrain, f);
    case DType::I32: return binary_kernel<int32_t, bool>(in[0], in[1], out[0], kGrain, f);
    case DType::I64: return binary_kernel<int64_t, bool>(in[0], in[1], out[0], kGrain, f);
    case DType::Bool: return binary_kernel<bool, bool>(in[0], in[1], out[0], kGrain, f);
    default: MERAK_FAIL(name, ": dtype ", dtype_name(in[0].dtype()), " not supported");
  }
}

}  // namespace

#define MERAK_CPU_COMPARE(name, expr)                                                    \
  MERAK_REGISTER_KERNEL(name, CPU, [](const std::vector<Tensor>& in,                     \
                                      const std::vector<Tensor>& out, const Attrs&) {    \
    compare_kernel(in, out, #name, [](auto x, auto y) { return expr; });                 \
  })

MERAK_CPU_COMPARE(eq, x == y);
MERAK_CPU_COMPARE(lt, x < y);
MERAK_CPU_COMPARE(gt, x > y);
MERAK_CPU_COMPARE(le, x <= y);
MERAK_CPU_COMPARE(ge, x >= y);

// Logical ops: bool inputs (the definitions check), bool out.
#define MERAK_CPU_LOGICAL(name, expr)                                                    \
  MERAK_REGISTER_KERNEL(name, CPU, [](const std::vector<Tensor>& in,                     \
                                      const std::vector<Tensor>& out, const Attrs&) {    \
    binary_kernel<bool, bool>(in[0], in[1], out[0], kGrain,                              \
                              [](bool x, bool y) -> bool { return expr; });              \
  })

MERAK_CPU_LOGICAL(logical_and, x && y);
MERAK_CPU_LOGICAL(logical_or, x || y);
MERAK_CPU_LOGICAL(logical_xor, x != y);

namespace {

template <typename T>
void where_kernel(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) {
  const bool* pc = in_ptr<bool>(cond);
  const T* pa = in_ptr<T>(a);
  const T* pb = in_ptr<T>(b);
  T* po = out_ptr<T>(out);
  const int64_t n = out.numel();
  if (cond.numel() == n && a.numel() == n && b.numel() == n) {
    run_chunks(n, kGrain, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) po[i] = pc[i] ? pa[i] : pb[i];
    });
    return;
  }
  for_each_row<3>(out.shape(), {cond.shape(), a.shape(), b.shape()}, kGrain,
                  [&](int64_t o, const std::array<int64_t, 3>& off, int64_t len,
                      const std::array<int64_t, 3>& st) {
                    const bool* c = pc + off[0];
                    const T* x = pa + off[1];
                    const T* y = pb + off[2];
                    T* __restrict dst = po + o;
                    for (int64_t j = 0; j < len; ++j)
                      dst[j] = c[j * st[0]] ? x[j * st[1]] : y[j * st[2]];
                  });
}

}  // namespace

// Selection moves values without arithmetic, so besides the floating dtypes it takes the
// integer and bool ones (masks and shape values that ONNX import folds).
MERAK_REGISTER_KERNEL(where, CPU, [](const std::vector<Tensor>& in,
                                     const std::vector<Tensor>& out, const Attrs&) {
  switch (out[0].dtype()) {
    case DType::I32: return where_kernel<int32_t>(in[0], in[1], in[2], out[0]);
    case DType::I64: return where_kernel<int64_t>(in[0], in[1], in[2], out[0]);
    case DType::Bool: return where_kernel<bool>(in[0], in[1], in[2], out[0]);
    default:
      MERAK_DISPATCH_FLOAT(out[0].dtype(), "where",
                           [&] { where_kernel<scalar_t>(in[0], in[1], in[2], out[0]); });
  }
});

MERAK_REGISTER_KERNEL(masked_fill, CPU, [](const std::vector<Tensor>& in,
                                           const std::vector<Tensor>& out, const Attrs& a) {
  MERAK_DISPATCH_FLOAT(out[0].dtype(), "masked_fill", [&] {
    using T = scalar_t;
    const T value = T(a.f("value"));
    const T* px = in_ptr<T>(in[0]);
    const bool* pm = in_ptr<bool>(in[1]);
    T* po = out_ptr<T>(out[0]);
    const int64_t n = out[0].numel(), nm = in[1].numel();
    auto fill_row = [&](int64_t o, int64_t m, int64_t len, int64_t sm) {
      const T* __restrict x = px + o;
      const bool* __restrict mask = pm + m;
      T* __restrict dst = po + o;
      if (sm == 1) {
        for (int64_t j = 0; j < len; ++j) dst[j] = mask[j] ? value : x[j];
      } else {
        for (int64_t j = 0; j < len; ++j) dst[j] = mask[j * sm] ? value : x[j];
      }
    };
    if (n == 0) return;
    if (nm == n) {
      run_chunks(n, kGrain, [&](int64_t lo, int64_t hi) { fill_row(lo, lo, hi - lo, 1); });
    } else if (repeats_as_rows(in[1].shape(), out[0].shape())) {  // e.g. a [T, T] causal mask
      run_chunks(n / nm, std::max<int64_t>(1, kGrain / nm), [&](int64_t lo, int64_t hi) {
        for (int64_t r = lo; r < hi; ++r) fill_row(r * nm, 0, nm, 1);
      });
    } else {
      // x has the output's shape, so its offset is the output's; only the mask broadcasts.
      for_each_row<2>(out[0].shape(), {in[0].shape(), in[1].shape()}, kGrain,
                      [&](int64_t o, const std::array<int64_t, 2>& off, int64_t len,
                          const std::array<int64_t, 2>& st) { fill_row(o, off[1], len, st[1]); });
    }
  });
});

// --- cast ---

namespace {

// How each dtype is stored and which arithmetic type its values convert through: bf16 and f16
// are 16-bit patterns read and written via f32 with merak's round-to-nearest-even converters.
template <DType D> struct Elem;
template <> struct Elem<DType::F32> {
  using storage = float;
  using value = float;
  static value load(storage s) { return s; }
  static storage store(value v) { return v; }
};
template <> struct Elem<DType::F64> {
  using storage = double;
  using value = double;
  static value load(storage s) { return s; }
  static storage store(value v) { return v; }
};
template <> struct Elem<DType::BF16> {
  using storage = uint16_t;
  using value = float;
  static value load(storage s) { return bf16_to_f32(s); }
  static storage store(value v) { return f32_to_bf16(v); }
};
template <> struct Elem<DType::F16> {
  using storage = uint16_t;
  using value = float;
  static value load(storage s) { return f16_to_f32(s); }
  static storage store(value v) { return f32_to_f16(v); }
};
template <> struct Elem<DType::I32> {
  using storage = int32_t;
  using value = int32_t;
  static value load(storage s) { return s; }
  static storage store(value v) { return v; }
};
template <> struct Elem<DType::I64> {
  using storage = int64_t;
  using value = int64_t;
  static value load(storage s) { return s; }
  static storage store(value v) { return v; }
};
template <> struct Elem<DType::Bool> {
  using storage = bool;
  using value = bool;
  static value load(storage s) { return s; }
  static storage store(value v) { return v; }
};

// One value between arithmetic types. Floating -> integer truncates toward zero, with NaN -> 0
// and out-of-range values saturating (a plain static_cast would be undefined there); -> bool is
// v != 0; everything else is C++'s conversion.
template <typename To, typename From>
inline To convert(From v) {
  if constexpr (std::is_same_v<To, bool>) {
    return v != From(0);
  } else if constexpr (std::is_integral_v<To> && std::is_floating_point_v<From>) {
    const double d = double(v);
    // 2^31 and 2^63 are exact doubles; the largest values below them are not representable in
    // an f32, so comparing against the power of two is the exact range test.
    const double top = std::is_same_v<To, int32_t> ? 2147483648.0 : 9223372036854775808.0;
    if (!(d == d)) return To(0);
    if (d >= top) return std::numeric_limits<To>::max();
    if (d < -top) return std::numeric_limits<To>::min();
    return static_cast<To>(d);
  } else {
    return static_cast<To>(v);
  }
}

template <DType Src, DType Dst>
void cast_loop(const Tensor& x, const Tensor& y) {
  using S = Elem<Src>;
  using D = Elem<Dst>;
  const auto* px = static_cast<const typename S::storage*>(x.raw_data());
  auto* py = static_cast<typename D::storage*>(y.raw_data());
  run_chunks(x.numel(), kGrain, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i)
      py[i] = D::store(convert<typename D::value>(S::load(px[i])));
  });
}

// Calls f(std::integral_constant<DType, t>) for a runtime dtype t.
template <typename F>
void with_dtype(DType t, const F& f) {
  switch (t) {
    case DType::F32: return f(std::integral_constant<DType, DType::F32>());
    case DType::F64: return f(std::integral_constant<DType, DType::F64>());
    case DType::BF16: return f(std::integral_constant<DType, DType::BF16>());
    case DType::F16: return f(std::integral_constant<DType, DType::F16>());
    case DType::I32: return f(std::integral_constant<DType, DType::I32>());
    case DType::I64: return f(std::integral_constant<DType, DType::I64>());
    case DType::Bool: return f(std::integral_constant<DType, DType::Bool>());
  }
  MERAK_FAIL("cast: unknown dtype ", int(t));
}

}  // namespace

MERAK_REGISTER_KERNEL(cast, CPU, [](const std::vector<Tensor>& in, const std::vector<Tensor>& out,
                                    const Attrs&) {
  const Tensor &x = in[0], &y = out[0];
  if (x.dtype() == y.dtype()) {
    if (x.numel() > 0) std::memcpy(y.raw_data(), x.raw_data(), size_t(x.nbytes()));
    return;
  }
  with_dtype(x.dtype(), [&](auto src) {
    with_dtype(y.dtype(),
               [&](auto dst) { cast_loop<decltype(src)::value, decltype(dst)::value>(x, y); });
  });
});

}  // namespace merak::cpu
