// Choosing the next token from a language model's logits: greedy (temperature 0) or a draw from
// softmax(logits / temperature), optionally over the top-k logits only. The draw is Philox keyed
// by (seed, the token's index), so a seed gives the same text on every run and device.
#pragma once

#include <cstdint>

namespace merak::models {

struct SamplingOptions {
  double temperature = 1.0;  // 0: greedy (argmax, the lowest id among ties)
  int64_t top_k = 0;         // 0: every token
  uint64_t seed = 1;
};

// The token drawn from logits[0, vocab) (host memory) for the `index`-th generated token.
int64_t sample_token(const float* logits, int64_t vocab, const SamplingOptions& options,
                     uint64_t index);

}  // namespace merak::models
