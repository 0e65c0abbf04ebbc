#include "merak/runtime/engine_tp.h"

#include <algorithm>
#include <chrono>
#include <memory>

#include "kernels/cpu/tp_ops.h"

namespace merak::runtime {

namespace {

void check_group(const comm::Communicator& tp, const std::vector<std::string>& groups,
                 const std::string& name, int64_t size) {
  const bool known = std::find(groups.begin(), groups.end(), name) != groups.end();
  MERAK_CHECK(known && size == tp.size(), "tensor-parallel op on group '", name, "' of ", size,
              " members, but this rank's tp group is '", groups.front(), "' of ", tp.size());
}

comm::ReduceOp reduce_op(cpu::TpReduce op) {
  return op == cpu::TpReduce::Sum ? comm::ReduceOp::Sum : comm::ReduceOp::Max;
}

}  // namespace

TpCollectiveScope::TpCollectiveScope(comm::Communicator& tp, std::vector<std::string> groups,
                                     bool shared_memory) {
  MERAK_CHECK(!groups.empty(), "a tensor-parallel scope needs its group's name");
  std::string why_not;
  node_ = comm::NodeAllReduce::create_if(shared_memory, tp, &why_not);
  transport_ = node_ ? "shared memory" : "MPI all-reduce (not shared memory: " + why_not + ")";
  cpu::set_tp_collective([&tp, groups, this](const Tensor& t, cpu::TpReduce op,
                                             const std::string& name, int64_t size) {
    check_group(tp, groups, name, size);
    const auto start = std::chrono::steady_clock::now();
    if (comm::NodeAllReduce* node = shared_for(t, reduce_op(op)))
      node->all_reduce(t.data<float>(), t.numel(), reduce_op(op));
    else
      tp.all_reduce(t, reduce_op(op));
    seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  });
  // The sub-pipelined mode posts instead; the time counted is the wait, what the overlap left.
  cpu::set_tp_collective_async([&tp, groups, this](const Tensor& t, cpu::TpReduce op,
                                                   const std::string& name, int64_t size) {
    check_group(tp, groups, name, size);
    ++posted_;
    PendingOp pending;
    std::function<void()> wait;
    if (comm::NodeAllReduce* node = shared_for(t, reduce_op(op))) {
      const uint64_t round = node->post(t.data<float>(), t.numel(), reduce_op(op));
      // Ready means the others have posted; finishing is this member's own reduction.
      pending.test = [node, round] {
        if (!node->ready(round)) return false;
        node->wait(round);
        return true;
      };
      wait = [node, round] { node->wait(round); };
    } else {
      auto work = std::make_shared<comm::Work>(tp.iall_reduce(t, reduce_op(op)));
      pending.test = [work] { return work->test(); };
      wait = [work] { work->wait(); };
    }
    pending.wait = [wait, this] {
      const auto start = std::chrono::steady_clock::now();
      wait();
      seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    };
    return pending;
  });
}

comm::NodeAllReduce* TpCollectiveScope::shared_for(const Tensor& t, comm::ReduceOp op) const {
  const bool fits = node_ && t.dtype() == DType::F32 && t.is_contiguous() &&
                    comm::NodeAllReduce::handles(t.numel(), op);
  return fits ? node_.get() : nullptr;
}

TpCollectiveScope::~TpCollectiveScope() {
  cpu::set_tp_collective(nullptr);
  cpu::set_tp_collective_async(nullptr);
}

}  // namespace merak::runtime
