#include "merak/train/progress.h"

#include <cinttypes>
#include <utility>

#include "merak/core/median.h"

namespace merak::train {

StepReport report(const StepStats& s, double peak_gflops_total) {
  StepReport r;
  r.stats = s;
  r.tokens_per_s = s.seconds > 0 ? s.tokens / s.seconds : 0;
  r.gflops = s.seconds > 0 ? s.model_flops / s.seconds / 1e9 : 0;
  r.peak_fraction = peak_gflops_total > 0 ? r.gflops / peak_gflops_total : 0;
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
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "step %5" PRId64 "/%" PRId64 " | loss %.4f | lr %.3e | grad norm %.3f | "
                "%.0f tok/s | %.1f GFLOP/s (%.0f%% of peak) | peak mem %s",
                r.stats.step, total_steps, r.stats.loss, r.stats.lr, r.stats.grad_norm,
                r.tokens_per_s, r.gflops, 100 * r.peak_fraction,
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

std::string json_line(const StepReport& r) {
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "{\"step\": %" PRId64 ", \"loss\": %.17g, \"lr\": %.9g, \"grad_norm\": %.17g, "
                "\"tokens_per_s\": %.9g, \"gflops\": %.9g, \"peak_fraction\": %.9g, "
                "\"peak_mem_bytes\": %" PRId64 ", \"step_seconds\": %.9g}",
                r.stats.step, r.stats.loss, r.stats.lr, r.stats.grad_norm, r.tokens_per_s,
                r.gflops, r.peak_fraction, r.stats.peak_mem_bytes, r.stats.seconds);
  std::string line = buf;
  if (r.eval) {
    std::snprintf(buf, sizeof buf, ", \"valid_loss\": %.17g, \"valid_ppl\": %.17g}",
                  r.eval->loss, r.eval->perplexity);
    line.pop_back();  // the closing brace
    line += buf;
  }
  return line;
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
