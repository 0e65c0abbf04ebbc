// merak_train: trains the model a config describes.
//
//   merak_train --config configs/gpt-tiny.yaml [--set key=value ...] [--metrics FILE]
//   mpirun -np N merak_train --config configs/gpt-tiny-3d.yaml [...] [--trace FILE.json]
//
// When the config's parallel section asks for more than one rank (dp * pp * tp > 1) every rank
// runs the 3D engine (tools/train/parallel.h); the job's size must equal dp * pp * tp.
//
// Exit codes: 0 done, 2 bad command line or config (one line naming the file and key), 1 any
// other failure.
#include <unistd.h>

#include <cstdlib>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "merak/comm/mpi_env.h"
#include "merak/core/parallel.h"
#include "merak/cuda/runtime.h"
#include "tools/common/fma_peak.h"
#include "tools/train/parallel.h"
#include "tools/train/progress.h"
#include "tools/train/trainer.h"

namespace {

struct Args {
  std::string config;
  std::vector<std::string> overrides;
  std::string metrics;
  std::string trace;
};

[[noreturn]] void usage(const std::string& problem) {
  std::fprintf(stderr,
               "merak_train: %s\nusage: [mpirun -np N] merak_train --config FILE.yaml "
               "[--set key=value ...] [--metrics FILE.jsonl] [--trace FILE.json]\n",
               problem.c_str());
  std::exit(2);
}

Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--config") a.config = value();
    else if (arg == "--set") a.overrides.push_back(value());
    else if (arg == "--metrics") a.metrics = value();
    else if (arg == "--trace") a.trace = value();
    else if (arg == "--help" || arg == "-h") usage("help");
    else usage("unknown argument '" + arg + "'");
  }
  if (a.config.empty()) usage("--config is required");
  return a;
}

// The job's size and this process's rank as the MPI launcher tells them (before MPI starts, so
// a single-process run never initialises MPI): 1 and 0 without a launcher.
int launcher_value(const char* openmpi, const char* pmi, int fallback) {
  for (const char* name : {openmpi, pmi})
    if (const char* v = std::getenv(name)) return std::atoi(v);
  return fallback;
}

// Every rank of a parallel job. Errors in the layout or the plan reach every rank alike (exit 2,
// printed once); anything else ends the whole job with a message, so no rank is left waiting.
int parallel_main(int argc, char** argv, const merak::config::Config& cfg, const Args& args) {
  using namespace merak;
  comm::MpiSession session(&argc, &argv);
  try {
    train::ParallelRun run;
    run.metrics = args.metrics;
    run.trace = args.trace;
    return train::run_parallel(cfg, run);
  } catch (const train::SetupError& e) {
    if (comm::world_rank() == 0) std::fprintf(stderr, "merak_train: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    comm::abort_job(std::string("merak_train: error: ") + e.what());
  }
}

}  // namespace

