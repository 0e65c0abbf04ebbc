#include "merak/train/run.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "merak/checkpoint/store.h"
#include "merak/comm/mpi_env.h"
#include "merak/core/fma_peak.h"
#include "merak/core/median.h"
#include "merak/core/parallel.h"
#include "merak/cuda/runtime.h"
#include "merak/log/log.h"
#include "merak/metrics/tensorboard.h"
#include "merak/partition/hardware.h"
#include "merak/partition/report.h"
#include "merak/runtime/engine_comm.h"
#include "merak/runtime/engine_replay.h"
#include "merak/runtime/simulator_trace.h"
#include "merak/train/layout_search.h"
#include "merak/train/progress.h"
#include "merak/train/trainer.h"

namespace merak::train {
namespace {

// The peak "of peak" is measured against: on a GPU each rank's dense 16-bit tensor-core rate at
// its maximum clock (so the share is MFU, an upper-bound peak's), on the CPU the f32 FMA rate of a
// core, measured now, times the cores the job's threads can use.
struct Peak {
  double job_gflops = 0;   // the whole job's; 0 when not known (a GPU of no known rate)
  double core_gflops = 0;  // CPU: one core's measured rate
  std::string what;        // for the start-up report
  std::string unknown;     // why there is no peak, for a warning
};

// Collective; rank 0 measures, and only its answer is filled in. A CPU node's ranks count no
// more cores than the node has: with more threads than cores (more ranks than cores under
// mpirun --oversubscribe, or train.threads above them) the extra threads add no FLOP/s. Each
// rank counts min(its threads, the node's cores / the node's ranks), which sums over a node to
// min(its ranks' threads, its cores), since a node's ranks all run as many threads (train.threads,
// MERAK_NUM_THREADS and the default split are the same for each).
Peak measure_peak(Trainer& trainer) {
  comm::Grid& grid = trainer.grid();
  const Device device = trainer.device();
  const int world = grid.world().size();
  Peak p;
  char buf[160];
  if (device.is_cuda()) {
    if (grid.rank() != 0) return p;
    const double rank_gflops = 1e3 * cuda::dense_peak_tflops(device.index, &p.unknown);
    p.job_gflops = rank_gflops * world;
    if (rank_gflops > 0)
      std::snprintf(buf, sizeof buf, "peak %.0f TFLOP/s a rank (dense 16-bit tensor cores at the "
                    "maximum clock)", rank_gflops / 1e3);
    else
      std::snprintf(buf, sizeof buf, "no peak known");
  } else {
    const double cores = std::max(1u, std::thread::hardware_concurrency());
    const double mine = std::min(double(num_threads()), cores / comm::node_place().local_size);
    const std::vector<double> all = runtime::all_gather_doubles(grid.host(), {mine});
    if (grid.rank() != 0) return p;
    double used = 0;  // cores
    for (double c : all) used += c;
    p.core_gflops = bench::measured_fma_peak_gflops();
    p.job_gflops = p.core_gflops * used;
    std::snprintf(buf, sizeof buf, "peak %.0f GFLOP/s (%.0f a core, measured, x %.4g core%s)",
                  p.job_gflops, p.core_gflops, used, used == 1 ? "" : "s");
  }
  p.what = buf;
  return p;
}

// What rank 0 writes besides stdout, opened (or, for checkpoint.dir, checked) at start-up, so
// that a path it cannot write ends the job before training rather than after, or halfway.
struct Outputs {
  std::ofstream metrics;  // to append until start_metrics knows where the run starts
  std::ofstream trace;    // checked at start-up (appending: nothing changes), written at the end
  std::unique_ptr<metrics::TensorBoardWriter> board;
};

// Collective: every rank read its own config (its file, its --set flags), and only the layout
// comes from rank 0; ranks that differ (node-local copies, a file edited during the launch)
// would hang at a step count or drift apart at a learning rate. Compared by hash; where one
// differs, the texts name its first line that is not rank 0's.
void check_same_config(const config::Config& c, comm::Grid& grid) {
  const std::string text = config::to_yaml(c);
  const std::vector<std::string> hashes =
      runtime::all_gather_bytes(grid.host(), std::to_string(std::hash<std::string>{}(text)));
  auto same = [&](const std::string& h) { return h == hashes[0]; };
  if (std::all_of(hashes.begin(), hashes.end(), same)) return;
  const std::vector<std::string> texts = runtime::all_gather_bytes(grid.host(), text);
  std::string problem;
  for (size_t r = 1; r < texts.size() && problem.empty(); ++r) {
    if (texts[r] == texts[0]) continue;
    std::istringstream theirs(texts[r]), ours(texts[0]);
    std::string a, b, section;
    for (;;) {  // the first line that differs (an empty one past the shorter text's end)
      const bool more_a = bool(std::getline(theirs, a)), more_b = bool(std::getline(ours, b));
      if (!more_a) a.clear();
      if (!more_b) b.clear();
      if (a != b || (!more_a && !more_b)) break;
      if (!b.empty() && b[0] != ' ' && b.back() == ':') section = b.substr(0, b.size() - 1) + ".";
    }
    // "  steps: 4" under "train:" as "train.steps: 4".
    auto key = [&](const std::string& line) {
      const size_t at = line.find_first_not_of(' ');
      return at == 0 || at == std::string::npos ? line : section + line.substr(at);
    };
    problem = c.path + ": rank " + std::to_string(r) + " read another config than rank 0 ('" +
              key(a) + "' where rank 0 has '" + key(b) + "'): every rank must read the same " +
              "file and --set flags";
  }
  agree(grid.host(), problem);
}

// The metrics file is rewritten as the run starts (from nothing, or keeping the steps a resumed
// run continues from): an existing regular file must hold only merak_train's metrics lines (a
// last one cut short too), so a wrong path (the config, a corpus) is refused before anything is
// written, as is a file someone added lines to.
void check_metrics_file(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return;
  std::ifstream in(path);
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    const bool torn = in.eof() && line.rfind("{\"step\": ", 0) == 0;  // no newline yet
    if (!json_line_step(line) && !line.empty() && !torn)
      throw std::runtime_error("'" + path + "' line " + std::to_string(number) +
                               " is not a metrics line of merak_train; the run would rewrite " +
                               "the file (give a new file, or remove that line)");
  }
  if (in.bad()) throw std::runtime_error("cannot read '" + path + "'");
}

// Whether two paths name one file (existing or not yet).
bool same_file(const std::string& a, const std::string& b) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(a, ec) && fs::exists(b, ec)) return fs::equivalent(a, b, ec);
  return fs::weakly_canonical(a, ec) == fs::weakly_canonical(b, ec);
}

