// The communicator suite on the MPI backend (host memory). Run under mpirun: comm_mpi_test.sh.
//   comm_suite_mpi                    MPI communicators
//   comm_suite_mpi --shared-memory    every group a NodeCommunicator (its f32 sums and maxima
//                                     through shared memory, the rest through MPI): the cases
//                                     any backend passes
//   comm_suite_mpi --staged           every group a StagedCommunicator over MPI, its buffers in
//                                     "device" memory: the cases any backend passes, with a
//                                     stand-in CUDA backend whose memory is the host's (so the
//                                     staging's copies in and out are what is tested)
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "merak/comm/mpi_communicator.h"
#include "merak/comm/mpi_env.h"
#include "merak/comm/node_communicator.h"
#include "merak/comm/staged_communicator.h"
#include "merak/core/device_backend.h"
#include "tests/comm/suite.h"

namespace {

enum class Mode { Mpi, SharedMemory, Staged };

class MpiKit : public merak::comm::test::Kit {
 public:
  explicit MpiKit(Mode mode) : mode_(mode) {}
  // The backend() of the MPI and shared-memory groups; the staged ones say so.
  const char* name() const override { return mode_ == Mode::Staged ? "mpi-staged" : "mpi"; }
  // The MPI-only cases (tags, truncation, the node windows themselves) need plain MPI groups.
  bool is_mpi() const override { return mode_ == Mode::Mpi; }
  merak::comm::CommFactory factory(const merak::comm::CommOptions& o) override {
    switch (mode_) {
      case Mode::Mpi: return merak::comm::mpi_backend(o);
      case Mode::SharedMemory: return merak::comm::node_backend(o);
      case Mode::Staged: return merak::comm::staged_backend(merak::comm::mpi_backend(o), device());
    }
    return nullptr;
  }
  merak::Device device() const override {
    return mode_ == Mode::Staged ? merak::Device::cuda(0) : merak::Device::cpu();
  }
  void* alloc(size_t bytes) override { return std::malloc(bytes); }
  void release(void* p) override { std::free(p); }
  // An empty buffer may have no address: memcpy must not see it (its pointers must be valid).
  void upload(void* dst, const void* src, size_t n) override {
    if (n) std::memcpy(dst, src, n);
  }
  void download(void* dst, const void* src, size_t n) override {
    if (n) std::memcpy(dst, src, n);
  }

 private:
  Mode mode_;
};

// "cuda" memory that is host memory: every copy a memcpy (no CUDA backend is linked in here).
void register_stand_in_device() {
  merak::DeviceBackend b;
  b.copy_bytes = [](void* dst, merak::Device, const void* src, merak::Device, size_t bytes) {
    if (bytes > 0) std::memcpy(dst, src, bytes);
  };
  // The staging copies only; the suite never runs a kernel on this memory.
  b.strided_copy = [](const merak::Tensor&, const merak::Tensor&) {
    MERAK_FAIL("the stand-in device has no strided copies");
  };
  b.fill = [](const merak::Tensor&, double) { MERAK_FAIL("the stand-in device has no fills"); };
  merak::register_device_backend(merak::DeviceType::CUDA, b);
}

}  // namespace

int main(int argc, char** argv) {
  merak::comm::MpiSession mpi(&argc, &argv);
  const std::string arg = argc > 1 ? argv[1] : "";
  const Mode mode = arg == "--shared-memory" ? Mode::SharedMemory
                    : arg == "--staged"      ? Mode::Staged
                                             : Mode::Mpi;
  const bool root = merak::comm::world_rank() == 0;
  if (mode == Mode::SharedMemory && root)
    std::printf("comm suite: every group a NodeCommunicator (f32 sums and maxima through shared "
                "memory)\n");
  if (mode == Mode::Staged) {
    register_stand_in_device();
    if (root) std::printf("comm suite: every group a StagedCommunicator over MPI\n");
  }
  MpiKit kit(mode);
  return merak::comm::test::run_suite(kit);
}
