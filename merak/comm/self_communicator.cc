#include "merak/comm/self_communicator.h"

#include <cstring>

namespace merak::comm {
namespace {

// An operation that was complete when it was posted.
class DoneWork : public WorkImpl {
 public:
  explicit DoneWork(std::string what) : what_(std::move(what)) {}
  bool poll() override { return true; }
  std::string describe() const override { return what_; }

 private:
  std::string what_;
};

std::unique_ptr<WorkImpl> done(const char* what) { return std::make_unique<DoneWork>(what); }

// Input to output unless they are the same memory (one member's gather or scatter is a copy).
void copy(const Buffer& in, const Buffer& out) {
  if (in.data != out.data && in.bytes() > 0) std::memcpy(out.data, in.data, in.bytes());
}

}  // namespace

SelfCommunicator::SelfCommunicator(std::string name, CommOptions options)
    : Communicator(std::move(name), options) {}

std::unique_ptr<WorkImpl> SelfCommunicator::post_batch(const std::vector<P2P>& ops) {
  MERAK_FAIL("point to point on ", describe(), ": a group of one process has no peer (",
             ops.size(), " operations posted)");
}

std::unique_ptr<WorkImpl> SelfCommunicator::post_all_reduce(const Buffer&, ReduceOp) {
  return done("all_reduce of one member");
}

std::unique_ptr<WorkImpl> SelfCommunicator::post_all_gather(const Buffer& in, const Buffer& out,
                                                            const std::vector<int64_t>&) {
  copy(in, out);
  return done("all_gather of one member");
}

std::unique_ptr<WorkImpl> SelfCommunicator::post_reduce_scatter(const Buffer& in,
                                                                const Buffer& out, ReduceOp,
                                                                const std::vector<int64_t>&) {
  copy(in, out);
  return done("reduce_scatter of one member");
}

std::unique_ptr<WorkImpl> SelfCommunicator::post_broadcast(const Buffer&, int) {
  return done("broadcast of one member");
}

std::unique_ptr<WorkImpl> SelfCommunicator::post_barrier() { return done("barrier of one member"); }

}  // namespace merak::comm
