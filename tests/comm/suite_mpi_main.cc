// The communicator suite on the MPI backend (host memory). Run under mpirun: comm_mpi_test.sh.
//   comm_suite_mpi                    MPI communicators
//   comm_suite_mpi --shared-memory    every group a NodeCommunicator (its f32 sums and maxima
//                                     through shared memory, the rest through MPI): the cases
//                                     any backend passes
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "merak/comm/mpi_communicator.h"
#include "merak/comm/mpi_env.h"
#include "merak/comm/node_communicator.h"
#include "tests/comm/suite.h"

namespace {

class MpiKit : public merak::comm::test::Kit {
 public:
  explicit MpiKit(bool shared_memory) : shared_memory_(shared_memory) {}
  const char* name() const override { return "mpi"; }  // the backend() of both kinds of group
  // The MPI-only cases (tags, truncation, the node windows themselves) need plain MPI groups.
  bool is_mpi() const override { return !shared_memory_; }
  merak::comm::CommFactory factory(const merak::comm::CommOptions& o) override {
    return shared_memory_ ? merak::comm::node_backend(o) : merak::comm::mpi_backend(o);
  }
  merak::Device device() const override { return merak::Device::cpu(); }
  void* alloc(size_t bytes) override { return std::malloc(bytes); }
  void release(void* p) override { std::free(p); }
  void upload(void* dst, const void* src, size_t n) override { std::memcpy(dst, src, n); }
  void download(void* dst, const void* src, size_t n) override { std::memcpy(dst, src, n); }

 private:
  bool shared_memory_;
};

}  // namespace

int main(int argc, char** argv) {
  merak::comm::MpiSession mpi(&argc, &argv);
  const bool shared_memory = argc > 1 && std::string(argv[1]) == "--shared-memory";
  if (shared_memory && merak::comm::world_rank() == 0)
    std::printf("comm suite: every group a NodeCommunicator (f32 sums and maxima through shared "
                "memory)\n");
  MpiKit kit(shared_memory);
  return merak::comm::test::run_suite(kit);
}
