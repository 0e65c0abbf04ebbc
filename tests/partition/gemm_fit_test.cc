// Fitting the GEMM curve: times made by a known curve give that curve back, and the fit reports
// how far the best curve stays from samples no curve can match.
#include "merak/partition/gemm_fit.h"

#include <cmath>
#include <stdexcept>

#include "tests/partition/helpers.h"

using namespace merak::partition;

namespace {

std::vector<GemmSample> shapes() {
  std::vector<GemmSample> out;
  for (int64_t units : {1, 4})
    for (double m : {64, 256, 1024, 4096})
      for (double n : {64, 256, 1024})
        for (double k : {64, 256, 1024}) out.push_back({1, m, n, k, units, 0});
  return out;
}

}  // namespace

TEST_CASE("the GEMM fit recovers the curve that made the times", "[partition]") {
  GemmContext ctx;
  ctx.peak_per_unit = 100e9, ctx.bandwidth_per_unit = 20e9, ctx.overhead = 2e-6;
  GemmCurve truth;
  truth.efficiency = 0.73, truth.tile_m = 32, truth.tile_n = 64, truth.k_half = 16;
  truth.min_macs_per_unit = 1 << 20;
  truth.pack_bandwidth = 16e9;
  std::vector<GemmSample> samples = shapes();
  for (GemmSample& s : samples) s.seconds = gemm_model_seconds(truth, ctx, s);
  const GemmFit fit = fit_gemm_curve(samples, ctx);
  CHECK(fit.curve.efficiency == Approx(0.73));
  CHECK(fit.curve.tile_m == 32);
  CHECK(fit.curve.tile_n == 64);
  CHECK(fit.curve.k_half == 16);
  CHECK(fit.curve.min_macs_per_unit == 1 << 20);
  CHECK(fit.curve.pack_bandwidth == 16e9);
  CHECK(fit.rms_log_error < 1e-9);
  CHECK(fit.worst_ratio == Approx(1));
}

TEST_CASE("the GEMM fit says how far off its best curve is", "[partition]") {
  GemmContext ctx;
  ctx.peak_per_unit = 100e9, ctx.bandwidth_per_unit = 20e9, ctx.overhead = 0;
  GemmCurve truth;
  truth.efficiency = 0.5, truth.tile_m = 16, truth.tile_n = 16, truth.k_half = 0;
  truth.pack_bandwidth = 0;  // (a GPU's curve: no packing)
  std::vector<GemmSample> samples = shapes();
  for (GemmSample& s : samples) s.seconds = gemm_model_seconds(truth, ctx, s);
  samples[5].seconds *= 3;  // one product three times slower than any curve explains
  const GemmFit fit = fit_gemm_curve(samples, ctx);
  CHECK(fit.rms_log_error > 0.1);
  // The best curve leans a little towards it, and still says it is about 3x off.
  CHECK(fit.worst_ratio > 0.3);
  CHECK(fit.worst_ratio < 0.4);
  CHECK_THROWS_AS(fit_gemm_curve({}, ctx), std::invalid_argument);
}
