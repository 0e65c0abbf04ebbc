#include "tools/partition/calibrate.h"

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "merak/autograd/engine.h"
#include "merak/core/fma_peak.h"
#include "merak/core/parallel.h"
#include "merak/core/tensor.h"
#include "merak/graph/executor.h"
#include "merak/graph/tracer.h"
#include "merak/ops/functional.h"
#include "merak/partition/analysis.h"
#include "merak/partition/cost.h"
#include "merak/partition/gemm_fit.h"
#include "merak/partition/hardware.h"
#include "models/model.h"

namespace merak::tools {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Best of `reps` timings of fn().
template <typename Fn>
double best_time(int reps, Fn fn) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    fn();
    best = std::min(best, seconds_since(t0));
  }
  return best;
}

// Median seconds of one call of fn(), over `reps` calls after a warm-up call.
template <typename Fn>
double median_time(int reps, Fn fn) {
  fn();
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    fn();
    t.push_back(seconds_since(t0));
  }
  std::nth_element(t.begin(), t.begin() + reps / 2, t.end());
  return t[size_t(reps / 2)];
}

// ops::matmul on the shapes of small transformers' products (tokens x width x width), on one
// thread and on all of them: the samples the GEMM curve is fitted to. As in training, each
// product takes operands no earlier product left in cache (a ring of copies over 64 MiB), and
// the three forms a linear layer runs take turns: forward x W^T, dx = dy W, dW = dy^T x.
std::vector<partition::GemmSample> gemm_samples(int threads) {
  std::vector<partition::GemmSample> out;
  std::vector<int> counts = {1};
  if (threads > 1) counts.push_back(threads);
  struct Form {
    bool ta, tb;
  };
  const Form forms[] = {{false, true}, {false, false}, {true, false}};
  for (int t : counts) {
    set_num_threads(t);
    for (int64_t m : {64, 256, 1024, 4096})
      for (int64_t n : {64, 256, 1024})
        for (int64_t k : {64, 256, 1024}) {
          const int64_t bytes = 4 * (m * k + k * n);
          const int64_t copies = std::clamp<int64_t>((int64_t(64) << 20) / bytes, 1, 64);
          std::vector<Tensor> as, bs;
          for (int64_t c = 0; c < copies; ++c)
            for (const Form& f : forms) {
              as.push_back(Tensor::full(f.ta ? Shape{k, m} : Shape{m, k}, 0.5, DType::F32));
              bs.push_back(Tensor::full(f.tb ? Shape{n, k} : Shape{k, n}, 0.25, DType::F32));
            }
          // Repeat small products so each timing spans about a millisecond.
          const int64_t reps = std::max<int64_t>(3, (int64_t(1) << 27) / (m * n * k));
          const int runs = m * n * k > (int64_t(1) << 28) ? 3 : 7;
          const double sec = median_time(runs, [&] {
            for (int64_t r = 0; r < reps; ++r) {
              const size_t i = size_t(r) % as.size();
              const Form& f = forms[i % 3];
              ops::matmul(as[i], bs[i], f.ta, f.tb);
            }
          });
          out.push_back({1, double(m), double(n), double(k), t, sec / double(reps)});
        }
  }
  set_num_threads(threads);
  return out;
}

// Seconds one tiny op call costs (dispatch, output allocation, the thread pool's hand-off).
double op_overhead() {
  const Tensor a = Tensor::full({1}, 1.0, DType::F32);
  const int calls = 2000;
  return median_time(5, [&] {
           for (int i = 0; i < calls; ++i) ops::add(a, a);
         }) /
         calls;
}

// A narrow GPT (4 layers of `hidden`) traced for `batch` x `seq` tokens, and the median seconds
// of its forward and backward through graph::Executor on one thread, as each rank of a full node
// runs (one rank a thread). Its parameters' gradients accumulate from the second run on, as on
// every micro-batch of a step but the first.
struct Probe {
  graph::Model traced;
  double measured = 0;
};