// The trace file is replaced at the end of the run: an existing regular file must be one (a
// Chrome trace from an earlier run) or empty, so a wrong path (the config, a checkpoint's
// tensors) is refused before anything is written.
void check_trace_file(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return;
  std::ifstream in(path, std::ios::binary);
  std::string head(16, '\0');
  in.read(head.data(), std::streamsize(head.size()));
  head.resize(size_t(in.gcount()));
  if (!head.empty() && head != "{\"traceEvents\": ")
    throw std::runtime_error("'" + path + "' is not a trace of merak_train; the run would " +
                             "replace it (give a new file, or remove it)");
}

// Collective: rank 0 opens or checks every path; the job agrees on the first problem.
Outputs open_outputs(const config::Config& c, comm::Grid& grid, const RunOptions& options) {
  Outputs out;
  std::string problem;
  auto attempt = [&](const std::string& what, const std::function<void()>& open) {
    if (!problem.empty() || grid.rank() != 0) return;
    try {
      open();
    } catch (const std::exception& e) {
      problem = what + e.what();
    }
  };
  // The stream's failure as an error with the system's reason.
  auto open_file = [](std::ofstream& f, const std::string& path, std::ios::openmode mode,
                      const std::string& what) {
    errno = 0;
    f.open(path, mode);
    if (!f)
      throw std::runtime_error("cannot write " + what + " '" + path + "'" +
                               (errno ? std::string(" (") + std::strerror(errno) + ")" : ""));
  };
  if (!c.checkpoint.dir.empty())
    attempt(c.path + ": key 'checkpoint.dir': ",
            [&] { checkpoint::check_writable(c.checkpoint.dir); });
  // Appending changes nothing yet: a resumed run keeps the steps it continues from.
  if (!options.metrics.empty())
    attempt("--metrics: ", [&] {
      check_metrics_file(options.metrics);
      open_file(out.metrics, options.metrics, std::ios::app, "metrics file");
    });
  if (!options.trace.empty())
    attempt("--trace: ", [&] {
      if (!options.metrics.empty() && same_file(options.trace, options.metrics))
        throw std::runtime_error("'" + options.trace + "' is the --metrics file too");
      check_trace_file(options.trace);
      open_file(out.trace, options.trace, std::ios::app, "trace file");
    });
  if (!options.tensorboard.empty())
    attempt("--tensorboard: ", [&] {
      out.board = std::make_unique<metrics::TensorBoardWriter>(options.tensorboard);
    });
  agree(grid.host(), problem);
  return out;
}

