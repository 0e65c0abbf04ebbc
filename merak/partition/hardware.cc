#include "merak/partition/hardware.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include <yaml-cpp/yaml.h>

#include "merak/core/fma_peak.h"
#include "merak/core/read_file.h"

namespace merak::partition {
namespace {

// Reads one profile, remembering the file name for messages and which keys were used so an
// unknown (misspelt) key is an error rather than silently ignored.
class Reader {
 public:
  Reader(const YAML::Node& root, const std::string& file) : root_(root), file_(file) {
    if (!root.IsMap()) fail("", "expected a map of keys (name, memory_gib, peak_tflops, ...)");
  }

  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    throw HardwareError(file_ + ": " + (key.empty() ? "" : "key '" + key + "': ") + what);
  }

  // The node at a dotted key; `found` false (and a null node) when it is absent.
  YAML::Node node(const std::string& key, bool required, bool* found = nullptr) {
    seen_.insert(key);
    if (found) *found = false;
    YAML::Node n;
    n.reset(root_);  // reset, not assignment: assigning a yaml-cpp node rewrites its content
    std::stringstream path(key);
    std::string part;
    while (std::getline(path, part, '.')) {
      if (!n.IsMap()) fail(key, "expected a map above it");
      const YAML::Node& parent = n;  // const lookup: does not insert the key
      YAML::Node child = parent[part];
      if (!child) {
        if (required) fail(key, "missing");
        return YAML::Node();
      }
      n.reset(child);
    }
    if (found) *found = true;
    return n;
  }

  std::string text(const std::string& key, bool required = true) {
    bool found = false;
    YAML::Node n = node(key, required, &found);
    if (!found) return "";
    if (!n.IsScalar()) fail(key, "expected a string");
    return n.as<std::string>();
  }

  // A number > 0 (>= 0 with allow_zero).
  double number(const std::string& key, bool required = true, bool allow_zero = false) {
    bool found = false;
    YAML::Node n = node(key, required, &found);
    if (!found) return 0;
    double v = 0;
    try {
      if (!n.IsScalar()) throw YAML::Exception(YAML::Mark::null_mark(), "");
      v = n.as<double>();
    } catch (const YAML::Exception&) {
      fail(key, "expected a number");
    }
    if (!(v > 0 || (allow_zero && v == 0))) fail(key, "must be " + std::string(allow_zero ? ">= 0" : "> 0"));
    return v;
  }

  // A whole number >= 1.
  int64_t count(const std::string& key) {
    const double v = number(key);
    if (v != double(int64_t(v))) fail(key, "must be an integer");
    return int64_t(v);
  }

  // Two whole numbers >= 1: [a, b].
  std::pair<int64_t, int64_t> pair_of_counts(const std::string& key) {
    YAML::Node n = node(key, true);
    if (!n.IsSequence() || n.size() != 2) fail(key, "expected two integers [m, n]");
    int64_t v[2];
    for (size_t i = 0; i < 2; ++i) {
      double d = 0;
      try {
        d = n[i].as<double>();
      } catch (const YAML::Exception&) {
        fail(key, "expected two integers [m, n]");
      }
      if (!(d >= 1) || d != double(int64_t(d))) fail(key, "entries must be integers >= 1");
      v[i] = int64_t(d);
    }
    return {v[0], v[1]};
  }

  bool flag(const std::string& key) {
    bool found = false;
    YAML::Node n = node(key, false, &found);
    if (!found) return false;
    try {
      if (!n.IsScalar()) throw YAML::Exception(YAML::Mark::null_mark(), "");
      return n.as<bool>();
    } catch (const YAML::Exception&) {
      fail(key, "expected true or false");
    }
  }

  // A map of text values; every key under it counts as read.
  std::map<std::string, std::string> texts(const std::string& key) {
    YAML::Node n = node(key, true);
    if (!n.IsMap()) fail(key, "expected a map of key: text");
    std::map<std::string, std::string> out;
    for (const auto& entry : n) {
      const std::string k = entry.first.as<std::string>();
      seen_.insert(key + "." + k);
      if (!entry.second.IsScalar()) fail(key + "." + k, "expected a string");
      out[k] = entry.second.as<std::string>();
    }
    return out;
  }

  // Every key of the document must have been read.
  void check_unknown(const YAML::Node& n, const std::string& prefix) const {
    for (const auto& entry : n) {
      const std::string key = prefix + entry.first.as<std::string>();
      if (entry.second.IsMap() && !seen_.count(key)) {
        check_unknown(entry.second, key + ".");
      } else if (!seen_.count(key)) {
        fail(key, "unknown key");
      }
    }
  }
  void check_unknown() const { check_unknown(root_, ""); }

