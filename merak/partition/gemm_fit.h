// Fitting a hardware's GEMM efficiency curve (GemmCurve) to measured matrix products: what
// `merak_partition calibrate` does on this machine's CPU.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "merak/partition/hardware.h"

namespace merak::partition {

// One timed product: `batch` x [m, k] @ [k, n] on `units` compute units (threads).
struct GemmSample {
  double batch = 1, m = 0, n = 0, k = 0;
  int64_t units = 1;
  double seconds = 0;
};

// What the cost model knows besides the curve when it prices a product.
struct GemmContext {
  double peak_per_unit = 0;       // FLOP/s of one unit
  double bandwidth_per_unit = 0;  // bytes/s one unit streams (operands and result, f32)
  double overhead = 0;            // seconds per call
};

// The time the cost model gives `s` with `curve` (curve.units replaced by s.units).
double gemm_model_seconds(const GemmCurve& curve, const GemmContext& ctx, const GemmSample& s);

struct GemmFit {
  GemmCurve curve;           // units left at 1: a profile sets the node's count
  double rms_log_error = 0;  // sqrt(mean(log(model / measured)^2))
  double worst_ratio = 1;    // model / measured farthest from 1
};

// The efficiency, tile, k_half, least work a unit is given and packing bandwidth whose model
// times come closest to the samples (least squares on log time, over a grid: gemm_fit.cc).
// Throws std::invalid_argument on no samples or a non-positive time.
GemmFit fit_gemm_curve(const std::vector<GemmSample>& samples, const GemmContext& ctx);

}  // namespace merak::partition