// Starts the metrics file (rank 0's; collective) once the run knows its first step: a fresh run
// starts it anew; a resumed one, from step `done`, keeps its lines of steps up to `done` and
// appends, dropping those after it (an abandoned run's, which this run writes again). A last line
// of ours cut short (the process died while writing it) is dropped too; a file holding any line
// not ours was refused before (check_metrics_file). The kept lines replace the file by a rename,
// so a failed write loses none of them.
void start_metrics(comm::Grid& grid, const std::string& path, std::ofstream& metrics,
                   bool resumed, int64_t done) {
  std::string problem;
  // A device or a pipe (/dev/null, /dev/stdout, a FIFO) is written as it is: renaming a file
  // over it would replace it, and reading it back may never end.
  std::error_code ec;
  const bool regular = !std::filesystem::exists(path, ec) ||
                       std::filesystem::is_regular_file(path, ec);
  if (metrics.is_open() && regular) {
    std::string kept;  // lines of ours only: check_metrics_file has refused any other
    if (resumed) {
      std::ifstream in(path);
      std::string line;
      while (std::getline(in, line)) {
        const std::optional<int64_t> step = json_line_step(line);
        if (step && *step <= done) kept += line + "\n";
      }
      if (in.bad()) problem = "--metrics: cannot read '" + path + "'";
    }
    if (problem.empty()) {
      metrics.close();
      // Through a symbolic link, the file it names is replaced, and the link stays.
      const std::filesystem::path resolved = std::filesystem::canonical(path, ec);
      const std::string target = ec ? path : resolved.string();
      const std::string tmp = target + ".tmp";
      errno = 0;
      std::ofstream out(tmp, std::ios::trunc);
      if (!(out << kept << std::flush) || (out.close(), !out) ||
          std::rename(tmp.c_str(), target.c_str()) != 0) {
        problem = "--metrics: cannot write '" + tmp + "' and rename it to '" + target + "'" +
                  (errno ? std::string(" (") + std::strerror(errno) + ")" : "");
        std::remove(tmp.c_str());
      } else {
        metrics.open(path, std::ios::app);
        if (!metrics) problem = "--metrics: cannot write '" + path + "'";
      }
    }
  }
  agree(grid.host(), problem);
}

// A message at `level` (merak/log), printf-style; one line, no newline needed.
[[gnu::format(printf, 2, 3)]] void say(log::Level level, const char* format, ...) {
  if (!log::enabled(level)) return;
  char buf[1024];
  va_list args;
  va_start(args, format);
  std::vsnprintf(buf, sizeof buf, format, args);
  va_end(args);
  std::string line = buf;
  while (!line.empty() && line.back() == '\n') line.pop_back();
  std::fflush(stdout);  // after what was printf'd before it
  log::message(level, line);
}

// Warns when the config's hardware profile is a CPU's calibrated on a CPU of another speed
// (partition::cpu_profile_warning; `core_gflops` 0: measured there).
void check_cpu_profile(const config::Config& c, double core_gflops) {
  const std::string warning = partition::cpu_profile_warning(c.parallel.hardware, core_gflops);
  if (!warning.empty()) say(log::Level::Warn, "%s", warning.c_str());
}

