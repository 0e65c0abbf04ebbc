// Hardware profiles: the vendor profiles read with their spec-sheet numbers and a source for
// every number, the calibrated cpu-local profile is well formed, the GEMM curve's shape terms,
// a shared CPU node split between its ranks, a profile survives writing and reading back, and
// a bad one is an error naming the file and the key.
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
  for (const Hardware* hw : {&a100, &h100, &h200}) {
    INFO(hw->name);
    CHECK(hw->sources.at("peak_tflops").rfind("datasheet", 0) == 0);
    CHECK(hw->sources.count("gemm") == 1);
    CHECK_FALSE(hw->shared_node);
  }
  CHECK(a100.gemm.units == 108);  // SMs
  CHECK(h100.gemm.units == 132);
}

TEST_CASE("the GEMM curve loses the idle units of a last wave, edge tiles and shallow depths",
          "[partition]") {
  GemmCurve c;
  c.efficiency = 0.8, c.tile_m = 128, c.tile_n = 128, c.units = 100, c.k_half = 64;
  // 100 tiles of 128 x 128 fill one wave: only the depth term is lost.
  CHECK(c.at(1, 1280, 1280, 4096) == Approx(0.8 * 4096.0 / 4160.0));
  // 101 tiles take two waves, the second with 99 units idle.
  CHECK(c.at(1, 1280 + 128, 1280, 4096) == Approx(0.8 * 110.0 / 200.0 * 4096.0 / 4160.0));
  // A 64-row product fills half of each tile's rows.
  CHECK(c.at(1, 64, 128 * 100, 4096) == Approx(0.8 * 0.5 * 4096.0 / 4160.0));
  // Depth 64 runs at half speed.
  CHECK(c.at(1, 1280, 1280, 64) == Approx(0.4));
  // A batch of products shares the units.
  CHECK(c.at(100, 128, 128, 4096) == Approx(c.at(1, 1280, 1280, 4096)));
  // Too little work for every unit: a product of 10 units' worth runs on 10 of the 100.
  c.min_macs_per_unit = 1280.0 * 1280 * 4096 / 10;
  CHECK(c.at(1, 1280, 1280, 4096) == Approx(0.8 * 0.1 * 4096.0 / 4160.0));
}

TEST_CASE("a CPU GEMM's time adds packing: each unit packs the unsplit side's operand whole",
          "[partition]") {
  GemmCurve c;
  c.efficiency = 0.5, c.tile_m = 8, c.tile_n = 8, c.units = 2;
  const double peak = 200e9;  // both units
  // No packing bandwidth (a GPU's curve): the arithmetic alone.
  CHECK(c.seconds(peak, 1, 64, 256, 128) == Approx(2.0 * 64 * 256 * 128 / (peak * 0.5)));
  c.pack_bandwidth = 4e9;
  const double arithmetic = 2.0 * 64 * 256 * 128 / (peak * c.at(1, 64, 256, 128));
  // Split along n (256 columns, 128 a unit): a unit packs A's 64 x 128 and its 128 x 128 of B.
  CHECK(c.seconds(peak, 1, 64, 256, 128) ==
        Approx(arithmetic + 4.0 * 128 * (64 + 128) / 4e9));
  // A batch of 4 goes 2 products to a unit, each packed whole.
  const double batched = 4 * 2.0 * 64 * 256 * 128 / (peak * c.at(4, 64, 256, 128));
  CHECK(c.seconds(peak, 4, 64, 256, 128) == Approx(batched + 4.0 * 2 * 128 * (64 + 256) / 4e9));
  // Too little work for two units: one unit packs both operands.
  c.min_macs_per_unit = 64.0 * 256 * 128;
  CHECK(c.seconds(peak, 1, 64, 256, 128) ==
        Approx(2.0 * 64 * 256 * 128 / (peak * c.at(1, 64, 256, 128)) +
               4.0 * 128 * (64 + 256) / 4e9));
}

