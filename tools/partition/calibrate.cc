#include "tools/partition/calibrate.h"

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>
#include <vector>

#include "merak/core/parallel.h"
#include "merak/core/tensor.h"
#include "merak/ops/functional.h"
#include "merak/partition/hardware.h"
#include "merak/core/fma_peak.h"

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

// Achieved f32 GFLOP/s of ops::matmul on square matrices, the partitioner's dominant op.
double matmul_gflops() {
  const int64_t n = 2048;
  const Tensor a = Tensor::full({n, n}, 0.5, DType::F32);
  const Tensor b = Tensor::full({n, n}, 0.25, DType::F32);
  ops::matmul(a, b);  // warm up the pool and the caches
  const double t = best_time(3, [&] { ops::matmul(a, b); });
  return 2.0 * double(n) * double(n) * double(n) / t / 1e9;
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

int calibrate(int argc, char** argv, const std::string& out) {
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
  const double core_peak = bench::measured_fma_peak_gflops();
  const double peak = core_peak * threads;
  const double achieved = matmul_gflops();
  const double bandwidth = copy_bandwidth();
  if (!(mpi && size >= 2)) p2p = shared_memory_p2p();

  partition::Hardware hw;
  hw.name = "cpu-local";
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  hw.device = "this machine's CPU: " + std::to_string(threads) + " threads of " +
              std::to_string(cores) + " (" + bench::fma_peak_isa() + ")";
  hw.source = "merak_partition calibrate; p2p: " + p2p.method;
  hw.memory_bytes = int64_t(sysconf(_SC_PHYS_PAGES)) * int64_t(sysconf(_SC_PAGE_SIZE));
  hw.peak_f32 = peak * 1e9;
  hw.memory_bandwidth = bandwidth;
  hw.compute_efficiency = std::min(1.0, achieved / peak);
  hw.memory_efficiency = 1.0;  // the bandwidth above is already what a copy achieves
  hw.precision = partition::Precision::F32;
  hw.devices_per_node = std::max(1, int(cores) / threads);
  hw.intra_node = {p2p.bandwidth, p2p.latency};
  hw.inter_node = {p2p.bandwidth, p2p.latency};

  char line[256];
  std::vector<std::string> comment = {
      "This machine, measured by `merak_partition calibrate` (rerun it to refresh).",
  };
  std::snprintf(line, sizeof line,
                "f32 peak: %.1f GFLOP/s per core (FMA loop, %s) x %d threads = %.1f GFLOP/s",
                core_peak, bench::fma_peak_isa(), threads, peak);
  comment.push_back(line);
  std::snprintf(line, sizeof line,
                "ops::matmul 2048^3 f32: %.1f GFLOP/s = compute_efficiency %.3f of that peak",
                achieved, achieved / peak);
  comment.push_back(line);
  std::snprintf(line, sizeof line, "memory: %.1f GB/s read + written by a 256 MiB parallel copy",
                bandwidth / 1e9);
  comment.push_back(line);
  std::snprintf(line, sizeof line, "p2p: %.2f GB/s, %.2f us latency (%s)", p2p.bandwidth / 1e9,
                p2p.latency * 1e6, p2p.method.c_str());
  comment.push_back(line);
  comment.push_back("One device is one process with the threads above; both links are the p2p figure.");
  const std::string yaml = partition::hardware_yaml(hw, comment);
  std::ofstream f(out, std::ios::trunc);
  if (!f || !(f << yaml) || !f.flush()) {
    std::fprintf(stderr, "merak_partition: cannot write '%s'\n", out.c_str());
    if (mpi) MPI_Finalize();
    return 2;
  }
  std::fputs(yaml.c_str(), stdout);
  std::printf("wrote %s\n", out.c_str());
  if (mpi) MPI_Finalize();
  return 0;
}

}  // namespace merak::tools
