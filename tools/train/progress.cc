#include "tools/train/progress.h"

#include <cinttypes>
#include <utility>

#include "tools/common/median.h"

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
  return buf;
}

std::string json_line(const StepReport& r) {
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "{\"step\": %" PRId64 ", \"loss\": %.6g, \"lr\": %.6g, \"grad_norm\": %.6g, "
                "\"tokens_per_s\": %.6g, \"gflops\": %.6g, \"peak_fraction\": %.4g, "
                "\"peak_mem_bytes\": %" PRId64 ", \"step_seconds\": %.6g}",
                r.stats.step, r.stats.loss, r.stats.lr, r.stats.grad_norm, r.tokens_per_s,
                r.gflops, r.peak_fraction, r.stats.peak_mem_bytes, r.stats.seconds);
  return buf;
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
  const double median = tools::median(std::move(step_seconds));
  if (median <= 0) return "";
  char buf[96];
  std::snprintf(buf, sizeof buf, "(median step %.1f ms = %.0f tok/s)", median * 1e3,
                tokens_per_step / median);
  return buf;
}

}  // namespace merak::train
