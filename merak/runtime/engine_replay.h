// A measured run replayed in the simulator: per-instruction costs taken from the engine's spans,
// so the simulated step can be set against the measured one (is the simulator's model of the
// pipeline good enough to choose schedules with?).
#pragma once

#include <vector>

#include "merak/comm/grid_layout.h"
#include "merak/runtime/simulator.h"
#include "merak/runtime/simulator_trace.h"

namespace merak::runtime {

// Costs from spans (track = rank) of a run on `shape`: per pipeline stage the median forward,
// backward, recompute, weight-gradient (zero-bubble runs) and optimizer step (medians: a busy machine's outliers do not skew them),
// taking the slowest of the stage's dp x tp ranks; ReduceGrads as the quickest one seen per stage
// (a longer one was waiting for other ranks, which the simulation produces itself); p2p as the
// quickest receive.
// Interleaved runs (virtual_stages > 1) are costed per model stage: chunk c of pipeline rank r
// is model stage c * pp + r, its spans named "F3.1" for chunk 1.
SimCosts measured_costs(const std::vector<TraceSpan>& spans, const comm::GridShape& shape,
                        int virtual_stages = 1);

}  // namespace merak::runtime
