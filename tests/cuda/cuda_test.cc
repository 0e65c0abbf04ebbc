#include <catch2/catch.hpp>

#include <cstdio>
#include <string>
#include <vector>

#include "merak/core/tensor.h"
#include "merak/cuda/caching_allocator.h"
#include "merak/cuda/runtime.h"
#include "merak/ops/registry.h"

using namespace merak;

namespace {

// Whether a GPU is here; when not, says once that the device checks are skipped and why (a
// skipped check is reported, never counted as passed).
bool have_gpu(const char* what) {
  std::string why;
  if (cuda::device_count(&why) > 0) return true;
  std::printf("cuda_test: SKIPPED (no GPU: %s): %s\n", why.c_str(), what);
  return false;
}

}  // namespace

TEST_CASE("size classes: 512 B steps below 1 MiB, 2 MiB steps above", "[cuda]") {
  using cuda::CachingAllocator;
  CHECK(CachingAllocator::size_class(1) == 512);
  CHECK(CachingAllocator::size_class(512) == 512);
  CHECK(CachingAllocator::size_class(513) == 1024);
  CHECK(CachingAllocator::size_class((1 << 20) - 1) == (1 << 20));
  CHECK(CachingAllocator::size_class(1 << 20) == (2 << 20));
  CHECK(CachingAllocator::size_class((2 << 20) + 1) == (4 << 20));
}

TEST_CASE("without a GPU: discovery says why, and a CUDA tensor is a clear error", "[cuda]") {
  std::string why;
  if (cuda::device_count(&why) > 0) {
    std::printf("cuda_test: SKIPPED (a GPU is present): the no-GPU error path\n");
    return;
  }
  CHECK(why.find("cudaGetDeviceCount") != std::string::npos);
  CHECK_THROWS_WITH(Tensor::empty({4}, DType::F32, Device::cuda()),
                    Catch::Contains("cudaMalloc") && Catch::Contains("cudaError"));
  // CPU work is untouched by the backend being linked in.
  CHECK(Tensor::full({3}, 2.0).to_vector<float>() == std::vector<float>{2, 2, 2});
}

TEST_CASE("one caching allocator per device, allocating on its own GPU", "[cuda]") {
  // Registration and lookup touch no CUDA API: checked everywhere.
  CHECK(allocator_for(Device::cuda(0)) == &cuda::caching_allocator(0));
  CHECK(allocator_for(Device::cuda(1)) == &cuda::caching_allocator(1));
  CHECK(cuda::caching_allocator(1).device() == 1);
  std::string why;
  if (cuda::device_count(&why) < 2) {
    std::printf("cuda_test: SKIPPED (fewer than 2 GPUs: %s): a tensor for cuda:1 while cuda:0 "
                "is current\n", why.empty() ? "1 GPU" : why.c_str());
    return;
  }
  cuda::check(cudaSetDevice(0), "cudaSetDevice");
  const int64_t live1 = cuda::caching_allocator(1).stats().live_bytes;
  const Tensor t = Tensor::empty({1 << 10}, DType::F32, Device::cuda(1));
  cudaPointerAttributes where{};
  cuda::check(cudaPointerGetAttributes(&where, t.device_data()), "cudaPointerGetAttributes");
  CHECK(where.device == 1);
  int current = -1;
  cuda::check(cudaGetDevice(&current), "cudaGetDevice");
  CHECK(current == 0);  // the caller's device is left as it was
  CHECK(cuda::caching_allocator(1).stats().live_bytes == live1 + 4096);
}

TEST_CASE("with a GPU: transfers, fills, strided copies, block reuse", "[cuda]") {
  if (!have_gpu("transfers, fills, strided copies, block reuse")) return;
  const Tensor host = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor dev = host.to(Device::cuda());
  CHECK(dev.device().is_cuda());
  CHECK(dev.to_vector<float>() == host.to_vector<float>());
  CHECK(dev.to(Device::cpu()).to_vector<float>() == std::vector<float>{1, 2, 3, 4, 5, 6});
  // A transposed view made contiguous on the device.
  CHECK(dev.transpose(0, 1).contiguous().to_vector<float>() ==
        std::vector<float>{1, 4, 2, 5, 3, 6});
  CHECK(Tensor::full({5}, 1.5, DType::F64, Device::cuda()).to_vector<double>() ==
        std::vector<double>{1.5, 1.5, 1.5, 1.5, 1.5});
  CHECK(Tensor::zeros({3}, DType::I64, Device::cuda()).to_vector<int64_t>() ==
        std::vector<int64_t>{0, 0, 0});
  CHECK(Tensor::full({1}, 7.0, DType::F32, Device::cuda()).item() == 7.0);
  // A freed block serves the next request of its size class without a new cudaMalloc.
  const int64_t reserved = [] {
    Tensor t = Tensor::empty({1 << 20}, DType::F32, Device::cuda());
    return cuda::caching_allocator(0).stats().reserved_bytes;
  }();
  { Tensor again = Tensor::empty({1 << 20}, DType::F32, Device::cuda()); }
  CHECK(cuda::caching_allocator(0).stats().reserved_bytes == reserved);
}

TEST_CASE("CUDA kernel coverage of the registered ops", "[cuda]") {
  // Registration needs no GPU: this is checked everywhere. View ops need no kernel.
  const ops::Registry& registry = ops::Registry::get();
  std::vector<std::string> missing, tp;
  int with_kernel = 0, views = 0;
  for (const std::string& name : registry.names()) {
    const bool is_tp = name.rfind("tp_", 0) == 0;
    if (registry.at(name).view) {
      ++views;
      if (is_tp) tp.push_back(name + " (view)");
    } else if (registry.kernel(name, DeviceType::CUDA)) {
      ++with_kernel;
      if (is_tp) tp.push_back(name);
    } else {
      missing.push_back(name);
    }
  }
  auto join = [](const std::vector<std::string>& v) {
    std::string s;
    for (const std::string& x : v) s += (s.empty() ? "" : ", ") + x;
    return s;
  };
  std::printf("cuda_test: CUDA kernels for %d ops, %d view ops, %zu ops without one%s%s\n",
              with_kernel, views, missing.size(), missing.empty() ? "" : ": ",
              join(missing).c_str());
  std::printf("cuda_test: tensor-parallel ops covered: %s\n", join(tp).c_str());
  // Every op has one, the tensor-parallel ops (kernels/cuda/tp) included.
  CHECK(missing.empty());
  CHECK(tp.size() == 7);  // tp_all_reduce, tp_copy, tp_all_gather, the embedding and loss pairs
}
