// Harness cases for the elementwise ops. One naive reference serves them all: every output
// element is f of the input elements its index maps to under NumPy broadcasting, computed in f64
// with libm. Shapes cover each kernel path (equal shapes, scalar, row suffix, general broadcast)
// at small sizes for the finite-difference check, and at sizes that split over threads (forward
// only). Dense grids check the f32 special functions over their whole range.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <utility>

#include "tests/ops/harness.h"

namespace merak::test {
namespace {

using Args = std::vector<double>;
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
using ElemFn = std::function<double(const Args&)>;

// An f64 (or other dtype) tensor from values; values must be exact in the dtype for 16-bit ones.
Tensor tensor_of(const Shape& shape, const std::vector<double>& v, DType dtype) {
  if (dtype == DType::F64) return make_f64(shape, v);
  Tensor t = Tensor::empty(shape, dtype);
  void* p = t.raw_data();
  for (size_t i = 0; i < v.size(); ++i) {
    switch (dtype) {
      case DType::F32: static_cast<float*>(p)[i] = float(v[i]); break;
      case DType::I32: static_cast<int32_t*>(p)[i] = int32_t(v[i]); break;
      case DType::I64:  // 2^63 (a saturated cast) does not fit: clamp it
        static_cast<int64_t*>(p)[i] = v[i] >= 9223372036854775808.0
                                          ? std::numeric_limits<int64_t>::max()
                                          : int64_t(v[i]);
        break;
      case DType::Bool: static_cast<bool*>(p)[i] = v[i] != 0; break;
      case DType::BF16: {  // the top half of the f32 pattern (exact for bf16 values)
        const float f = float(v[i]);
        uint32_t bits;
        std::memcpy(&bits, &f, 4);
        static_cast<uint16_t*>(p)[i] = uint16_t(bits >> 16);
        break;
      }
      case DType::F16: static_cast<uint16_t*>(p)[i] = f32_to_f16(float(v[i])); break;
      case DType::F64: break;
    }
  }
  return t;
}

// out[i] = f(the inputs' elements at i's broadcast sources).
Tensor broadcast_ref(const std::vector<Tensor>& in, const ElemFn& f, DType out = DType::F64) {
  Shape shape;
  for (const Tensor& t : in) shape = broadcast_shapes(shape, t.shape());
  std::vector<std::vector<double>> v;
  for (const Tensor& t : in) v.push_back(values(t));
  std::vector<double> y(size_t(numel(shape)));
  Args args(in.size());
  for (int64_t i = 0; i < int64_t(y.size()); ++i) {
    const std::vector<int64_t> idx = unravel(i, shape);
    for (size_t k = 0; k < in.size(); ++k)
      args[k] = v[k][size_t(broadcast_source(idx, in[k].shape()))];
    y[size_t(i)] = f(args);
  }
  return tensor_of(shape, y, out);
}

OpCase make_case(std::string label, std::vector<Tensor> inputs, const ElemFn& f,
                 Attrs attrs = Attrs(), DType out = DType::F64) {
  OpCase c;
  c.label = std::move(label);
  c.inputs = std::move(inputs);
  c.attrs = std::move(attrs);
  c.reference = [f, out](const std::vector<Tensor>& in, const Attrs&) {
    return std::vector<Tensor>{broadcast_ref(in, f, out)};
  };
  return c;
}

OpCase forward_only(OpCase c) {
  c.check_grad = false;
  return c;
}

// Uniform magnitudes in [lo, hi) with random signs: inputs kept away from 0 (kinks, poles).
Tensor rand_away(const Shape& shape, uint64_t seed, double lo, double hi) {
  std::vector<double> m = values(rand_f64(shape, seed, lo, hi));
  const std::vector<double> s = values(rand_f64(shape, seed + 7919));
  for (size_t i = 0; i < m.size(); ++i)
    if (s[i] < 0) m[i] = -m[i];
  return make_f64(shape, m);
}

// n evenly spaced values in [lo, hi].
Tensor grid(double lo, double hi, int64_t n) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = lo + (hi - lo) * double(i) / double(n - 1);
  return make_f64({n}, v);
}

// --- binary arithmetic ---

// Shape pairs that reach every path of a broadcasting binary kernel.
std::vector<std::pair<std::string, std::pair<Shape, Shape>>> binary_shapes() {
  return {{"same shape", {{3, 4}, {3, 4}}},
          {"row broadcast (bias)", {{2, 3, 4}, {4}}},
          {"b suffix with a leading 1", {{3, 4}, {1, 4}}},
          {"scalar b", {{3, 4}, {}}},
          {"scalar a", {{}, {2, 5}}},
          {"one-element b of rank 2", {{2, 3}, {1, 1}}},
          {"a repeats as rows of b", {{5}, {3, 5}}},
          {"column broadcast", {{4, 3}, {4, 1}}},
          {"both broadcast", {{3, 1, 4}, {2, 1}}},
          {"middle dim broadcast", {{2, 3, 4}, {2, 1, 4}}},
          {"leading dim broadcast of a", {{1, 3, 2}, {4, 3, 2}}},
          {"scalars", {{}, {}}},
          {"empty", {{0, 3}, {3}}}};
}

// Large enough to split over threads; forward only.
std::vector<std::pair<std::string, std::pair<Shape, Shape>>> large_binary_shapes() {
  return {{"large same shape", {{300, 200}, {300, 200}}},
          {"large row broadcast", {{200, 300}, {300}}},
          {"large a rows of b", {{300}, {200, 300}}},
          {"large scalar b", {{70001}, {}}},
          {"large general broadcast", {{100, 1, 300}, {1, 4, 300}}},
          {"large column broadcast", {{5000, 9}, {5000, 1}}}};
}

std::vector<OpCase> binary_cases(const std::function<double(double, double)>& f, bool b_nonzero) {
  const ElemFn g = [f](const Args& v) { return f(v[0], v[1]); };
  auto b_values = [b_nonzero](const Shape& s, uint64_t seed) {
    return b_nonzero ? rand_away(s, seed, 0.5, 2.0) : rand_f64(s, seed);
  };
  std::vector<OpCase> cs;
  uint64_t seed = 1;
  for (const auto& [label, shapes] : binary_shapes()) {
    cs.push_back(
        make_case(label, {rand_f64(shapes.first, seed), b_values(shapes.second, seed + 1)}, g));
    seed += 2;
  }
  for (const auto& [label, shapes] : large_binary_shapes()) {
    cs.push_back(forward_only(
        make_case(label, {rand_f64(shapes.first, seed), b_values(shapes.second, seed + 1)}, g)));
    seed += 2;
  }
  // The same tensor as both operands.
  OpCase same = make_case("a and b the same tensor", {}, g);
  const Tensor x = b_values({2, 3}, 99);
  same.inputs = {x, x};
  cs.push_back(same);
  return cs;
}

MERAK_OP_CASES(add) { return binary_cases([](double a, double b) { return a + b; }, false); }
MERAK_OP_CASES(sub) { return binary_cases([](double a, double b) { return a - b; }, false); }
MERAK_OP_CASES(mul) { return binary_cases([](double a, double b) { return a * b; }, false); }
MERAK_OP_CASES(div) { return binary_cases([](double a, double b) { return a / b; }, true); }

// --- maximum, minimum, pow_tensor ---

double max_ref(double a, double b) {
  return std::isnan(a) || std::isnan(b) ? kNaN : std::max(a, b);
}
double min_ref(double a, double b) {
  return std::isnan(a) || std::isnan(b) ? kNaN : std::min(a, b);
}

std::vector<OpCase> extremum_cases(double (*ref)(double, double)) {
  const ElemFn f = [ref](const Args& v) { return ref(v[0], v[1]); };
  std::vector<OpCase> cs = binary_cases(ref, false);
  // Ties split the gradient evenly, which is what central differences see at the kink
  // (+h moves the result, -h does not): the check confirms the convention.
  cs.push_back(make_case(
      "ties share the gradient",
      {make_f64({4}, {0.5, -0.25, 0.75, 0.125}), make_f64({4}, {0.5, 0.25, 0.75, 0.0})}, f));
  cs.push_back(forward_only(make_case(
      "NaN on either side wins",
      {make_f64({4}, {kNaN, 1.0, kNaN, -kInf}), make_f64({4}, {1.0, kNaN, kNaN, kInf})}, f)));
  // Integers exactly, at i32's extremes (no gradient: forward only).
  for (DType t : {DType::I32, DType::I64})
    cs.push_back(forward_only(make_case(
        std::string(dtype_name(t)) + " broadcast",
        {tensor_of({2, 3}, {-5, 7, 0, 2147483647, -2147483647, 3}, t),
         tensor_of({3}, {4, 7, -1}, t)},
        f, Attrs(), t)));
  return cs;
}

MERAK_OP_CASES(maximum) { return extremum_cases(max_ref); }
MERAK_OP_CASES(minimum) { return extremum_cases(min_ref); }

// A positive base (ln a in the exponent's gradient), exponents of either sign.
MERAK_OP_CASES(pow_tensor) {
  const ElemFn f = [](const Args& v) { return std::pow(v[0], v[1]); };
  std::vector<OpCase> cs;
  uint64_t seed = 190;
  for (const auto& [label, shapes] : binary_shapes()) {
    cs.push_back(make_case(
        label, {rand_f64(shapes.first, seed, 0.3, 2), rand_f64(shapes.second, seed + 1, -2, 2)},
        f));
    seed += 2;
  }
  cs.push_back(forward_only(
      make_case("large row broadcast",
                {rand_f64({200, 300}, seed, 0.1, 3), rand_f64({300}, seed + 1, -3, 3)}, f)));
  // Integer exponents of negative bases are real; 0^0 is 1; a fractional power of a negative
  // base is NaN.
  cs.push_back(
      forward_only(make_case("negative bases, zero",
                             {make_f64({4}, {-2, -2, 0, -8}), make_f64({4}, {3, -2, 0, 0.5})}, f)));
  return cs;
}

// --- scalar arithmetic ---

std::vector<OpCase> scalar_cases(bool multiply) {
  std::vector<OpCase> cs;
  uint64_t seed = 30;
  for (double value : {2.5, -0.75, 0.0}) {
    const ElemFn f = [value, multiply](const Args& v) {
      return multiply ? v[0] * value : v[0] + value;
    };
    const Attrs a = Attrs().set("value", value);
    cs.push_back(
        make_case("matrix, value " + std::to_string(value), {rand_f64({3, 4}, seed++)}, f, a));
    cs.push_back(make_case("scalar, value " + std::to_string(value), {rand_f64({}, seed++)}, f, a));
  }
  const ElemFn f = [multiply](const Args& v) { return multiply ? v[0] * 3.0 : v[0] + 3.0; };
  cs.push_back(make_case("integer-valued attribute", {rand_f64({5}, seed++)}, f,
                         Attrs().set("value", 3)));
  cs.push_back(forward_only(make_case("large", {rand_f64({70001}, seed++)}, f,
                                      Attrs().set("value", 3.0))));
  return cs;
}

MERAK_OP_CASES(add_scalar) { return scalar_cases(false); }
MERAK_OP_CASES(mul_scalar) { return scalar_cases(true); }

// --- unary math ---

// Small cases (with gradients) on `lo..hi`, a scalar, an empty tensor and a large one.
std::vector<OpCase> unary_cases(const std::function<double(double)>& f, double lo, double hi,
                                bool away_from_zero = false, Attrs attrs = Attrs()) {
  const ElemFn g = [f](const Args& v) { return f(v[0]); };
  auto input = [&](const Shape& s, uint64_t seed) {
    return away_from_zero ? rand_away(s, seed, lo, hi) : rand_f64(s, seed, lo, hi);
  };
  return {make_case("matrix", {input({4, 5}, 41)}, g, attrs),
          make_case("rank 3", {input({2, 3, 4}, 42)}, g, attrs),
          make_case("scalar", {input({}, 43)}, g, attrs),
          make_case("empty", {input({2, 0}, 44)}, g, attrs),
          forward_only(make_case("large (threads)", {input({257, 301}, 45)}, g, attrs))};
}

// Values that hit the f32 approximations' branch points, tiny and huge arguments.
OpCase special_values(std::vector<double> v, const std::function<double(double)>& f,
                      Attrs attrs = Attrs()) {
  const int64_t n = int64_t(v.size());
  return forward_only(make_case("special values", {make_f64({n}, v)},
                                [f](const Args& a) { return f(a[0]); }, std::move(attrs)));
}

// A dense sweep of [lo, hi]: the f32 accuracy over the whole range, within `tol`.
OpCase sweep(double lo, double hi, const std::function<double(double)>& f, double tol,
             Attrs attrs = Attrs()) {
  OpCase c = forward_only(make_case("dense sweep of [" + std::to_string(lo) + ", " +
                                        std::to_string(hi) + "]",
                                    {grid(lo, hi, 4001)}, [f](const Args& a) { return f(a[0]); },
                                    std::move(attrs)));
  c.f32_tol = tol;
  return c;
}

MERAK_OP_CASES(neg) { return unary_cases([](double x) { return -x; }, -1, 1); }

MERAK_OP_CASES(exp) {
  const auto f = [](double x) { return std::exp(x); };
  auto cs = unary_cases(f, -3, 3);
  // Up to f32's overflow (88.72), and past its smallest normal result (-87.33).
  cs.push_back(special_values({0, -0.0, 1e-8, -1e-8, 0.3465, -0.3466, 10, -10, 80, -80, 88.1,
                               88.5, 88.7, -87.3, -87.5, -95, -110, -1e30, kInf, -kInf, kNaN},
                              f));
  cs.push_back(sweep(-20, 20, f, 1e-6));
  return cs;
}

MERAK_OP_CASES(log) {
  const auto f = [](double x) { return std::log(x); };
  auto cs = unary_cases(f, 0.2, 5);
  cs.push_back(special_values({1, 1e-30, 1e30, 0.5, 2}, f));
  return cs;
}

MERAK_OP_CASES(sqrt) {
  const auto f = [](double x) { return std::sqrt(x); };
  auto cs = unary_cases(f, 0.2, 4);
  cs.push_back(special_values({0, 1, 1e-20, 1e20, 2}, f));
  return cs;
}

MERAK_OP_CASES(rsqrt) {
  const auto f = [](double x) { return 1 / std::sqrt(x); };
  auto cs = unary_cases(f, 0.2, 4);
  cs.push_back(special_values({1, 1e-20, 1e20, 2}, f));
  return cs;
}

MERAK_OP_CASES(pow) {
  std::vector<OpCase> cs;
  uint64_t seed = 60;
  // Integer exponents on signed inputs (away from 0 for the negative ones), the rest on positive.
  for (double e : {2.0, 3.0, -1.0, -2.0, 1.0, 0.0, 4.0}) {
    const ElemFn f = [e](const Args& v) { return std::pow(v[0], e); };
    cs.push_back(make_case("exponent " + std::to_string(e), {rand_away({3, 4}, seed++, 0.3, 2)}, f,
                           Attrs().set("exponent", e)));
  }
  for (double e : {0.5, -0.5, 1.7, -2.5}) {
    const ElemFn f = [e](const Args& v) { return std::pow(v[0], e); };
    cs.push_back(make_case("exponent " + std::to_string(e), {rand_f64({3, 4}, seed++, 0.3, 2)}, f,
                           Attrs().set("exponent", e)));
  }
  const ElemFn cube = [](const Args& v) { return v[0] * v[0] * v[0]; };
  cs.push_back(forward_only(make_case("large cube", {rand_f64({70001}, seed++)}, cube,
                                      Attrs().set("exponent", 3.0))));
  const ElemFn general = [](const Args& v) { return std::pow(v[0], 1.3); };
  cs.push_back(forward_only(make_case("large general exponent",
                                      {rand_f64({70001}, seed++, 0.1, 3)}, general,
                                      Attrs().set("exponent", 1.3))));
  return cs;
}

MERAK_OP_CASES(tanh) {
  const auto f = [](double x) { return std::tanh(x); };
  auto cs = unary_cases(f, -3, 3);
  cs.push_back(special_values({0, 1e-30, -1e-6, 1e-3, 0.5499, -0.5501, 0.55, 1, -5, 9, 20, -40,
                               100, -1e4, kInf, -kInf, kNaN},
                              f));
  cs.push_back(sweep(-12, 12, f, 1e-6));
  return cs;
}

MERAK_OP_CASES(erf) {
  const auto f = [](double x) { return std::erf(x); };
  auto cs = unary_cases(f, -2.5, 2.5);
  cs.push_back(special_values({0, 1e-30, -1e-6, 1e-3, 0.4999, -0.5001, 0.5, 1, -2, 3, -4, 6,
                               11, -12, 1e4, kInf, -kInf, kNaN},
                              f));
  cs.push_back(sweep(-8, 8, f, 1e-6));
  return cs;
}

MERAK_OP_CASES(abs) {
  const auto f = [](double x) { return std::fabs(x); };
  auto cs = unary_cases(f, 0.05, 2, true);  // away from the kink at 0
  cs.push_back(special_values({0, -0.0, -kInf, kNaN, -1e30}, f));
  // Integers exactly; |MIN| wraps to MIN as -MIN does.
  const int64_t min = std::numeric_limits<int64_t>::min();
  cs.push_back(forward_only(OpCase{
      "i64, MIN wraps", {Tensor::from_vector(std::vector<int64_t>{-3, 0, 9, min}, {4})}, Attrs(),
      [min](const std::vector<Tensor>&, const Attrs&) {
        return std::vector<Tensor>{Tensor::from_vector(std::vector<int64_t>{3, 0, 9, min}, {4})};
      }}));
  cs.push_back(forward_only(make_case("i32", {tensor_of({3}, {-7, 7, -2147483647}, DType::I32)},
                                      [f](const Args& v) { return f(v[0]); }, Attrs(),
                                      DType::I32)));
  return cs;
}

MERAK_OP_CASES(sign) {
  const auto f = [](double x) { return std::isnan(x) ? x : double((x > 0) - (x < 0)); };
  auto cs = unary_cases(f, -2, 2);
  cs.push_back(special_values({0, -0.0, 1e-30, -1e-30, kInf, -kInf, kNaN}, f));
  for (DType t : {DType::I32, DType::I64})
    cs.push_back(make_case(std::string(dtype_name(t)), {tensor_of({4}, {-9, 0, 4, -1}, t)},
                           [f](const Args& v) { return f(v[0]); }, Attrs(), t));
  return cs;
}

MERAK_OP_CASES(floor) {
  const auto f = [](double x) { return std::floor(x); };
  auto cs = unary_cases(f, -3, 3);
  cs.push_back(special_values({0, -0.0, -0.5, 0.5, 2, -2, 2.5, -2.5, 1e20, kInf, -kInf, kNaN}, f));
  return cs;
}

MERAK_OP_CASES(ceil) {
  const auto f = [](double x) { return std::ceil(x); };
  auto cs = unary_cases(f, -3, 3);
  cs.push_back(special_values({0, -0.0, -0.5, 0.5, 2, -2, 2.5, -2.5, 1e20, kInf, -kInf, kNaN}, f));
  return cs;
}

// --- activations ---

MERAK_OP_CASES(relu) {
  return unary_cases([](double x) { return x > 0 ? x : 0.0; }, 0.05, 1, true);
}

MERAK_OP_CASES(relu_grad) {
  const ElemFn f = [](const Args& v) { return v[1] > 0 ? v[0] : 0.0; };
  auto y_of = [](const Shape& s, uint64_t seed) {  // relu outputs: exact zeros and positives
    std::vector<double> v = values(rand_f64(s, seed));
    for (double& x : v) x = x > 0 ? x : 0.0;
    return make_f64(s, v);
  };
  return {make_case("matrix", {rand_f64({4, 5}, 70), y_of({4, 5}, 71)}, f),
          make_case("scalar", {rand_f64({}, 72), y_of({}, 73)}, f),
          make_case("large", {rand_f64({301, 257}, 74), y_of({301, 257}, 75)}, f)};
}

double gelu_tanh_grad_ref(double x) {
  const double k = std::sqrt(2 / M_PI);
  const double t = std::tanh(k * (x + 0.044715 * x * x * x));
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * 0.044715 * x * x);
}
double gelu_erf_grad_ref(double x) {
  return 0.5 * (1 + std::erf(x / std::sqrt(2.0))) +
         x * std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI);
}

