#include "merak/train/progress.h"

#include <cinttypes>
#include <cmath>
#include <cstdlib>
#include <utility>

#include "merak/core/median.h"

namespace merak::train {

StepReport report(const StepStats& s, double peak_gflops_total) {
  StepReport r;
  r.stats = s;
  r.tokens_per_s = s.seconds > 0 ? s.tokens / s.seconds : 0;
  r.gflops = s.seconds > 0 ? s.model_flops / s.seconds / 1e9 : 0;
  r.peak_fraction = peak_gflops_total > 0 ? r.gflops / peak_gflops_total : std::nan("");
  return r;
}

std::string human_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", bytes, units[u]);
  return buf;
}

std::string log_line(const StepReport& r, int64_t total_steps) {
  char share[32] = "";
  if (std::isfinite(r.peak_fraction))
    std::snprintf(share, sizeof share, " (%.0f%% of peak)", 100 * r.peak_fraction);
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "step %5" PRId64 "/%" PRId64 " | loss %.4f | lr %.3e | grad norm %.3f | "
                "%.0f tok/s | %.1f GFLOP/s%s | peak mem %s",
                r.stats.step, total_steps, r.stats.loss, r.stats.lr, r.stats.grad_norm,
                r.tokens_per_s, r.gflops, share,
                human_bytes(double(r.stats.peak_mem_bytes)).c_str());
  std::string line = buf;
  if (r.eval) {
    std::snprintf(buf, sizeof buf, " | valid loss %.4f (ppl %.2f, %.2f s)", r.eval->loss,
                  r.eval->perplexity, r.eval->seconds);
    line += buf;
  }
  return line;
}

std::string time_breakdown(const StepReport& r, int ranks) {
  const runtime::StepBreakdown& b = r.stats.time;
  const double step = b.step > 0 ? b.step : 1;
  char buf[192];
  std::snprintf(buf, sizeof buf,
                " | per rank %.1f GFLOP/s | compute %.0f%% (recompute %.0f%%), p2p wait %.0f%%, "
                "collectives %.0f%%, bubble %.0f%%",
                r.gflops / ranks, 100 * b.compute / step, 100 * b.recompute / step,
                100 * b.p2p_wait / step, 100 * b.collectives / step, 100 * b.bubble);
  return buf;
}

namespace {

// A JSON number with `digits` significant digits, or null for NaN and the infinities (JSON has
// no spelling for them; printf's "nan" or "-inf" would make the line unreadable to a parser).
std::string json_number(double v, int digits) {
  if (!std::isfinite(v)) return "null";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*g", digits, v);
  return buf;
}

}  // namespace

std::string json_line(const StepReport& r) {
  std::string line = "{\"step\": " + std::to_string(r.stats.step) +
                     ", \"loss\": " + json_number(r.stats.loss, 17) +
                     ", \"lr\": " + json_number(r.stats.lr, 9) +
                     ", \"grad_norm\": " + json_number(r.stats.grad_norm, 17) +
                     ", \"tokens_per_s\": " + json_number(r.tokens_per_s, 9) +
                     ", \"gflops\": " + json_number(r.gflops, 9) +
                     ", \"peak_fraction\": " + json_number(r.peak_fraction, 9) +
                     ", \"peak_mem_bytes\": " + std::to_string(r.stats.peak_mem_bytes) +
                     ", \"step_seconds\": " + json_number(r.stats.seconds, 9);
  if (r.eval)
    line += ", \"valid_loss\": " + json_number(r.eval->loss, 17) +
            ", \"valid_ppl\": " + json_number(r.eval->perplexity, 17);
  return line + "}";
}

std::optional<int64_t> json_line_step(const std::string& line) {
  const std::string head = "{\"step\": ";
  if (line.compare(0, head.size(), head) != 0 || line.back() != '}') return std::nullopt;
  char* end = nullptr;
  const long long step = std::strtoll(line.c_str() + head.size(), &end, 10);
  if (end == line.c_str() + head.size() || *end != ',') return std::nullopt;
  return step;
}

void draw_progress(std::FILE* out, int64_t step, int64_t total, double loss) {
  const int width = 30;
  const int filled = total > 0 ? int(width * step / total) : width;
  std::string bar(size_t(filled), '#');
  bar.append(size_t(width - filled), '.');
  std::fprintf(out, "\r[%s] %" PRId64 "/%" PRId64 " loss %.4f ", bar.c_str(), step, total, loss);
  std::fflush(out);
}

std::string steady_rate(std::vector<double> step_seconds, double tokens_per_step) {
  const double middle = median(std::move(step_seconds));
  if (middle <= 0) return "";
  char buf[96];
  std::snprintf(buf, sizeof buf, "(median step %.1f ms = %.0f tok/s)", middle * 1e3,
                tokens_per_step / middle);
  return buf;
}

}  // namespace merak::train