Probe run_probe(int64_t hidden, int64_t batch, int64_t seq, int runs) {
  models::ModelOptions o;
  o.layers = 4, o.hidden = hidden, o.heads = 2, o.max_seq = seq, o.vocab = 16;
  auto model = models::make_model(o);
  Probe p{graph::trace_model(*model, batch, seq, /*seed=*/1), 0};
  graph::Executor exec(p.traced, /*seed=*/1);
  const std::map<std::string, Tensor> inputs = {
      {"tokens", Tensor::full({batch, seq}, 1.0, DType::I64)},
      {"targets", Tensor::full({batch, seq}, 2.0, DType::I64)}};
  const int threads = num_threads();
  set_num_threads(1);
  p.measured = median_time(runs, [&] {
    const std::vector<Tensor> out = exec.run(inputs);
    autograd::backward(out.at(0));
  });
  set_num_threads(threads);
  return p;
}

// What the runtime adds to the GEMMs, measured in place: kernel_overhead, the seconds each
// kernel the cost model counts costs beyond its work (the op call, the output's allocation,
// the executor's values, autograd's tape), and memory_efficiency, the share of the copy
// bandwidth that the other kernels reach on the sizes a small model's ranks run. Two probes:
// width 8 over 4 tokens, whose time is nearly all kernel calls, and width 64 over 512 tokens
// (rows as short as a small model's, 128 KiB a value), where the bytes that kernels other than
// GEMMs move weigh most. The cost model of a one-thread rank (`hw` with everything but these
// two) is set equal to each, the first solved for the overhead, the second for the efficiency,
// in turn until both settle.
struct RuntimeFit {
  double kernel_overhead = 0;
  double memory_efficiency = 1;
  double small_seconds = 0, large_seconds = 0;  // the probes' measured times
};

RuntimeFit fit_runtime(const partition::Hardware& hw, int threads) {
  const Probe small = run_probe(8, 1, 4, 51);
  const Probe large = run_probe(64, 8, 64, 15);
  const partition::GraphFacts small_facts = partition::analyze(small.traced.graph());
  const partition::GraphFacts large_facts = partition::analyze(large.traced.graph());
  // One rank of `threads` on the node: one thread's share of the cores and bandwidth.
  const partition::Placement one_thread{threads, 1, 1};
  auto modelled = [&](const partition::GraphFacts& facts, double overhead, double efficiency) {
    partition::Hardware h = hw;
    h.kernel_overhead = overhead;
    h.memory_efficiency = efficiency;
    const partition::CostModel cost(h, partition::Precision::F32, one_thread);
    double t = 0;
    for (size_t n = 0; n < facts.nodes.size(); ++n) {
      const partition::NodeTime nt = cost.node_time(facts, int(n));
      t += nt.fwd + nt.bwd + nt.accumulate;
    }
    return t;
  };
  RuntimeFit fit;
  fit.small_seconds = small.measured;
  fit.large_seconds = large.measured;
  for (int round = 0; round < 8; ++round) {
    // The model is linear in the overhead.
    const double base = modelled(small_facts, 0, fit.memory_efficiency);
    const double per_second = modelled(small_facts, 1, fit.memory_efficiency) - base;
    fit.kernel_overhead = std::max(0.0, small.measured - base) / per_second;
    // And falls as the efficiency grows: bisect on its logarithm within [0.02, 1].
    auto time_at = [&](double e) { return modelled(large_facts, fit.kernel_overhead, e); };
    double lo = 0.02, hi = 1.0;
    if (time_at(hi) >= large.measured) {
      fit.memory_efficiency = hi;  // the copy's own speed already explains it
    } else if (time_at(lo) <= large.measured) {
      fit.memory_efficiency = lo;
    } else {
      for (int i = 0; i < 60; ++i) {
        const double mid = std::sqrt(lo * hi);
        (time_at(mid) > large.measured ? lo : hi) = mid;
      }
      fit.memory_efficiency = std::sqrt(lo * hi);
    }
  }
  return fit;
}

