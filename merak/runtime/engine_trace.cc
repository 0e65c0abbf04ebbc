#include "merak/runtime/engine_trace.h"

#include <algorithm>
#include <cstring>
#include <sstream>

#include "merak/runtime/engine_comm.h"

namespace merak::runtime {

std::vector<StepTimes> gather_times(comm::Communicator& world, const StepTimes& mine) {
  const std::vector<double> all = all_gather_doubles(
      world, {mine.total, mine.compute, mine.recompute, mine.p2p_wait, mine.collectives});
  std::vector<StepTimes> out;
  for (size_t i = 0; i + 4 < all.size(); i += 5)
    out.push_back({all[i], all[i + 1], all[i + 2], all[i + 3], all[i + 4]});
  return out;
}

StepBreakdown breakdown(const std::vector<StepTimes>& ranks) {
  StepBreakdown b;
  if (ranks.empty()) return b;
  double compute = 0;
  for (const StepTimes& t : ranks) {
    b.step = std::max(b.step, t.total);
    compute += t.compute;
    b.compute += t.compute;
    b.recompute += t.recompute;
    b.p2p_wait += t.p2p_wait;
    b.collectives += t.collectives;
  }
  const double n = double(ranks.size());
  b.compute /= n;
  b.recompute /= n;
  b.p2p_wait /= n;
  b.collectives /= n;
  b.bubble = b.step > 0 ? std::max(0.0, 1 - compute / (n * b.step)) : 0;
  return b;
}

void SpanLog::begin_step() {
  if (int(starts_.size()) >= steps_) {
    const size_t drop = starts_.size() > 1 ? starts_[1] : spans_.size();
    spans_.erase(spans_.begin(), spans_.begin() + std::ptrdiff_t(drop));
    starts_.pop_front();
    for (size_t& s : starts_) s -= drop;
  }
  starts_.push_back(spans_.size());
}

void SpanLog::add(std::string name, std::string category, Clock::time_point start,
                  Clock::time_point end) {
  TraceSpan s;
  s.name = std::move(name);
  s.category = std::move(category);
  s.start = std::chrono::duration<double>(start - epoch_).count();
  s.end = std::chrono::duration<double>(end - epoch_).count();
  spans_.push_back(std::move(s));
}

// One span a line: name, category, start and end (seconds, exact as hex floats), tab separated.
// Names and categories are the engine's own (no tabs or newlines).
std::vector<TraceSpan> gather_spans(comm::Communicator& world,
                                    const std::vector<TraceSpan>& mine) {
  std::string text;
  char num[64];
  for (const TraceSpan& s : mine) {
    text += s.name + '\t' + s.category + '\t';
    std::snprintf(num, sizeof num, "%a\t%a\n", s.start, s.end);
    text += num;
  }
  std::vector<TraceSpan> out;
  const std::vector<std::string> all = gather_bytes(world, text, 0);
  for (size_t r = 0; r < all.size(); ++r) {
    std::istringstream in(all[r]);
    std::string line;
    while (std::getline(in, line)) {
      TraceSpan s;
      s.track = int(r);
      const size_t a = line.find('\t'), b = line.find('\t', a + 1), c = line.find('\t', b + 1);
      if (a == std::string::npos || b == std::string::npos || c == std::string::npos) continue;
      s.name = line.substr(0, a);
      s.category = line.substr(a + 1, b - a - 1);
      s.start = std::strtod(line.c_str() + b + 1, nullptr);
      s.end = std::strtod(line.c_str() + c + 1, nullptr);
      out.push_back(std::move(s));
    }
  }
  return out;
}

}  // namespace merak::runtime
