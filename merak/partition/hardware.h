// Hardware profiles: what the cost model knows about a device and its links, read from YAML
// (configs/hardware/*.yaml). Vendor profiles quote the spec sheet; cpu-local.yaml is measured
// on this machine by `merak_partition calibrate`.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
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

// How fast a matrix product runs, by its shape. The device deals the output's tile_m x tile_n
// blocks out to `units` compute units in waves (SMs on a GPU, threads on a CPU); a last wave
// that leaves units idle, or blocks hanging over the matrix's edge, are lost time. Each
// block's loop over the depth K reaches K / (K + k_half) of its speed (a fixed start and
// finish per block). Large, well-shaped products reach `efficiency` of the peak. A product
// of fewer than units x min_macs_per_unit multiply-adds uses fewer units (a CPU GEMM gives
// a thread only work worth its hand-off; 0 on GPUs). A CPU GEMM also first copies its f32
// operands into the kernel's panels, at pack_bandwidth bytes/s a unit: each unit packs its
// share of the side it splits and all of the other operand (0 on GPUs: no such step).
struct GemmCurve {
  double efficiency = 1;
  int64_t tile_m = 1, tile_n = 1;
  int64_t units = 1;
  double k_half = 0;
  double min_macs_per_unit = 0;
  double pack_bandwidth = 0;

  // Fraction of peak that `batch` products [m, k] x [k, n] run their arithmetic at.
  double at(double batch, double m, double n, double k) const;
  // Seconds those products take on units that together compute `peak` FLOP/s: the arithmetic
  // at at()'s fraction of it, then the packing.
  double seconds(double peak, double batch, double m, double n, double k) const;

 private:
  double units_used(double batch, double m, double n, double k) const;
};

struct Hardware {
  std::string name;               // "a100-80g"
  std::string device;             // "NVIDIA A100 80GB SXM4"
  std::string source;             // where the numbers come from (spec sheet, calibration)
  int64_t memory_bytes = 0;       // per device (what the device reports; see usable_memory)
  // Per device, out of the job's reach: the CUDA context, NCCL's and cuBLAS's buffers (the
  // profile's optional reserved_gib; CPU ranks have none worth counting).
  int64_t reserved_bytes = 0;
  double peak_f32 = 0, peak_tf32 = 0, peak_bf16 = 0, peak_f16 = 0;  // dense FLOP/s
  double memory_bandwidth = 0;    // bytes/s
  GemmCurve gemm;                 // matrix products
  // Achievable fractions of peak for the other kernels: their time is
  // max(flops / (peak * compute_efficiency), bytes / (memory_bandwidth * memory_efficiency)).
  double compute_efficiency = 1;
  double memory_efficiency = 1;
  double kernel_overhead = 0;     // seconds every kernel (CPU: every op call) costs on top
  // CPUs: the node's cores (gemm.units), memory and bandwidth are one pool its ranks split
  // between them: each rank runs cores / ranks threads, at least one, so with more ranks than
  // cores the ranks take turns on the cores (concurrent_ranks).
  bool shared_node = false;
  Precision precision = Precision::F32;  // what training on it uses by default
  int64_t devices_per_node = 1;
  Link intra_node;                // NVLink / shared memory
  Link inter_node;                // the network
  // Where each number comes from, by key (peak_tflops, gemm, ...): each starts with its kind,
  // "datasheet", "published", "measured" or "estimate", then says which.
  std::map<std::string, std::string> sources;

  double peak(Precision p) const;  // 0 when the device has no such arithmetic
  // The bytes a plan may fill: memory_bytes less reserved_bytes, less kMemoryMargin of the rest
  // for what the memory model does not count (allocator fragmentation and caching, temporaries
  // between ops: measured CPU peaks ran 6-8% above its estimates). Every fit is checked on it.
  static constexpr double kMemoryMargin = 0.08;
  double usable_memory() const {
    return double(memory_bytes - reserved_bytes) * (1 - kMemoryMargin);
  }
  // What one of `ranks_on_node` ranks on a node computes with while it runs (its threads' share
  // of the cores and bandwidth; its share of the memory): the profile itself unless shared_node.
  Hardware per_rank(int64_t ranks_on_node) const;
  // What one rank of a job of `world` ranks gets (nodes filled devices_per_node at a time).
  Hardware for_world(int64_t world) const { return per_rank(std::min(world, devices_per_node)); }
  // How many of a job's `world` ranks can compute at once at per_rank's speed: all of them,
  // unless nodes are shared and hold more threads than cores (then the cores' worth of ranks;
  // the others wait their turn, and all slow down evenly).
  double concurrent_ranks(int64_t world) const;
  // The share of per_rank's speed each rank gets while all `world` ranks compute at once.
  double all_busy_share(int64_t world) const {
    return std::min(1.0, concurrent_ranks(world) / double(world));
  }
};

// A CPU's profile (shared_node; configs/hardware/cpu-local.yaml is one) describes the machine it
// was calibrated on: on another CPU its step-time predictions, and so the layout search's
// ranking, are off by about the ratio of their speeds.
bool is_cpu_profile(const Hardware& hw);
// The warning for a CPU measuring `core_gflops` a core (merak/core/fma_peak.h) with profile
// `name`: empty when `hw` is not a CPU's profile or the speeds are within 20% of each other.
std::string cpu_profile_warning(const Hardware& hw, const std::string& name, double core_gflops);
// The same for the profile called `name` (find_hardware), this CPU measured here when
// core_gflops is 0 (for a CPU's profile only); empty too when the profile does not load, which
// whoever uses it reports.
std::string cpu_profile_warning(const std::string& name, double core_gflops = 0);

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
