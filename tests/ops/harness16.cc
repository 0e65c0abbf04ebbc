#include "tests/ops/harness16.h"

#include <algorithm>
#include <cmath>

#include "merak/ops/dispatch.h"

namespace merak::test {

const std::vector<DType>& half_dtypes() {
  static const std::vector<DType> dtypes = {DType::BF16, DType::F16};
  return dtypes;
}

Tolerance half_tolerance(DType out, double work, double case_f32_tol) {
  if (!is_floating(out)) return {};
  const double floor = std::max(1e-5, case_f32_tol);
  if (out == DType::F32 || out == DType::F64) return {floor, floor};
  const double s = std::sqrt(std::max(1.0, work / 256));
  const Tolerance base = out == DType::BF16 ? Tolerance{1.6e-2, 1e-2} : Tolerance{2e-3, 1e-3};
  return {std::max(base.rtol, floor), std::max(base.atol * s, floor)};
}

double work_per_output(const ops::OpDef& op, const std::vector<Tensor>& inputs, const Attrs& a) {
  std::vector<ops::TensorMeta> metas;
  for (const Tensor& t : inputs) metas.push_back(ops::TensorMeta::of(t));
  const Attrs full = ops::complete_attrs(op, a);
  double outs = 0;
  for (const ops::TensorMeta& m : ops::infer(op, metas, full)) outs += double(m.numel());
  return outs > 0 ? ops::cost(op, metas, full).fwd_flops / outs : 1.0;
}

bool within(double got, double want, const Tolerance& tol) {
  if (std::isnan(got) || std::isnan(want)) return std::isnan(got) && std::isnan(want);
  if (got == want) return true;
  // Checked apart: inf - finite is inf, and so is atol + rtol * inf.
  if (std::isinf(got) || std::isinf(want)) return false;
  return std::fabs(got - want) <= tol.atol + tol.rtol * std::fabs(want);
}

double round_to(double v, DType dtype) {
  switch (dtype) {
    case DType::F32: return double(float(v));
    case DType::BF16: return bf16_to_f32(f32_to_bf16(float(v)));
    case DType::F16: return f16_to_f32(f32_to_f16(float(v)));
    default: return v;
  }
}

const std::vector<std::pair<std::string, std::string>>& half_skip_table() {
  static const std::vector<std::pair<std::string, std::string>> table = {
      {"arange", "reads only x's shape and writes i64 positions: x's dtype changes nothing"},
      {"cast", "its cases pick their source and target dtypes, bf16 and f16 among them"},
      {"eq", "its CUDA kernel compares f32, i32, i64 and bool only and refuses 16-bit inputs "
             "(eq_type_of in kernels/cuda/elementwise/elementwise.cc)"},
      {"ge", "a comparison: refuses 16-bit inputs as eq does (compare_def in defs/elementwise.cc)"},
      {"gt", "a comparison: refuses 16-bit inputs as eq does (compare_def in defs/elementwise.cc)"},
      {"le", "a comparison: refuses 16-bit inputs as eq does (compare_def in defs/elementwise.cc)"},
      {"logical_and", "bool inputs only: nothing to round"},
      {"logical_or", "bool inputs only: nothing to round"},
      {"logical_xor", "bool inputs only: nothing to round"},
      {"lt", "a comparison: refuses 16-bit inputs as eq does (compare_def in defs/elementwise.cc)"},
  };
  return table;
}

std::string half_skip_reason(const std::string& op) {
  for (const auto& [name, why] : half_skip_table())
    if (name == op) return why;
  return "";
}

bool is_stat_input(const ops::OpDef& op, size_t i) {
  if (op.inputs.empty()) return false;
  std::string name = op.inputs[std::min(i, op.inputs.size() - 1)];  // variadic: the last repeats
  if (!name.empty() && name.back() == '?') name.pop_back();
  return name == "mean" || name == "rstd" || name == "lse" || name == "dloss";
}

namespace {

// Values rounded to `dtype` (bf16, f16 or f32) and stored in it.
Tensor rounded(const std::vector<double>& v, const Shape& shape, DType dtype) {
  Tensor out = Tensor::empty(shape, dtype);
  for (size_t i = 0; i < v.size(); ++i) {
    const float f = float(v[i]);
    if (dtype == DType::F32) out.data<float>()[i] = f;
    else if (dtype == DType::BF16) static_cast<uint16_t*>(out.raw_data())[i] = f32_to_bf16(f);
    else static_cast<uint16_t*>(out.raw_data())[i] = f32_to_f16(f);
  }
  return out;
}

Tensor widened(const Tensor& t) {
  const std::vector<double> v = values(t);
  return rounded(v, t.shape(), DType::F32);  // exact: every bf16 and f16 value is an f32 one
}

}  // namespace

HalfVariant derive_half(const ops::OpDef& op, const OpCase& c, DType dtype) {
  HalfVariant h;
  if (c.f32_tol <= 0) {
    h.skip = "no f32 run: the reference needs f64";
    return h;
  }
  bool any = false;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    const Tensor& t = c.inputs[i];
    if (!t.defined() || !is_floating(t.dtype())) {  // absent, integer or bool: as they are
      h.inputs.push_back(t);
      h.widened.push_back(t);
      continue;
    }
    if (t.dtype() == DType::BF16 || t.dtype() == DType::F16) {
      h.skip = "the case picks its own 16-bit dtypes";
      return h;
    }
    const std::vector<double> v = values(t);
    if (is_stat_input(op, i)) {  // f32 whatever the data's dtype
      h.inputs.push_back(rounded(v, t.shape(), DType::F32));
      h.widened.push_back(h.inputs.back());
      continue;
    }
    for (double x : v) {
      if (std::isfinite(x) && std::isinf(round_to(x, dtype))) {
        h.skip = std::string("an input overflows ") + dtype_name(dtype);
        return h;
      }
    }
    h.inputs.push_back(rounded(v, t.shape(), dtype));
    h.widened.push_back(widened(h.inputs.back()));
    any = true;
  }
  if (!any) {
    h.skip = "no floating input to round";
    h.inputs.clear();
    h.widened.clear();
  }
  return h;
}

}  // namespace merak::test