// Achieved FLOP/s of the fused attention kernel (forward, causal) on a small model's shape.
double attention_flops_per_s() {
  const int64_t B = 4, H = 4, T = 256, D = 64;
  const Tensor q = Tensor::full({B, H, T, D}, 0.01, DType::F32);
  const double sec = median_time(5, [&] { ops::sdpa(q, q, q, Tensor(), true); });
  // Q K^T and P V over the causal half of the scores, as the registry counts them.
  const double pairs = double(T) * double(T + 1) / 2;
  return double(B * H) * pairs * (4.0 * double(D) + 5) / sec;
}

// Bytes/s read plus written by a parallel copy of 256 MiB (well beyond any cache).
double copy_bandwidth() {
  const size_t bytes = size_t(256) << 20;
  std::vector<char> src(bytes, 1), dst(bytes, 0);
  auto copy = [&] {
    parallel_for(0, int64_t(bytes), int64_t(1) << 22, [&](int64_t lo, int64_t hi) {
      std::memcpy(dst.data() + lo, src.data() + lo, size_t(hi - lo));
    });
  };
  copy();
  const double t = best_time(5, copy);
  return 2.0 * double(bytes) / t;
}

struct P2p {
  double bandwidth = 0, latency = 0;
  std::string method;
};

// Ping-pong between ranks 0 and 1: 64 MiB messages for bandwidth, 8 bytes for latency.
P2p mpi_p2p(int rank) {
  P2p p;
  p.method = "MPI ping-pong between ranks 0 and 1";
  const size_t big = size_t(64) << 20;
  std::vector<char> buf(big, 1);
  auto pingpong = [&](size_t bytes, int reps) {
    MPI_Barrier(MPI_COMM_WORLD);
    const auto t0 = Clock::now();
    for (int r = 0; r < reps; ++r) {
      if (rank == 0) {
        MPI_Send(buf.data(), int(bytes), MPI_BYTE, 1, 0, MPI_COMM_WORLD);
        MPI_Recv(buf.data(), int(bytes), MPI_BYTE, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      } else if (rank == 1) {
        MPI_Recv(buf.data(), int(bytes), MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(buf.data(), int(bytes), MPI_BYTE, 0, 0, MPI_COMM_WORLD);
      }
    }
    return seconds_since(t0) / (2.0 * reps);  // one way
  };
  pingpong(big, 1);
  p.bandwidth = double(big) / pingpong(big, 5);
  pingpong(8, 100);
  p.latency = pingpong(8, 1000);
  return p;
}

// Two threads hand a 64 MiB buffer over through shared memory: the receiver copies what the
// sender wrote (bandwidth), and a flag bounces between them (latency).
P2p shared_memory_p2p() {
  P2p p;
  p.method = "copy between two threads through shared memory (not launched by mpirun)";
  const size_t bytes = size_t(64) << 20;
  std::vector<char> src(bytes, 1), dst(bytes, 0);
  std::atomic<int> turn{0};
  double copy_s = 1e30;
  std::thread peer([&] {
    for (int r = 0; r < 5; ++r) {
      while (turn.load() != 1) std::this_thread::yield();
      const auto t0 = Clock::now();
      std::memcpy(dst.data(), src.data(), bytes);
      copy_s = std::min(copy_s, seconds_since(t0));
      turn.store(0);
    }
    const int bounces = 10000;
    for (int r = 0; r < bounces; ++r) {
      while (turn.load(std::memory_order_acquire) != 3) {
      }
      turn.store(2, std::memory_order_release);
    }
  });
  for (int r = 0; r < 5; ++r) {
    std::memset(src.data(), r, bytes);
    turn.store(1);
    while (turn.load() != 0) std::this_thread::yield();
  }
  const int bounces = 10000;
  const auto t0 = Clock::now();
  for (int r = 0; r < bounces; ++r) {
    turn.store(3, std::memory_order_release);
    while (turn.load(std::memory_order_acquire) != 2) {
    }
  }
  p.latency = seconds_since(t0) / (2.0 * bounces);
  peer.join();
  p.bandwidth = double(bytes) / copy_s;
  return p;
}

bool under_mpirun() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (std::getenv(v)) return true;
  return false;
}

}  // namespace