void print_header(Trainer& trainer, const Peak& peak) {
  const config::Config& c = trainer.config();
  const config::ParallelConfig& p = c.parallel;
  const auto& t = c.train;
  runtime::Engine& engine = trainer.engine();
  const int world = trainer.grid().world().size();
  char model[512];
  if (c.model.onnx.empty())
    std::snprintf(model, sizeof model, "%s, %lld layers, hidden %lld, %lld heads",
                  c.model.family.c_str(), (long long)c.model.layers, (long long)c.model.hidden,
                  (long long)c.model.heads);
  else
    std::snprintf(model, sizeof model, "%s imported, %s's loss", c.model.onnx.c_str(),
                  c.model.family.c_str());
  say(log::Level::Info,
      "merak_train: %s | %s | %.2fM parameters | dp %lld, pp %lld, tp %lld on %d rank%s",
      c.path.c_str(), model, double(trainer.parameters()) / 1e6, (long long)p.dp,
      (long long)p.pp, (long long)p.tp, world, world == 1 ? "" : "s");
  const int threads = num_threads();
  say(log::Level::Info,
      "  batch %lld x seq %lld in %lld micro-batch%s of %lld per replica, schedule %s, "
      "recompute %s, %lld steps | %s in %s, %d thread%s a rank, %s",
      (long long)t.batch, (long long)t.seq_len, (long long)config::micro_batches_per_replica(c),
      config::micro_batches_per_replica(c) == 1 ? "" : "es",
      (long long)config::micro_batch_size(c), p.schedule.c_str(), p.recompute.c_str(),
      (long long)t.steps, trainer.device().str().c_str(), t.precision.c_str(), threads,
      threads == 1 ? "" : "s", peak.what.c_str());
  // A job (even of one rank, under a launcher) names what carries its groups' tensors.
  if (std::string(trainer.grid().pp().backend()) != "self")
    say(log::Level::Info, "  groups talk over %s", comm::backend_name(trainer.grid().pp()).c_str());
  if (!engine.dp_transport().empty() && engine.dp_parameters().empty())
    say(log::Level::Info, "  data-parallel gradient sums: %s", engine.dp_transport().c_str());
  else if (!engine.dp_transport().empty())
    say(log::Level::Info, "  data-parallel gradient sums: %s, buckets of %g MiB; parameters: %s",
        engine.dp_transport().c_str(), p.bucket_mb, engine.dp_parameters().c_str());
  if (!engine.tp_transport().empty())
    say(log::Level::Info, "  tensor-parallel all-reduces: %s", engine.tp_transport().c_str());
  std::fflush(stdout);
}

// The step directory `resume` names (see RunOptions), resolved on rank 0 and shared: empty for a
// fresh start. A path that names no checkpoint is a SetupError on every rank.
std::string resume_dir(const config::Config& c, comm::Grid& grid, const std::string& resume) {
  if (resume.empty()) return "";
  std::string answer;  // "P<path>" or "E<problem>"
  if (grid.rank() == 0) {
    try {
      if (resume == "auto" && c.checkpoint.dir.empty())
        throw SetupError(c.path + ": --resume auto continues from checkpoint.dir, which is empty");
      answer = "P" + (resume == "auto" ? checkpoint::resolve(c.checkpoint.dir, true)
                                       : checkpoint::resolve(resume));
    } catch (const std::exception& e) {
      answer = std::string("E") + e.what();
    }
  }
  answer = runtime::broadcast_bytes(grid.host(), answer, 0);
  if (!answer.empty() && answer[0] == 'E') throw SetupError(answer.substr(1));
  return answer.substr(1);
}

