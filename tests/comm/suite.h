// The communicator suite every backend passes, run under mpirun (one process per rank). A Kit
// supplies the backend (its CommFactory) and its memory (host for MPI, device for NCCL); the
// cases fill buffers with a known pattern, communicate, and compare with results computed by
// hand from the pattern. Checks are counted per rank and summed on rank 0.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "merak/comm/communicator.h"
#include "merak/core/error.h"

namespace merak::comm::test {

class Kit {
 public:
  virtual ~Kit() = default;
  virtual const char* name() const = 0;  // "mpi", "nccl"
  virtual bool is_mpi() const = 0;       // runs the MPI-only cases (tags, truncation, tensors)
  virtual CommFactory factory(const CommOptions& options) = 0;
  virtual Device device() const = 0;
  virtual void* alloc(size_t bytes) = 0;
  virtual void release(void* p) = 0;
  virtual void upload(void* dst, const void* src, size_t bytes) = 0;
  virtual void download(void* dst, const void* src, size_t bytes) = 0;
};

// Elements in host memory, read and written as double (exact for the test patterns).
class HostArray {
 public:
  HostArray(DType dtype, int64_t n);
  DType dtype() const { return dtype_; }
  int64_t size() const { return n_; }
  void* data() { return bytes_.data(); }
  const void* data() const { return bytes_.data(); }
  size_t bytes() const { return bytes_.size(); }
  void set(int64_t i, double v);
  double get(int64_t i) const;
  // set(i, f(i)) for every i, with the dtype switch outside the loop.
  template <typename F> void fill(F f);

 private:
  DType dtype_;
  int64_t n_;
  std::vector<unsigned char> bytes_;
};

// Elements in the kit's memory.
class KitArray {
 public:
  KitArray(Kit& kit, DType dtype, int64_t n);
  ~KitArray();
  KitArray(const KitArray&) = delete;
  KitArray& operator=(const KitArray&) = delete;
  Buffer buffer() const;
  void upload(const HostArray& h);
  HostArray download() const;

 private:
  Kit& kit_;
  DType dtype_;
  int64_t n_;
  void* data_;
};

class Checks {
 public:
  explicit Checks(int rank) : rank_(rank) {}
  // Counts one check; prints "FAIL [rank r] <case>: <what>" when it failed.
  void expect(bool ok, const std::string& what);
  // Compares every element with want(i), within tol: one check, naming the first mismatch.
  template <typename F>
  void expect_array(const HostArray& got, F want, const std::string& what, double tol = 0);
  // Runs f, expecting merak::Error whose message holds every piece of `needles`.
  template <typename F>
  void expect_error(F f, const std::vector<std::string>& needles, const std::string& what);

  std::string current_case;
  int passed = 0, failed = 0;

 private:
  int rank_;
};

struct Ctx {
  Kit& kit;
  Checks& checks;
  int rank;   // world rank
  int world;  // world size
  CommOptions options;
};

// The test pattern: small integers (exact in bf16 and f16, and in their sums over 8 ranks);
// i64 values are scaled past 2^32 so that 32-bit truncation would show.
double pattern(DType t, int rank, int64_t i);

// Cases; each runs on every rank and keeps the ranks in step.
void case_grid(Ctx& c);
void case_world_size_error(Ctx& c);
void case_collectives(Ctx& c);
void case_async_overlap(Ctx& c);
void case_barrier(Ctx& c);
void case_ring(Ctx& c);
void case_split_batch(Ctx& c);
void case_argument_errors(Ctx& c);
void case_mpi_tags(Ctx& c);
void case_mpi_errors(Ctx& c);
void case_mpi_split(Ctx& c);
void case_mpi_tensors(Ctx& c);
void case_mpi_node_sum(Ctx& c);
void case_mpi_node_all_reduce(Ctx& c);
void case_mpi_shared_array(Ctx& c);

// Runs every case (or those named in MERAK_COMM_CASES, comma-separated) and prints the counts.
// Returns the exit status: 0 when every rank passed every check.
int run_suite(Kit& kit);

// ---- templates ----

template <typename F>
void HostArray::fill(F f) {
  switch (dtype_) {
    case DType::F32: {
      auto* p = reinterpret_cast<float*>(data());
      for (int64_t i = 0; i < n_; ++i) p[i] = float(f(i));
      return;
    }
    case DType::I32: {
      auto* p = reinterpret_cast<int32_t*>(data());
      for (int64_t i = 0; i < n_; ++i) p[i] = int32_t(f(i));
      return;
    }
    case DType::I64: {
      auto* p = reinterpret_cast<int64_t*>(data());
      for (int64_t i = 0; i < n_; ++i) p[i] = int64_t(f(i));
      return;
    }
    default:
      for (int64_t i = 0; i < n_; ++i) set(i, f(i));
  }
}

template <typename F>
void Checks::expect_array(const HostArray& got, F want, const std::string& what, double tol) {
  for (int64_t i = 0; i < got.size(); ++i) {
    const double g = got.get(i), w = want(i);
    if (!(g == w || std::fabs(g - w) <= tol)) {
      expect(false, detail::concat(what, ": element ", i, " of ", got.size(), " is ", g,
                                   ", want ", w));
      return;
    }
  }
  expect(true, what);
}

template <typename F>
void Checks::expect_error(F f, const std::vector<std::string>& needles, const std::string& what) {
  try {
    f();
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const std::string& n : needles)
      if (msg.find(n) == std::string::npos) {
        expect(false, what + ": message lacks '" + n + "': " + msg);
        return;
      }
    expect(true, what);
    return;
  }
  expect(false, what + ": no error");
}

}  // namespace merak::comm::test
