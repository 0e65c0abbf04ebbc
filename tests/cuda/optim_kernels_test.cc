// Checks of the CUDA optimizer kernels (kernels/cuda/optim). Everywhere: the chunk descriptors'
// layout, the registration with merak::optim, and the argument errors that need no device.
// With a GPU:
//   - AdamW through merak::optim on CUDA parameters against the CPU AdamW over several steps,
//     bit for bit, with f32, bf16, f16 and mixed gradients (the CPU gets the same rounded ones);
//   - sum of squares against the CPU's sum_of_squares / grad_norm, and run to run bit-identical;
//   - the non-finite check with an inf, a -inf and a NaN planted;
//   - the argument errors that need CUDA tensors, which must leave the parameters untouched.
// Without a GPU the device checks are reported as skipped. Exit status 1 on any failure.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "kernels/cuda/optim/multi_tensor.h"
#include "merak/core/tensor.h"
#include "merak/cuda/runtime.h"
#include "merak/optim/adamw.h"
#include "merak/optim/device_optim.h"
#include "tests/cuda/device_check.h"

namespace merak {
namespace {

using cuda_kernels::optim::kChunkNumel;
using cuda_kernels::optim::TensorChunk;
using namespace device_check;

// ---- tensors on the host ------------------------------------------------------------------

// Values in [-1, 1), with some exact zeros and, scaled down, some whose squares are subnormal
// in f32 (the CPU does not flush them; neither may the GPU).
Tensor rand_grad(const Shape& shape, uint64_t seed) {
  Tensor t = Tensor::empty(shape, DType::F32);
  float* p = t.data<float>();
  uint64_t s = seed * 7919 + 17;
  for (int64_t i = 0; i < t.numel(); ++i) {
    float x = 2.f * float(next_random(s) % 1000003) / 1000003.f - 1.f;
    if (i % 97 == 5) x = 0.f;
    if (i % 101 == 7) x *= 1e-21f;
    p[i] = x;
  }
  return t;
}

// Whether two f32 tensors (either device) hold the same bits; names the first difference.
void same_bits(const std::string& label, const Tensor& want, const Tensor& got) {
  if (!want.defined() || !got.defined()) {
    if (want.defined() != got.defined()) fail(label + ": defined on one side only");
    return;
  }
  const Tensor w = want.to(Device::cpu()).contiguous(), g = got.to(Device::cpu()).contiguous();
  if (w.shape() != g.shape() || w.dtype() != g.dtype()) {
    fail(label + ": " + g.str() + ", expected " + w.str());
    return;
  }
  for (int64_t i = 0; i < w.numel(); ++i) {
    uint32_t a, b;
    std::memcpy(&a, w.data<float>() + i, 4);
    std::memcpy(&b, g.data<float>() + i, 4);
    if (a != b) {
      char buf[160];
      std::snprintf(buf, sizeof(buf), ": element %lld is %.9g (0x%08x), expected %.9g (0x%08x)",
                    (long long)i, double(g.data<float>()[i]), b, double(w.data<float>()[i]), a);
      fail(label + buf);
      return;
    }
  }
}

// Odd sizes: one element, empty, a chunk less one, a chunk plus one, several chunks.
std::vector<Shape> test_shapes() {
  return {{1}, {7}, {3, 5}, {0, 4}, {2, 3, 11}, {257, 255}, {kChunkNumel + 1}, {13},
          {3, kChunkNumel / 2 + 7}};
}

// ---- host-side checks (no GPU needed) -----------------------------------------------------

void check_chunks() {
  using cuda_kernels::optim::split_into_chunks;
  const std::vector<TensorChunk> want = {{0, 0, 4}, {0, 4, 4}, {0, 8, 2}, {2, 0, 4}, {3, 0, 1}};
  if (split_into_chunks({10, 0, 4, 1}, 4) != want) fail("chunks of {10, 0, 4, 1} by 4");
  if (!split_into_chunks({}, 4).empty() || !split_into_chunks({0, 0}).empty())
    fail("chunks of empty tensors");
  const std::vector<TensorChunk> big = split_into_chunks({5, 2 * kChunkNumel + 3});
  const std::vector<TensorChunk> big_want = {
      {0, 0, 5}, {1, 0, kChunkNumel}, {1, kChunkNumel, kChunkNumel}, {1, 2 * kChunkNumel, 3}};
  if (big != big_want) fail("chunks at the default size");
  expect_error("chunk size 0", [] { split_into_chunks({3}, 0); }, {"chunk size", "0"});
  expect_error("negative size", [] { split_into_chunks({3, -1}); }, {"tensor 1", "-1"});
}

void check_registration() {
  try {
    const optim::DeviceOptimizer& k = optim::device_optimizer(DeviceType::CUDA, "the test");
    if (k.adamw != &cuda_kernels::optim::adamw_step_cuda ||
        k.sum_of_squares != &cuda_kernels::optim::sum_of_squares_cuda ||
        k.all_finite != &cuda_kernels::optim::all_finite_cuda)
      fail("the CUDA optimizer kernels registered are not kernels/cuda/optim's");
  } catch (const std::exception& e) {
    fail(std::string("no CUDA optimizer kernels registered: ") + e.what());
  }
}

// Errors found before any device memory is touched, so they hold with or without a GPU.
void check_host_errors() {
  using namespace cuda_kernels::optim;
  const AdamWCoefficients c;
  const Tensor a = Tensor::zeros({3}), b = Tensor::zeros({2, 2}, DType::BF16);
  expect_error("list lengths", [&] { adamw_step_cuda({a, a}, {a}, {a, a}, {a, a}, c); },
               {"adamw_step_cuda", "2 params, 1 grads, 2 m, 2 v"});
  expect_error("CPU parameter", [&] { adamw_step_cuda({a}, {a}, {a}, {a}, c); },
               {"adamw_step_cuda: params[0] is f32[3] cpu", "CUDA device"});
  expect_error("undefined parameter", [&] { adamw_step_cuda({Tensor()}, {a}, {a}, {a}, c); },
               {"params[0] is undefined"});
  expect_error("CPU tensor summed", [&] { sum_of_squares_cuda({b}); },
               {"sum_of_squares_cuda: tensors[0] is bf16[2, 2] cpu", "f32, bf16 or f16"});
  const Tensor meta = Tensor::empty({5}, DType::F32, Device::meta());
  expect_error("Meta tensor checked", [&] { all_finite_cuda({meta}); },
               {"all_finite_cuda: tensors[0] is f32[5] meta"});
  // Empty lists are no work at all.
  try {
    adamw_step_cuda({}, {}, {}, {}, c);
    if (sum_of_squares_cuda({}) != 0.0) fail("sum of squares of no tensors is not 0");
    if (!all_finite_cuda({})) fail("no tensors are not all finite");
  } catch (const std::exception& e) {
    fail(std::string("empty lists: ") + e.what());
  }
}

// ---- device checks ------------------------------------------------------------------------

// Gradient dtype of parameter i: `dtype`, or cycling f32, bf16, f16 for a mixed list (F64).
DType grad_dtype(DType dtype, size_t i) {
  if (dtype != DType::F64) return dtype;
  const DType cycle[] = {DType::F32, DType::BF16, DType::F16};
  return cycle[i % 3];
}

// merak::optim::AdamW on CUDA parameters (the registered multi-tensor kernel, one launch for
// the parameters that decay and one for those that do not) against the CPU AdamW, bit for bit,
// after every step. Parameter 1 has no gradient at the first step.
void check_adamw(DType dtype, const char* label) {
  const std::vector<Shape> shapes = test_shapes();
  std::vector<std::pair<std::string, Tensor>> host, device;
  for (size_t i = 0; i < shapes.size(); ++i) {
    const Tensor init = rand_grad(shapes[i], 100 + i);
    host.push_back({"p" + std::to_string(i), init.clone()});
    device.push_back({"p" + std::to_string(i), init.to(Device::cuda())});
  }
  optim::AdamWOptions options;
  options.lr = 1e-3;
  optim::AdamW cpu(optim::make_params(host), options), gpu(optim::make_params(device), options);
  const double lrs[] = {1e-3, 3e-3, 2e-4, 1e-2, 5e-4};
  const float scales[] = {1.f, 0.37f, 1.f, 0.8123f, 1.f};
  for (int step = 0; step < 5; ++step) {
    for (size_t i = 0; i < shapes.size(); ++i) {
      if (step == 0 && i == 1) continue;
      const Tensor g = convert(rand_grad(shapes[i], 1000 * step + i), grad_dtype(dtype, i));
      cpu.params()[i].value.set_grad(convert(g, DType::F32));
      gpu.params()[i].value.set_grad(g.to(Device::cuda()));
    }
    cpu.step(lrs[step], scales[step]);
    gpu.step(lrs[step], scales[step]);
    for (size_t i = 0; i < shapes.size(); ++i) {
      const std::string at = std::string("AdamW ") + label + " step " + std::to_string(step + 1) +
                             " p" + std::to_string(i);
      same_bits(at + " param", cpu.params()[i].value, gpu.params()[i].value);
      same_bits(at + " m", cpu.exp_avg()[i], gpu.exp_avg()[i]);
      same_bits(at + " v", cpu.exp_avg_sq()[i], gpu.exp_avg_sq()[i]);
    }
  }
}

// The multi-tensor sum against the CPU's, per dtype, through merak::optim and directly.
void check_sum_of_squares(DType dtype, const char* label) {
  const std::vector<Shape> shapes = test_shapes();
  std::vector<Tensor> on_gpu;
  std::vector<optim::Param> cpu_params, gpu_params;
  double want = 0;
  for (size_t i = 0; i < shapes.size(); ++i) {
    const Tensor g = convert(rand_grad(shapes[i], 7 + i), grad_dtype(dtype, i));
    want += optim::sum_of_squares(convert(g, DType::F32));
    on_gpu.push_back(g.to(Device::cuda()));
    cpu_params.push_back({"p" + std::to_string(i), Tensor::zeros(shapes[i]), true});
    cpu_params.back().value.set_grad(convert(g, DType::F32));
    gpu_params.push_back({"p" + std::to_string(i), Tensor::zeros(shapes[i]), true});
    gpu_params.back().value.set_grad(on_gpu.back());
  }
  const double got = cuda_kernels::optim::sum_of_squares_cuda(on_gpu);
  const double tol = 1e-12;  // both in f64 over exact squares; only the order differs
  if (!(std::fabs(got - want) <= tol * want))
    fail(std::string("sum of squares ") + label + ": " + std::to_string(got) + ", expected " +
         std::to_string(want));
  const double again = cuda_kernels::optim::sum_of_squares_cuda(on_gpu);
  if (std::memcmp(&got, &again, sizeof(double)) != 0)
    fail(std::string("sum of squares ") + label + ": differs between two runs");
  const double norm_cpu = optim::grad_norm(cpu_params), norm_gpu = optim::grad_norm(gpu_params);
  if (!(std::fabs(norm_gpu - norm_cpu) <= tol * norm_cpu))
    fail(std::string("grad_norm ") + label + ": " + std::to_string(norm_gpu) + " on CUDA, " +
         std::to_string(norm_cpu) + " on the CPU");
  // One tensor through optim::sum_of_squares, and a transposed view (read through a copy).
  const Tensor& m = on_gpu[2];
  const double one_cpu = optim::sum_of_squares(convert(m, DType::F32));
  if (!(std::fabs(optim::sum_of_squares(m) - one_cpu) <= tol * one_cpu))
    fail(std::string("optim::sum_of_squares of one CUDA tensor ") + label);
  if (!(std::fabs(cuda_kernels::optim::sum_of_squares_cuda({m.transpose(0, 1)}) - one_cpu) <=
        tol * one_cpu))
    fail(std::string("sum of squares of a transposed view ") + label);
  if (cuda_kernels::optim::sum_of_squares_cuda({on_gpu[3]}) != 0.0)
    fail(std::string("sum of squares of an empty tensor ") + label);
}

// inf, -inf and NaN planted one at a time, in a later chunk of a large tensor and in a small
// one; the largest finite f16 is finite.
void check_all_finite(DType dtype, const char* label) {
  using cuda_kernels::optim::all_finite_cuda;
  const std::vector<Shape> shapes = test_shapes();
  std::vector<Tensor> host;
  for (size_t i = 0; i < shapes.size(); ++i)
    host.push_back(convert(rand_grad(shapes[i], 31 + i), grad_dtype(dtype, i)));
  auto upload = [](const std::vector<Tensor>& ts) {
    std::vector<Tensor> out;
    for (const Tensor& t : ts) out.push_back(t.to(Device::cuda()));
    return out;
  };
  if (!all_finite_cuda(upload(host))) fail(std::string("all finite ") + label + ": clean list");
  const float inf = std::numeric_limits<float>::infinity();
  struct Plant {
    size_t tensor;
    int64_t at;
    float value;
  };
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const Plant plants[] = {{8, kChunkNumel + 5, inf}, {1, 6, -inf}, {6, kChunkNumel, nan},
                          {0, 0, nan}};
  for (const Plant& p : plants) {
    std::vector<Tensor> bad = host;
    Tensor f = convert(bad[p.tensor], DType::F32);
    f.data<float>()[p.at] = p.value;
    bad[p.tensor] = convert(f, bad[p.tensor].dtype());
    if (all_finite_cuda(upload(bad)))
      fail(std::string("all finite ") + label + ": missed " + std::to_string(p.value) +
           " in tensor " + std::to_string(p.tensor) + " at " + std::to_string(p.at));
  }
  const Tensor f16_max = Tensor::full({3}, 65504.0, DType::F16);
  if (dtype == DType::F16 && !all_finite_cuda({f16_max.to(Device::cuda())}))
    fail("all finite f16: 65504 taken for inf");
}

// Errors that need CUDA tensors: each names the list and index at fault, and nothing is updated.
void check_device_errors() {
  using namespace cuda_kernels::optim;
  const Device gpu = Device::cuda();
  AdamWCoefficients c;
  c.neg_step_size = -0.1f;
  const std::vector<Shape> shapes = {{4}, {3, 5}, {3, 5}};
  std::vector<Tensor> p, g, m, v;
  for (const Shape& s : shapes) {
    p.push_back(Tensor::ones(s, DType::F32, gpu));
    g.push_back(Tensor::ones(s, DType::F32, gpu));
    m.push_back(Tensor::zeros(s, DType::F32, gpu));
    v.push_back(Tensor::zeros(s, DType::F32, gpu));
  }
  auto with = [](std::vector<Tensor> list, size_t i, const Tensor& t) {
    list[i] = t;
    return list;
  };
  const Tensor wrong_shape = Tensor::ones({5, 3}, DType::F32, gpu);
  const Tensor wrong_dtype = Tensor::ones({3, 5}, DType::I32, gpu);
  const Tensor f16_moment = Tensor::zeros({4}, DType::F16, gpu);
  const Tensor on_cpu = Tensor::zeros({3, 5});
  const Tensor strided = Tensor::ones({5, 3}, DType::F32, gpu).transpose(0, 1);
  expect_error("grad shape", [&] { adamw_step_cuda(p, with(g, 2, wrong_shape), m, v, c); },
               {"adamw_step_cuda: grads[2] is f32[5, 3] cuda:0", "params[2]'s shape [3, 5]"});
  expect_error("grad dtype", [&] { adamw_step_cuda(p, with(g, 1, wrong_dtype), m, v, c); },
               {"grads[1] is i32[3, 5] cuda:0", "f32, bf16 or f16"});
  expect_error("moment dtype", [&] { adamw_step_cuda(p, g, with(m, 0, f16_moment), v, c); },
               {"m[0] is f16[4] cuda:0", "contiguous f32 tensor"});
  expect_error("moment device", [&] { adamw_step_cuda(p, g, m, with(v, 1, on_cpu), c); },
               {"v[1] is f32[3, 5] cpu", "on cuda:0"});
  expect_error("strided parameter", [&] { adamw_step_cuda(with(p, 1, strided), g, m, v, c); },
               {"params[1] is f32[3, 5] cuda:0 (not contiguous)"});
  expect_error("mixed devices summed", [&] { sum_of_squares_cuda({g[0], Tensor::ones({2})}); },
               {"sum_of_squares_cuda: tensors[1] is f32[2] cpu", "on cuda:0"});
  const Tensor integers = Tensor::zeros({2}, DType::I64, gpu);
  expect_error("integer checked", [&] { all_finite_cuda({g[0], integers}); },
               {"all_finite_cuda: tensors[1] is i64[2] cuda:0"});
  for (size_t i = 0; i < p.size(); ++i)
    same_bits("parameter " + std::to_string(i) + " after refused calls",
              Tensor::ones(shapes[i]), p[i]);
  // And the same lists, valid, do update.
  adamw_step_cuda(p, g, m, v, c);
  if (p[0].to(Device::cpu()).data<float>()[0] == 1.f)
    fail("a valid call left params[0] as it was");
}

int run() {
  check_chunks();
  check_registration();
  check_host_errors();

  std::string why;
  if (cuda::device_count(&why) == 0) {
    std::printf("optim_kernels_test: SKIPPED (no GPU: %s): multi-tensor AdamW, sum of squares and "
                "the non-finite check against the CPU\n", why.c_str());
  } else {
    const std::pair<DType, const char*> dtypes[] = {
        {DType::F32, "f32"}, {DType::BF16, "bf16"}, {DType::F16, "f16"}, {DType::F64, "mixed"}};
    for (const auto& [dtype, label] : dtypes) {
      try {
        check_adamw(dtype, label);
        check_sum_of_squares(dtype, label);
        check_all_finite(dtype, label);
      } catch (const std::exception& e) {
        fail(std::string(label) + ": " + e.what());
      }
    }
    try {
      check_device_errors();
    } catch (const std::exception& e) {
      fail(std::string("device errors: ") + e.what());
    }
  }
  std::printf("optim_kernels_test: %s (%d failures)\n", failures() ? "FAILED" : "passed",
              failures());
  return failures() ? 1 : 0;
}

}  // namespace
}  // namespace merak

int main() { return merak::run(); }
