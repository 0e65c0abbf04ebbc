#include "merak/partition/memory.h"

#include <algorithm>
#include <cstdio>
#include <stdexcept>

namespace merak::partition {

std::string memory_text(double bytes) {
  constexpr double kGiB = 1024.0 * 1024 * 1024;
  char text[48];
  if (bytes >= 0.1 * kGiB) {
    std::snprintf(text, sizeof text, "%.1f GiB", bytes / kGiB);
    return text;
  }
  const char* units[] = {"B", "KiB", "MiB"};
  int u = 0;
  while (bytes >= 1024 && u < 2) {
    bytes /= 1024;
    ++u;
  }
  std::snprintf(text, sizeof text, "%.4g %s", bytes, units[u]);
  return text;
}

const char* schedule_name(Schedule s) {
  switch (s) {
    case Schedule::GPipe: return "gpipe";
    case Schedule::ZeroBubble: return "zb";
    default: return "1f1b";
  }
}

Schedule parse_schedule(const std::string& name) {
  if (name == "1f1b") return Schedule::OneFOneB;
  if (name == "gpipe") return Schedule::GPipe;
  if (name == "zb") return Schedule::ZeroBubble;
  throw std::invalid_argument("schedule '" + name + "' is not one of 1f1b, gpipe, zb");
}

const char* recompute_name(Recompute r) {
  switch (r) {
    case Recompute::Full: return "full";
    case Recompute::AsNeeded: return "memory";
    default: return "none";
  }
}

Recompute parse_recompute(const std::string& name) {
  if (name == "none") return Recompute::None;
  if (name == "full") return Recompute::Full;
  if (name == "memory") return Recompute::AsNeeded;
  throw std::invalid_argument("recompute '" + name + "' is not one of none, full, memory");
}

PerParameter bytes_per_parameter(const MemoryOptions& o) {
  const bool half = o.precision == Precision::BF16 || o.precision == Precision::F16;
  PerParameter p;
  p.weight = half ? 2 : 4;
  p.grad = 4;
  p.optimizer = half ? 12 : 8;
  const double dp = double(std::max<int64_t>(o.dp, 1));
  if (o.zero1 || o.shared_update) p.optimizer /= dp;
  if (o.shared_update) p.weight /= dp;  // one copy a node, each member's share
  // ZeRO-1's own exchange sums a member's segment of the gradients into a buffer of its own.
  if (o.zero1 && !o.shared_update) p.grad += 4 / dp;
  if (o.dp_window) p.shared = 4 * (dp + 1) / dp;
  return p;
}

int64_t in_flight(const MemoryOptions& o, int64_t stage, int64_t stages) {
  const int64_t m = std::max<int64_t>(o.micro_batches, 1);
  if (o.schedule == Schedule::GPipe) return m;
  const int64_t extra = o.schedule == Schedule::ZeroBubble && stage < stages - 1 ? 1 : 0;
  return std::min(m, stages - stage + extra);
}

bool can_recompute(const MemoryOptions& o, int64_t stage, int64_t stages) {
  return o.recompute != Recompute::None && in_flight(o, stage, stages) > 1;
}

StageMemory stage_memory(const MemoryOptions& o, int64_t stage, int64_t stages, double params,
                         double activations, double boundary_in, double working, bool recompute,
                         const DeferredBytes& deferred) {
  const PerParameter per = bytes_per_parameter(o);
  StageMemory m;
  m.weights = params * per.weight;
  m.grads = params * per.grad;
  m.optimizer = params * per.optimizer;
  m.shared = params * per.shared;
  m.in_flight = in_flight(o, stage, stages);
  m.recompute = recompute && can_recompute(o, stage, stages);
  m.activations = m.recompute ? double(m.in_flight) * boundary_in + activations
                              : double(m.in_flight) * activations;
  m.working = working;
  if (o.schedule == Schedule::ZeroBubble) {
    const double whole = deferred.inputs + deferred.grads;
    m.deferred = o.micro_batches <= 1 ? deferred.grads : (stage == stages - 1 ? 2 : 1) * whole;
  }
  m.accumulates = o.micro_batches > 1;
  return m;
}

}  // namespace merak::partition