 private:
  YAML::Node root_;
  std::string file_;
  std::set<std::string> seen_;
};

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// What every profile says the source of, and the kinds of source there are.
const char* const kSourced[] = {"peak_tflops",      "memory_bandwidth_gbs", "gemm",
                                "compute_efficiency", "memory_efficiency",  "kernel_overhead_us",
                                "intra_node",       "inter_node"};
const char* const kSourceKinds[] = {"datasheet", "published", "measured", "estimate"};

bool readable(const std::string& path) { return std::ifstream(path).good(); }

}  // namespace

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::F32: return "f32";
    case Precision::TF32: return "tf32";
    case Precision::BF16: return "bf16";
    case Precision::F16: return "f16";
  }
  return "?";
}

Precision parse_precision(const std::string& name) {
  if (name == "f32") return Precision::F32;
  if (name == "tf32") return Precision::TF32;
  if (name == "bf16") return Precision::BF16;
  if (name == "f16") return Precision::F16;
  throw std::invalid_argument("precision '" + name + "' is not one of f32, tf32, bf16, f16");
}

double GemmCurve::units_used(double batch, double m, double n, double k) const {
  if (min_macs_per_unit <= 0) return double(units);
  return std::clamp(std::floor(batch * m * n * k / min_macs_per_unit), 1.0, double(units));
}

double GemmCurve::at(double batch, double m, double n, double k) const {
  if (batch <= 0 || m <= 0 || n <= 0 || k <= 0) return efficiency;
  // The units the product is dealt to, and the share of their time its tiles fill.
  const double used = units_used(batch, m, n, k);
  const double tiles = batch * std::ceil(m / double(tile_m)) * std::ceil(n / double(tile_n));
  const double waves = std::ceil(tiles / used);
  const double fill = batch * m * n / (waves * double(units) * double(tile_m * tile_n));
  return efficiency * fill * k / (k + k_half);
}

double GemmCurve::seconds(double peak, double batch, double m, double n, double k) const {
  if (batch <= 0 || m <= 0 || n <= 0 || k <= 0) return 0;
  const double arithmetic = 2 * batch * m * n * k / (peak * at(batch, m, n, k));
  if (pack_bandwidth <= 0) return arithmetic;
  // A batch is dealt out whole products at a time; one product is split along its longer
  // output side, so every unit packs the shorter side's operand whole.
  const double used = units_used(batch, m, n, k);
  const double floats = batch >= used ? batch / used * k * (m + n)
                                      : k * (std::min(m, n) + std::max(m, n) / used);
  return arithmetic + 4 * floats / pack_bandwidth;
}

namespace {

// The threads each of `ranks` ranks on a node of `cores` runs (as the trainer sets them).
int64_t threads_per_rank(int64_t cores, int64_t ranks) {
  return std::max<int64_t>(1, cores / std::max<int64_t>(1, ranks));
}

}  // namespace

bool is_cpu_profile(const Hardware& hw) {
  return hw.shared_node && hw.devices_per_node >= 1 && hw.peak_f32 > 0;
}

std::string cpu_profile_warning(const Hardware& hw, const std::string& name, double core_gflops) {
  if (!is_cpu_profile(hw) || !(core_gflops > 0)) return "";
  const double profiled = hw.peak_f32 / double(hw.devices_per_node) / 1e9;
  const double ratio = core_gflops / profiled;
  if (ratio >= 0.8 && ratio <= 1.25) return "";
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "hardware profile '%s' was calibrated on a CPU of %.0f GFLOP/s a core; this one "
                "measures %.0f, so its step-time predictions are off by about %.1fx (profile this "
                "machine: merak_partition calibrate -o FILE.yaml, then parallel.hardware: "
                "FILE.yaml)",
                name.c_str(), profiled, core_gflops, std::max(ratio, 1 / ratio));
  return buf;
}

std::string cpu_profile_warning(const std::string& name, double core_gflops) {
  Hardware hw;
  try {
    hw = load_hardware(find_hardware(name));
  } catch (const HardwareError&) {
    return "";
  }
  if (!is_cpu_profile(hw)) return "";
  return cpu_profile_warning(hw, name,
                             core_gflops > 0 ? core_gflops : bench::measured_fma_peak_gflops());
}