// (-inf is left out: the f64 formulas give NaN there, the f32 ones 0.)
const std::vector<double> kGeluSpecials = {0,   1e-30, -1e-6, 0.3, -0.3, 1,  -1,   3,    -3,   -5,
                                           5,   -8,    -9,    9.5, -9.5, 12, -14,  -16,  30,   -30,
                                           1e6, -1e6,  1e30,  kInf, kNaN};

MERAK_OP_CASES(gelu) {
  std::vector<OpCase> cs;
  for (std::string mode : {"tanh", "none"}) {
    const auto f = mode == "tanh" ? gelu_tanh_ref : gelu_erf_ref;
    const Attrs a = Attrs().set("approximate", mode);
    for (OpCase& c : unary_cases(f, -4, 4, false, a)) cs.push_back(c);
    cs.push_back(special_values(kGeluSpecials, f, a));
    cs.push_back(sweep(-12, 12, f, 1e-6, a));
  }
  // The default is the tanh form.
  cs.push_back(make_case("default attribute", {rand_f64({3, 3}, 80, -3, 3)},
                         [](const Args& v) { return gelu_tanh_ref(v[0]); }));
  return cs;
}

MERAK_OP_CASES(gelu_grad) {
  std::vector<OpCase> cs;
  for (std::string mode : {"tanh", "none"}) {
    const auto fp = mode == "tanh" ? gelu_tanh_grad_ref : gelu_erf_grad_ref;
    const ElemFn f = [fp](const Args& v) { return v[0] * fp(v[1]); };
    const Attrs a = Attrs().set("approximate", mode);
    cs.push_back(
        make_case(mode + " matrix", {rand_f64({4, 5}, 81), rand_f64({4, 5}, 82, -4, 4)}, f, a));
    cs.push_back(make_case(mode + " scalar", {rand_f64({}, 83), rand_f64({}, 84, -4, 4)}, f, a));
    // Without inf, where the reference formulas give inf * 0.
    std::vector<double> xs;
    for (double x : kGeluSpecials)
      if (!std::isinf(x)) xs.push_back(x);
    const int64_t n = int64_t(xs.size());
    cs.push_back(
        make_case(mode + " special values", {rand_f64({n}, 85), make_f64({n}, xs)}, f, a));
    const Tensor ones = make_f64({4001}, std::vector<double>(4001, 1.0));
    OpCase dense = make_case(mode + " dense sweep of [-12, 12]", {ones, grid(-12, 12, 4001)}, f, a);
    dense.f32_tol = 1e-6;
    cs.push_back(dense);
  }
  return cs;
}

