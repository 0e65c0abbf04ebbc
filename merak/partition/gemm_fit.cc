#include "merak/partition/gemm_fit.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace merak::partition {

namespace {

// The least time `s` takes: streaming its operands and result once.
double memory_seconds(const GemmContext& ctx, const GemmSample& s) {
  const double bytes = 4 * s.batch * (s.m * s.k + s.k * s.n + s.m * s.n);
  return bytes / (ctx.bandwidth_per_unit * double(s.units));
}

}  // namespace

double gemm_model_seconds(const GemmCurve& curve, const GemmContext& ctx, const GemmSample& s) {
  GemmCurve c = curve;
  c.units = s.units;
  const double compute = c.seconds(ctx.peak_per_unit * double(s.units), s.batch, s.m, s.n, s.k);
  return std::max(compute, memory_seconds(ctx, s)) + ctx.overhead;
}

GemmFit fit_gemm_curve(const std::vector<GemmSample>& samples, const GemmContext& ctx) {
  if (samples.empty()) throw std::invalid_argument("fit_gemm_curve: no samples");
  for (const GemmSample& s : samples)
    if (!(s.seconds > 0)) throw std::invalid_argument("fit_gemm_curve: a sample of no time");
  // Tiles of 8 to 128 a side (12 rows: our AVX-512 kernel's), k_half 0 to 256, the least work
  // a unit is given 0 to 2^22 multiply-adds, packing at 2 to 128 GB/s a unit or none; the
  // efficiency in steps of 0.01 from 0.2 to 1 for each, then to 0.001 around the best.
  const int64_t tiles_m[] = {8, 12, 16, 24, 32, 64, 128};
  const int64_t tiles_n[] = {8, 16, 32, 64, 128};
  const double k_halves[] = {0, 4, 8, 16, 32, 64, 128, 256};
  const double min_macs[] = {0, 1 << 16, 1 << 18, 1 << 20, 1 << 22};
  const double pack_gbs[] = {0, 2, 4, 8, 16, 32, 64, 128};
  auto error = [&](const GemmCurve& c) {
    double sum = 0;
    for (const GemmSample& s : samples) {
      const double r = std::log(gemm_model_seconds(c, ctx, s) / s.seconds);
      sum += r * r;
    }
    return sum;
  };
  GemmFit best;
  double best_error = INFINITY;
  // A sample's model time is max(arithmetic / efficiency + packing, memory) + overhead: for
  // each shape of the curve the parts are worked out once, then every efficiency is tried.
  struct Parts {
    double arithmetic, packing, memory, seconds;
  };
  std::vector<Parts> parts(samples.size());
  for (size_t i = 0; i < samples.size(); ++i)  // what no curve changes
    parts[i].memory = memory_seconds(ctx, samples[i]), parts[i].seconds = samples[i].seconds;
  for (int64_t tm : tiles_m)
    for (int64_t tn : tiles_n)
      for (double kh : k_halves)
        for (double mm : min_macs)
          for (double pack : pack_gbs) {
            GemmCurve c;
            c.tile_m = tm, c.tile_n = tn, c.k_half = kh, c.min_macs_per_unit = mm;
            for (size_t i = 0; i < samples.size(); ++i) {
              const GemmSample& s = samples[i];
              GemmCurve u = c;
              u.units = s.units;
              const double peak = ctx.peak_per_unit * double(s.units);
              Parts& p = parts[i];
              p.arithmetic = u.seconds(peak, s.batch, s.m, s.n, s.k);
              u.pack_bandwidth = pack * 1e9;
              p.packing = u.seconds(peak, s.batch, s.m, s.n, s.k) - p.arithmetic;
            }
            for (int e = 20; e <= 100; ++e) {
              const double eff = e / 100.0;
              double sum = 0;
              for (const Parts& p : parts) {
                const double r = std::log(
                    (std::max(p.arithmetic / eff + p.packing, p.memory) + ctx.overhead) / p.seconds);
                sum += r * r;
              }
              if (sum < best_error) {
                best_error = sum;
                best.curve = c;
                best.curve.efficiency = eff;
                best.curve.pack_bandwidth = pack * 1e9;
              }
            }
          }
  // Then to 0.001 around the best, with the model itself.
  const GemmCurve coarse = best.curve;
  best_error = error(coarse);
  for (int e = -9; e <= 9; ++e) {
    GemmCurve c = coarse;
    c.efficiency = std::min(1.0, coarse.efficiency + e / 1000.0);
    const double err = error(c);
    if (err < best_error) best_error = err, best.curve = c;
  }
  best.rms_log_error = std::sqrt(best_error / double(samples.size()));
  for (const GemmSample& s : samples) {
    const double ratio = gemm_model_seconds(best.curve, ctx, s) / s.seconds;
    if (std::abs(std::log(ratio)) > std::abs(std::log(best.worst_ratio))) best.worst_ratio = ratio;
  }
  return best;
}

}  // namespace merak::partition
