// What a run prints: a line per logged step, a progress bar on a terminal, JSON metrics.
#pragma once

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "merak/train/trainer.h"

namespace merak::train {

struct StepReport {
  StepStats stats;
  const EvalStats* eval = nullptr;  // when an evaluation ran after this step
  double tokens_per_s = 0;
  double gflops = 0;         // achieved model GFLOP/s
  // Of the job's peak (run.cc: the cores its threads can use, on a CPU); NaN when no peak is
  // known (a GPU of no known tensor-core rate): the log line leaves it out, --metrics writes null.
  double peak_fraction = 0;
};

StepReport report(const StepStats& s, double peak_gflops_total);
std::string log_line(const StepReport& r, int64_t total_steps);
// What a job of several ranks adds to the line: " | per rank 12.3 GFLOP/s | compute 80% (recompute
// 10%), p2p wait 5%, collectives 3%, bubble 12%".
std::string time_breakdown(const StepReport& r, int ranks);
// The step as one JSON object (a line of --metrics); NaN and infinities are written as null.
std::string json_line(const StepReport& r);
// The step a line json_line wrote names, when `line` is one: whole, from '{"step": N' to '}'.
std::optional<int64_t> json_line_step(const std::string& line);
// "[#####.....] 120/200 loss 1.93" redrawn in place (call only when stdout is a terminal).
void draw_progress(std::FILE* out, int64_t step, int64_t total, double loss);
std::string human_bytes(double bytes);
// The run's steady-state speed from its step times (warm-up step left out): "(median step
// 35.5 ms = 28845 tok/s)". Unlike the mean rate, one step slowed by another process on a shared
// machine does not move it. Empty without steps.
std::string steady_rate(std::vector<double> step_seconds, double tokens_per_step);

}  // namespace merak::train