// --- comparison and selection ---

// A comparison's cases: every broadcast path, each dtype it takes, NaN and signed zeros.
std::vector<OpCase> compare_cases(const std::function<bool(double, double)>& cmp) {
  const ElemFn f = [cmp](const Args& v) { return cmp(v[0], v[1]) ? 1.0 : 0.0; };
  // Small integers make ties likely, in every dtype.
  auto ints = [](const Shape& s, uint64_t seed, DType t) {
    return tensor_of(s, values(rand_int(s, seed, 0, 3)), t);
  };
  std::vector<OpCase> cs;
  uint64_t seed = 90;
  for (const auto& [label, shapes] : binary_shapes())
    cs.push_back(make_case(label, {ints(shapes.first, seed++, DType::F64),
                                   ints(shapes.second, seed++, DType::F64)},
                           f, Attrs(), DType::Bool));
  cs.push_back(make_case("large row broadcast",
                         {ints({200, 300}, seed++, DType::F64), ints({300}, seed++, DType::F64)},
                         f, Attrs(), DType::Bool));
  for (DType t : {DType::I32, DType::I64, DType::Bool})
    cs.push_back(make_case(std::string(dtype_name(t)) + " inputs, broadcast",
                           {ints({3, 4}, seed++, t), ints({4}, seed++, t)}, f, Attrs(),
                           DType::Bool));
  // Integers beyond 2^53 compare exactly, not through a double.
  const int64_t big = int64_t(1) << 60;
  cs.push_back(OpCase{"i64 beyond double's precision",
                      {Tensor::from_vector(std::vector<int64_t>{big, big + 1, -big}, {3}),
                       Tensor::from_vector(std::vector<int64_t>{big + 1, big, -big}, {3})},
                      Attrs(),
                      [cmp](const std::vector<Tensor>&, const Attrs&) {
                        const int64_t b = int64_t(1) << 60;
                        const std::vector<int64_t> x = {b, b + 1, -b}, y = {b + 1, b, -b};
                        Tensor out = Tensor::empty({3}, DType::Bool);
                        for (size_t i = 0; i < 3; ++i) {
                          // The three orders (less, greater, equal) as doubles that keep them.
                          const double dx = x[i] < y[i] ? 0 : x[i] > y[i] ? 2 : 1;
                          out.data<bool>()[i] = cmp(dx, 1);
                        }
                        return std::vector<Tensor>{out};
                      }});
  const double nan = std::numeric_limits<double>::quiet_NaN();
  cs.push_back(
      make_case("NaN compares false, -0 equals 0",
                {make_f64({4}, {nan, -0.0, 1.0, 2.0}), make_f64({4}, {nan, 0.0, 1.0, nan})}, f,
                Attrs(), DType::Bool));
  return cs;
}

