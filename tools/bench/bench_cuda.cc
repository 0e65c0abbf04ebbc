// GPU throughput through the op registry's CUDA kernels, against the device's dense bf16
// tensor-core peak (SMs x clock x FLOP per SM per clock of its architecture): bf16 matmul
// (cuBLASLt) at 4096^3 and at GPT-2 124M's linear shapes for batch 16 x sequence 1024; then
// attention (sdpa and sdpa_grad) in bf16 at batch 4, 16 heads, sequence 2048, head dim 64 and
// 128, causal and not, counting the products' FLOPs as flash attention's papers do (forward
// Q K^T and P V: 4 T^2 D a head, halved when causal; backward 2.5 times that).
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
#include "merak/ops/dispatch.h"
#include "merak/ops/functional.h"
#include "tools/common/cli.h"

namespace {

using namespace merak;

Tensor random_bf16(const Shape& shape, uint64_t seed) {
  Tensor t = Tensor::empty(shape);
  fill_normal(t, seed, 0.0, 1.0);
  return ops::cast(t, DType::BF16).to(Device::cuda());
}

// Median seconds of `iters` calls of fn (after warm-up), synchronised around each.
template <typename Fn>
double median_seconds(Fn&& fn, int iters) {
  for (int i = 0; i < 3; ++i) fn();
  cuda::synchronize(0);
  std::vector<double> times;
  for (int i = 0; i < iters; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    cuda::synchronize(0);
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// Median seconds of `iters` products y = x W^T.
double time_linear(int64_t m, int64_t n, int64_t k, int iters) {
  const Tensor x = random_bf16({m, k}, 1), w = random_bf16({n, k}, 2);
  return median_seconds([&] { ops::linear(x, w); }, iters);
}

// "  63.2%" of the peak, or "-" when the device's peak is not known (0).
std::string of_peak(double tflops, double peak) {
  char buf[16];
  if (peak > 0) std::snprintf(buf, sizeof buf, "%7.1f%%", 100 * tflops / peak);
  else std::snprintf(buf, sizeof buf, "%8s", "-");
  return buf;
}

// Attention forward (sdpa) and backward (sdpa_grad, from the forward's out and lse) in bf16.
void bench_attention(int iters, double peak) {
  std::printf("\n%-28s %5s %5s %6s %4s %7s %10s %9s %8s\n", "attention (bf16)", "B", "H", "T",
              "D", "causal", "ms", "TFLOP/s", "of peak");
  const int64_t B = 4, H = 16, T = 2048;
  for (int64_t D : {64, 128}) {
    for (bool causal : {false, true}) {
      const Tensor q = random_bf16({B, H, T, D}, 3), k = random_bf16({B, H, T, D}, 4),
                   v = random_bf16({B, H, T, D}, 5), dout = random_bf16({B, H, T, D}, 6);
      const ops::Attrs attrs = ops::Attrs().set("causal", causal).set("scale", 0.0);
      std::vector<Tensor> fwd;
      const double f_sec =
          median_seconds([&] { fwd = ops::call("sdpa", {q, k, v, Tensor()}, attrs); }, iters);
      const double b_sec = median_seconds(
          [&] { ops::call("sdpa_grad", {dout, q, k, v, Tensor(), fwd[0], fwd[1]}, attrs); },
          iters);
      const double f_flops =
          4.0 * double(B * H) * double(T) * double(T) * double(D) * (causal ? 0.5 : 1.0);
      auto report = [&](const char* pass, double sec, double flops) {
        const double tflops = flops / sec / 1e12;
        std::printf("%-28s %5lld %5lld %6lld %4lld %7s %10.3f %9.1f %s\n", pass,
                    (long long)B, (long long)H, (long long)T, (long long)D, causal ? "yes" : "no",
                    1e3 * sec, tflops, of_peak(tflops, peak).c_str());
      };
      report("sdpa forward", f_sec, f_flops);
      report("sdpa backward", b_sec, 2.5 * f_flops);
    }
  }
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
  const double peak = cuda::dense_peak_tflops(0, &why);
  if (peak > 0)
    std::printf("# %s: bf16 dense tensor-core peak %.0f TFLOP/s (SMs x maximum clock x "
                "FLOP/SM/clock: an upper bound)\n", prop.name, peak);
  else
    std::printf("# %s: %s; no \"of peak\" figures\n", prop.name, why.c_str());
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
    std::printf("%-28s %8lld %8lld %8lld %10.3f %9.1f %s\n", s.name, (long long)s.m,
                (long long)s.n, (long long)s.k, 1e3 * sec, tflops, of_peak(tflops, peak).c_str());
  }
  bench_attention(iters, peak);
  return 0;
}
