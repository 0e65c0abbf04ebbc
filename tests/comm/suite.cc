#include "tests/comm/suite.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "merak/comm/mpi_env.h"

namespace merak::comm::test {

HostArray::HostArray(DType dtype, int64_t n)
    : dtype_(dtype), n_(n), bytes_(size_t(n) * dtype_size(dtype)) {}

void HostArray::set(int64_t i, double v) {
  void* p = bytes_.data() + size_t(i) * dtype_size(dtype_);
  switch (dtype_) {
    case DType::F32: { float x = float(v); std::memcpy(p, &x, 4); return; }
    case DType::I32: { int32_t x = int32_t(v); std::memcpy(p, &x, 4); return; }
    case DType::I64: { int64_t x = int64_t(v); std::memcpy(p, &x, 8); return; }
    case DType::BF16: { uint16_t x = f32_to_bf16(float(v)); std::memcpy(p, &x, 2); return; }
    case DType::F16: { uint16_t x = f32_to_f16(float(v)); std::memcpy(p, &x, 2); return; }
    default: MERAK_FAIL("HostArray: dtype ", dtype_name(dtype_));
  }
}

double HostArray::get(int64_t i) const {
  const void* p = bytes_.data() + size_t(i) * dtype_size(dtype_);
  switch (dtype_) {
    case DType::F32: { float x; std::memcpy(&x, p, 4); return x; }
    case DType::I32: { int32_t x; std::memcpy(&x, p, 4); return x; }
    case DType::I64: { int64_t x; std::memcpy(&x, p, 8); return double(x); }
    case DType::BF16: { uint16_t x; std::memcpy(&x, p, 2); return bf16_to_f32(x); }
    case DType::F16: { uint16_t x; std::memcpy(&x, p, 2); return f16_to_f32(x); }
    default: MERAK_FAIL("HostArray: dtype ", dtype_name(dtype_));
  }
}

KitArray::KitArray(Kit& kit, DType dtype, int64_t n)
    : kit_(kit), dtype_(dtype), n_(n),
      data_(kit.alloc(std::max<size_t>(size_t(n) * dtype_size(dtype), 1))) {}

KitArray::~KitArray() { kit_.release(data_); }

Buffer KitArray::buffer() const { return Buffer(data_, n_, dtype_, kit_.device()); }

void KitArray::upload(const HostArray& h) {
  MERAK_CHECK(h.size() == n_ && h.dtype() == dtype_, "KitArray::upload: size or dtype");
  kit_.upload(data_, h.data(), h.bytes());
}

HostArray KitArray::download() const {
  HostArray h(dtype_, n_);
  kit_.download(h.data(), data_, h.bytes());
  return h;
}

void Checks::expect(bool ok, const std::string& what) {
  if (ok) {
    ++passed;
    return;
  }
  ++failed;
  std::fprintf(stderr, "FAIL [rank %d] %s: %s\n", rank_, current_case.c_str(), what.c_str());
}

double pattern(DType t, int rank, int64_t i) {
  const double v = double((i * 7 + rank * 3) % 11) - 5;  // -5 .. 5
  return t == DType::I64 ? v * 8589934592.0 : v;        // 2^33
}

namespace {

struct Case {
  const char* name;
  void (*run)(Ctx&);
};

bool selected(const char* name) {
  const char* env = std::getenv("MERAK_COMM_CASES");
  if (!env || !*env) return true;
  std::stringstream list(env);
  std::string item;
  while (std::getline(list, item, ','))
    if (item == name) return true;
  return false;
}

}  // namespace

int run_suite(Kit& kit) {
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const Case cases[] = {
      {"grid", case_grid},
      {"world_size_error", case_world_size_error},
      {"collectives", case_collectives},
      {"async_overlap", case_async_overlap},
      {"barrier", case_barrier},
      {"ring", case_ring},
      {"split_batch", case_split_batch},
      {"argument_errors", case_argument_errors},
      {"mpi_tags", case_mpi_tags},
      {"mpi_errors", case_mpi_errors},
      {"mpi_split", case_mpi_split},
      {"mpi_tensors", case_mpi_tensors},
      {"mpi_node_sum", case_mpi_node_sum},
      {"mpi_node_all_reduce", case_mpi_node_all_reduce},
      {"mpi_shared_array", case_mpi_shared_array},
  };
  Checks checks(rank);
  // A hung case ends the job with its message; generous for 8 ranks on 2 cores.
  Ctx ctx{kit, checks, rank, world, CommOptions{20.0}};
  int total_passed = 0, total_failed = 0;
  for (const Case& cs : cases) {
    if (!selected(cs.name)) continue;
    checks.current_case = cs.name;
    checks.passed = checks.failed = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    const double start = MPI_Wtime();
    try {
      cs.run(ctx);
    } catch (const std::exception& e) {
      // The other ranks may now wait on this one: end the job rather than hang.
      abort_job(std::string("case ") + cs.name + ": unexpected error: " + e.what());
    }
    int mine[2] = {checks.passed, checks.failed}, sum[2] = {0, 0};
    MPI_Reduce(mine, sum, 2, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0)
      std::printf("case %-18s %6d passed, %d failed  (%.2f s)\n", cs.name, sum[0], sum[1],
                  MPI_Wtime() - start);
    std::fflush(stdout);
    total_passed += sum[0];
    total_failed += sum[1];
  }
  int any_failed = total_failed > 0;
  MPI_Bcast(&any_failed, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (rank == 0)
    std::printf("comm suite (%s backend, %d ranks): %d checks passed, %d failed\n", kit.name(),
                world, total_passed, total_failed);
  return any_failed ? 1 : 0;
}

}  // namespace merak::comm::test
