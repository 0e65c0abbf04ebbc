#include "merak/comm/staged_communicator.h"

#include <utility>

#include "merak/core/device_backend.h"

namespace merak::comm {
namespace {

// A host tensor holding `b`'s elements (copied from the device when `fill`).
Tensor host_copy(const Buffer& b, bool fill) {
  Tensor h = Tensor::empty({b.numel}, b.dtype);
  if (fill && b.numel > 0)
    device_backend(b.device.type).copy_bytes(h.raw_data(), Device::cpu(), b.data, b.device,
                                             b.bytes());
  return h;
}

// The host operation; once it has finished, the results go back to the device.
class StagedWork : public WorkImpl {
 public:
  StagedWork(Work inner, std::vector<std::pair<Tensor, Buffer>> back, std::string what)
      : inner_(std::move(inner)), back_(std::move(back)), what_(std::move(what)) {}

  bool poll() override {
    if (!inner_.test()) return false;
    for (const auto& [host, device] : back_)
      if (device.numel > 0)
        device_backend(device.device.type).copy_bytes(device.data, device.device,
                                                      host.raw_data(), Device::cpu(),
                                                      device.bytes());
    back_.clear();
    return true;
  }
  std::string describe() const override { return what_; }
  std::string roll_call(double grace_s) override { return inner_.roll_call(grace_s); }

 private:
  Work inner_;
  std::vector<std::pair<Tensor, Buffer>> back_;  // (host result, its place on the device)
  std::string what_;
};

}  // namespace

StagedCommunicator::StagedCommunicator(std::unique_ptr<Communicator> host, Device device)
    : Communicator(Wrapping{}, *host), host_(std::move(host)), device_(device) {
  MERAK_CHECK(host_->memory() == DeviceType::CPU, "staging ", describe(), " through the host: ",
              "the wrapped ", host_->backend(), " communicator is not one of host memory");
  MERAK_CHECK(!device_.is_cpu(), "staging ", describe(), ": buffers on the host need no staging");
}

std::unique_ptr<WorkImpl> StagedCommunicator::post_batch(const std::vector<P2P>& ops) {
  std::vector<P2P> staged;
  std::vector<std::pair<Tensor, Buffer>> back;
  for (const P2P& p : ops) {
    const bool send = p.kind == P2P::Send;
    Tensor h = host_copy(p.buffer, send);
    staged.push_back({p.kind, h, p.peer, p.tag});
    if (!send) back.emplace_back(h, p.buffer);
  }
  return std::make_unique<StagedWork>(host_->ibatch(staged), std::move(back),
                                      "point to point (staged) on " + describe());
}

std::unique_ptr<WorkImpl> StagedCommunicator::post_all_reduce(const Buffer& b, ReduceOp op) {
  Tensor h = host_copy(b, true);
  return std::make_unique<StagedWork>(host_->iall_reduce(h, op),
                                      std::vector<std::pair<Tensor, Buffer>>{{h, b}},
                                      std::string("all_reduce (") + reduce_op_name(op) +
                                          ", staged) on " + describe());
}

std::unique_ptr<WorkImpl> StagedCommunicator::post_all_gather(
    const Buffer& in, const Buffer& out, const std::vector<int64_t>& counts) {
  Tensor hin = host_copy(in, true), hout = host_copy(out, false);
  return std::make_unique<StagedWork>(host_->iall_gather(hin, hout, counts),
                                      std::vector<std::pair<Tensor, Buffer>>{{hout, out}},
                                      "all_gather (staged) on " + describe());
}

std::unique_ptr<WorkImpl> StagedCommunicator::post_reduce_scatter(
    const Buffer& in, const Buffer& out, ReduceOp op, const std::vector<int64_t>& counts) {
  Tensor hin = host_copy(in, true), hout = host_copy(out, false);
  return std::make_unique<StagedWork>(host_->ireduce_scatter(hin, hout, op, counts),
                                      std::vector<std::pair<Tensor, Buffer>>{{hout, out}},
                                      "reduce_scatter (staged) on " + describe());
}

std::unique_ptr<WorkImpl> StagedCommunicator::post_broadcast(const Buffer& b, int root) {
  const bool mine = rank() == root;
  Tensor h = host_copy(b, mine);
  std::vector<std::pair<Tensor, Buffer>> back;
  if (!mine) back.emplace_back(h, b);
  return std::make_unique<StagedWork>(host_->ibroadcast(h, root), std::move(back),
                                      "broadcast (staged) on " + describe());
}

std::unique_ptr<WorkImpl> StagedCommunicator::post_barrier() {
  return std::make_unique<StagedWork>(host_->ibarrier(), std::vector<std::pair<Tensor, Buffer>>{},
                                      "barrier on " + describe());
}

CommFactory staged_backend(CommFactory host, Device device) {
  return [host, device](MPI_Comm group, const std::string& name) -> std::unique_ptr<Communicator> {
    return std::make_unique<StagedCommunicator>(host(group, name), device);
  };
}

}  // namespace merak::comm
