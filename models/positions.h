// Position ids 0..T-1 as an i64 tensor on a device (shape only on Meta).
#pragma once

#include "merak/core/tensor.h"

namespace merak::models {

inline Tensor positions(int64_t t, Device device) {
  Tensor p = Tensor::empty({t}, DType::I64, device);
  if (device.is_cpu())
    for (int64_t i = 0; i < t; ++i) p.data<int64_t>()[i] = i;
  return p;
}

}  // namespace merak::models
