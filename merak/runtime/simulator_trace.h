// Chrome-trace JSON (chrome://tracing, Perfetto) of a pipeline step: one track per rank with a
// span per instruction. The engine writes its measured steps through the same function.
#pragma once

#include <string>
#include <vector>

#include "merak/runtime/simulator.h"

namespace merak::runtime {

struct TraceSpan {
  int track = 0;          // one per rank
  std::string name;       // "F3", "wait RG2", ...
  std::string category;   // "compute", "recompute", "wait", "update"
  double start = 0, end = 0;  // seconds
};

// {"traceEvents": [...]} with a named track per entry of track_names and complete events ("X")
// in microseconds.
std::string chrome_trace_json(const std::vector<std::string>& track_names,
                              const std::vector<TraceSpan>& spans);

// A simulated step's spans: compute instructions, and receives that waited as "wait ..." spans.
std::vector<TraceSpan> trace_spans(const SimResult& result);

// Both in one: tracks named "rank 0", "rank 1", ...
std::string chrome_trace_json(const SimResult& result);

}  // namespace merak::runtime
