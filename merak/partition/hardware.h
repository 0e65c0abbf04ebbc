// Hardware profiles: what the cost model knows about a device and its links, read from YAML
// (configs/hardware/*.yaml). Vendor profiles quote the spec sheet; cpu-local.yaml is measured
// on this machine by `merak_partition calibrate`.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace merak::partition {

// Arithmetic the cost model can price: f32 (CPUs, and GPUs without tensor cores), tf32, and the
// 16-bit formats of mixed-precision training.
enum class Precision { F32, TF32, BF16, F16 };
const char* precision_name(Precision p);
Precision parse_precision(const std::string& name);  // throws std::invalid_argument

struct Link {
  double bandwidth = 0;  // bytes/s, one direction, per device
  double latency = 0;    // seconds per message
};

struct Hardware {
  std::string name;               // "a100-80g"
  std::string device;             // "NVIDIA A100 80GB SXM4"
  std::string source;             // where the numbers come from (spec sheet, calibration)
  int64_t memory_bytes = 0;       // per device
  double peak_f32 = 0, peak_tf32 = 0, peak_bf16 = 0, peak_f16 = 0;  // dense FLOP/s
  double memory_bandwidth = 0;    // bytes/s
  // Achievable fractions of peak: node time = max(flops / (peak * compute_efficiency),
  // bytes / (memory_bandwidth * memory_efficiency)).
  double compute_efficiency = 1;
  double memory_efficiency = 1;
  Precision precision = Precision::F32;  // what training on it uses by default
  int64_t devices_per_node = 1;
  Link intra_node;                // NVLink / shared memory
  Link inter_node;                // the network

  double peak(Precision p) const;  // 0 when the device has no such arithmetic
};

// A bad profile: what() is one line "FILE: key 'a.b': what is wrong".
class HardwareError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

Hardware load_hardware(const std::string& path);
Hardware parse_hardware(const std::string& yaml_text, const std::string& name);
// The profile as YAML that parse_hardware reads back; `comment` lines go first, each after "# ".
std::string hardware_yaml(const Hardware& hw, const std::vector<std::string>& comment);

// A profile by name ("a100-80g") or path (anything with '/' or ending in .yaml). Names are
// looked up in $MERAK_HARDWARE_DIR, then configs/hardware under the working directory, then
// under the Bazel runfiles of the running binary. Throws HardwareError listing where it looked.
std::string find_hardware(const std::string& name_or_path);

}  // namespace merak::partition