MERAK_OP_CASES(eq) { return compare_cases(std::equal_to<double>()); }
MERAK_OP_CASES(lt) { return compare_cases(std::less<double>()); }
MERAK_OP_CASES(gt) { return compare_cases(std::greater<double>()); }
MERAK_OP_CASES(le) { return compare_cases(std::less_equal<double>()); }
MERAK_OP_CASES(ge) { return compare_cases(std::greater_equal<double>()); }

// Logical ops: bool inputs over the broadcast paths.
std::vector<OpCase> logical_cases(const std::function<bool(bool, bool)>& op) {
  const ElemFn f = [op](const Args& v) { return op(v[0] != 0, v[1] != 0) ? 1.0 : 0.0; };
  std::vector<OpCase> cs;
  uint64_t seed = 170;
  for (const auto& [label, shapes] : binary_shapes()) {
    cs.push_back(make_case(label,
                           {rand_bool(shapes.first, seed), rand_bool(shapes.second, seed + 1)}, f,
                           Attrs(), DType::Bool));
    seed += 2;
  }
  cs.push_back(make_case("large row broadcast",
                         {rand_bool({200, 300}, seed), rand_bool({300}, seed + 1)}, f, Attrs(),
                         DType::Bool));
  return cs;
}

MERAK_OP_CASES(logical_and) { return logical_cases(std::logical_and<bool>()); }
MERAK_OP_CASES(logical_or) { return logical_cases(std::logical_or<bool>()); }
MERAK_OP_CASES(logical_xor) { return logical_cases(std::not_equal_to<bool>()); }

