#include "merak/comm/node_communicator.h"

namespace merak::comm {
namespace {

// An operation the wrapped MPI communicator carries.
class Delegated : public WorkImpl {
 public:
  Delegated(Work work, std::string what) : work_(std::move(work)), what_(std::move(what)) {}
  bool poll() override { return work_.test(); }
  std::string describe() const override { return what_; }
  std::string roll_call(double grace_s) override { return work_.roll_call(grace_s); }

 private:
  Work work_;
  std::string what_;
};

// A round of the shared-memory window: done once every member has posted and this one has
// reduced.
class SharedRound : public WorkImpl {
 public:
  SharedRound(NodeAllReduce& node, uint64_t round, std::string what)
      : node_(node), round_(round), what_(std::move(what)) {}
  bool poll() override {
    if (!node_.ready(round_)) return false;
    node_.wait(round_);
    return true;
  }
  // Names the member the round waits for, if one is behind: the peer a timeout is about.
  std::string describe() const override {
    const std::string late = node_.behind(round_);
    return late.empty() ? what_ : what_ + " (" + late + ")";
  }

 private:
  NodeAllReduce& node_;
  uint64_t round_;
  std::string what_;
};

}  // namespace

std::unique_ptr<Communicator> NodeCommunicator::wrap(std::unique_ptr<MpiCommunicator> mpi,
                                                     std::string* why_not) {
  std::unique_ptr<NodeAllReduce> node = NodeAllReduce::create_if(true, *mpi, why_not);
  if (!node) return mpi;
  return std::unique_ptr<Communicator>(new NodeCommunicator(std::move(mpi), std::move(node)));
}

NodeCommunicator::NodeCommunicator(std::unique_ptr<MpiCommunicator> mpi,
                                   std::unique_ptr<NodeAllReduce> node)
    : Communicator(mpi->mpi_comm(), mpi->name(), mpi->options()),
      mpi_(std::move(mpi)),
      node_(std::move(node)) {}

NodeCommunicator::~NodeCommunicator() = default;

std::unique_ptr<WorkImpl> NodeCommunicator::post_all_reduce(const Buffer& b, ReduceOp op) {
  const std::string what = "all_reduce (" + std::string(reduce_op_name(op)) + ") of " +
                           std::to_string(b.numel) + " " + dtype_name(b.dtype) + " on " +
                           describe();
  if (b.dtype == DType::F32 && node_->accepts(b.numel, op))
    return std::make_unique<SharedRound>(
        *node_, node_->post(static_cast<float*>(b.data), b.numel, op), what + " (shared memory)");
  return std::make_unique<Delegated>(mpi_->iall_reduce(b, op), what);
}

std::unique_ptr<WorkImpl> NodeCommunicator::post_batch(const std::vector<P2P>& ops) {
  return std::make_unique<Delegated>(mpi_->ibatch(ops), "point to point on " + describe());
}

std::unique_ptr<WorkImpl> NodeCommunicator::post_all_gather(const Buffer& in, const Buffer& out,
                                                            const std::vector<int64_t>& counts) {
  return std::make_unique<Delegated>(mpi_->iall_gather(in, out, counts),
                                     "all_gather on " + describe());
}

std::unique_ptr<WorkImpl> NodeCommunicator::post_reduce_scatter(
    const Buffer& in, const Buffer& out, ReduceOp op, const std::vector<int64_t>& counts) {
  return std::make_unique<Delegated>(mpi_->ireduce_scatter(in, out, op, counts),
                                     "reduce_scatter on " + describe());
}

std::unique_ptr<WorkImpl> NodeCommunicator::post_broadcast(const Buffer& b, int root) {
  return std::make_unique<Delegated>(mpi_->ibroadcast(b, root), "broadcast on " + describe());
}

std::unique_ptr<WorkImpl> NodeCommunicator::post_barrier() {
  return std::make_unique<Delegated>(mpi_->ibarrier(), "barrier on " + describe());
}

CommFactory node_backend(CommOptions options) {
  return [options](MPI_Comm group, const std::string& name) -> std::unique_ptr<Communicator> {
    std::string why_not;
    return NodeCommunicator::wrap(std::make_unique<MpiCommunicator>(group, name, options),
                                  &why_not);
  };
}

}  // namespace merak::comm
