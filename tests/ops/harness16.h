// The op harness's 16-bit CUDA pass (bf16 and f16): how a case's 16-bit variant is derived, what
// it is compared with and within which tolerance, and which ops have none. The device part lives
// in op_harness_test.cc; everything here is host-side and checked without a GPU
// (harness16_test.cc).
//
// A variant rounds the case's f64/f32 floating inputs to the 16-bit dtype (integer and bool
// inputs unchanged; the inputs an op takes in op_util.h's stat_dtype, f32 for 16-bit data, are
// rounded to f32 only) and runs the op on CUDA. The expected result is the CPU's f32 run on the
// rounded inputs widened back to f32, so only the kernel's own error is measured, not the
// inputs' rounding.
//
// Tolerances, for |got - want| <= atol + rtol |want| with want the CPU's f32 value rounded to the
// output's dtype (so overflow to inf and underflow are expected, not errors):
//
//   output dtype in the 16-bit run   rtol                      atol
//   bf16                             1.6e-2                    1e-2 x s
//   f16                              2e-3                      1e-3 x s
//   f32 (stats, losses: stat_dtype)  max(1e-5, case f32_tol)   the same (the f32 pass's rule)
//   i32, i64, bool                   exact                     exact
//
// bf16's rtol is PyTorch's assert_close default; f16's is twice its 1e-3 default; both are about
// two units of the last place (2^-7, 2^-10), the atols one, as PyTorch's attention tests use.
// The kernels accumulate in f32 and round once, which this leaves room for. s grows with the
// work behind each output element, as PyTorch's OpInfo tests loosen long reductions op by op:
// s = sqrt(max(1, w / 256)), w = the registry's forward FLOPs per output element (a reduction's
// row length, a matmul's 2K; elementwise ops stay at 1), the random-walk growth of rounding
// errors summed over w terms. A case's own looser f32 tolerance is the floor of both.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "merak/ops/registry.h"
#include "tests/ops/harness.h"

namespace merak::test {

// The dtypes of the 16-bit pass, in the order the summary prints them.
const std::vector<DType>& half_dtypes();

struct Tolerance {
  double rtol = 0, atol = 0;  // both 0: exact
};

// The tolerance of one output whose dtype in the 16-bit run is `out`; `work` is the op's forward
// FLOPs per output element, `case_f32_tol` the case's f32 tolerance.
Tolerance half_tolerance(DType out, double work, double case_f32_tol);
// Forward FLOPs per output element of `op` on these inputs (the registry's cost, on Meta).
double work_per_output(const ops::OpDef& op, const std::vector<Tensor>& inputs, const Attrs& a);
// Whether `got` is within `tol` of `want`: NaN matches NaN, an infinity only itself.
bool within(double got, double want, const Tolerance& tol);
// `v` rounded to `dtype` (bf16, f16 or f32) and widened back; other dtypes return v.
double round_to(double v, DType dtype);

// Ops with no 16-bit variants, each with why: {op, reason}.
const std::vector<std::pair<std::string, std::string>>& half_skip_table();
// The table's reason for `op`, or "" when it has 16-bit variants.
std::string half_skip_reason(const std::string& op);

// Whether input `i` of `op` is one it takes in stat_dtype (f32 for 16-bit data): layer_norm's
// mean and rstd, the log-sum-exps and a loss's gradient, named so by the definitions.
bool is_stat_input(const ops::OpDef& op, size_t i);

struct HalfVariant {
  std::string skip;             // non-empty: no variant, and why (a rule on the case's inputs)
  std::vector<Tensor> inputs;   // for the GPU: floating inputs in the 16-bit dtype, stats in f32
  std::vector<Tensor> widened;  // for the CPU reference: the same values, all floating in f32
};

// The variant of case `c` of `op` in `dtype` (bf16 or f16). Cases without one: those without an
// f32 run (their reference needs f64), those whose inputs are already 16-bit (they pick their
// dtypes), those with no floating input to round, and those where rounding turns a finite input
// into an infinity (values outside the dtype's range: a different computation, not a precision
// check).
HalfVariant derive_half(const ops::OpDef& op, const OpCase& c, DType dtype);

}  // namespace merak::test
