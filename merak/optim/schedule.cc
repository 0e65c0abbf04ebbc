#include <cmath>

#include "merak/optim/adamw.h"

namespace merak::optim {

constexpr double kPi = 3.14159265358979323846;

double scheduled_lr(int64_t step, int64_t total_steps, double lr, int64_t warmup_steps,
                    const std::string& decay, double min_lr) {
  MERAK_CHECK(decay == "cosine" || decay == "linear" || decay == "constant",
              "unknown lr decay '", decay, "' (expected cosine, linear or constant)");
  MERAK_CHECK(step >= 0, "scheduled_lr: step must be >= 0, got ", step);
  MERAK_CHECK(warmup_steps >= 0, "scheduled_lr: warmup_steps must be >= 0, got ", warmup_steps);
  if (step < warmup_steps) return lr * double(step + 1) / double(warmup_steps);
  if (decay == "constant") return lr;
  // Progress through the decay phase, 0 at the end of warmup and 1 at total_steps (and after).
  const double span = double(std::max<int64_t>(1, total_steps - warmup_steps));
  const double p = std::min(1.0, std::max(0.0, double(step - warmup_steps) / span));
  if (decay == "cosine") return min_lr + (lr - min_lr) * 0.5 * (1 + std::cos(kPi * p));
  return lr + (min_lr - lr) * p;  // linear
}

}  // namespace merak::optim
