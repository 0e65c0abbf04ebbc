// Runs every registered op through its harness cases (see harness.h for what is checked).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include "merak/autograd/engine.h"
#include "merak/autograd/grad_mode.h"
#include "merak/cuda/runtime.h"
#include "merak/ops/dispatch.h"
#include "tests/ops/harness16.h"
#include "tests/ops/harness_registry.h"

namespace merak::test {
namespace {

// Converts f64 inputs to f32 (plain rounding) and back, for the f32 run and its reference.
Tensor with_dtype(const Tensor& t, DType to) {
  if (!t.defined() || t.dtype() == to || !(t.dtype() == DType::F64 || t.dtype() == DType::F32))
    return t;
  const std::vector<double> v = values(t);
  Tensor out = Tensor::empty(t.shape(), to);
  for (size_t i = 0; i < v.size(); ++i) {
    if (to == DType::F32) out.data<float>()[i] = float(v[i]);
    else out.data<double>()[i] = v[i];
  }
  return out;
}

// "" when `got` matches `want` within tol * (1 + |want|) elementwise (exact for non-floats).
std::string compare(const Tensor& got, const Tensor& want, double tol, bool check_dtype) {
  std::ostringstream err;
  if (got.shape() != want.shape()) {
    err << "shape " << shape_str(got.shape()) << ", expected " << shape_str(want.shape());
    return err.str();
  }
  if (check_dtype && got.dtype() != want.dtype()) {
    err << "dtype " << dtype_name(got.dtype()) << ", expected " << dtype_name(want.dtype());
    return err.str();
  }
  const std::vector<double> g = values(got), w = values(want);
  const bool exact = !is_floating(want.dtype());
  for (size_t i = 0; i < g.size(); ++i) {
    const bool both_nan = std::isnan(g[i]) && std::isnan(w[i]);
    const bool ok = exact ? g[i] == w[i]
                          : both_nan || g[i] == w[i] ||  // g == w: equal infinities too
                                std::fabs(g[i] - w[i]) <= tol * (1 + std::fabs(w[i]));
    if (!ok) {
      err << "element " << i << " = " << g[i] << ", expected " << w[i] << " (tol " << tol << ")";
      return err.str();
    }
  }
  return "";
}

int differentiable_outputs(const ops::OpDef& op, size_t n) {
  return op.grad_outputs < 0 ? int(n) : std::min(int(n), op.grad_outputs);
}

// sum_k <weights_k, outputs_k> over the differentiable floating outputs, in f64.
double weighted_sum(const std::vector<Tensor>& outs, const std::vector<Tensor>& weights) {
  double s = 0;
  for (size_t k = 0; k < weights.size(); ++k) {
    if (!weights[k].defined()) continue;
    const auto o = values(outs[k]), w = values(weights[k]);
    for (size_t i = 0; i < o.size(); ++i) s += o[i] * w[i];
  }
  return s;
}

struct Tally {
  int ops = 0, cases = 0, grad_checks = 0;
  // CUDA cases by dtype (f32, bf16, f16): run on the GPU against the CPU, or skipped without one.
  std::map<DType, int> cuda_run, cuda_skipped;
  // 16-bit variants not derived, by dtype and reason (harness16.h), and derived ones per op.
  std::map<DType, std::map<std::string, int>> not_derived;
  std::map<DType, int> op_variants;
};

// Whether the CUDA pass runs: a GPU must be present. Without one, `why` says what the runtime
// reported (the CUDA cases are then counted as skipped, never as passed).
bool cuda_available(std::string* why) {
  static std::string reason;
  static const int count = cuda::device_count(&reason);
  if (why) *why = reason;
  return count > 0;
}

// 5. The op on the GPU with the f32 inputs, against the CPU's f32 outputs (within 1e-5, or the
// case's looser f32 tolerance). View ops need no kernel; other ops must have a CUDA one.
void run_cuda(const ops::OpDef& op, const OpCase& c, const std::vector<Tensor>& in32,
              const std::vector<Tensor>& cpu_outs, const std::string& where, Tally& tally) {
  if (!cuda_available(nullptr)) {
    ++tally.cuda_skipped[DType::F32];
    return;
  }
  ++tally.cuda_run[DType::F32];
  if (!op.view && !ops::Registry::get().kernel(op.name, DeviceType::CUDA)) {
    FAIL_CHECK(where << "no CUDA kernel");
    return;
  }
  std::vector<Tensor> dev;
  for (const Tensor& t : in32) dev.push_back(t.defined() ? t.to(Device::cuda()) : t);
  try {
    const std::vector<Tensor> outs = ops::call(op, dev, c.attrs);
    for (size_t k = 0; k < cpu_outs.size() && k < outs.size(); ++k) {
      const std::string e = compare(outs[k].to(Device::cpu()), cpu_outs[k],
                                    std::max(1e-5, c.f32_tol), true);
      if (!e.empty()) FAIL_CHECK(where << "CUDA output " << k << " vs CPU: " << e);
    }
  } catch (const std::exception& e) {
    FAIL_CHECK(where << "CUDA call threw: " << e.what());
  }
}

// "" when every element of `got` (a 16-bit run's output, on the CPU) is within `tol` of `want`
// (the CPU's f32 output) rounded to `dtype`, the output's dtype in that run.
std::string compare_half(const Tensor& got, const Tensor& want, DType dtype, const Tolerance& tol) {
  std::ostringstream err;
  if (got.shape() != want.shape() || got.dtype() != dtype) {
    err << "got " << got.str() << ", expected " << dtype_name(dtype) << shape_str(want.shape());
    return err.str();
  }
  const std::vector<double> g = values(got), w = values(want);
  for (size_t i = 0; i < g.size(); ++i) {
    const double wi = round_to(w[i], dtype);
    if (!within(g[i], wi, tol)) {
      err << "element " << i << " = " << g[i] << ", expected " << wi << " (rtol " << tol.rtol
          << ", atol " << tol.atol << ")";
      return err.str();
    }
  }
  return "";
}

// 6. The case's variant in `dtype` (bf16 or f16; harness16.h) on the GPU, against the CPU's f32
// run on the same rounded values. Deriving the variant and its Meta inference need no GPU and
// run everywhere: a definition that refuses the variant, or keeps an output in a dtype other
// than the variant's or f32, fails here too.
void run_cuda_half(const ops::OpDef& op, const OpCase& c, DType dtype, const std::string& where,
                   Tally& tally) {
  if (!half_skip_reason(op.name).empty()) {
    ++tally.not_derived[dtype]["op in the skip table"];
    return;
  }
  const HalfVariant h = derive_half(op, c, dtype);
  if (!h.skip.empty()) {
    ++tally.not_derived[dtype][h.skip];
    return;
  }
  ++tally.op_variants[dtype];
  const std::string at = where + dtype_name(dtype) + " variant: ";
  std::vector<Tensor> meta;
  for (const Tensor& t : h.inputs)
    meta.push_back(t.defined() ? Tensor::empty(t.shape(), t.dtype(), Device::meta()) : t);
  std::vector<Tensor> mouts;
  try {
    mouts = ops::call(op, meta, c.attrs);
  } catch (const std::exception& e) {
    FAIL_CHECK(at << "Meta call threw: " << e.what());
    return;
  }
  for (size_t k = 0; k < mouts.size(); ++k) {
    const DType d = mouts[k].dtype();
    if (is_floating(d) && d != dtype && d != DType::F32)
      FAIL_CHECK(at << "Meta output " << k << " is " << mouts[k].str() << ", expected "
                    << dtype_name(dtype) << " or f32");
  }
  if (!cuda_available(nullptr)) {
    ++tally.cuda_skipped[dtype];
    return;
  }
  ++tally.cuda_run[dtype];
  if (!op.view && !ops::Registry::get().kernel(op.name, DeviceType::CUDA)) {
    FAIL_CHECK(at << "no CUDA kernel");
    return;
  }
  try {
    const std::vector<Tensor> want = ops::call(op, h.widened, c.attrs);
    std::vector<Tensor> dev;
    for (const Tensor& t : h.inputs) dev.push_back(t.defined() ? t.to(Device::cuda()) : t);
    const std::vector<Tensor> got = ops::call(op, dev, c.attrs);
    const double work = work_per_output(op, c.inputs, c.attrs);
    for (size_t k = 0; k < want.size() && k < got.size() && k < mouts.size(); ++k) {
      const DType d = mouts[k].dtype();
      const std::string e = compare_half(got[k].to(Device::cpu()), want[k], d,
                                         half_tolerance(d, work, c.f32_tol));
      if (!e.empty()) FAIL_CHECK(at << "CUDA output " << k << " vs CPU f32: " << e);
    }
  } catch (const std::exception& e) {
    FAIL_CHECK(at << "CUDA call threw: " << e.what());
  }
}

void run_case(const ops::OpDef& op, const OpCase& c, Tally& tally) {
  const std::string where = "op '" + op.name + "' case '" + c.label + "' " + c.attrs.str() + ": ";
  ++tally.cases;

  // 1. f64 against the reference.
  std::vector<Tensor> outs;
  try {
    outs = ops::call(op, c.inputs, c.attrs);
  } catch (const std::exception& e) {
    FAIL_CHECK(where << "f64 call threw: " << e.what());
    return;
  }
  const std::vector<Tensor> want = c.reference(c.inputs, c.attrs);
  REQUIRE(want.size() <= outs.size());
  for (size_t k = 0; k < want.size(); ++k) {
    const std::string e = compare(outs[k], want[k], 1e-9, true);
    if (!e.empty()) FAIL_CHECK(where << "f64 output " << k << ": " << e);
  }

  // 2. f32 against the reference on the f32-rounded inputs.
  if (c.f32_tol > 0) {
    std::vector<Tensor> in32, rounded;
    for (const Tensor& t : c.inputs) {
      in32.push_back(with_dtype(t, DType::F32));
      rounded.push_back(t.defined() && t.dtype() == DType::F64
                            ? with_dtype(with_dtype(t, DType::F32), DType::F64)
                            : t);
    }
    try {
      const std::vector<Tensor> outs32 = ops::call(op, in32, c.attrs);
      const std::vector<Tensor> want32 = c.reference(rounded, c.attrs);
      for (size_t k = 0; k < want32.size(); ++k) {
        const std::string e = compare(outs32[k], want32[k], c.f32_tol, false);
        if (!e.empty()) FAIL_CHECK(where << "f32 output " << k << ": " << e);
      }
      run_cuda(op, c, in32, outs32, where, tally);
    } catch (const std::exception& e) {
      FAIL_CHECK(where << "f32 call threw: " << e.what());
    }
  }
  for (DType dtype : half_dtypes()) run_cuda_half(op, c, dtype, where, tally);

  // 3. Meta inference matches the real outputs and allocates nothing.
  {
    std::vector<Tensor> meta;
    for (const Tensor& t : c.inputs)
      meta.push_back(t.defined() ? Tensor::empty(t.shape(), t.dtype(), Device::meta()) : t);
    const int64_t live_before = cpu_memory_stats().live_bytes;
    std::vector<Tensor> mouts;
    try {
      mouts = ops::call(op, meta, c.attrs);
    } catch (const std::exception& e) {
      FAIL_CHECK(where << "Meta call threw: " << e.what());
    }
    CHECK(cpu_memory_stats().live_bytes == live_before);
    if (mouts.size() != outs.size()) {
      FAIL_CHECK(where << "Meta gave " << mouts.size() << " outputs, real " << outs.size());
    } else {
      for (size_t k = 0; k < outs.size(); ++k) {
        if (mouts[k].shape() != outs[k].shape() || mouts[k].dtype() != outs[k].dtype() ||
            !mouts[k].is_meta())
          FAIL_CHECK(where << "Meta output " << k << " is " << mouts[k].str() << ", real "
                           << outs[k].str());
      }
    }
  }

  // 4. Gradients against central finite differences in f64.
  if (!op.backward || !c.check_grad) return;
  std::set<int> checked(c.grad_inputs.begin(), c.grad_inputs.end());
  std::vector<Tensor> leaves;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    const Tensor& t = c.inputs[i];
    const bool floating = t.defined() && t.dtype() == DType::F64;
    const bool want_grad = floating && (checked.empty() || checked.count(int(i)));
    Tensor leaf = t.defined() ? t.clone() : t;
    if (want_grad) leaf.set_requires_grad(true);
    leaves.push_back(leaf);
  }
  std::vector<Tensor> gouts = ops::call(op, leaves, c.attrs);
  std::vector<Tensor> weights(gouts.size()), roots, seeds;
  const int n_diff = differentiable_outputs(op, gouts.size());
  for (int k = 0; k < n_diff; ++k) {
    if (gouts[k].dtype() != DType::F64) continue;
    weights[k] = rand_f64(gouts[k].shape(), 1000 + k);
    if (gouts[k].grad_fn()) {
      roots.push_back(gouts[k]);
      seeds.push_back(weights[k]);
    }
  }
  if (roots.empty()) {
    FAIL_CHECK(where << "no output was recorded for backward");
    return;
  }
  autograd::backward(roots, seeds);