Hardware Hardware::per_rank(int64_t ranks_on_node) const {
  if (!shared_node || ranks_on_node <= 1) return *this;
  const int64_t cores = std::max<int64_t>(1, gemm.units);
  const int64_t threads = threads_per_rank(cores, ranks_on_node);
  const double share = double(threads) / double(cores);
  Hardware h = *this;
  h.peak_f32 *= share, h.peak_tf32 *= share, h.peak_bf16 *= share, h.peak_f16 *= share;
  h.memory_bandwidth *= share;
  h.memory_bytes = int64_t(double(memory_bytes) / double(ranks_on_node));
  h.reserved_bytes = int64_t(double(reserved_bytes) / double(ranks_on_node));
  h.gemm.units = threads;
  return h;
}

double Hardware::concurrent_ranks(int64_t world) const {
  const int64_t on_node = std::min(world, devices_per_node);
  if (!shared_node || on_node <= 1) return double(world);
  const int64_t cores = std::max<int64_t>(1, gemm.units);
  const double per_node =
      std::min(double(on_node), double(cores) / double(threads_per_rank(cores, on_node)));
  const int64_t nodes = (world + on_node - 1) / on_node;
  return per_node * double(nodes);
}

double Hardware::peak(Precision p) const {
  switch (p) {
    case Precision::F32: return peak_f32;
    case Precision::TF32: return peak_tf32;
    case Precision::BF16: return peak_bf16;
    case Precision::F16: return peak_f16;
  }
  return 0;
}

Hardware parse_hardware(const std::string& yaml_text, const std::string& name) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    throw HardwareError(name + ": not valid YAML (line " + std::to_string(e.mark.line + 1) +
                        ": " + e.msg + ")");
  }
  Reader r(root, name);
  Hardware hw;
  hw.name = r.text("name");
  hw.device = r.text("device");
  hw.source = r.text("source");
  hw.memory_bytes = int64_t(r.number("memory_gib") * kGiB);
  hw.reserved_bytes = int64_t(r.number("reserved_gib", false, true) * kGiB);
  if (hw.reserved_bytes >= hw.memory_bytes)
    r.fail("reserved_gib", "must be less than memory_gib");
  hw.peak_f32 = r.number("peak_tflops.f32") * 1e12;
  hw.peak_tf32 = r.number("peak_tflops.tf32", false, true) * 1e12;
  hw.peak_bf16 = r.number("peak_tflops.bf16", false, true) * 1e12;
  hw.peak_f16 = r.number("peak_tflops.f16", false, true) * 1e12;
  hw.memory_bandwidth = r.number("memory_bandwidth_gbs") * 1e9;
  hw.gemm.efficiency = r.number("gemm.efficiency");
  if (hw.gemm.efficiency > 1) r.fail("gemm.efficiency", "must be <= 1");
  std::tie(hw.gemm.tile_m, hw.gemm.tile_n) = r.pair_of_counts("gemm.tile");
  hw.gemm.units = r.count("gemm.units");
  hw.gemm.k_half = r.number("gemm.k_half", true, true);
  hw.gemm.min_macs_per_unit = r.number("gemm.min_macs_per_unit", false, true);
  hw.gemm.pack_bandwidth = r.number("gemm.pack_gbs", false, true) * 1e9;
  hw.compute_efficiency = r.number("compute_efficiency");
  hw.memory_efficiency = r.number("memory_efficiency");
  if (hw.compute_efficiency > 1) r.fail("compute_efficiency", "must be <= 1");
  if (hw.memory_efficiency > 1) r.fail("memory_efficiency", "must be <= 1");
  hw.kernel_overhead = r.number("kernel_overhead_us", true, true) * 1e-6;
  hw.shared_node = r.flag("shared_node");
  try {
    hw.precision = parse_precision(r.text("precision"));
  } catch (const std::invalid_argument& e) {
    r.fail("precision", e.what());
  }
  if (hw.peak(hw.precision) <= 0)
    r.fail("precision", std::string("the profile gives no peak_tflops.") +
                            precision_name(hw.precision));
  const double devices = r.number("devices_per_node");
  if (devices != double(int64_t(devices))) r.fail("devices_per_node", "must be an integer");
  hw.devices_per_node = int64_t(devices);
  hw.intra_node.bandwidth = r.number("intra_node.bandwidth_gbs") * 1e9;
  hw.intra_node.latency = r.number("intra_node.latency_us", true, true) * 1e-6;
  hw.inter_node.bandwidth = r.number("inter_node.bandwidth_gbs") * 1e9;
  hw.inter_node.latency = r.number("inter_node.latency_us", true, true) * 1e-6;
  hw.sources = r.texts("sources");
  for (const char* key : kSourced)
    if (!hw.sources.count(key))
      r.fail(std::string("sources.") + key, "missing: say where the number comes from");
  for (const auto& [key, text] : hw.sources) {
    bool kind = false;
    for (const char* k : kSourceKinds) kind = kind || text.rfind(k, 0) == 0;
    if (!kind)
      r.fail("sources." + key, "must start with datasheet, published, measured or estimate, got '" +
                                    text + "'");
  }
  r.check_unknown();
  return hw;
}