TEST_CASE("a shared CPU node gives each rank its share; a GPU profile is per device",
          "[partition]") {
  const Hardware cpu = test::profile("cpu-local");
  REQUIRE(cpu.shared_node);
  const Hardware half = cpu.per_rank(2);
  CHECK(half.peak_f32 == Approx(cpu.peak_f32 / 2));
  CHECK(half.memory_bandwidth == Approx(cpu.memory_bandwidth / 2));
  CHECK(half.memory_bytes == cpu.memory_bytes / 2);
  CHECK(half.gemm.units == std::max<int64_t>(1, cpu.gemm.units / 2));
  CHECK(cpu.per_rank(1).peak_f32 == cpu.peak_f32);
  const Hardware a100 = test::profile("a100-80g");
  CHECK(a100.per_rank(8).peak_bf16 == a100.peak_bf16);
  CHECK(a100.concurrent_ranks(64) == 64);
}

TEST_CASE("ranks outnumbering a CPU node's cores run a core each, taking turns",
          "[partition]") {
  Hardware two = test::profile("cpu-local");
  two.gemm.units = 2;  // two cores
  two.devices_per_node = 4;
  // Four ranks: a thread each, at one core's speed while running, a quarter of the memory;
  // two of them run at once.
  const Hardware quarter = two.per_rank(4);
  CHECK(quarter.gemm.units == 1);
  CHECK(quarter.peak_f32 == Approx(two.peak_f32 / 2));
  CHECK(quarter.memory_bandwidth == Approx(two.memory_bandwidth / 2));
  CHECK(quarter.memory_bytes == two.memory_bytes / 4);
  CHECK(two.concurrent_ranks(4) == 2);
  CHECK(two.concurrent_ranks(2) == 2);  // a core each: no turns
  CHECK(two.concurrent_ranks(8) == 4);  // two nodes of four ranks
  // Three ranks on eight cores: two threads each, all three at once.
  Hardware eight = two;
  eight.gemm.units = 8;
  CHECK(eight.per_rank(3).gemm.units == 2);
  CHECK(eight.per_rank(3).peak_f32 == Approx(eight.peak_f32 / 4));
  CHECK(eight.concurrent_ranks(3) == 3);
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
  CHECK(cpu.gemm.efficiency > 0);
  CHECK(cpu.gemm.efficiency <= 1);
  CHECK(cpu.kernel_overhead > 0);
  CHECK(cpu.sources.at("gemm").rfind("measured", 0) == 0);
}

TEST_CASE("a CPU profile calibrated on a CPU of another speed is warned of", "[partition]") {
  Hardware cpu = test::profile("cpu-local");
  cpu.devices_per_node = 4;
  cpu.peak_f32 = 4 * 200e9;  // 200 GFLOP/s a core
  CHECK(is_cpu_profile(cpu));
  for (double mine : {161.0, 200.0, 249.0}) CHECK(cpu_profile_warning(cpu, "p", mine).empty());
  CHECK_THAT(cpu_profile_warning(cpu, "p.yaml", 100),
             Catch::StartsWith("hardware profile 'p.yaml' was calibrated on a CPU of 200 GFLOP/s "
                               "a core; this one measures 100") &&
                 Catch::Contains("off by about 2.0x"));
  CHECK_THAT(cpu_profile_warning(cpu, "p", 300), Catch::Contains("off by about 1.5x"));
  // A GPU's profile is never compared with the host CPU.
  const Hardware gpu = test::profile("h100-80g");
  CHECK_FALSE(is_cpu_profile(gpu));
  CHECK(cpu_profile_warning(gpu, "h100-80g", 1).empty());
}

