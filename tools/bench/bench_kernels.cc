// Kernel benchmark: f32 matmul GFLOP/s (a linear layer's products at GPT-2 124M's shapes, or with
// --shape small the L4 C256 V8192 model's, 1 and 2 threads, against a per-core peak) and the GB/s
// of memory-bound ops (layer_norm, softmax, gelu) next to a plain copy of the same tensor, and the
// cost of an empty parallel region.
// Every op goes through merak::ops, so dispatch and output allocation are part of the timing.
//
//   bench_kernels [--threads N] [--runs N] [--peak GFLOPS_PER_CORE] [--shape 124m|small]
// Without --peak the per-core peak is measured (an FMA loop from registers) at start-up.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "merak/core/parallel.h"
#include "merak/core/tensor.h"
#include "merak/ops/functional.h"
#include "merak/core/fma_peak.h"

namespace {

using merak::Tensor;

struct Options {
  int threads = int(std::max(1u, std::thread::hardware_concurrency()));  // memory-bound ops
  int runs = 7;                                                            // timed runs (median)
  double peak = 0;  // GFLOP/s per core for the fraction column; 0 = measure it
  std::string shape = "124m";  // the matmuls' layer sizes: GPT-2 124M's or "small" (L4 C256 V8192)
};

[[noreturn]] void usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s [--threads N] [--runs N >= 5] [--peak GFLOPS_PER_CORE] "
               "[--shape 124m|small]\n",
               argv0);
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 >= argc) usage(argv[0]);
    if (arg == "--threads") o.threads = std::atoi(argv[++i]);
    else if (arg == "--runs") o.runs = std::atoi(argv[++i]);
    else if (arg == "--peak") o.peak = std::atof(argv[++i]);
    else if (arg == "--shape") o.shape = argv[++i];
    else usage(argv[0]);
  }
  if (o.threads < 1 || o.runs < 5 || o.peak < 0 || (o.shape != "124m" && o.shape != "small"))
    usage(argv[0]);
  return o;
}

// Deterministic values in [-1, 1): the numbers don't matter, only that they are ordinary.
Tensor random_f32(const merak::Shape& shape, uint32_t seed) {
  Tensor t = Tensor::empty(shape, merak::DType::F32);
  float* p = t.data<float>();
  uint32_t s = seed * 2654435761u + 1;
  for (int64_t i = 0; i < t.numel(); ++i) {
    s = s * 1664525u + 1013904223u;
    p[i] = float(s >> 8) / float(1 << 23) - 1.0f;
  }
  return t;
}

