#include "merak/runtime/simulator_trace.h"
#include "merak/core/json.h"

#include <cstdio>

namespace merak::runtime {
namespace {


std::string micros(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", seconds * 1e6);
  return buf;
}

std::string category(Op op) {
  switch (op) {
    case Op::Recompute: return "recompute";
    case Op::ReduceGrads:
    case Op::OptimizerStep: return "update";
    case Op::RecvActivation:
    case Op::RecvGrad: return "wait";
    default: return "compute";
  }
}

}  // namespace

std::string chrome_trace_json(const std::vector<std::string>& track_names,
                              const std::vector<TraceSpan>& spans) {
  std::string out = "{\"traceEvents\": [\n";
  bool first = true;
  auto add = [&](const std::string& event) {
    out += first ? "  " : ",\n  ";
    out += event;
    first = false;
  };
  for (size_t t = 0; t < track_names.size(); ++t) {
    const std::string tid = std::to_string(t);
    add("{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 0, \"tid\": " + tid +
        ", \"args\": {\"name\": " + json_quote(track_names[t]) + "}}");
    add("{\"name\": \"thread_sort_index\", \"ph\": \"M\", \"pid\": 0, \"tid\": " + tid +
        ", \"args\": {\"sort_index\": " + tid + "}}");
  }
  for (const TraceSpan& s : spans)
    add("{\"name\": " + json_quote(s.name) + ", \"cat\": " + json_quote(s.category) +
        ", \"ph\": \"X\", \"pid\": 0, \"tid\": " + std::to_string(s.track) +
        ", \"ts\": " + micros(s.start) + ", \"dur\": " + micros(s.end - s.start) + "}");
  out += "\n], \"displayTimeUnit\": \"ms\"}\n";
  return out;
}

std::vector<TraceSpan> trace_spans(const SimResult& result) {
  std::vector<TraceSpan> spans;
  for (const auto& rank : result.spans)
    for (const Span& s : rank) {
      if (s.end <= s.start) continue;  // sends, and receives that did not wait
      const std::string cat = category(s.inst.op);
      spans.push_back({s.rank, (cat == "wait" ? "wait " : "") + to_string(s.inst), cat, s.start,
                       s.end});
    }
  return spans;
}

std::string chrome_trace_json(const SimResult& result) {
  std::vector<std::string> names;
  for (int r = 0; r < result.stages; ++r) names.push_back("rank " + std::to_string(r));
  return chrome_trace_json(names, trace_spans(result));
}

}  // namespace merak::runtime