// Every rank's peak memory next to what the partitioner's memory model predicted for it (rank 0
// prints; a rank per line up to 16 ranks, the extremes beyond).
void print_memory(Trainer& trainer, int64_t peak) {
  comm::Grid& grid = trainer.grid();
  const std::vector<double> all = runtime::all_gather_doubles(
      grid.host(), {double(peak), double(trainer.predicted_memory_bytes())});
  if (grid.rank() != 0) return;
  const int world = int(all.size() / 2);
  const char* what = trainer.device().is_cuda() ? "device" : "host";
  auto one = [&](int r) {
    const double measured = all[size_t(2 * r)], predicted = all[size_t(2 * r + 1)];
    char ratio[32] = "";
    if (predicted > 0) std::snprintf(ratio, sizeof ratio, ", x%.2f", measured / predicted);
    return "rank " + std::to_string(r) + " " + human_bytes(measured) + " (" +
           human_bytes(predicted) + ratio + ")";
  };
  std::printf("peak %s memory per rank, measured (partitioner's estimate):", what);
  if (world <= 16) {
    for (int r = 0; r < world; ++r) std::printf("%s %s", r ? ";" : "", one(r).c_str());
  } else {
    int low = 0, high = 0;
    for (int r = 1; r < world; ++r) {
      if (all[size_t(2 * r)] < all[size_t(2 * low)]) low = r;
      if (all[size_t(2 * r)] > all[size_t(2 * high)]) high = r;
    }
    std::printf(" least %s; most %s", one(low).c_str(), one(high).c_str());
  }
  std::printf("\n");
}

// The run replayed in the simulator with the costs it measured, next to the measured step.
void print_replay(const std::vector<runtime::TraceSpan>& spans, const comm::GridShape& shape,
                  const runtime::EngineOptions& options, int micro_batches,
                  const std::vector<double>& step_seconds) {
  if (step_seconds.empty()) return;
  runtime::ScheduleOptions so;
  so.recompute = options.recompute;
  so.virtual_stages = options.virtual_stages;
  const runtime::SimResult sim = runtime::simulate(
      runtime::make_schedules(options.schedule, shape.pp, micro_batches, so),
      runtime::measured_costs(spans, shape, options.virtual_stages));
  const double measured = median(step_seconds);
  std::printf("simulator with the measured costs: step %.1f ms, bubble %.0f%% | measured: %.1f ms "
              "(median of %zu steps) | simulated / measured %.3f\n",
              1e3 * sim.step_time, 100 * sim.bubble, 1e3 * measured, step_seconds.size(),
              sim.step_time / measured);
}

// Every rank's spans into one Chrome trace on rank 0 (into `f`, opened at start-up), with the
// simulator's replay of them. Collective; a failed write is a SetupError on every rank.
void write_trace(Trainer& trainer, std::ofstream& f, const std::string& path,
                 const std::vector<double>& step_seconds) {
  comm::Grid& grid = trainer.grid();
  const std::vector<runtime::TraceSpan> spans =
      runtime::gather_spans(grid.host(), trainer.engine().spans());
  std::string problem;
  if (grid.rank() == 0) {
    const int world = grid.world().size();
    std::vector<std::string> names;
    for (int r = 0; r < world; ++r) {
      const comm::GridCoord co = comm::grid_coord(grid.shape(), r);
      names.push_back("rank " + std::to_string(r) + " (dp " + std::to_string(co.dp) + ", pp " +
                      std::to_string(co.pp) + ", tp " + std::to_string(co.tp) + ")");
    }
    f.close();
    f.open(path, std::ios::trunc);  // only now: a run with nothing to run leaves it as it was
    f << runtime::chrome_trace_json(names, spans);
    if (!f.flush()) problem = "--trace: cannot write trace file '" + path + "'";
  }
  agree(grid.host(), problem);
  if (grid.rank() != 0) return;
  const int world = grid.world().size();
  std::printf("trace: %s (%zu spans from %d rank%s)\n", path.c_str(), spans.size(), world,
              world == 1 ? "" : "s");
  print_replay(spans, grid.shape(), trainer.options(), trainer.engine().micro_batches(),
               step_seconds);
}