// Median seconds of one call of `fn`. Each timed run repeats it enough times to last ~20 ms, so
// microsecond-scale ops are not dominated by the clock; warm-up runs first.
double median_seconds(const std::function<void()>& fn, int runs) {
  using clock = std::chrono::steady_clock;
  auto time = [&](int reps) {
    const auto t0 = clock::now();
    for (int r = 0; r < reps; ++r) fn();
    return std::chrono::duration<double>(clock::now() - t0).count();
  };
  time(1);
  const double once = std::max(1e-7, time(1));
  const int reps = std::max(1, int(0.02 / once));
  time(reps);
  std::vector<double> t;
  for (int r = 0; r < runs; ++r) t.push_back(time(reps) / reps);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// A linear layer's three products at GPT-2 124M's shapes or the small benchmark model's (L4 C256
// V8192; batch 4 x 64 = 256 tokens for both): the forward x W^T, the input's gradient dY W and
// the weight's gradient dY^T x, each its own transposes, as training runs them; then a square
// product.
void bench_matmul(const Options& o) {
  struct Layer { const char* name; int64_t tokens, out, in; };
  const int64_t c = o.shape == "small" ? 256 : 768;
  const int64_t vocab = o.shape == "small" ? 8192 : 50257;
  const std::vector<Layer> layers = {{"attn out", 256, c, c}, {"qkv", 256, 3 * c, c},
                                     {"mlp up", 256, 4 * c, c}, {"mlp down", 256, c, 4 * c},
                                     {"lm head", 256, vocab, c}};
  std::printf("f32 matmul (median of %d runs; peak %.0f GFLOP/s per core)\n", o.runs, o.peak);
  std::printf("  %-9s %-7s %6s %6s %6s  %7s  %9s  %7s\n", "layer", "product", "M", "N", "K",
              "threads", "GFLOP/s", "of peak");
  auto row = [&](const char* layer, const char* form, const Tensor& a, const Tensor& b, bool ta,
                 bool tb, int threads) {
    const int64_t m = ta ? a.size(1) : a.size(0), k = ta ? a.size(0) : a.size(1);
    const int64_t n = tb ? b.size(0) : b.size(1);
    const double s = median_seconds([&] { merak::ops::matmul(a, b, ta, tb); }, o.runs);
    const double gflops = 2.0 * double(m) * double(n) * double(k) / s / 1e9;
    std::printf("  %-9s %-7s %6lld %6lld %6lld  %7d  %9.1f  %6.0f%%\n", layer, form,
                (long long)m, (long long)n, (long long)k, threads, gflops,
                100 * gflops / (o.peak * threads));
  };
  for (int threads : {1, 2}) {
    merak::set_num_threads(threads);
    for (const Layer& l : layers) {
      const Tensor x = random_f32({l.tokens, l.in}, 1), w = random_f32({l.out, l.in}, 2);
      const Tensor dy = random_f32({l.tokens, l.out}, 3);
      row(l.name, "x W^T", x, w, false, true, threads);
      row(l.name, "dY W", dy, w, false, false, threads);
      row(l.name, "dY^T x", dy, x, true, false, threads);
    }
    const Tensor a = random_f32({1024, 1024}, 4), b = random_f32({1024, 1024}, 5);
    row("square", "A B", a, b, false, false, threads);
  }
}

// What splitting work costs by itself: an empty parallel region on the pool's threads (the
// handoff to the workers and the wait for them), which every split op pays once.
void bench_parallel_region(const Options& o) {
  merak::set_num_threads(o.threads);
  const double s = median_seconds(
      [&] { merak::parallel_for(0, o.threads, 1, [](int64_t, int64_t) {}); }, o.runs);
  std::printf("\nan empty parallel region on %d thread(s): %.2f us (median of %d runs)\n",
              o.threads, s * 1e6, o.runs);
}

void bench_memory_ops(const Options& o) {
  merak::set_num_threads(o.threads);
  const int64_t rows = 256, cols = 3072, n = rows * cols;
  const Tensor x = random_f32({rows, cols}, 3);
  const Tensor w = random_f32({cols}, 4), b = random_f32({cols}, 5);
  const Tensor dst = Tensor::empty({rows, cols});
  const double tensor_bytes = double(n) * 4;

  // The baseline: a memcpy into a preallocated buffer, split over the same threads.
  const float* src = x.data<float>();
  float* out = dst.data<float>();
  auto copy = [&] {
    merak::parallel_for(0, n, 1 << 16, [&](int64_t lo, int64_t hi) {
      std::memcpy(out + lo, src + lo, size_t(hi - lo) * 4);
    });
  };
  struct Row { const char* name; double bytes; std::function<void()> fn; };
  const std::vector<Row> table = {
      {"copy (memcpy)", 2 * tensor_bytes, copy},
      {"layer_norm", 2 * tensor_bytes + 2.0 * cols * 4,
       [&] { merak::ops::layer_norm(x, w, b, 1e-5); }},
      {"softmax (last dim)", 2 * tensor_bytes, [&] { merak::ops::softmax(x, -1); }},
      {"gelu (tanh)", 2 * tensor_bytes, [&] { merak::ops::gelu(x, "tanh"); }},
  };
  std::printf("\nmemory-bound ops on f32 [%lld, %lld], %d thread(s) (median of %d runs)\n",
              (long long)rows, (long long)cols, o.threads, o.runs);
  std::printf("  %-20s %9s  %8s  %8s\n", "op", "us", "GB/s", "vs copy");
  double copy_gbs = 0;
  for (const Row& r : table) {
    double s = 0;
    try {
      s = median_seconds(r.fn, o.runs);
    } catch (const std::exception& e) {  // an op whose kernel is not built yet: say so, go on
      std::printf("  %-20s not available: %s\n", r.name, e.what());
      continue;
    }
    const double gbs = r.bytes / s / 1e9;
    if (copy_gbs == 0) copy_gbs = gbs;
    std::printf("  %-20s %9.1f  %8.1f  %8.2f\n", r.name, s * 1e6, gbs, gbs / copy_gbs);
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options o = parse(argc, argv);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // rows appear as they are measured
  if (o.peak == 0) {
    o.peak = merak::bench::measured_fma_peak_gflops();
    std::printf("per-core f32 peak: %.1f GFLOP/s measured (%s loop, one thread)\n\n", o.peak,
                merak::bench::fma_peak_isa());
  } else {
    std::printf("per-core f32 peak: %.1f GFLOP/s (--peak)\n\n", o.peak);
  }
  bench_matmul(o);
  bench_parallel_region(o);
  bench_memory_ops(o);
  return 0;
}
