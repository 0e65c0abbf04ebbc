// Checks of the CUDA nn kernels. Everywhere: each op has a CUDA kernel registered. With a GPU:
//   - f32: every op through the dispatcher on CUDA against the CPU kernel on the same inputs;
//   - bf16 and f16: every op through the dispatcher on CUDA against the CPU's f32 results on
//     the same, rounded, inputs; the statistics and the loss (layer_norm's mean and rstd,
//     cross_entropy's loss and lse, sdpa's lse, and dloss) are f32 there (op_util.h's
//     stat_dtype), fed to the backwards unrounded and compared at f32 precision;
//   - determinism: the gradients that sum over rows give the same bits twice;
//   - a kernel called around the op's inference with 16-bit stats refuses them by name.
// Without a GPU the device checks are reported as skipped. Exit status 1 on any failure.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "merak/core/tensor.h"
#include "merak/cuda/runtime.h"
#include "merak/ops/dispatch.h"
#include "merak/ops/registry.h"
#include "tests/cuda/device_check.h"

namespace merak {
namespace {

using ops::Attrs;
using namespace device_check;

// ---- tensors on the host ------------------------------------------------------------------

Tensor bools(const Shape& shape, const std::vector<bool>& v) {
  Tensor t = Tensor::empty(shape, DType::Bool);
  for (size_t i = 0; i < v.size(); ++i) t.data<bool>()[i] = v[i];
  return t;
}

// ---- cases --------------------------------------------------------------------------------

struct Case {
  std::string op, label;
  std::vector<Tensor> inputs;  // host; floating ones f32
  Attrs attrs;
  double tol = 1e-5;  // f32 tolerance (the 16-bit ones are set by dtype)
};

std::vector<Case> cases() {
  std::vector<Case> c;
  uint64_t seed = 1;
  auto r = [&](const Shape& s) { return rand_f32(s, seed++); };
  auto mm = [&](const std::string& label, const Shape& a, const Shape& b, bool ta, bool tb) {
    c.push_back({"matmul", label, {r(a), r(b)},
                 Attrs().set("trans_a", ta).set("trans_b", tb), 1e-5});
  };
  mm("2-D", {7, 5}, {5, 9}, false, false);
  mm("2-D ta", {5, 7}, {5, 9}, true, false);
  mm("2-D tb", {7, 5}, {9, 5}, false, true);
  mm("2-D ta tb", {5, 7}, {9, 5}, true, true);
  mm("shared b, folded", {2, 3, 7, 5}, {5, 9}, false, false);
  mm("shared b, ta", {2, 3, 5, 7}, {5, 9}, true, false);
  mm("shared a", {7, 5}, {4, 5, 9}, false, false);
  mm("interleaved broadcast", {2, 1, 7, 5}, {3, 5, 9}, false, false);
  mm("interleaved broadcast tb", {2, 1, 7, 5}, {3, 9, 5}, false, true);
  mm("batched ta tb", {2, 3, 5, 7}, {2, 3, 9, 5}, true, true);
  mm("K = 0", {3, 0}, {0, 4}, false, false);
  mm("large", {3, 130, 300}, {300, 70}, false, false);

  const Tensor x3 = r({2, 3, 8}), w3 = r({5, 8}), b3 = r({5});
  c.push_back({"linear", "bias", {x3, w3, b3}, {}, 1e-5});
  c.push_back({"linear", "no bias", {x3, w3}, {}, 1e-5});
  const Tensor b_wide = r({6});
  c.push_back({"linear", "misaligned bias", {x3, w3, b_wide.narrow(0, 1, 5)}, {}, 1e-5});
  c.push_back({"linear", "in = 0", {r({3, 0}), r({4, 0}), r({4})}, {}, 1e-6});
  // linear_gelu: the tanh form with 8k outputs runs cuBLASLt's GELU_AUX epilogue (with and
  // without bias); the others take the linear-then-gelu path.
  const Tensor x16 = rand_f32({2, 3, 24}, seed++, -2, 2), w16 = r({16, 24}), b16 = r({16});
  const Attrs gelu_tanh = Attrs().set("approximate", "tanh");
  const Attrs gelu_none = Attrs().set("approximate", "none");
  c.push_back({"linear_gelu", "tanh, epilogue with bias", {x16, w16, b16}, gelu_tanh, 1e-5});
  c.push_back({"linear_gelu", "tanh, epilogue without bias", {x16, w16}, gelu_tanh, 1e-5});
  const Tensor x_big = rand_f32({300, 256}, seed++, -1, 1);
  c.push_back({"linear_gelu", "tanh, large", {x_big, r({512, 256}), r({512})}, gelu_tanh, 1e-5});
  c.push_back({"linear_gelu", "tanh, 5 outputs (no epilogue)", {x3, w3, b3}, gelu_tanh, 1e-5});
  c.push_back({"linear_gelu", "tanh, misaligned bias", {x16, w16, r({17}).narrow(0, 1, 16)},
               gelu_tanh, 1e-5});
  c.push_back({"linear_gelu", "none (erf, no epilogue)", {x16, w16, b16}, gelu_none, 1e-5});

  for (const char* op : {"softmax", "log_softmax"}) {
    c.push_back({op, "short rows", {rand_f32({6, 37}, seed++, -5, 5)}, {}, 1e-5});
    c.push_back({op, "long rows", {rand_f32({3, 2000}, seed++, -5, 5)}, {}, 1e-5});
    c.push_back({op, "middle dim", {rand_f32({4, 5, 6}, seed++, -5, 5)}, Attrs().set("dim", 1), 1e-5});
  }
  for (const char* op : {"softmax_grad", "log_softmax_grad"}) {
    const bool is_log = std::string(op) == "log_softmax_grad";
    auto y_of = [&](const Tensor& x, int64_t dim) {
      return ops::call(is_log ? "log_softmax" : "softmax", {x}, Attrs().set("dim", dim))[0];
    };
    c.push_back({op, "short rows", {r({6, 37}), y_of(r({6, 37}), -1)}, {}, 1e-5});
    c.push_back({op, "long rows", {r({3, 2000}), y_of(r({3, 2000}), -1)}, {}, 1e-5});
    c.push_back({op, "middle dim", {r({4, 5, 6}), y_of(r({4, 5, 6}), 1)}, Attrs().set("dim", 1), 1e-5});
  }

  c.push_back({"layer_norm", "weight and bias", {r({5, 33}), r({33}), r({33})}, {}, 1e-5});
  c.push_back({"layer_norm", "weight, long rows", {r({3, 1500}), r({1500}), Tensor()}, {}, 1e-5});
  c.push_back({"layer_norm", "plain", {r({2, 3, 40})}, Attrs().set("eps", 1e-3), 1e-5});
  for (bool with_w : {true, false}) {
    const Tensor x = r({130, 40}), w = with_w ? r({40}) : Tensor();
    const std::vector<Tensor> ln = ops::call("layer_norm", {x, w, Tensor()});
    c.push_back({"layer_norm_grad", with_w ? "weight, 3 chunks" : "no weight",
                 {r({130, 40}), x, w, ln[1], ln[2]}, {}, 1e-5});
  }
  {
    const Tensor x = r({4, 1100}), w = r({1100});
    const std::vector<Tensor> ln = ops::call("layer_norm", {x, w, Tensor()});
    c.push_back({"layer_norm_grad", "long rows", {r({4, 1100}), x, w, ln[1], ln[2]}, {}, 1e-5});
  }

  c.push_back({"embedding", "i64", {r({11, 7}), rand_ids({3, 4}, seed++, 0, 11, DType::I64)}, {}, 0});
  c.push_back({"embedding", "i32, long rows",
               {r({5, 1300}), rand_ids({6}, seed++, 0, 5, DType::I32)}, {}, 0});
  c.push_back({"embedding_grad", "i64, repeats",
               {r({3, 4, 7}), rand_ids({3, 4}, seed++, 0, 5, DType::I64)},
               Attrs().set("num_embeddings", int64_t(11)), 1e-6});
  c.push_back({"embedding_grad", "i32, long rows",
               {r({40, 300}), rand_ids({40}, seed++, 0, 3, DType::I32)},
               Attrs().set("num_embeddings", int64_t(4)), 1e-6});

  {
    Tensor t = rand_ids({9}, seed++, 0, 13, DType::I64);
    t.data<int64_t>()[2] = -100;
    t.data<int64_t>()[7] = -100;
    const Tensor x = rand_f32({9, 13}, seed++, -4, 4);
    c.push_back({"cross_entropy", "ignored rows", {x, t}, {}, 1e-5});
    const Tensor lse = ops::call("cross_entropy", {x, t})[1];
    c.push_back({"cross_entropy_grad", "ignored rows",
                 {Tensor::full({}, 1.7), x, t, lse}, {}, 1e-5});
  }
  {
    const Tensor t = rand_ids({5}, seed++, 0, 1500, DType::I32);
    const Tensor x = rand_f32({5, 1500}, seed++, -4, 4);
    const Attrs a = Attrs().set("ignore_index", int64_t(t.data<int32_t>()[1]));
    c.push_back({"cross_entropy", "long rows, ignore_index in range", {x, t}, a, 1e-5});
    const Tensor lse = ops::call("cross_entropy", {x, t}, a)[1];
    c.push_back({"cross_entropy_grad", "long rows", {Tensor::full({}, 0.5), x, t, lse}, a, 1e-5});
  }
  {
    Tensor t = Tensor::full({3}, -100.0, DType::I64);
    const Tensor x = r({3, 4});
    c.push_back({"cross_entropy", "all ignored", {x, t}, {}, 1e-6});
  }

  // sdpa: every head-dim configuration (64, 128, 256), Tq != Tk both ways, causal, padding
  // (one batch entry fully masked).
  struct Attn {
    const char* label;
    int64_t B, H, Tq, Tk, D, Dv;
    bool causal, mask;
  };
  const Attn attn[] = {
      {"D 16, causal", 2, 3, 70, 70, 16, 16, true, false},
      {"D 64, Tq < Tk, causal, mask", 2, 2, 33, 90, 64, 48, true, true},
      {"D 100, Dv 128, Tq > Tk, mask", 2, 2, 50, 40, 100, 128, false, true},
      {"D 200, Dv 256, causal", 1, 2, 20, 45, 200, 256, true, false},
      {"Tq > Tk, causal (empty rows)", 1, 2, 40, 20, 32, 32, true, false},
  };
  for (const Attn& a : attn) {
    const Tensor q = r({a.B, a.H, a.Tq, a.D}), k = r({a.B, a.H, a.Tk, a.D});
    const Tensor v = r({a.B, a.H, a.Tk, a.Dv});
    Tensor mask;
    if (a.mask) {
      std::vector<bool> keep(size_t(a.B * a.Tk));
      for (int64_t i = 0; i < a.Tk; ++i) keep[size_t(i)] = i % 3 != 1;  // batch 0: some keys
      // batch 1 (and later): none
      mask = bools({a.B, a.Tk}, keep);
    }
    const Attrs at = Attrs().set("causal", a.causal).set("scale", 0.0);
    c.push_back({"sdpa", a.label, {q, k, v, mask}, at, 2e-5});
    const std::vector<Tensor> fwd = ops::call("sdpa", {q, k, v, mask}, at);
    c.push_back({"sdpa_grad", a.label, {r({a.B, a.H, a.Tq, a.Dv}), q, k, v, mask, fwd[0], fwd[1]},
                 at, 2e-5});
  }
  return c;
}

// ---- running ------------------------------------------------------------------------------

std::vector<Tensor> run_cpu(const Case& c) { return ops::call(c.op, c.inputs, c.attrs); }

// The inputs and outputs of an op that are statistics or a loss: f32 when the other floating
// ones are bf16 or f16 (op_util.h's stat_dtype).
struct Stats {
  std::vector<size_t> inputs, outputs;
};
Stats stats_of(const std::string& op) {
  if (op == "layer_norm") return {{}, {1, 2}};          // mean, rstd
  if (op == "layer_norm_grad") return {{3, 4}, {}};     // mean, rstd
  if (op == "cross_entropy") return {{}, {0, 1}};       // loss, lse
  if (op == "cross_entropy_grad") return {{0, 3}, {}};  // dloss, lse
  if (op == "sdpa") return {{}, {1}};                   // lse
  if (op == "sdpa_grad") return {{6}, {}};              // lse
  return {};
}
bool has(const std::vector<size_t>& v, size_t i) {
  return std::find(v.begin(), v.end(), i) != v.end();
}

// The case's inputs with the floating ones, stats aside, stored as `dtype` (bf16 or f16) and
// converted back to f32 when `back` (the CPU reference's inputs).
std::vector<Tensor> narrowed(const Case& c, DType dtype, bool back) {
  const Stats st = stats_of(c.op);
  std::vector<Tensor> in = c.inputs;
  for (size_t i = 0; i < in.size(); ++i)
    if (floating(in[i]) && !has(st.inputs, i))
      in[i] = back ? convert(convert(in[i], dtype), DType::F32) : convert(in[i], dtype);
  return in;
}

double tolerance(const Case& c, DType dtype) { return tolerance_for(c.op, dtype, c.tol); }

void check_case(const Case& c) {
  const std::string name = c.op + " (" + c.label + ")";
  try {
    const std::vector<Tensor> want = run_cpu(c);
    const std::vector<Tensor> got = ops::call(c.op, to_device(c.inputs, Device::cuda()), c.attrs);
    for (size_t i = 0; i < want.size(); ++i)
      compare(name + " f32 output " + std::to_string(i), want[i], got[i], c.tol);
    if (c.op == "embedding_grad" || c.op == "layer_norm_grad" || c.op == "sdpa_grad") {
      const std::vector<Tensor> again =
          ops::call(c.op, to_device(c.inputs, Device::cuda()), c.attrs);
      for (size_t i = 0; i < got.size(); ++i) {
        const Tensor a = got[i].to(Device::cpu()), b = again[i].to(Device::cpu());
        if (a.nbytes() && std::memcmp(a.raw_data(), b.raw_data(), size_t(a.nbytes())) != 0)
          fail(name + ": not deterministic");
      }
    }
    const Stats st = stats_of(c.op);
    for (DType dtype : {DType::BF16, DType::F16}) {
      // The reference: the CPU in f32 on the rounded inputs (the f32 stats as they are).
      const std::vector<Tensor> want16 = ops::call(c.op, narrowed(c, dtype, true), c.attrs);
      const std::vector<Tensor> got16 =
          ops::call(c.op, to_device(narrowed(c, dtype, false), Device::cuda()), c.attrs);
      for (size_t i = 0; i < want16.size(); ++i) {
        const std::string label = name + " " + dtype_name(dtype) + " output " + std::to_string(i);
        const bool stat = has(st.outputs, i);
        const DType expect = !floating(want16[i]) ? want16[i].dtype() : stat ? DType::F32 : dtype;
        if (got16[i].dtype() != expect) {
          fail(label + ": dtype " + dtype_name(got16[i].dtype()) + ", expected " +
               dtype_name(expect));
          continue;
        }
        // Stats and the loss are computed and kept in f32: as close as the f32 run's.
        compare(label, want16[i], got16[i], stat ? c.tol : tolerance(c, dtype));
      }
    }
  } catch (const std::exception& e) {
    fail(name + ": " + e.what());
  }
}

int run() {
  const char* ops_covered[] = {"matmul",          "linear",         "linear_gelu",
                               "softmax",         "log_softmax",    "softmax_grad",
                               "log_softmax_grad", "layer_norm",    "layer_norm_grad",
                               "embedding",       "embedding_grad", "cross_entropy",
                               "cross_entropy_grad", "sdpa",        "sdpa_grad"};
  for (const char* op : ops_covered)
    if (!ops::Registry::get().kernel(op, DeviceType::CUDA))
      fail(std::string(op) + ": no CUDA kernel registered");

  std::string why;
  if (cuda::device_count(&why) == 0) {
    std::printf("nn_kernels_test: SKIPPED (no GPU: %s): the CUDA kernels against the CPU\n", why.c_str());
  } else {
    for (const Case& c : cases()) check_case(c);
    // A CUDA f64 tensor is refused with the op's name.
    try {
      ops::call("softmax", {Tensor::zeros({2, 3}, DType::F64).to(Device::cuda())});
      fail("softmax accepted an f64 CUDA tensor");
    } catch (const std::exception& e) {
      if (std::string(e.what()).find("softmax") == std::string::npos)
        fail(std::string("f64 error does not name the op: ") + e.what());
    }
    // A kernel called around the op's inference with its stats in the input's 16-bit dtype
    // refuses them, naming the op and the input, before misreading them as f32.
    try {
      const Device gpu = Device::cuda();
      const Tensor x = Tensor::empty({4, 8}, DType::BF16, gpu);
      const Tensor stat = Tensor::empty({4}, DType::BF16, gpu);
      const std::vector<Tensor> out = {Tensor::empty({4, 8}, DType::BF16, gpu),
                                       Tensor::empty({8}, DType::BF16, gpu),
                                       Tensor::empty({8}, DType::BF16, gpu)};
      (*ops::Registry::get().kernel("layer_norm_grad", DeviceType::CUDA))(
          {x, x, Tensor(), stat, stat}, out, Attrs());
      fail("layer_norm_grad's CUDA kernel accepted a bf16 mean");
    } catch (const std::exception& e) {
      const std::string what = e.what();
      if (what.find("layer_norm_grad") == std::string::npos ||
          what.find("mean") == std::string::npos)
        fail("a bf16 mean's error does not name the op and input: " + what);
    }
  }
  std::printf("nn_kernels_test: %s (%d failures)\n", failures() ? "FAILED" : "passed",
              failures());
  return failures() ? 1 : 0;
}

}  // namespace
}  // namespace merak

int main() { return merak::run(); }