MERAK_OP_CASES(where) {
  const ElemFn f = [](const Args& v) { return v[0] != 0 ? v[1] : v[2]; };
  std::vector<OpCase> cs;
  uint64_t seed = 110;
  for (const auto& [label, shapes] : std::vector<std::pair<std::string, std::vector<Shape>>>{
           {"same shape", {{3, 4}, {3, 4}, {3, 4}}},
           {"cond row, scalar b", {{4}, {2, 3, 4}, {}}},
           {"all three broadcast", {{3, 1}, {1, 4}, {2, 3, 4}}},
           {"causal mask over heads", {{4, 4}, {2, 4, 4}, {1}}},
           {"scalar cond", {{}, {2, 3}, {2, 3}}},
           {"cond broadcast to a and b", {{2, 1, 3}, {2, 4, 3}, {2, 4, 3}}},
           {"empty", {{0, 2}, {0, 2}, {2}}}})
    cs.push_back(make_case(label, {rand_bool(shapes[0], seed), rand_f64(shapes[1], seed + 1),
                                   rand_f64(shapes[2], seed + 2)},
                           f));
  cs.push_back(forward_only(make_case(
      "large same shape", {rand_bool({301, 257}, 120), rand_f64({301, 257}, 121),
                           rand_f64({301, 257}, 122)},
      f)));
  cs.push_back(forward_only(make_case(
      "large broadcast",
      {rand_bool({64, 1, 64}, 123), rand_f64({64, 20, 64}, 124), rand_f64({64}, 125)}, f)));
  return cs;
}

