#include "merak/partition/report.h"
#include "merak/core/json.h"

#include <cmath>
#include <cstdio>
#include <sstream>

namespace merak::partition {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// 1.23e9 -> "1.23 G"
std::string si(double v) {
  const char* units[] = {"", " K", " M", " G", " T", " P", " E"};
  int u = 0;
  while (std::fabs(v) >= 1000 && u < 6) {
    v /= 1000;
    ++u;
  }
  return fmt("%.3g", v) + units[u];
}

std::string pad(std::string s, size_t width, bool right = false) {
  if (s.size() >= width) return s;
  return right ? std::string(width - s.size(), ' ') + s : s + std::string(width - s.size(), ' ');
}


std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

std::string baseline_line(const std::optional<Partition>& p, double limit) {
  if (!p) return "n/a (no block stack, or fewer blocks than stages)";
  std::string s = fmt("%.3f", p->imbalance()) + fmt(" (slowest stage %.2f ms", p->max_time() * 1e3);
  const double need = p->max_memory();
  s += need <= limit ? fmt(", fits: %.1f GiB)", need / kGiB)
                     : fmt(", does not fit: needs %.1f GiB)", need / kGiB);
  return s;
}

std::string schedule_of(const Request& req, const Plan& plan) {
  std::string s = req.schedule.empty() ? plan.schedule() : req.schedule;
  if (req.virtual_stages > 1) s += " x" + std::to_string(req.virtual_stages);
  return s;
}

}  // namespace

std::string explain(const Result& r, const Request& req, const ReportHeader& h) {
  std::ostringstream os;
  const Plan& plan = r.plan;
  const double limit = stage_memory_limit(req);
  os << "model '" << plan.model() << "' from " << h.source << ": " << si(double(r.parameters))
     << " parameters, " << r.nodes << " nodes (tp rank 0's graph)\n";
  os << "layout dp " << req.dp << " x pp " << req.pp << " x tp " << req.tp << " = "
     << req.dp * req.pp * req.tp << " ranks on " << h.hardware << " ("
     << req.hardware.device << ", " << fmt("%.0f GiB", double(req.hardware.memory_bytes) / kGiB)
     << "); " << plan.precision() << ", " << schedule_of(req, plan) << ", "
     << plan.micro_batches()
     << (plan.micro_batches() == 1 ? " micro-batch" : " micro-batches")
     << (plan.recompute() ? std::string(", recompute ") + recompute_name(req.memory.recompute)
                          : std::string())
     << (plan.zero1() ? ", ZeRO-1" : "") << "\n\n";

  const std::vector<std::string> head = {"stage", "modules", "params", "GFLOP f+b", "fwd ms",
                                         "bwd ms", "recomp ms", "p2p ms", "stage ms", "memory GiB"};
  std::vector<std::vector<std::string>> rows;
  for (size_t s = 0; s < r.ours.stages.size(); ++s) {
    const StageEstimate& e = r.ours.stages[s];
    rows.push_back({std::to_string(s), r.stage_modules[s], si(e.params),
                    fmt("%.1f", (e.fwd_flops + e.bwd_flops) / 1e9), fmt("%.2f", e.fwd * 1e3),
                    fmt("%.2f", e.bwd * 1e3), fmt("%.2f", e.recompute * 1e3),
                    fmt("%.2f", e.p2p * 1e3), fmt("%.2f", e.time() * 1e3),
                    fmt("%.1f", e.memory.total() / kGiB)});
  }
  std::vector<size_t> width(head.size());
  for (size_t c = 0; c < head.size(); ++c) {
    width[c] = head[c].size();
    for (const auto& row : rows) width[c] = std::max(width[c], row[c].size());
  }
  auto line = [&](const std::vector<std::string>& cells) {
    std::string l;
    for (size_t c = 0; c < cells.size(); ++c)
      l += (c ? "  " : "") + pad(cells[c], width[c], c != 1);
    os << l.substr(0, l.find_last_not_of(' ') + 1) << "\n";
  };
  line(head);
  for (const auto& row : rows) line(row);
  os << "\nop ranges:\n";
  for (const RankProgram& rp : plan.ranks())
    if (rp.dp() == 0 && rp.tp() == 0)
      os << "  stage " << rp.pp() << ": " << rp.first_node() << " .. " << rp.last_node() << "\n";
  if (plan.tied_params_size() > 0) {
    os << "tied (shared by stages, gradients summed):";
    for (const std::string& t : plan.tied_params()) os << " " << t;
    os << "\n";
  }
  for (const std::string& n : r.notes) os << "tensor parallel: " << n << "\n";
  os << "\nimbalance (slowest / mean stage time):\n";
  os << "  ours (exact, time + memory)   " << baseline_line(r.ours, limit) << "\n";
  os << "  uniform layers (Megatron)     " << baseline_line(r.uniform, limit) << "\n";
  os << "  parameter-balanced (DeepSpeed) " << baseline_line(r.balanced, limit) << "\n";
  if (req.virtual_stages > 1)
    os << "(" << r.ours.stages.size() << " model stages, " << req.virtual_stages
       << " a rank: rank r holds stages r, r + " << req.pp << ", ...; each fits "
       << fmt("%.1f GiB", limit / kGiB) << ", its share of the device)\n";
  if (r.simulated_step_seconds > 0)
    os << fmt("predicted step: %.3f s", r.simulated_step_seconds)
       << " (the layout search's: the schedule simulated, with the gradient exchange and the "
          "optimizer step)\n";
  os << fmt(r.simulated_step_seconds > 0 ? "the plan's bound: %.3f s" : "predicted step: %.3f s",
            plan.predicted_step_seconds())
     << " ((" << plan.micro_batches() << " micro-batches + " << r.ours.stages.size() - 1
     << " fill/drain) x slowest stage)\n";
  os << fmt("partitioning took %.3f s\n", r.seconds);
  return os.str();
}

