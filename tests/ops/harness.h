// The op harness: every registered op is checked by cases that each op group registers here.
// For each case the harness
//   1. runs the op in f64 and compares every output the reference returns (naive loops, written
//      independently of the kernels) within 1e-9 relative;
//   2. runs it with floating inputs cast to f32 and compares within `f32_tol` relative;
//   3. runs it on Meta inputs and compares output shapes and dtypes with the real outputs;
//   4. if the op has a backward, checks autograd's input gradients against central finite
//      differences in f64 for a random weighting of the differentiable outputs;
//   5. with a GPU, runs the f32 inputs on CUDA against the CPU's f32 outputs;
//   6. with a GPU, runs the case's bf16 and f16 variants on CUDA against the CPU's f32 run on the
//      same rounded inputs (harness16.h: derivation, tolerances, the ops without variants).
// A registered op without cases fails the suite.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "merak/core/tensor.h"
#include "merak/ops/attrs.h"

namespace merak::test {

using ops::Attrs;
using ReferenceFn =
    std::function<std::vector<Tensor>(const std::vector<Tensor>& inputs, const Attrs& attrs)>;

struct OpCase {
  std::string label;           // what this case exercises, e.g. "row broadcast"
  std::vector<Tensor> inputs;  // CPU, contiguous; floating ones f64; undefined = absent optional
  Attrs attrs;
  ReferenceFn reference;       // expected outputs (a prefix of the op's outputs), f64 for floats
  // Floating inputs to check by finite differences; empty = every floating input.
  std::vector<int> grad_inputs;
  bool check_grad = true;      // false for cases at a kink (e.g. ties in max)
  double f32_tol = 1e-5;       // relative tolerance of the f32 run against the f64 reference
  double fd_tol = 1e-6;        // tolerance of gradients against finite differences
};

using CaseFactory = std::function<std::vector<OpCase>()>;

struct CaseRegistrar {
  CaseRegistrar(const std::string& op, CaseFactory factory);
};

// MERAK_OP_CASES(add) { return {OpCase{...}, ...}; }
#define MERAK_OP_CASES(id)                                                        \
  static std::vector<::merak::test::OpCase> merak_cases_##id();                   \
  static ::merak::test::CaseRegistrar merak_case_registrar_##id(#id, &merak_cases_##id); \
  static std::vector<::merak::test::OpCase> merak_cases_##id()

// --- helpers for writing cases and references ---
// Uniform f64 values in [lo, hi), deterministic in `seed`.
Tensor rand_f64(const Shape& shape, uint64_t seed, double lo = -1.0, double hi = 1.0);
// Uniform integers in [lo, hi) of dtype i32 or i64.
Tensor rand_int(const Shape& shape, uint64_t seed, int64_t lo, int64_t hi, DType dtype = DType::I64);
Tensor rand_bool(const Shape& shape, uint64_t seed, double p_true = 0.5);
// Row-major f64 values of any floating tensor; and building an f64 tensor from values.
std::vector<double> values(const Tensor& t);
Tensor make_f64(const Shape& shape, const std::vector<double>& v);
// Flat index helpers for references: multi-index <-> row-major offset.
std::vector<int64_t> unravel(int64_t flat, const Shape& shape);
int64_t ravel(const std::vector<int64_t>& index, const Shape& shape);
// Row-major offset in `shape` of the element a broadcast result index maps to.
int64_t broadcast_source(const std::vector<int64_t>& out_index, const Shape& shape);
// GELU in f64 by its textbook formulas: GPT-2's tanh form and the exact erf form.
double gelu_tanh_ref(double x);
double gelu_erf_ref(double x);

}  // namespace merak::test