// A step's figures as TensorBoard scalars (and the evaluation's, when one ran), handed over as
// one group so that a time-based flush never leaves part of a slow step's figures waiting in
// memory for the next step.
void write_scalars(metrics::TensorBoardWriter& board, const StepReport& r) {
  std::vector<std::pair<std::string, float>> v = {
      {"train/loss", float(r.stats.loss)},
      {"train/lr", float(r.stats.lr)},
      {"train/grad_norm", float(r.stats.grad_norm)},
      {"train/tokens_per_s", float(r.tokens_per_s)}};
  if (std::isfinite(r.peak_fraction)) v.push_back({"train/mfu", float(r.peak_fraction)});
  v.push_back({"train/peak_mem_gib", float(double(r.stats.peak_mem_bytes) / (1 << 30))});
  if (r.stats.loss_scale > 0) v.push_back({"train/loss_scale", float(r.stats.loss_scale)});
  if (r.eval) {
    v.push_back({"valid/loss", float(r.eval->loss)});
    v.push_back({"valid/perplexity", float(r.eval->perplexity)});
  }
  board.scalars(r.stats.step, v);
}

// A write to the event file that fails (a full disk) ends the run as the metrics file's does.
template <typename F>
void to_board(F&& write) {
  try {
    write();
  } catch (const std::exception& e) {
    throw OutputError("--tensorboard: " + std::string(e.what()));
  }
}

}  // namespace

