// Hardware profiles: the vendor profiles read with their spec-sheet numbers, the calibrated
// cpu-local profile is well formed, a profile survives writing and reading back, and a bad one
// is an error naming the file and the key.
#include "merak/partition/hardware.h"

#include "tests/partition/helpers.h"

using namespace merak;
using namespace merak::partition;

TEST_CASE("vendor profiles carry the spec sheets' dense peaks, bandwidths and memory",
          "[partition]") {
  const Hardware a100 = test::profile("a100-80g");
  CHECK(a100.name == "a100-80g");
  CHECK(a100.peak(Precision::BF16) == Approx(312e12));
  CHECK(a100.peak(Precision::F32) == Approx(19.5e12));
  CHECK(a100.peak(Precision::TF32) == Approx(156e12));
  CHECK(a100.memory_bandwidth == Approx(2039e9));
  CHECK(a100.memory_bytes == int64_t(80) << 30);
  CHECK(a100.precision == Precision::BF16);
  CHECK(a100.intra_node.bandwidth > a100.inter_node.bandwidth);

  const Hardware h100 = test::profile("h100-80g");
  const Hardware h200 = test::profile("h200");
  CHECK(h100.peak(Precision::BF16) == Approx(989.4e12));
  CHECK(h200.peak(Precision::BF16) == h100.peak(Precision::BF16));  // the same Hopper compute
  CHECK(h200.memory_bandwidth == Approx(4800e9));
  CHECK(h200.memory_bytes > h100.memory_bytes);
}

TEST_CASE("the calibrated cpu-local profile is f32 with measured, plausible numbers",
          "[partition]") {
  const Hardware cpu = test::profile("cpu-local");
  CHECK(cpu.precision == Precision::F32);
  CHECK(cpu.peak(Precision::BF16) == 0);
  CHECK(cpu.compute_efficiency > 0);
  CHECK(cpu.compute_efficiency <= 1);
  CHECK(cpu.memory_bandwidth > 1e8);
  CHECK(cpu.intra_node.bandwidth > 1e7);
  CHECK(cpu.source.find("calibrate") != std::string::npos);
}

TEST_CASE("a profile written as YAML reads back the same", "[partition]") {
  const Hardware a = test::profile("h100-80g");
  const Hardware b = parse_hardware(hardware_yaml(a, {"round trip"}), "copy.yaml");
  CHECK(b.name == a.name);
  CHECK(b.device == a.device);
  CHECK(b.memory_bytes == a.memory_bytes);
  CHECK(b.peak(Precision::BF16) == Approx(a.peak(Precision::BF16)));
  CHECK(b.peak(Precision::F16) == Approx(a.peak(Precision::F16)));
  CHECK(b.memory_bandwidth == Approx(a.memory_bandwidth));
  CHECK(b.compute_efficiency == Approx(a.compute_efficiency));
  CHECK(b.inter_node.latency == Approx(a.inter_node.latency));
  CHECK(b.devices_per_node == a.devices_per_node);
  CHECK(b.precision == a.precision);
}

TEST_CASE("bad profiles name the file and the key", "[partition]") {
  const std::string good = hardware_yaml(test::profile("a100-80g"), {});
  auto with = [&](const std::string& from, const std::string& to) {
    std::string s = good;
    const size_t at = s.find(from);
    REQUIRE(at != std::string::npos);
    return s.replace(at, from.size(), to);
  };
  CHECK_THROWS_WITH(parse_hardware(with("memory_gib: 80", "memory_gib: -1"), "x.yaml"),
                    "x.yaml: key 'memory_gib': must be > 0");
  CHECK_THROWS_WITH(parse_hardware(with("memory_gib: 80", "memory_gb: 80"), "x.yaml"),
                    Catch::StartsWith("x.yaml: key 'memory_gib': missing"));
  CHECK_THROWS_WITH(parse_hardware(good + "nvlink_gen: 3\n", "x.yaml"),
                    "x.yaml: key 'nvlink_gen': unknown key");
  CHECK_THROWS_WITH(parse_hardware(with("bf16: 312", "bf16: fast"), "x.yaml"),
                    "x.yaml: key 'peak_tflops.bf16': expected a number");
  CHECK_THROWS_WITH(parse_hardware(with("precision: bf16", "precision: fp8"), "x.yaml"),
                    Catch::StartsWith("x.yaml: key 'precision': precision 'fp8' is not one of"));
  CHECK_THROWS_WITH(parse_hardware(with("compute_efficiency: 0.7", "compute_efficiency: 1.5"),
                                   "x.yaml"),
                    "x.yaml: key 'compute_efficiency': must be <= 1");
  CHECK_THROWS_WITH(parse_hardware("name: [", "x.yaml"), Catch::StartsWith("x.yaml: not valid YAML"));
  CHECK_THROWS_WITH(load_hardware("no/such.yaml"), "no/such.yaml: cannot read hardware profile");
  CHECK_THROWS_WITH(find_hardware("tpu-v9"), Catch::StartsWith("hardware profile 'tpu-v9' not found"));
}
