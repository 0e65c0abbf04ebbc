#include "merak/runtime/engine_tp.h"

#include <algorithm>
#include <chrono>
#include <memory>

namespace merak::runtime {
namespace {

using Clock = std::chrono::steady_clock;

comm::ReduceOp reduce_op(ops::TpReduce op) {
  return op == ops::TpReduce::Sum ? comm::ReduceOp::Sum : comm::ReduceOp::Max;
}

double since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

TpGroupCollectives::TpGroupCollectives(comm::Communicator& tp, std::vector<std::string> groups,
                                       bool shared_memory)
    : tp_(tp), groups_(std::move(groups)) {
  MERAK_CHECK(!groups_.empty(), "tensor-parallel collectives need their group's name");
  std::string why_not;
  node_ = comm::NodeAllReduce::create_if(shared_memory, tp, &why_not);
  transport_ = node_ ? "shared memory" : "MPI all-reduce (not shared memory: " + why_not + ")";
}

TpGroupCollectives::~TpGroupCollectives() = default;

void TpGroupCollectives::check_group(const std::string& name, int64_t size) const {
  const bool known = std::find(groups_.begin(), groups_.end(), name) != groups_.end();
  MERAK_CHECK(known && size == tp_.size(), "tensor-parallel op on group '", name, "' of ", size,
              " members, but this rank's tp group is '", groups_.front(), "' of ", tp_.size());
}

comm::NodeAllReduce* TpGroupCollectives::shared_for(const Tensor& t, comm::ReduceOp op) const {
  const bool fits = node_ && t.device().is_cpu() && t.dtype() == DType::F32 &&
                    t.is_contiguous() && comm::NodeAllReduce::handles(t.numel(), op);
  return fits ? node_.get() : nullptr;
}

void TpGroupCollectives::reduce(const Tensor& t, ops::TpReduce op, const std::string& group,
                                int64_t size) {
  check_group(group, size);
  const auto start = Clock::now();
  if (comm::NodeAllReduce* node = shared_for(t, reduce_op(op))) {
    node->all_reduce(t.data<float>(), t.numel(), reduce_op(op));
  } else if (t.device().type == tp_.memory()) {
    tp_.all_reduce(t, reduce_op(op));
  } else {
    // A device tensor over a host communicator: staged through the host.
    const Tensor host = t.to(Device::cpu());
    tp_.all_reduce(host, reduce_op(op));
    t.copy_(host);
  }
  seconds_ += since(start);
}

PendingOp TpGroupCollectives::post(const Tensor& t, ops::TpReduce op, const std::string& group,
                                   int64_t size) {
  check_group(group, size);
  PendingOp pending;
  std::function<void()> wait;
  if (comm::NodeAllReduce* node = shared_for(t, reduce_op(op))) {
    ++posted_;
    const uint64_t round = node->post(t.data<float>(), t.numel(), reduce_op(op));
    // Ready means the others have posted; finishing is this member's own reduction.
    pending.test = [node, round] {
      if (!node->ready(round)) return false;
      node->wait(round);
      return true;
    };
    wait = [node, round] { node->wait(round); };
  } else if (t.device().type == tp_.memory()) {
    ++posted_;
    auto work = std::make_shared<comm::Work>(tp_.iall_reduce(t, reduce_op(op)));
    pending.test = [work] { return work->test(); };
    wait = [work] { work->wait(); };
  } else {
    return TpCollectives::post(t, op, group, size);  // staged: done now
  }
  pending.wait = [wait, this] {
    const auto start = Clock::now();
    wait();
    seconds_ += since(start);
  };
  return pending;
}

}  // namespace merak::runtime
