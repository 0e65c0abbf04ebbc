#include "models/sampling.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "merak/core/error.h"
#include "merak/core/philox.h"

namespace merak::models {

int64_t sample_token(const float* logits, int64_t vocab, const SamplingOptions& options,
                     uint64_t index) {
  MERAK_CHECK(vocab > 0, "sample_token: empty vocabulary");
  MERAK_CHECK(options.temperature >= 0, "sample_token: temperature ", options.temperature,
              " is negative");
  const int64_t best = int64_t(std::max_element(logits, logits + vocab) - logits);
  if (options.temperature == 0) return best;
  // Only logits at or above the k-th largest take part (ties at the threshold included).
  float threshold = -INFINITY;
  if (options.top_k > 0 && options.top_k < vocab) {
    std::vector<float> sorted(logits, logits + vocab);
    std::nth_element(sorted.begin(), sorted.begin() + (options.top_k - 1), sorted.end(),
                     std::greater<float>());
    threshold = sorted[size_t(options.top_k - 1)];
  }
  std::vector<double> weights(size_t(vocab), 0.0);
  double total = 0;
  for (int64_t i = 0; i < vocab; ++i) {
    if (logits[i] < threshold) continue;
    weights[size_t(i)] = std::exp((double(logits[i]) - double(logits[best])) / options.temperature);
    total += weights[size_t(i)];
  }
  // A uniform double in [0, 1) from 53 random bits of one Philox block.
  const auto bits = philox_at(philox_key(options.seed, "merak.sample"), index);
  const double u = double((uint64_t(bits[0]) << 21) ^ (uint64_t(bits[1]) >> 11)) / 9007199254740992.0;
  double target = u * total, acc = 0;
  for (int64_t i = 0; i < vocab; ++i) {
    acc += weights[size_t(i)];
    if (weights[size_t(i)] > 0 && target < acc) return i;
  }
  return best;  // rounding at the very top of the range
}

}  // namespace merak::models
