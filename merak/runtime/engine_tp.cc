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

}  // namespace

TpCollectiveScope::TpCollectiveScope(comm::Communicator& tp, std::vector<std::string> groups) {
  MERAK_CHECK(!groups.empty(), "a tensor-parallel scope needs its group's name");
  cpu::set_tp_collective([&tp, groups, this](const Tensor& t, cpu::TpReduce op,
                                             const std::string& name, int64_t size) {
    check_group(tp, groups, name, size);
    const auto start = std::chrono::steady_clock::now();
    tp.all_reduce(t, op == cpu::TpReduce::Sum ? comm::ReduceOp::Sum : comm::ReduceOp::Max);
    seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  });
  // The sub-pipelined mode posts instead; the time counted is the wait, what the overlap left.
  cpu::set_tp_collective_async([&tp, groups, this](const Tensor& t, cpu::TpReduce op,
                                                   const std::string& name, int64_t size) {
    check_group(tp, groups, name, size);
    auto work = std::make_shared<comm::Work>(
        tp.iall_reduce(t, op == cpu::TpReduce::Sum ? comm::ReduceOp::Sum : comm::ReduceOp::Max));
    ++posted_;
    PendingOp pending;
    pending.test = [work] { return work->test(); };
    pending.wait = [work, this] {
      const auto start = std::chrono::steady_clock::now();
      work->wait();
      seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    };
    return pending;
  });
}

TpCollectiveScope::~TpCollectiveScope() {
  cpu::set_tp_collective(nullptr);
  cpu::set_tp_collective_async(nullptr);
}

}  // namespace merak::runtime