std::string to_json(const Result& r, const Request& req, const ReportHeader& h) {
  std::ostringstream os;
  const Plan& plan = r.plan;
  const double limit = stage_memory_limit(req);
  auto imbalance = [](const std::optional<Partition>& p) {
    return p ? json_number(p->imbalance()) : std::string("null");
  };
  auto stages = [&](const Partition& p, bool with_modules) {
    std::ostringstream s;
    s << "[";
    for (size_t i = 0; i < p.stages.size(); ++i) {
      const StageEstimate& e = p.stages[i];
      s << (i ? ", " : "") << "{\"stage\": " << i << ", \"first\": " << e.first
        << ", \"end\": " << e.end;
      if (with_modules) s << ", \"modules\": " << json_quote(r.stage_modules[i]);
      s << ", \"params\": " << json_number(e.params)
        << ", \"fwd_flops\": " << json_number(e.fwd_flops)
        << ", \"bwd_flops\": " << json_number(e.bwd_flops)
        << ", \"fwd_seconds\": " << json_number(e.fwd)
        << ", \"bwd_seconds\": " << json_number(e.bwd)
        << ", \"recompute_seconds\": " << json_number(e.recompute)
        << ", \"p2p_seconds\": " << json_number(e.p2p)
        << ", \"time_seconds\": " << json_number(e.time())
        << ", \"memory_bytes\": " << json_number(e.memory.total())
        << ", \"in_flight\": " << e.memory.in_flight
        << ", \"recompute\": " << (e.memory.recompute ? "true" : "false") << "}";
    }
    s << "]";
    return s.str();
  };
  auto baseline = [&](const std::optional<Partition>& p) {
    if (!p) return std::string("null");
    std::ostringstream s;
    s << "{\"imbalance\": " << json_number(p->imbalance())
      << ", \"max_seconds\": " << json_number(p->max_time())
      << ", \"max_memory_bytes\": " << json_number(p->max_memory())
      << ", \"fits\": " << (p->max_memory() <= limit ? "true" : "false")
      << ", \"stages\": " << stages(*p, false) << "}";
    return s.str();
  };
  os << "{\"model\": " << json_quote(plan.model()) << ", \"source\": " << json_quote(h.source)
     << ", \"hardware\": " << json_quote(h.hardware) << ", \"parameters\": " << r.parameters
     << ", \"nodes\": " << r.nodes << ", \"dp\": " << req.dp << ", \"pp\": " << req.pp
     << ", \"tp\": " << req.tp << ", \"virtual_stages\": " << req.virtual_stages
     << ", \"precision\": " << json_quote(plan.precision())
     << ", \"schedule\": " << json_quote(req.schedule.empty() ? plan.schedule() : req.schedule)
     << ", \"micro_batches\": " << plan.micro_batches()
     << ", \"recompute\": " << (plan.recompute() ? "true" : "false")
     << ", \"zero1\": " << (plan.zero1() ? "true" : "false")
     << ", \"memory_limit_bytes\": " << json_number(limit * double(req.virtual_stages))
     << ",\n \"stages\": " << stages(r.ours, true)
     << ",\n \"imbalance\": {\"ours\": " << json_number(r.ours.imbalance())
     << ", \"uniform_layers\": " << imbalance(r.uniform)
     << ", \"parameter_balanced\": " << imbalance(r.balanced) << "}"
     << ",\n \"uniform_layers\": " << baseline(r.uniform)
     << ",\n \"parameter_balanced\": " << baseline(r.balanced)
     << ",\n \"tied_params\": [";
  for (int i = 0; i < plan.tied_params_size(); ++i)
    os << (i ? ", " : "") << json_quote(plan.tied_params(i));
  os << "], \"notes\": [";
  for (size_t i = 0; i < r.notes.size(); ++i) os << (i ? ", " : "") << json_quote(r.notes[i]);
  os << "],\n \"step_seconds\": " << json_number(plan.predicted_step_seconds())

     << ", \"partition_seconds\": " << json_number(r.seconds) << "}\n";
  return os.str();
}

}  // namespace merak::partition
