// The communicator suite on the NCCL backend (device memory), one rank per GPU, then the stream
// order check: an all-reduce posted right after copies queued on the device's compute stream,
// with no host synchronisation between, sums what those copies wrote. Run under mpirun:
// comm_nccl_test.sh. Without a GPU it prints why and exits 77 ("skipped"), which does
// not count as passing. `--count-devices` prints the GPU count (for choosing -np) and exits.
#include <cstdio>
#include <string>
#include <vector>

#include "merak/comm/mpi_env.h"
#include "merak/comm/nccl_communicator.h"
#include "merak/cuda/runtime.h"
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

// The all-reduce must wait for the work queued on the compute stream before it: a long queue of
// copies, the last of which writes the input. Without the ordering NCCL would read the zeros the
// buffer held before. Returns the number of failures (printed).
int stream_order_check(int device, int rank, int world) {
  const size_t n = size_t(1) << 26;  // 256 MiB of f32: each copy takes a while
  const size_t bytes = n * sizeof(float);
  float *in = nullptr, *value = nullptr, *busy = nullptr;
  check(cudaMalloc(&in, bytes), "cudaMalloc");
  check(cudaMalloc(&value, bytes), "cudaMalloc");
  check(cudaMalloc(&busy, bytes), "cudaMalloc");
  check(cudaMemset(in, 0, bytes), "cudaMemset");
  std::vector<float> host(n, float(rank + 1));
  check(cudaMemcpy(value, host.data(), bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  MPI_Comm dup;
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  merak::comm::NcclCommunicator comm(dup, "order", device);
  const cudaStream_t s = merak::cuda::stream(device);
  for (int k = 0; k < 40; ++k)
    check(cudaMemcpyAsync(busy, value, bytes, cudaMemcpyDeviceToDevice, s), "busy copy");
  check(cudaMemcpyAsync(in, value, bytes, cudaMemcpyDeviceToDevice, s), "input copy");
  comm.all_reduce(merak::comm::Buffer(in, int64_t(n), merak::DType::F32,
                                      merak::Device::cuda(device)),
                  merak::comm::ReduceOp::Sum);
  check(cudaMemcpy(host.data(), in, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy");
  const float want = float(world * (world + 1) / 2);
  size_t bad = 0;
  for (float x : host) bad += x != want;
  if (bad > 0)
    std::printf("FAIL [rank %d] stream order: %zu of %zu sums are not %g (the all-reduce read "
                "before the compute stream's copies had written)\n", rank, bad, n, double(want));
  cudaFree(in);
  cudaFree(value);
  cudaFree(busy);
  return bad > 0 ? 1 : 0;
}

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
  const int suite = merak::comm::test::run_suite(kit);
  int failed = stream_order_check(local, rank, world);
  MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0)
    std::printf("stream order: %s\n", failed == 0 ? "every rank summed the compute stream's last "
                                                     "writes" : "FAILED");
  return suite != 0 ? suite : failed != 0 ? 1 : 0;
}