// Why `out` cannot take the profile, or "": checked before the measuring, which takes a while.
std::string unwritable(const std::string& out) {
  std::error_code ec;
  if (std::filesystem::is_directory(out, ec)) return "it is a directory";
  if (std::filesystem::exists(out, ec))
    return ::access(out.c_str(), W_OK) == 0 ? "" : std::strerror(errno);
  const std::string dir = std::filesystem::path(out).parent_path().string();
  if (::access(dir.empty() ? "." : dir.c_str(), W_OK) == 0) return "";
  return (dir.empty() ? "." : dir) + ": " + std::strerror(errno);
}

int calibrate(int argc, char** argv, const std::string& out) {
  if (const std::string why = unwritable(out); !why.empty()) {
    std::fprintf(stderr, "merak_partition: cannot write '%s' (%s)\n", out.c_str(), why.c_str());
    return 2;
  }
  const bool mpi = under_mpirun();
  int rank = 0, size = 1;
  if (mpi) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
  }
  P2p p2p;
  if (mpi && size >= 2) p2p = mpi_p2p(rank);
  if (rank != 0) {
    MPI_Finalize();
    return 0;
  }
  const int threads = num_threads();
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const double core_peak = bench::measured_fma_peak_gflops() * 1e9;
  const double bandwidth = copy_bandwidth();
  if (!(mpi && size >= 2)) p2p = shared_memory_p2p();
  partition::GemmContext ctx;
  ctx.peak_per_unit = core_peak;
  ctx.bandwidth_per_unit = bandwidth / double(threads);
  ctx.overhead = op_overhead();
  std::printf("fitting the GEMM curve to ops::matmul on 1 and %d threads...\n", threads);
  std::fflush(stdout);
  const std::vector<partition::GemmSample> samples = gemm_samples(threads);
  const partition::GemmFit fit = partition::fit_gemm_curve(samples, ctx);
  std::printf("     m     n     k  threads  measured us  curve us  curve/measured\n");
  for (const partition::GemmSample& g : samples) {
    const double model = partition::gemm_model_seconds(fit.curve, ctx, g);
    std::printf("  %4.0f  %4.0f  %4.0f  %7lld  %11.1f  %8.1f  %14.2f\n", g.m, g.n, g.k,
                (long long)g.units, g.seconds * 1e6, model * 1e6, model / g.seconds);
  }
  const double attention = attention_flops_per_s();

  // The profile describes the whole machine as one node whose cores its ranks share.
  partition::Hardware hw;
  hw.name = "cpu-local";
  // Named as calibrated: the profile may be read on another machine (the committed one is).
  hw.device = "the CPU calibrated on: " + std::to_string(threads) + " threads of " +
              std::to_string(cores) + " (" + bench::fma_peak_isa() + ")";
  hw.source = "merak_partition calibrate; p2p: " + p2p.method;
  hw.memory_bytes = int64_t(sysconf(_SC_PHYS_PAGES)) * int64_t(sysconf(_SC_PAGE_SIZE));
  hw.peak_f32 = core_peak * threads;
  hw.memory_bandwidth = bandwidth;
  hw.gemm = fit.curve;
  hw.gemm.units = threads;
  hw.compute_efficiency = std::min(1.0, attention / hw.peak_f32);
  hw.shared_node = true;
  hw.precision = partition::Precision::F32;
  hw.devices_per_node = threads;
  hw.intra_node = {p2p.bandwidth, p2p.latency};
  hw.inter_node = {p2p.bandwidth, p2p.latency};
  const RuntimeFit runtime = fit_runtime(hw, threads);
  hw.kernel_overhead = runtime.kernel_overhead;
  hw.memory_efficiency = runtime.memory_efficiency;
  char line[512];
  auto say = [&](const char* f, auto... v) {
    std::snprintf(line, sizeof line, f, v...);
    return std::string(line);
  };
  hw.sources["peak_tflops"] = say("measured: FMA loop, %.1f GFLOP/s a core (%s) x %d threads",
                                  core_peak / 1e9, bench::fma_peak_isa(), threads);
  hw.sources["memory_bandwidth_gbs"] = "measured: bytes read + written by a 256 MiB parallel copy";
  hw.sources["gemm"] = say("measured: fitted to ops::matmul at %zu shapes on 1 and %d threads "
                           "(cold operands, a linear layer's three forms), rms log error %.3f, "
                           "worst curve/measured %.2f",
                           samples.size(), threads, fit.rms_log_error, fit.worst_ratio);
  hw.sources["compute_efficiency"] = "measured: ops::sdpa forward, causal, [4, 4, 256, 64]";
  hw.sources["memory_efficiency"] =
      "measured: a GPT of width 64 over 512 tokens forward and backward through the graph "
      "executor on one thread, less the model's GEMMs and kernel overhead, against its bytes "
      "at a thread's share of the copy bandwidth";
  hw.sources["kernel_overhead_us"] =
      "measured: a GPT of width 8 over 4 tokens forward and backward through the graph "
      "executor on one thread, per kernel the cost model counts, less its arithmetic";
  hw.sources["devices_per_node"] = "measured: one rank per thread fills the machine";
  hw.sources["intra_node"] = "measured: " + p2p.method;
  hw.sources["inter_node"] = "measured: as intra_node (one machine)";

  std::vector<std::string> comment = {
      "This machine, measured by `merak_partition calibrate` (rerun it to refresh).",
      "One node: its ranks share the cores, memory and bandwidth below (shared_node).",
  };
  comment.push_back(say("f32 peak: %.1f GFLOP/s per core x %d threads = %.1f GFLOP/s",
                        core_peak / 1e9, threads, core_peak * threads / 1e9));
  comment.push_back(say("GEMM curve: %.3f of peak, tiles %lld x %lld, k_half %.0f, packing "
                        "%.0f GB/s a thread (rms log error %.3f over %zu shapes)",
                        fit.curve.efficiency, (long long)fit.curve.tile_m,
                        (long long)fit.curve.tile_n, fit.curve.k_half,
                        fit.curve.pack_bandwidth / 1e9, fit.rms_log_error,
                        samples.size()));
  comment.push_back(say("attention: %.1f GFLOP/s; op call overhead %.2f us, %.2f us a kernel "
                        "through the executor",
                        attention / 1e9, ctx.overhead * 1e6, hw.kernel_overhead * 1e6));
  comment.push_back(say("memory: %.1f GB/s, other kernels reach %.2f of it (probes: %.2f ms for "
                        "4 tokens, %.2f ms for 512); p2p: %.2f GB/s, %.2f us latency",
                        bandwidth / 1e9, hw.memory_efficiency, runtime.small_seconds * 1e3,
                        runtime.large_seconds * 1e3, p2p.bandwidth / 1e9, p2p.latency * 1e6));
  const std::string yaml = partition::hardware_yaml(hw, comment);
  errno = 0;
  std::ofstream f(out, std::ios::trunc);
  if (!f || !(f << yaml) || !f.flush()) {
    std::fprintf(stderr, "merak_partition: cannot write '%s'%s%s%s\n", out.c_str(),
                 errno ? " (" : "", errno ? std::strerror(errno) : "", errno ? ")" : "");
    if (mpi) MPI_Finalize();
    return 2;
  }
  std::fputs(yaml.c_str(), stdout);
  std::printf("wrote %s\n", out.c_str());
  if (mpi) MPI_Finalize();
  return 0;
}

}  // namespace merak::tools