MERAK_OP_CASES(masked_fill) {
  std::vector<OpCase> cs;
  uint64_t seed = 130;
  for (double value : {-1e4, 0.5}) {
    const ElemFn f = [value](const Args& v) { return v[1] != 0 ? value : v[0]; };
    const Attrs a = Attrs().set("value", value);
    for (const auto& [label, shapes] : std::vector<std::pair<std::string, std::pair<Shape, Shape>>>{
             {"same shape", {{3, 4}, {3, 4}}},
             {"mask rows (suffix)", {{2, 3, 4}, {3, 4}}},
             {"mask column (general)", {{2, 3, 4}, {3, 1}}},
             {"mask with a leading 1", {{2, 3}, {1, 3}}},
             {"scalar mask", {{2, 3}, {}}},
             {"scalar x", {{}, {}}}}) {
      cs.push_back(make_case(label + " value " + std::to_string(value),
                             {rand_f64(shapes.first, seed), rand_bool(shapes.second, seed + 1)},
                             f, a));
      seed += 2;
    }
  }
  const ElemFn f = [](const Args& v) { return v[1] != 0 ? -7.0 : v[0]; };
  const Attrs a = Attrs().set("value", -7.0);
  cs.push_back(forward_only(make_case("large causal mask",
                                      {rand_f64({8, 4, 96, 96}, 150), rand_bool({96, 96}, 151)},
                                      f, a)));
  cs.push_back(forward_only(make_case("large general mask",
                                      {rand_f64({8, 96, 96}, 152), rand_bool({8, 1, 96}, 153)},
                                      f, a)));
  return cs;
}

