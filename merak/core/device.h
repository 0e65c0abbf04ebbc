// Where a tensor lives. Meta tensors carry shape and dtype only and never allocate.
#pragma once

#include <string>

namespace merak {

enum class DeviceType : uint8_t { CPU, CUDA, Meta };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;  // GPU ordinal for CUDA; 0 otherwise

  static Device cpu() { return {DeviceType::CPU, 0}; }
  static Device meta() { return {DeviceType::Meta, 0}; }
  static Device cuda(int i = 0) { return {DeviceType::CUDA, i}; }

  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_meta() const { return type == DeviceType::Meta; }
  bool is_cuda() const { return type == DeviceType::CUDA; }
  bool operator==(const Device& o) const { return type == o.type && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
  std::string str() const;
};

}  // namespace merak
