#include "merak/runtime/schedule_recompute.h"

#include <algorithm>
#include <cmath>

#include "merak/core/error.h"

namespace merak::runtime {

std::vector<double> ratio_rule_recompute(int stages, double r0) {
  MERAK_CHECK(stages >= 1, "recompute ratio rule: stages must be >= 1, got ", stages);
  MERAK_CHECK(r0 >= 0 && r0 <= 1, "recompute ratio rule: first-stage ratio must be in [0, 1], got ",
              r0);
  std::vector<double> ratio(stages, 0.0);
  for (int s = 0; s + 1 < stages; ++s) {
    const double r = 1 - (1 - r0) * (stages - 1) / (stages - 1 - s);
    ratio[s] = std::clamp(r, 0.0, 1.0);
  }
  return ratio;
}

double peak_memory(const StageMemory& m, double ratio) {
  const double kept = (1 - ratio) * m.activation_bytes + ratio * m.checkpoint_bytes;
  return m.static_bytes + m.in_flight * kept + ratio * m.activation_bytes;
}

std::vector<double> memory_driven_recompute(const std::vector<StageMemory>& stages,
                                            double cap_bytes, int layers) {
  MERAK_CHECK(layers >= 0, "recompute: layers must be >= 0, got ", layers);
  std::vector<double> ratio(stages.size(), 0.0);
  for (size_t s = 0; s < stages.size(); ++s) {
    const StageMemory& m = stages[s];
    MERAK_CHECK(m.in_flight >= 1, "recompute: stage ", s, " has in_flight ", m.in_flight,
                " (must be >= 1)");
    const double none = peak_memory(m, 0), full = peak_memory(m, 1);
    if (none <= cap_bytes) continue;
    MERAK_CHECK(full <= cap_bytes, "recompute: stage ", s, " needs ", full,
                " bytes even with full recomputation; the device cap is ", cap_bytes, " bytes");
    // The peak is linear in the ratio, so the smallest fitting ratio solves peak(r) = cap.
    double r = (none - cap_bytes) / (none - full);
    if (layers > 0) r = std::min(1.0, std::ceil(r * layers - 1e-9) / layers);
    ratio[s] = r;
  }
  return ratio;
}

}  // namespace merak::runtime