TEST_CASE("a profile written as YAML reads back the same", "[partition]") {
  Hardware a = test::profile("h100-80g");
  a.gemm.min_macs_per_unit = 1 << 20, a.gemm.pack_bandwidth = 12.5e9;  // (a CPU's terms too)
  const Hardware b = parse_hardware(hardware_yaml(a, {"round trip"}), "copy.yaml");
  CHECK(b.gemm.min_macs_per_unit == a.gemm.min_macs_per_unit);
  CHECK(b.gemm.pack_bandwidth == Approx(a.gemm.pack_bandwidth));
  CHECK(b.gemm.k_half == Approx(a.gemm.k_half));
  CHECK(b.name == a.name);
  CHECK(b.device == a.device);
  CHECK(b.memory_bytes == a.memory_bytes);
  CHECK(b.reserved_bytes == a.reserved_bytes);
  CHECK(b.peak(Precision::BF16) == Approx(a.peak(Precision::BF16)));
  CHECK(b.peak(Precision::F16) == Approx(a.peak(Precision::F16)));
  CHECK(b.memory_bandwidth == Approx(a.memory_bandwidth));
  CHECK(b.compute_efficiency == Approx(a.compute_efficiency));
  CHECK(b.gemm.efficiency == Approx(a.gemm.efficiency));
  CHECK(b.gemm.tile_n == a.gemm.tile_n);
  CHECK(b.gemm.units == a.gemm.units);
  CHECK(b.kernel_overhead == Approx(a.kernel_overhead));
  CHECK(b.sources == a.sources);
  CHECK(b.inter_node.latency == Approx(a.inter_node.latency));
  CHECK(b.devices_per_node == a.devices_per_node);
  CHECK(b.precision == a.precision);
}

TEST_CASE("plans fill a device's memory less its reserve and a margin", "[partition]") {
  // What the GPUs report (an H100 80GB 81559 MiB, an H200 143771 MiB), less the CUDA context's
  // and the communicators' share, less 8% for what the memory model does not count.
  const Hardware a100 = test::profile("a100-80g"), h100 = test::profile("h100-80g"),
                 h200 = test::profile("h200"), cpu = test::profile("cpu-local");
  const double gib = double(int64_t(1) << 30);
  CHECK(h100.memory_bytes / gib == Approx(79.6));
  CHECK(h200.memory_bytes / gib == Approx(140.4));
  CHECK(a100.usable_memory() / gib == Approx((80 - 2) * 0.92));
  CHECK(h100.usable_memory() / gib == Approx((79.6 - 2) * 0.92));
  CHECK(cpu.reserved_bytes == 0);
  CHECK(cpu.per_rank(2).usable_memory() == Approx(cpu.memory_bytes / 2 * 0.92).epsilon(1e-6));
  const std::string good = hardware_yaml(a100, {});
  const size_t at = good.find("reserved_gib: 2");
  REQUIRE(at != std::string::npos);
  CHECK_THROWS_WITH(parse_hardware(std::string(good).replace(at, 15, "reserved_gib: 80"), "x.yaml"),
                    "x.yaml: key 'reserved_gib': must be less than memory_gib");
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
  CHECK_THROWS_WITH(parse_hardware(with("compute_efficiency: 0.5", "compute_efficiency: 1.5"),
                                   "x.yaml"),
                    "x.yaml: key 'compute_efficiency': must be <= 1");
  CHECK_THROWS_WITH(parse_hardware(with("tile: [128, 128]", "tile: [128]"), "x.yaml"),
                    "x.yaml: key 'gemm.tile': expected two integers [m, n]");
  CHECK_THROWS_WITH(parse_hardware(with("  peak_tflops: \"datasheet", "  peak_tflops: \"vibes"),
                                   "x.yaml"),
                    Catch::StartsWith("x.yaml: key 'sources.peak_tflops': must start with"));
  CHECK_THROWS_WITH(parse_hardware(with("  gemm: \"", "  gemm_typo: \""), "x.yaml"),
                    Catch::StartsWith("x.yaml: key 'sources.gemm': missing"));
  CHECK_THROWS_WITH(parse_hardware("name: [", "x.yaml"), Catch::StartsWith("x.yaml: not valid YAML"));
  CHECK_THROWS_WITH(load_hardware("no/such.yaml"),
                    "no/such.yaml: cannot read hardware profile (No such file or directory)");
  CHECK_THROWS_WITH(find_hardware("tpu-v9"), Catch::StartsWith("hardware profile 'tpu-v9' not found"));
}