Hardware load_hardware(const std::string& path) {
  std::string text, why;
  if (!read_file(path, &text, &why))
    throw HardwareError(path + ": cannot read hardware profile (" + why + ")");
  return parse_hardware(text, path);
}

std::string hardware_yaml(const Hardware& hw, const std::vector<std::string>& comment) {
  std::ostringstream os;
  os.precision(6);
  for (const std::string& line : comment) os << "# " << line << "\n";
  auto quoted = [](const std::string& s) {
    std::string q = "\"";
    for (char c : s) q += (c == '"' || c == '\\') ? std::string("\\") + c : std::string(1, c);
    return q + "\"";
  };
  os << "name: " << quoted(hw.name) << "\n";
  os << "device: " << quoted(hw.device) << "\n";
  os << "source: " << quoted(hw.source) << "\n";
  os << "memory_gib: " << double(hw.memory_bytes) / kGiB << "\n";
  if (hw.reserved_bytes > 0) os << "reserved_gib: " << double(hw.reserved_bytes) / kGiB << "\n";
  os << "peak_tflops:\n  f32: " << hw.peak_f32 / 1e12 << "\n";
  if (hw.peak_tf32 > 0) os << "  tf32: " << hw.peak_tf32 / 1e12 << "\n";
  if (hw.peak_bf16 > 0) os << "  bf16: " << hw.peak_bf16 / 1e12 << "\n";
  if (hw.peak_f16 > 0) os << "  f16: " << hw.peak_f16 / 1e12 << "\n";
  os << "memory_bandwidth_gbs: " << hw.memory_bandwidth / 1e9 << "\n";
  os << "gemm:\n  efficiency: " << hw.gemm.efficiency << "\n  tile: [" << hw.gemm.tile_m << ", "
     << hw.gemm.tile_n << "]\n  units: " << hw.gemm.units << "\n  k_half: " << hw.gemm.k_half
     << "\n";
  if (hw.gemm.min_macs_per_unit > 0)
    os << "  min_macs_per_unit: " << std::llround(hw.gemm.min_macs_per_unit) << "\n";
  if (hw.gemm.pack_bandwidth > 0) os << "  pack_gbs: " << hw.gemm.pack_bandwidth / 1e9 << "\n";
  os << "compute_efficiency: " << hw.compute_efficiency << "\n";
  os << "memory_efficiency: " << hw.memory_efficiency << "\n";
  os << "kernel_overhead_us: " << hw.kernel_overhead * 1e6 << "\n";
  if (hw.shared_node) os << "shared_node: true\n";
  os << "precision: " << precision_name(hw.precision) << "\n";
  os << "devices_per_node: " << hw.devices_per_node << "\n";
  os << "intra_node:\n  bandwidth_gbs: " << hw.intra_node.bandwidth / 1e9
     << "\n  latency_us: " << hw.intra_node.latency * 1e6 << "\n";
  os << "inter_node:\n  bandwidth_gbs: " << hw.inter_node.bandwidth / 1e9
     << "\n  latency_us: " << hw.inter_node.latency * 1e6 << "\n";
  os << "sources:\n";
  for (const auto& [key, text] : hw.sources) os << "  " << key << ": " << quoted(text) << "\n";
  return os.str();
}

std::string find_hardware(const std::string& name_or_path) {
  const std::string& s = name_or_path;
  if (s.find('/') != std::string::npos ||
      (s.size() > 5 && s.compare(s.size() - 5, 5, ".yaml") == 0)) {
    if (!readable(s)) throw HardwareError(s + ": cannot read hardware profile");
    return s;
  }
  std::vector<std::string> dirs;
  if (const char* env = std::getenv("MERAK_HARDWARE_DIR")) dirs.push_back(env);
  dirs.push_back("configs/hardware");
  // Bazel: the binary's runfiles tree holds the workspace's ("merak") data files.
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n > 0) {
    self[n] = '\0';
    dirs.push_back(std::string(self) + ".runfiles/merak/configs/hardware");
  }
  if (const char* rf = std::getenv("RUNFILES_DIR"))
    dirs.push_back(std::string(rf) + "/merak/configs/hardware");
  std::string tried;
  for (const std::string& d : dirs) {
    const std::string path = d + "/" + s + ".yaml";
    if (readable(path)) return path;
    tried += (tried.empty() ? "" : ", ") + d;
  }
  throw HardwareError("hardware profile '" + s + "' not found (looked in " + tried + ")");
}

}  // namespace merak::partition
