// Stage-aware recomputation: how much of each stage's forward to checkpoint (and run again
// before its backward). Under 1F1B later stages hold fewer micro-batches in flight, so they
// need less recomputation than the first stage, and the last stage none.
#pragma once

#include <vector>

namespace merak::runtime {

// Merak's rule from a first-stage ratio r0: stage s of S gets 1 - (1 - r0)(S - 1)/(S - 1 - s),
// clamped to [0, 1]; the last stage gets 0.
std::vector<double> ratio_rule_recompute(int stages, double r0);

// One stage's memory, in bytes.
struct StageMemory {
  double static_bytes = 0;      // weights, gradients, optimizer state, workspace
  double activation_bytes = 0;  // activations one micro-batch's forward keeps for backward
  double checkpoint_bytes = 0;  // kept per micro-batch under full recomputation (segment inputs)
  int in_flight = 1;            // most micro-batches held at once (peak_in_flight of its program)
};

// Peak bytes when a share `ratio` of the forward is recomputed: every in-flight micro-batch
// keeps the rest of its activations plus the inputs of its recomputed share (ratio *
// checkpoint_bytes), and the micro-batch being run backward has its recomputed share rebuilt.
double peak_memory(const StageMemory& m, double ratio);

// The smallest ratio per stage whose peak fits in cap_bytes (0 where everything fits). With
// layers > 0 a ratio is rounded up to whole layers (a multiple of 1 / layers). Throws naming the
// stage and the bytes it needs when even full recomputation does not fit.
std::vector<double> memory_driven_recompute(const std::vector<StageMemory>& stages,
                                            double cap_bytes, int layers = 0);

}  // namespace merak::runtime
