// The communicator suite on the NCCL backend (device memory), one rank per GPU. Run under
// mpirun: comm_nccl_test.sh. Without a GPU it prints why and exits 77 ("skipped"), which does
// not count as passing. `--count-devices` prints the GPU count (for choosing -np) and exits.
#include <cstdio>
#include <string>

#include "merak/comm/mpi_env.h"
#include "merak/comm/nccl_communicator.h"
#include "tests/comm/suite.h"

namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) MERAK_FAIL(what, ": ", cudaGetErrorString(e));
}

class NcclKit : public merak::comm::test::Kit {
 public:
  explicit NcclKit(int device) : device_(device) { check(cudaSetDevice(device), "cudaSetDevice"); }
  const char* name() const override { return "nccl"; }
  bool is_mpi() const override { return false; }
  merak::comm::CommFactory factory(const merak::comm::CommOptions& o) override {
    return merak::comm::nccl_backend(o, device_);
  }
  merak::Device device() const override { return merak::Device::cuda(device_); }
  void* alloc(size_t bytes) override {
    void* p = nullptr;
    check(cudaMalloc(&p, bytes), "cudaMalloc");
    return p;
  }
  void release(void* p) override { cudaFree(p); }
  void upload(void* dst, const void* src, size_t n) override {
    check(cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice), "cudaMemcpy to device");
  }
  void download(void* dst, const void* src, size_t n) override {
    check(cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost), "cudaMemcpy to host");
  }

 private:
  int device_;
};

}  // namespace

int main(int argc, char** argv) {
  merak::comm::MpiSession mpi(&argc, &argv);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  std::string why;
  const int devices = merak::comm::cuda_device_count(&why);
  if (devices == 0) {
    if (rank == 0) std::printf("skipped: no CUDA device (%s)\n", why.c_str());
    return 77;
  }
  if (argc > 1 && std::string(argv[1]) == "--count-devices") {
    std::printf("%d\n", devices);
    return 0;
  }
  const int local = merak::comm::local_rank();
  if (local >= devices) {
    if (rank == 0)
      std::printf("comm_nccl_test: more ranks on a node than its %d GPUs; run one rank per GPU\n",
                  devices);
    return 2;
  }
  NcclKit kit(local);
  return merak::comm::test::run_suite(kit);
}
