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

TpGroupCollectives::TpGroupCollectives(comm::Communicator& tp, std::vector<std::string> groups)
    : tp_(tp), groups_(std::move(groups)) {
  MERAK_CHECK(!groups_.empty(), "tensor-parallel collectives need their group's name");
}

void TpGroupCollectives::check_group(const std::string& name, int64_t size) const {
  const bool known = std::find(groups_.begin(), groups_.end(), name) != groups_.end();
  MERAK_CHECK(known && size == tp_.size(), "tensor-parallel op on group '", name, "' of ", size,
              " members, but this rank's tp group is '", groups_.front(), "' of ", tp_.size());
}

void TpGroupCollectives::reduce(const Tensor& t, ops::TpReduce op, const std::string& group,
                                int64_t size) {
  check_group(group, size);
  const auto start = Clock::now();
  tp_.all_reduce(t, reduce_op(op));  // the group carries the rank's memory (comm::Grid)
  seconds_ += since(start);
}

PendingOp TpGroupCollectives::post(const Tensor& t, ops::TpReduce op, const std::string& group,
                                   int64_t size) {
  check_group(group, size);
  ++posted_;
  auto work = std::make_shared<comm::Work>(tp_.iall_reduce(t, reduce_op(op)));
  PendingOp pending;
  pending.test = [work] { return work->test(); };
  pending.wait = [work, this] {
    const auto start = Clock::now();
    work->wait();
    seconds_ += since(start);
  };
  return pending;
}

}  // namespace merak::runtime
