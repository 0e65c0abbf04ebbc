#include "merak/core/device_backend.h"

#include <mutex>

#include "merak/core/error.h"

namespace merak {
namespace {

std::mutex g_mu;
DeviceBackend g_cuda;
bool g_has_cuda = false;

}  // namespace

void register_device_backend(DeviceType type, DeviceBackend backend) {
  MERAK_CHECK(type == DeviceType::CUDA, "only a CUDA backend can be registered");
  MERAK_CHECK(backend.copy_bytes && backend.strided_copy && backend.fill,
              "a device backend needs copy_bytes, strided_copy and fill");
  std::lock_guard<std::mutex> lock(g_mu);
  g_cuda = std::move(backend);
  g_has_cuda = true;
}

const DeviceBackend& device_backend(DeviceType type) {
  std::lock_guard<std::mutex> lock(g_mu);
  MERAK_CHECK(type == DeviceType::CUDA && g_has_cuda, "no backend for ",
              type == DeviceType::CUDA ? "CUDA" : "this device",
              " tensors: this build has no CUDA backend linked in");
  return g_cuda;
}

}  // namespace merak