int main(int argc, char** argv) {
  using namespace merak;
  const Args args = parse_args(argc, argv);
  const int world = launcher_value("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", 1);
  const bool speaker = launcher_value("OMPI_COMM_WORLD_RANK", "PMI_RANK", 0) == 0;
  config::Config cfg;
  try {
    cfg = config::load(args.config, args.overrides);
  } catch (const config::ConfigError& e) {
    if (speaker) std::fprintf(stderr, "merak_train: %s\n", e.what());
    return 2;
  }
  const int64_t ranks = cfg.parallel.dp * cfg.parallel.pp * cfg.parallel.tp;
  if (ranks > 1 || world > 1) {
    if (world != ranks) {
      if (speaker)
        std::fprintf(stderr,
                     "merak_train: %s: key 'parallel': dp %lld x pp %lld x tp %lld needs %lld "
                     "ranks, but the job has %d (start it with mpirun -np %lld)\n",
                     cfg.path.c_str(), (long long)cfg.parallel.dp, (long long)cfg.parallel.pp,
                     (long long)cfg.parallel.tp, (long long)ranks, world, (long long)ranks);
      return 2;
    }
    return parallel_main(argc, argv, cfg, args);
  }
  if (!args.trace.empty()) usage("--trace needs a parallel run (dp * pp * tp > 1)");

  try {
    std::unique_ptr<train::Trainer> trainer;
    try {
      trainer = std::make_unique<train::Trainer>(cfg);
    } catch (const config::ConfigError& e) {
      std::fprintf(stderr, "merak_train: %s\n", e.what());
      return 2;
    }
    std::ofstream metrics;
    if (!args.metrics.empty()) {
      metrics.open(args.metrics);
      if (!metrics) {
        std::fprintf(stderr, "merak_train: cannot write metrics file '%s'\n", args.metrics.c_str());
        return 2;
      }
    }
    const int threads = num_threads();
    const auto& t = cfg.train;
    // "Of peak" is model FLOPs over the device's peak: on a GPU its dense 16-bit tensor-core
    // rate (so the share is MFU), on the CPU the f32 FMA rate measured now on these threads.
    const bool gpu = t.device == "cuda";
    const double peak_core = gpu ? 0 : bench::measured_fma_peak_gflops();
    const double peak = gpu ? 1e3 * cuda::dense_peak_tflops(0) : peak_core * threads;
    std::printf("merak_train: %s | %s, %lld layers, hidden %lld, %lld heads | %.2fM parameters\n",
                cfg.path.c_str(), cfg.model.family.c_str(), (long long)cfg.model.layers,
                (long long)cfg.model.hidden, (long long)cfg.model.heads,
                double(trainer->model().num_parameters()) / 1e6);
    if (gpu)
      std::printf("  batch %lld x seq %lld, %lld steps, cuda:0 in %s, peak %.0f TFLOP/s (dense "
                  "16-bit tensor cores)\n",
                  (long long)t.batch, (long long)t.seq_len, (long long)t.steps,
                  t.precision.c_str(), peak / 1e3);
    else
      std::printf("  batch %lld x seq %lld, %lld steps, %d threads, peak %.0f GFLOP/s "
                  "(%.0f a core, measured)\n",
                  (long long)t.batch, (long long)t.seq_len, (long long)t.steps, threads, peak,
                  peak_core);
    std::fflush(stdout);

    const bool tty = isatty(fileno(stdout));
    double first_loss = 0, last_loss = 0, tokens = 0, seconds = 0, flops = 0;
    int64_t peak_mem = 0;
    std::vector<double> step_seconds;
    for (int64_t i = 0; i < t.steps; ++i) {
      const train::StepStats s = trainer->step();
      const train::StepReport r = train::report(s, peak);
      if (i == 0) first_loss = s.loss;
      last_loss = s.loss;
      peak_mem = s.peak_mem_bytes;
      if (i > 0) {  // the first step includes one-time warm-up
        step_seconds.push_back(s.seconds);
        tokens += s.tokens;
        seconds += s.seconds;
        flops += s.model_flops;
      }
      if (metrics.is_open()) metrics << train::json_line(r) << "\n" << std::flush;
      const bool log = s.step == 1 || s.step % t.log_interval == 0 || s.step == t.steps;
      if (log) {
        if (tty) std::printf("\r\033[K");
        std::printf("%s\n", train::log_line(r, t.steps).c_str());
      }
      // Loss-scale changes and skipped steps are always shown (f16).
      if (!s.event.empty()) {
        if (tty) std::printf("\r\033[K");
        std::printf("step %5lld: %s\n", (long long)s.step, s.event.c_str());
      }
      if (tty) train::draw_progress(stdout, s.step, t.steps, s.loss);
      std::fflush(stdout);
    }
    if (tty) std::printf("\r\033[K");
    const double tps = seconds > 0 ? tokens / seconds : 0;
    const double gf = seconds > 0 ? flops / seconds / 1e9 : 0;
    std::printf("done: %lld steps | loss %.4f -> %.4f | %.0f tok/s %s | %.1f GFLOP/s (%.0f%% of "
                "peak) | peak mem %s\n",
                (long long)t.steps, first_loss, last_loss, tps,
                train::steady_rate(step_seconds, double(t.batch) * double(t.seq_len)).c_str(), gf,
                peak > 0 ? 100 * gf / peak : 0, train::human_bytes(double(peak_mem)).c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "merak_train: error: %s\n", e.what());
    return 1;
  }
}
