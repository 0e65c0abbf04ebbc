// What the engine measures: each rank's time split per step (compute, p2p wait, collectives,
// idle) and, when tracing, a span per instruction; gathered from every rank for rank 0's log
// line and the Chrome trace (simulator_trace.h writes both simulated and measured steps).
#pragma once

#include <algorithm>
#include <chrono>
#include <deque>
#include <string>
#include <vector>

#include "merak/comm/communicator.h"
#include "merak/runtime/simulator_trace.h"

namespace merak::runtime {

// Seconds of one rank's step.
struct StepTimes {
  double total = 0;        // wall time from the step's start to its end
  double compute = 0;      // forward, backward, recompute and optimizer, tp collectives excluded
  double recompute = 0;    // the share of compute spent recomputing
  double p2p_wait = 0;     // blocked in activation and gradient receives and send completions
  double collectives = 0;  // tp all-reduces, tied and data-parallel gradient sums, the norm
  double idle() const { return total - compute - p2p_wait - collectives; }
};

// Every rank's times, in rank order (a collective over `world`).
std::vector<StepTimes> gather_times(comm::Communicator& world, const StepTimes& mine);

// The job's time split: the slowest rank's step, and per category the mean over ranks;
// bubble is the share of rank-time not spent computing (1 - sum compute / (ranks * step)).
struct StepBreakdown {
  double step = 0, compute = 0, recompute = 0, p2p_wait = 0, collectives = 0, bubble = 0;
};
StepBreakdown breakdown(const std::vector<StepTimes>& ranks);

// Steps a trace keeps (the last ones): a long traced run's spans stay bounded in memory, and
// so does rank 0's gathering of every rank's.
constexpr int kTraceSteps = 10;

// Spans of this rank, times in seconds since `epoch` (the same instant on every rank: taken
// right after a barrier), of the last `steps` steps (begin_step starts one).
class SpanLog {
 public:
  using Clock = std::chrono::steady_clock;
  explicit SpanLog(Clock::time_point epoch, int steps = kTraceSteps)
      : epoch_(epoch), steps_(std::max(steps, 1)) {}
  void begin_step();  // drops the oldest step's spans when `steps` are kept already
  void add(std::string name, std::string category, Clock::time_point start,
           Clock::time_point end);
  const std::vector<TraceSpan>& spans() const { return spans_; }

 private:
  Clock::time_point epoch_;
  int steps_;
  std::vector<TraceSpan> spans_;
  std::deque<size_t> starts_;  // where each kept step's spans begin in spans_
};

// Every rank's spans (track = rank) on rank 0 of `world`, empty on the others: a collective over
// `world`.
std::vector<TraceSpan> gather_spans(comm::Communicator& world, const std::vector<TraceSpan>& mine);

}  // namespace merak::runtime
