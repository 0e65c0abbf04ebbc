#include "merak/partition/gemm_fit.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace merak::partition {

double gemm_model_seconds(const GemmCurve& curve, const GemmContext& ctx, const GemmSample& s) {
  GemmCurve c = curve;
  c.units = s.units;
  const double flops = 2 * s.batch * s.m * s.n * s.k;
  const double bytes = 4 * s.batch * (s.m * s.k + s.k * s.n + s.m * s.n);
  const double units = double(s.units);
  const double compute = flops / (ctx.peak_per_unit * units * c.at(s.batch, s.m, s.n, s.k));
  const double memory = bytes / (ctx.bandwidth_per_unit * units);
  return std::max(compute, memory) + ctx.overhead;
}

GemmFit fit_gemm_curve(const std::vector<GemmSample>& samples, const GemmContext& ctx) {
  if (samples.empty()) throw std::invalid_argument("fit_gemm_curve: no samples");
  for (const GemmSample& s : samples)
    if (!(s.seconds > 0)) throw std::invalid_argument("fit_gemm_curve: a sample of no time");
  const int64_t tiles[] = {8, 16, 32, 64, 128};
  const double k_halves[] = {0, 4, 8, 16, 32, 64, 128, 256};
  const double min_macs[] = {0, 1 << 16, 1 << 18, 1 << 20, 1 << 22};
  GemmFit best;
  double best_error = INFINITY;
  for (int64_t tm : tiles)
    for (int64_t tn : tiles)
      for (double kh : k_halves)
        for (double mm : min_macs)
          for (int e = 200; e <= 1000; e += 5) {
            GemmCurve c;
            c.efficiency = e / 1000.0;
            c.tile_m = tm, c.tile_n = tn, c.k_half = kh, c.min_macs_per_unit = mm;
            double sum = 0;
            for (const GemmSample& s : samples) {
              const double r = std::log(gemm_model_seconds(c, ctx, s) / s.seconds);
              sum += r * r;
            }
            if (sum < best_error) best_error = sum, best.curve = c;
          }
  best.rms_log_error = std::sqrt(best_error / double(samples.size()));
  for (const GemmSample& s : samples) {
    const double ratio = gemm_model_seconds(best.curve, ctx, s) / s.seconds;
    if (std::abs(std::log(ratio)) > std::abs(std::log(best.worst_ratio))) best.worst_ratio = ratio;
  }
  return best;
}

}  // namespace merak::partition