  autograd::NoGradGuard no_grad;
  const double eps = 1e-5;
  for (size_t i = 0; i < leaves.size(); ++i) {
    if (!leaves[i].defined() || !leaves[i].requires_grad()) continue;
    ++tally.grad_checks;
    const Tensor analytic = leaves[i].grad();
    if (!analytic.defined()) {
      FAIL_CHECK(where << "no gradient reached input " << i);
      continue;
    }
    const std::vector<double> a = values(analytic);
    std::vector<Tensor> probe = c.inputs;
    for (int64_t j = 0; j < c.inputs[i].numel(); ++j) {
      Tensor x = c.inputs[i].clone();
      double* p = x.data<double>();
      const double x0 = p[j];
      probe[i] = x;
      p[j] = x0 + eps;
      const double up = weighted_sum(ops::call(op, probe, c.attrs), weights);
      p[j] = x0 - eps;
      const double down = weighted_sum(ops::call(op, probe, c.attrs), weights);
      const double fd = (up - down) / (2 * eps);
      if (std::fabs(a[j] - fd) > c.fd_tol * (1 + std::fabs(fd))) {
        FAIL_CHECK(where << "d/d input " << i << " element " << j << ": autograd " << a[j]
                         << ", finite difference " << fd);
        break;
      }
    }
  }
}

std::set<std::string> filter_from_env() {
  std::set<std::string> names;
  if (const char* env = std::getenv("MERAK_HARNESS_OPS")) {
    std::stringstream ss(env);
    std::string name;
    while (std::getline(ss, name, ','))
      if (!name.empty()) names.insert(name);
  }
  return names;
}

}  // namespace

