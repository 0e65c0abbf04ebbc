// The communicator suite on the MPI backend (host memory). Run under mpirun: comm_mpi_test.sh.
#include <cstdlib>
#include <cstring>

#include "merak/comm/mpi_communicator.h"
#include "merak/comm/mpi_env.h"
#include "tests/comm/suite.h"

namespace {

class MpiKit : public merak::comm::test::Kit {
 public:
  const char* name() const override { return "mpi"; }
  bool is_mpi() const override { return true; }
  merak::comm::CommFactory factory(const merak::comm::CommOptions& o) override {
    return merak::comm::mpi_backend(o);
  }
  merak::Device device() const override { return merak::Device::cpu(); }
  void* alloc(size_t bytes) override { return std::malloc(bytes); }
  void release(void* p) override { std::free(p); }
  void upload(void* dst, const void* src, size_t n) override { std::memcpy(dst, src, n); }
  void download(void* dst, const void* src, size_t n) override { std::memcpy(dst, src, n); }
};

}  // namespace

int main(int argc, char** argv) {
  merak::comm::MpiSession mpi(&argc, &argv);
  MpiKit kit;
  return merak::comm::test::run_suite(kit);
}