int run(const config::Config& c, comm::Grid& grid, const RunOptions& options) {
  const auto& t = c.train;
  const config::CheckpointConfig& ck = c.checkpoint;
  const bool root = grid.rank() == 0;
  check_same_config(c, grid);
  Outputs out = open_outputs(c, grid, options);
  Trainer trainer(c, grid, !options.trace.empty());
  {
    const comm::GridCoord at = grid.coord();
    int64_t here = 0;
    for (const auto& [name, value] : trainer.engine().parameters()) here += value.numel();
    say(log::Level::Debug, "place: dp %d, pp %d, tp %d | %d model chunk%s, %.2fM parameters "
        "here | %s", at.dp, at.pp, at.tp, trainer.engine().chunks(),
        trainer.engine().chunks() == 1 ? "" : "s", double(here) / 1e6,
        trainer.device().str().c_str());
  }
  const std::string resume = resume_dir(c, grid, options.resume);
  double load_seconds = 0;
  if (!resume.empty()) {
    const auto start = std::chrono::steady_clock::now();
    trainer.resume_from(resume);
    load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }

  const int world = grid.world().size();
  // Only rank 0 reports; the others skip the measurement (and do not disturb it much).
  const Peak peak = measure_peak(trainer);
  if (root) print_header(trainer, peak);
  if (root && !peak.unknown.empty())
    say(log::Level::Warn, "%s: no MFU (\"of peak\") is reported", peak.unknown.c_str());
  if (root && peak.core_gflops > 0) check_cpu_profile(trainer.config(), peak.core_gflops);
  if (root && !resume.empty())
    say(log::Level::Info, "resumed from %s: step %lld done (loaded in %.2f s)", resume.c_str(),
                (long long)trainer.steps_done(), load_seconds);
  // A fresh run saving where another run's checkpoints are: allowed (a run started over), but
  // its saves replace those steps and move `latest` back, so it is said.
  if (root && resume.empty() && !ck.dir.empty()) {
    std::string earlier;
    try {
      earlier = checkpoint::resolve(ck.dir, true);
    } catch (const std::exception&) {  // a damaged `latest`: the saves will say what is wrong
    }
    if (!earlier.empty())
      say(log::Level::Warn, "checkpoint.dir %s holds an earlier run's checkpoint (%s); this "
          "fresh run saves over its steps and moves latest back (--resume auto continues it)",
          ck.dir.c_str(), earlier.c_str());
  }
  if (trainer.steps_done() >= t.steps) {  // before the outputs change: they stay as they are
    if (root)
      std::printf("done: nothing to run (train.steps is %lld, the checkpoint is at step %lld)\n",
                  (long long)t.steps, (long long)trainer.steps_done());
    return 0;
  }
  start_metrics(grid, options.metrics, out.metrics, !resume.empty(), trainer.steps_done());
  // TensorBoard drops what an earlier file of the directory holds from here on: after a resume,
  // the abandoned run's steps past the checkpoint, which this run writes again; on a fresh start
  // (a run started over, or --resume auto with nothing saved yet), all of an earlier attempt's,
  // as the metrics file starts anew.
  if (out.board) to_board([&] { out.board->session_start(trainer.steps_done() + 1); });

  // The bar redraws a line in place: one process started without mpirun, on a terminal only
  // (mpirun hands its ranks a terminal of its own, whatever its own output goes to, and forwards
  // their output line by line).
  const bool tty = world == 1 && !comm::mpi_running() && isatty(fileno(stdout));
  const int64_t first_step = trainer.steps_done() + 1;  // this process's (after a checkpoint's)
  double first_loss = 0, last_loss = 0, tokens = 0, seconds = 0, flops = 0;
  int64_t peak_mem = 0;
  std::vector<double> step_seconds;  // after the first (one-time warm-up)
  bool finite = true;  // the loss so far; the first step that is not is reported (once)
  int stopped = 0;     // the signal a rank was asked to stop by, agreed by all after a step
  if (options.steps_begin) options.steps_begin();
  for (int64_t i = 0; trainer.steps_done() < t.steps; ++i) {
    const StepStats s = trainer.step();
    if (i == 0) first_loss = s.loss;
    last_loss = s.loss;
    peak_mem = s.peak_mem_bytes;
    if (i > 0) {
      step_seconds.push_back(s.seconds);
      tokens += s.tokens;
      seconds += s.seconds;
      flops += s.model_flops;
    }
    // Evaluation after the step (collective), reported with it.
    std::optional<EvalStats> eval;
    if (c.eval.every > 0 && (s.step % c.eval.every == 0 || s.step == t.steps))
      eval = trainer.evaluate();
    if (root) {
      StepReport rep = report(s, peak.job_gflops);
      if (eval) rep.eval = &*eval;
      if (out.metrics.is_open()) {
        errno = 0;
        // Rank 0's alone: thrown, it ends the job with this message (a full disk loses no line
        // unnoticed).
        if (!(out.metrics << json_line(rep) << "\n" << std::flush))
          throw OutputError("--metrics: cannot write '" + options.metrics + "'" +
                            (errno ? std::string(" (") + std::strerror(errno) + ")" : ""));
      }
      if (out.board) to_board([&] { write_scalars(*out.board, rep); });
      if (s.step == 1 || s.step % t.log_interval == 0 || s.step == t.steps || eval) {
        if (tty) std::printf("\r\033[K");
        std::printf("%s%s\n", log_line(rep, t.steps).c_str(),
                    world > 1 ? time_breakdown(rep, world).c_str() : "");
      }
      // Training goes on as configured (an f16 loss scale may recover), but not unnoticed.
      if (finite && !std::isfinite(s.loss)) {
        finite = false;
        if (tty) std::printf("\r\033[K");
        say(log::Level::Warn, "step %lld: the loss is %g and the run goes on; a diverged run "
            "needs a lower optimizer.lr or optimizer.grad_clip (said once)",
            (long long)s.step, s.loss);
      }
      // Loss-scale changes and skipped steps are always shown (f16).
      if (!s.event.empty()) {
        if (tty) std::printf("\r\033[K");
        std::printf("step %5lld: %s\n", (long long)s.step, s.event.c_str());
      }
    }
    // Saved between steps (collective), outside the steps' measured times. A background save
    // is published at the step boundary after it started (or at the end).
    auto report_save = [&](const CheckpointSaved& saved) {
      if (!root) return;
      if (tty) std::printf("\r\033[K");
      say(log::Level::Info, "checkpoint: %s (%s in %.2f s; the steps waited %.3f s)",
                  saved.step_dir.c_str(), human_bytes(double(saved.bytes)).c_str(),
                  saved.seconds, saved.blocked);
    };
    // A stop asked of any rank (Ctrl-C, a scheduler's SIGTERM before it kills the job, a
    // SIGUSR1 that mpirun passes on) ends every rank after this step, saving first where
    // checkpoints are configured. A signal during the last step changes nothing: the run is
    // complete.
    if (options.stop_signal) {
      const double mine = double(options.stop_signal());
      for (double asked : runtime::all_gather_doubles(grid.host(), {mine}))
        if (asked > 0 && stopped == 0 && s.step < t.steps) stopped = int(asked);
    }
    const bool due = !ck.dir.empty() &&
                     ((ck.every > 0 && s.step % ck.every == 0) || s.step == t.steps || stopped);
    // A background save is published once its files are written everywhere, or before the
    // next one starts.
    if (trainer.checkpoint_pending() && (due || trainer.checkpoint_written()))
      report_save(trainer.finish_checkpoint());
    if (due) {
      if (ck.async && s.step < t.steps && !stopped) trainer.start_checkpoint(ck.dir, ck.keep);
      else report_save(trainer.save_checkpoint(ck.dir, ck.keep));
    }
    if (stopped) break;
    if (root && tty) draw_progress(stdout, s.step, t.steps, s.loss);
    if (root) std::fflush(stdout);
  }
  if (tty) std::printf("\r\033[K");
  // The last steps' records, before the run says it is done.
  if (out.board) to_board([&] { out.board->flush(); });
  if (!options.trace.empty()) write_trace(trainer, out.trace, options.trace, step_seconds);
  print_memory(trainer, peak_mem);
  if (root) {
    // The steps this process ran: a resumed run's start after its checkpoint's.
    const int64_t ran = trainer.steps_done() - first_step + 1;
    std::printf("done: %lld step%s", (long long)ran, ran == 1 ? "" : "s");
    if (first_step > 1)
      std::printf(" (%lld to %lld)", (long long)first_step, (long long)trainer.steps_done());
    std::printf(" | loss %.4f -> %.4f | ", first_loss, last_loss);
    if (seconds > 0) {
      const double gf = flops / seconds / 1e9;
      std::printf("%.0f tok/s %s | %.1f GFLOP/s", tokens / seconds,
                  steady_rate(step_seconds, double(t.batch) * double(t.seq_len)).c_str(), gf);
      if (peak.job_gflops > 0) std::printf(" (%.0f%% of peak)", 100 * gf / peak.job_gflops);
    } else {
      std::printf("no rate (the first step warms up and is not counted; run 2 or more)");
    }
    std::printf(" | peak mem %s\n", human_bytes(double(peak_mem)).c_str());
    if (stopped)
      say(log::Level::Warn, "stopped by signal %d (%s) after step %lld of %lld: %s", stopped,
          strsignal(stopped), (long long)trainer.steps_done(), (long long)t.steps,
          ck.dir.empty() ? "nothing saved (no checkpoint.dir)"
                         : "saved; --resume auto continues from it");
  }
  return stopped ? 128 + stopped : 0;
}

