#include "merak/runtime/engine_replay.h"

#include <algorithm>
#include <cmath>
#include <cctype>
#include <cstdlib>
#include <limits>
#include <map>
#include <string>

namespace merak::runtime {

namespace {

// The chunk of a span's name: "F3.1" -> 1, "F3" or "AR" -> 0.
int chunk_of(const std::string& name) {
  const size_t dot = name.find('.');
  return dot == std::string::npos ? 0 : std::atoi(name.c_str() + dot + 1);
}

}  // namespace

SimCosts measured_costs(const std::vector<TraceSpan>& spans, const comm::GridShape& shape,
                        int virtual_stages) {
  // Durations per (rank, chunk) and instruction kind ("F", "B", "R", "OPT", ...).
  std::map<std::pair<std::pair<int, int>, std::string>, std::vector<double>> seen;
  std::map<int, double> quickest_reduce;
  double quickest_recv = std::numeric_limits<double>::infinity();
  for (const TraceSpan& s : spans) {
    std::string kind;
    for (char c : s.name)
      if (std::isalpha(static_cast<unsigned char>(c))) kind += c;
      else break;
    const double d = s.end - s.start;
    seen[{{s.track, chunk_of(s.name)}, kind}].push_back(d);
    const int stage = comm::grid_coord(shape, s.track).pp;
    if (kind == "AR") {
      auto it = quickest_reduce.find(stage);
      quickest_reduce[stage] = it == quickest_reduce.end() ? d : std::min(it->second, d);
    }
    if (kind == "RA" || kind == "RG") quickest_recv = std::min(quickest_recv, d);
  }
  SimCosts c;
  const size_t stages = size_t(shape.pp), model_stages = stages * size_t(virtual_stages);
  c.forward.assign(model_stages, 0);
  c.backward.assign(model_stages, 0);
  c.recompute.assign(model_stages, 0);
  c.weight_grad.assign(model_stages, 0);
  c.optimizer.assign(stages, 0);
  c.reduce.assign(stages, 0);
  for (int r = 0; r < shape.size(); ++r) {
    const size_t pp = size_t(comm::grid_coord(shape, r).pp);
    auto at = [&](int chunk, const char* kind) {
      auto it = seen.find({{r, chunk}, kind});
      if (it == seen.end()) return 0.0;
      std::vector<double>& d = it->second;
      std::nth_element(d.begin(), d.begin() + d.size() / 2, d.end());
      return d[d.size() / 2];
    };
    for (int k = 0; k < virtual_stages; ++k) {
      const size_t g = size_t(k) * stages + pp;
      c.forward[g] = std::max(c.forward[g], at(k, "F"));
      c.backward[g] = std::max(c.backward[g], at(k, "B"));
      c.recompute[g] = std::max(c.recompute[g], at(k, "R"));
      c.weight_grad[g] = std::max(c.weight_grad[g], at(k, "W"));
    }
    c.optimizer[pp] = std::max(c.optimizer[pp], at(0, "OPT"));
  }
  for (const auto& [stage, d] : quickest_reduce) c.reduce[size_t(stage)] = d;
  c.p2p = std::isfinite(quickest_recv) ? quickest_recv : 0;
  return c;
}

}  // namespace merak::runtime
