// The tensor-core rate table behind MFU, checked without a GPU: each architecture's FLOP per SM
// per clock times a known part's SMs and clock gives NVIDIA's published dense bf16 figure, and an
// architecture not in the table has no rate (no peak is made up for it), and a step reported
// against no peak shows no share of one.
#include <catch2/catch.hpp>

#include <utility>

#include "merak/cuda/runtime.h"
#include "merak/train/progress.h"

using merak::cuda::tensor_flop_per_sm_clock;

namespace {

// TFLOP/s of `sms` SMs at `ghz` on compute capability major.minor.
double peak(int major, int minor, int sms, double ghz) {
  return sms * ghz * 1e9 * tensor_flop_per_sm_clock(major, minor) / 1e12;
}

}  // namespace

TEST_CASE("dense bf16 tensor-core rate by compute capability, major and minor", "[cuda]") {
  // Ampere: A100 and GA10x differ in minor only.
  CHECK(peak(8, 0, 108, 1.41) == Approx(312).epsilon(0.01));   // A100
  CHECK(peak(8, 6, 72, 1.695) == Approx(125).epsilon(0.01));   // A10
  CHECK(peak(8, 6, 84, 1.74) == Approx(149.7).epsilon(0.01));  // A40
  CHECK(peak(8, 9, 142, 2.52) == Approx(362).epsilon(0.02));   // L40S (Ada)
  CHECK(peak(9, 0, 132, 1.83) == Approx(989.4).epsilon(0.01)); // H100 SXM at its tensor clock
  CHECK(peak(10, 0, 148, 1.86) == Approx(2250).epsilon(0.01)); // B200
  CHECK(peak(12, 0, 188, 2.617) == Approx(503.8).epsilon(0.01));  // RTX PRO 6000 Blackwell
  CHECK(tensor_flop_per_sm_clock(10, 3) == tensor_flop_per_sm_clock(10, 0));  // B300
}

TEST_CASE("an architecture with no known rate has none", "[cuda]") {
  for (auto [major, minor] : {std::pair{7, 5}, {8, 7}, {9, 1}, {11, 0}, {12, 1}, {13, 0}})
    CHECK(tensor_flop_per_sm_clock(major, minor) == 0);
}

TEST_CASE("a step reported against no known peak shows no share of one", "[cuda]") {
  merak::train::StepStats s;
  s.step = 3;
  s.seconds = 0.5;
  s.model_flops = 1e12;
  const merak::train::StepReport none = merak::train::report(s, 0);
  CHECK_THAT(merak::train::log_line(none, 10),
             Catch::Contains("2000.0 GFLOP/s | peak mem") && !Catch::Contains("of peak"));
  CHECK_THAT(merak::train::json_line(none), Catch::Contains("\"peak_fraction\": null"));
  const merak::train::StepReport known = merak::train::report(s, 4000);
  CHECK_THAT(merak::train::log_line(known, 10), Catch::Contains("2000.0 GFLOP/s (50% of peak)"));
}
