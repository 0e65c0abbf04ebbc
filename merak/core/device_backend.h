// What the tensor core needs from a device backend other than the CPU's: copies (within the
// device, between it and the host) and fills. The CUDA backend registers its functions when it
// is linked in; without it, touching a CUDA tensor's data is an error saying so.
#pragma once

#include <cstddef>
#include <functional>

#include "merak/core/device.h"

namespace merak {

class Tensor;

struct DeviceBackend {
  // `bytes` from src to dst, contiguous, where either side may be the host (Device::cpu()).
  std::function<void(void* dst, Device dst_device, const void* src, Device src_device,
                     size_t bytes)>
      copy_bytes;
  // dst = src element by element, both on the backend's device, any strides.
  std::function<void(const Tensor& dst, const Tensor& src)> strided_copy;
  // Every element of a contiguous tensor set to `value` (in its dtype).
  std::function<void(const Tensor& t, double value)> fill;
};

void register_device_backend(DeviceType type, DeviceBackend backend);
// The registered backend; an error naming the device when none is linked in.
const DeviceBackend& device_backend(DeviceType type);

}  // namespace merak