TEST_CASE("op harness: every registered op vs reference, Meta inference and finite differences",
          "[ops]") {
  const std::set<std::string> only = filter_from_env();
  const auto& factories = case_factories();
  const auto& registry = ops::Registry::get();
  Tally tally;

  for (const auto& [name, list] : factories)
    if (!registry.find(name)) FAIL_CHECK("cases registered for unknown op '" << name << "'");

  for (const std::string& name : registry.names()) {
    if (!only.empty() && !only.count(name)) continue;
    const ops::OpDef& op = registry.at(name);
    auto it = factories.find(name);
    if (it == factories.end()) {
      FAIL_CHECK("op '" << name << "' is registered but the harness has no cases for it");
      continue;
    }
    if (!op.view && !registry.kernel(name, DeviceType::CPU))
      FAIL_CHECK("op '" << name << "' has neither a view function nor a CPU kernel");
    int cases = 0;
    tally.op_variants.clear();
    for (const CaseFactory& make : it->second) {
      for (const OpCase& c : make()) {
        run_case(op, c, tally);
        ++cases;
      }
    }
    if (cases == 0) FAIL_CHECK("op '" << name << "' has an empty case list");
    // No op loses its 16-bit check silently: it has variants or a line in the skip table.
    for (DType dtype : half_dtypes())
      if (half_skip_reason(name).empty() && tally.op_variants[dtype] == 0)
        FAIL_CHECK("op '" << name << "' has no " << dtype_name(dtype)
                          << " variant of any case: add a case or list it in harness16.cc's "
                          << "skip table with why");
    ++tally.ops;
  }
  std::cout << "op harness: " << tally.ops << " ops checked (of " << registry.names().size()
            << " registered), " << tally.cases << " cases, " << tally.grad_checks
            << " gradient checks against finite differences\n";
  // One line for tools/gpu_check.sh ('^op harness: CUDA', 'run on the GPU'), counting every
  // dtype; then the 16-bit variants per dtype and why some were not derived.
  std::string why;
  const bool gpu = cuda_available(&why);
  const std::map<DType, int>& counts = gpu ? tally.cuda_run : tally.cuda_skipped;
  std::ostringstream by_dtype;
  int total = 0;
  for (DType dtype : {DType::F32, DType::BF16, DType::F16}) {
    const int n = counts.count(dtype) ? counts.at(dtype) : 0;
    by_dtype << (dtype == DType::F32 ? "" : ", ") << dtype_name(dtype) << " " << n;
    total += n;
  }
  if (gpu)
    std::cout << "op harness: CUDA: " << total << " cases run on the GPU against the CPU ("
              << by_dtype.str() << ")\n";
  else
    std::cout << "op harness: CUDA: " << total << " cases SKIPPED (no GPU: " << why << ") ("
              << by_dtype.str() << ")\n";
  for (DType dtype : half_dtypes()) {
    const int n = counts.count(dtype) ? counts.at(dtype) : 0;
    int not_derived = 0;
    std::ostringstream reasons;
    for (const auto& [reason, k] : tally.not_derived[dtype]) {
      reasons << (not_derived ? "; " : "") << reason << ": " << k;
      not_derived += k;
    }
    std::cout << "op harness: " << dtype_name(dtype) << " variants: " << n
              << (gpu ? " run on the GPU" : " SKIPPED (no GPU)") << ", " << not_derived
              << " cases without one (" << reasons.str() << ")\n";
  }
  std::cout << "op harness: 16-bit skip table:";
  for (const auto& [name, reason] : half_skip_table())
    std::cout << " " << name << " (" << reason << ");";
  std::cout << "\n";
  if (only.empty()) CHECK(tally.ops == int(registry.names().size()));
}

}  // namespace merak::test
