// GPU matmul throughput through the op registry's CUDA kernels (cuBLASLt): bf16 TFLOP/s at
// 4096^3 and at GPT-2 124M's linear shapes for batch 16 x sequence 1024, against the device's
// dense bf16 tensor-core peak (SMs x clock x FLOP per SM per clock of its architecture).
//
//   bench_cuda [--iters N]
// Exits 1 on a machine without a GPU, saying why.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "merak/core/philox.h"
#include "merak/cuda/runtime.h"
#include "merak/ops/functional.h"
#include "tools/common/cli.h"

namespace {

using namespace merak;

Tensor random_bf16(const Shape& shape, uint64_t seed) {
  Tensor t = Tensor::empty(shape);
  fill_normal(t, seed, 0.0, 1.0);
  return ops::cast(t, DType::BF16).to(Device::cuda());
}

// Median seconds of `iters` products y = x W^T (after warm-up), synchronised around each.
double time_linear(int64_t m, int64_t n, int64_t k, int iters) {
  const Tensor x = random_bf16({m, k}, 1), w = random_bf16({n, k}, 2);
  for (int i = 0; i < 3; ++i) ops::linear(x, w);
  cuda::synchronize(0);
  std::vector<double> times;
  for (int i = 0; i < iters; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    const Tensor y = ops::linear(x, w);
    cuda::synchronize(0);
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const cli::Args args =
      cli::parse(argc, argv, 1, {"bench_cuda", "usage: bench_cuda [--iters N]", {"--iters"}, {}});
  const int iters = int(cli::positive("bench_cuda", args.one("--iters", "20"), "--iters"));
  std::string why;
  if (cuda::device_count(&why) == 0) cli::fail("bench_cuda", 1, "no GPU (" + why + ")");
  cudaDeviceProp prop{};
  cuda::check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  const double peak = cuda::dense_peak_tflops(0);
  std::printf("# %s: bf16 dense tensor-core peak %.0f TFLOP/s (SMs x clock x FLOP/SM/clock)\n",
              prop.name, peak);
  std::printf("%-28s %8s %8s %8s %10s %9s %8s\n", "product y = x W^T (bf16)", "M", "N", "K",
              "ms", "TFLOP/s", "of peak");
  struct Shape3 {
    const char* name;
    int64_t m, n, k;
  };
  const int64_t tokens = 16 * 1024;  // GPT-2 124M: batch 16 x sequence 1024
  const std::vector<Shape3> shapes = {{"square 4096^3", 4096, 4096, 4096},
                                      {"GPT-2 attn qkv", tokens, 2304, 768},
                                      {"GPT-2 attn proj", tokens, 768, 768},
                                      {"GPT-2 mlp fc", tokens, 3072, 768},
                                      {"GPT-2 mlp proj", tokens, 768, 3072},
                                      {"GPT-2 lm head (50304)", tokens, 50304, 768}};
  for (const Shape3& s : shapes) {
    const double sec = time_linear(s.m, s.n, s.k, iters);
    const double tflops = 2.0 * double(s.m) * double(s.n) * double(s.k) / sec / 1e12;
    std::printf("%-28s %8lld %8lld %8lld %10.3f %9.1f %7.1f%%\n", s.name, (long long)s.m,
                (long long)s.n, (long long)s.k, 1e3 * sec, tflops, 100 * tflops / peak);
  }
  return 0;
}