std::string dry_run(const config::Config& c, const DryRunOptions& o) {
  const partition::ReportHeader header{c.path, c.parallel.hardware};
  int64_t world = o.world > 0 ? o.world : 1;
  if (c.parallel.auto_keys.empty()) {
    // A fixed layout is a search with one candidate: the same predictions as the search gives.
    const config::ParallelConfig& p = c.parallel;
    const int64_t ranks = p.dp * p.pp * p.tp;
    if (o.world > 0 && o.world != ranks)
      throw SetupError(c.path + ": key 'parallel': dp " + std::to_string(p.dp) + " x pp " +
                       std::to_string(p.pp) + " x tp " + std::to_string(p.tp) + " is " +
                       std::to_string(ranks) + " ranks, not --world " + std::to_string(o.world) +
                       " (parallel: auto chooses a layout of the world size)");
    world = ranks;
  }
  const LayoutSearch s = search_layouts(c, world, o.devices_per_node);
  check_cpu_profile(c, 0);  // the predictions below are this profile's
  if (o.json) {
    std::string plan = partition::to_json(s.result, s.input.request, header);
    plan = plan.substr(0, plan.find_last_of('}'));  // the plan's members, then the search's
    while (!plan.empty() && (plan.back() == '\n' || plan.back() == ' ')) plan.pop_back();
    return plan + ",\n" + search_json(s) + "\n}\n";
  }
  return search_table(s) + "\n" + partition::explain(s.result, s.input.request, header);
}

}  // namespace merak::train
