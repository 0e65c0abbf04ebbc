#include "merak/optim/device_optim.h"

#include <map>
#include <mutex>

namespace merak::optim {
namespace {

struct Table {
  std::mutex mu;
  std::map<DeviceType, DeviceOptimizer> kernels;
};

Table& table() {
  static Table t;
  return t;
}

}  // namespace

void register_device_optimizer(DeviceType device, const DeviceOptimizer& kernels) {
  MERAK_CHECK(kernels.adamw && kernels.sum_of_squares && kernels.all_finite,
              "register_device_optimizer: every kernel must be given for ",
              Device{device, 0}.str());
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  t.kernels[device] = kernels;
}

const DeviceOptimizer& device_optimizer(DeviceType device, const char* what) {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  auto it = t.kernels.find(device);
  MERAK_CHECK(it != t.kernels.end(), what, ": no optimizer kernels for ", Device{device, 0}.str(),
              " tensors in this build");
  return it->second;
}

}  // namespace merak::optim