// --- cast ---

// Round to nearest even with `bits` significant bits, subnormals below 2^min_exp at a fixed
// spacing of 2^(min_exp - bits + 1), and overflow to inf above `max_finite` (rounded): the
// reference for bf16 (8 bits) and f16 (11 bits), written with frexp/nearbyint.
double round_to_bits(double v, int bits, int min_exp, double max_finite) {
  if (std::isnan(v) || std::isinf(v) || v == 0) return v;
  int e;
  std::frexp(v, &e);  // v = m 2^e, 0.5 <= |m| < 1
  const int exp_of_lsb = std::max(e - bits, min_exp - bits);
  const double r = std::ldexp(std::nearbyint(std::ldexp(v, -exp_of_lsb)), exp_of_lsb);
  return std::fabs(r) > max_finite ? std::copysign(INFINITY, v) : r;
}
double to_bf16(double v) { return round_to_bits(double(float(v)), 8, -125, 3.3895313892515355e38); }
double to_f16(double v) { return round_to_bits(double(float(v)), 11, -13, 65504.0); }

double to_int(double v, double lo, double hi) {
  if (std::isnan(v)) return 0;
  return std::min(std::max(std::trunc(v), lo), hi);
}

double convert_ref(double v, DType to) {
  switch (to) {
    case DType::F64: return v;
    case DType::F32: return double(float(v));
    case DType::BF16: return to_bf16(v);
    case DType::F16: return to_f16(v);
    case DType::I32: return to_int(v, -2147483648.0, 2147483647.0);
    case DType::I64: return to_int(v, -9223372036854775808.0, 9223372036854775807.0);
    case DType::Bool: return v != 0 ? 1 : 0;
  }
  return 0;
}

OpCase cast_case(std::string label, Tensor x, DType to) {
  OpCase c = make_case(std::move(label) + " -> " + dtype_name(to), {std::move(x)},
                       [to](const Args& v) { return convert_ref(v[0], to); },
                       Attrs().set("dtype", dtype_name(to)), to);
  // The finite-difference check needs an f64 output and a floating input.
  c.check_grad = to == DType::F64 && c.inputs[0].dtype() == DType::F64;
  return c;
}

MERAK_OP_CASES(cast) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<DType> all = {DType::F32, DType::F64, DType::BF16, DType::F16,
                                  DType::I32, DType::I64, DType::Bool};
  // Rounding ties and near-ties for bf16 (1 + 2^-8 sits halfway) and f16 (1 + 2^-11), f16's
  // subnormals and overflow, truncation toward zero, saturation, NaN.
  const std::vector<double> floats = {
      0,       -0.0,    1,       -2.7,    2.7,       0.5,        -0.5,         100.99,
      1 + 1.0 / 256, 1 + 3.0 / 256, 1 + 1.0 / 2048, 1 + 3.0 / 2048, 1 + 1.0 / 4096, 65504,
      65519,   65520,   1e5,     -1e5,    3e-5,      1e-6,       -6e-8,        1e-9,
      3e9,     -3e9,    1e19,    -1e19,   1.2345e-3, 123456.789, -7.25,        nan};
  const int64_t nf = int64_t(floats.size());
  constexpr DType I64 = DType::I64, I32 = DType::I32, BF16 = DType::BF16, F16 = DType::F16;
  std::vector<OpCase> cs;
  for (DType to : all) {
    cs.push_back(cast_case("f64 special values", make_f64({nf}, floats), to));
    cs.push_back(cast_case("f64 matrix", rand_f64({3, 5}, 160, -300, 300), to));
    cs.push_back(cast_case("i64", tensor_of({6}, {0, 1, -1, 257, 123456789, -987654321}, I64), to));
    cs.push_back(cast_case("i32", tensor_of({5}, {0, 7, -7, 4097, 2147483647}, I32), to));
    cs.push_back(cast_case("bool", rand_bool({2, 3}, 161), to));
    cs.push_back(cast_case("bf16", tensor_of({5}, {0, 1.5, -3.0, 1.0078125, 258}, BF16), to));
    cs.push_back(cast_case("f16", tensor_of({5}, {0, 1.5, -3.0, 1.0009765625, 65504}, F16), to));
    cs.push_back(forward_only(cast_case("large", rand_f64({70001}, 162, -100, 100), to)));
  }
  cs.push_back(cast_case("scalar", rand_f64({}, 163), DType::F64));
  cs.push_back(cast_case("empty", rand_f64({0, 4}, 164), DType::F32));
  return cs;
}

}  // namespace
}  // namespace merak::test
