// Training speed of Merak's GPT next to the same model in plain PyTorch (python/merak_ref) on
// the same shapes, thread count, batch and optimizer (forward, backward, global-norm clip,
// AdamW). Merak and tools/bench/bench_train_vs_torch.py (under /usr/bin/python3, with
// torch.set_num_threads and OpenBLAS limited to the same threads) take turns, --rounds times;
// each figure is the median over the rounds of a run's median step.
//
// PyTorch runs as a careful user would run it, and its fastest setting makes the ratio: with
// OpenBLAS's own kernel choice for this CPU (OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset, which
// this machine's environment sets to Haswell's kernels), and with the SkylakeX kernels named
// where the CPU has AVX-512 (OpenBLAS 0.3.21 does not know the newest CPUs and may pick generic
// kernels for them); each with glibc's default malloc and with one that keeps freed memory (see
// torch_settings); all with OMP_WAIT_POLICY=PASSIVE (PyTorch's OpenMP threads otherwise spin on
// the cores OpenBLAS's threads need). Each setting's time and the core OpenBLAS reported are
// printed.
//
//   bazel run //tools/bench:bench_train_vs_torch -- [--threads 2] [--batch 4] [--seq 64]
//       [--warmup 2] [--steps 5] [--rounds 3] [--shapes small,124m] [--no-torch]
//       [--peak GFLOPS_PER_CORE]
//
// Model FLOPs per token are the model's own count (6 N + 6 L T C for GPT); "of peak" divides the
// achieved model FLOP/s by the measured per-core FMA peak times the threads.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <sys/resource.h>
#include <unistd.h>

#include "merak/autograd/engine.h"
#include "merak/core/parallel.h"
#include "merak/optim/adamw.h"
#include "merak/optim/grad_norm.h"
#include "models/model.h"
#include "merak/core/fma_peak.h"
#include "merak/core/median.h"

namespace {

using merak::Tensor;
using clock_type = std::chrono::steady_clock;

struct Shape {
  std::string name;
  int64_t layers, hidden, heads, vocab, max_seq;
};

const std::map<std::string, Shape> kShapes = {
    {"small", {"L4 C256 H4 V8192", 4, 256, 4, 8192, 0}},  // max_seq 0 = the benchmark's seq
    {"124m", {"GPT-2 124M", 12, 768, 12, 50257, 1024}},
};

struct Options {
  int threads = 2;
  int64_t batch = 4, seq = 64;
  int warmup = 2, steps = 5, rounds = 3;
  std::vector<std::string> shapes = {"small", "124m"};
  bool torch = true;
  double peak = 0;  // GFLOP/s per core; 0 = measure
};

[[noreturn]] void usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s [--threads N] [--batch N] [--seq N] [--warmup N] [--steps N >= 5]\n"
               "          [--rounds N] [--shapes small,124m] [--no-torch] [--peak GFLOPS_PER_CORE]\n",
               argv0);
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--no-torch") {
      o.torch = false;
      continue;
    }
    if (i + 1 >= argc) usage(argv[0]);
    const char* v = argv[++i];
    if (arg == "--threads") o.threads = std::atoi(v);
    else if (arg == "--batch") o.batch = std::atoll(v);
    else if (arg == "--seq") o.seq = std::atoll(v);
    else if (arg == "--warmup") o.warmup = std::atoi(v);
    else if (arg == "--steps") o.steps = std::atoi(v);
    else if (arg == "--rounds") o.rounds = std::atoi(v);
    else if (arg == "--peak") o.peak = std::atof(v);
    else if (arg == "--shapes") {
      o.shapes.clear();
      std::stringstream ss(v);
      for (std::string s; std::getline(ss, s, ',');) {
        if (!kShapes.count(s)) {
          std::fprintf(stderr, "unknown shape '%s' (known: small, 124m)\n", s.c_str());
          std::exit(2);
        }
        o.shapes.push_back(s);
      }
    } else usage(argv[0]);
  }
  if (o.threads < 1 || o.batch < 1 || o.seq < 1 || o.warmup < 0 || o.steps < 5 || o.peak < 0 ||
      o.rounds < 1 || o.shapes.empty())
    usage(argv[0]);
  return o;
}

using merak::median;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

struct Timing {
  double step = 0, forward = 0, backward = 0, clip = 0, adamw = 0;  // median seconds
  int64_t params = 0;
  double flops_per_token = 0;
  double others = 0;  // cores' worth of CPU other processes used meanwhile (see Busy)
  std::string core;   // PyTorch: the kernel set OpenBLAS reported
};

// Per phase, the median over rounds (each round's figures are already medians of its steps);
// `others` is the worst round's.
Timing median_of(const std::vector<Timing>& rounds) {
  Timing t = rounds.front();
  auto pick = [&rounds](double Timing::*field) {
    std::vector<double> v;
    for (const Timing& r : rounds) v.push_back(r.*field);
    return median(v);
  };
  t.step = pick(&Timing::step), t.forward = pick(&Timing::forward);
  t.backward = pick(&Timing::backward), t.clip = pick(&Timing::clip);
  t.adamw = pick(&Timing::adamw);
  for (const Timing& r : rounds) t.others = std::max(t.others, r.others);
  return t;
}

// The machine is shared: CPU time every process spent (from /proc/stat) minus what this process
// and its children spent, over a run's wall time, says how many cores others took meanwhile.
class Busy {
 public:
  Busy() : wall_(clock_type::now()), all_(all_cpu_seconds()), own_(own_cpu_seconds()) {}
  double others_cores() const {
    const double wall = seconds_since(wall_);
    const double others = (all_cpu_seconds() - all_) - (own_cpu_seconds() - own_);
    return wall > 0 ? std::max(0.0, others / wall) : 0;
  }

 private:
  static double all_cpu_seconds() {
    std::ifstream f("/proc/stat");
    std::string cpu;
    double user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
    f >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal;
    return (user + nice + system + irq + softirq + steal) / double(sysconf(_SC_CLK_TCK));
  }
  static double own_cpu_seconds() {
    double total = 0;
    for (int who : {RUSAGE_SELF, RUSAGE_CHILDREN}) {
      rusage u{};
      getrusage(who, &u);
      total += double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
               1e-6 * double(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
    }
    return total;
  }
  clock_type::time_point wall_;
  double all_, own_;
};

// The same loop as the PyTorch side: zero grads, loss, backward, clip at 1.0, AdamW step. As
// merak_train does it: the gradient norm is taken during backward, as each gradient completes,
// and the clipping factor is applied inside AdamW's pass.
Timing time_merak(const Shape& s, const Options& o) {
  const Busy busy;
  merak::models::ModelOptions mo;
  mo.family = "gpt";
  mo.layers = s.layers, mo.hidden = s.hidden, mo.heads = s.heads, mo.vocab = s.vocab;
  mo.max_seq = s.max_seq > 0 ? s.max_seq : o.seq;
  auto model = merak::models::make_model(mo);
  model->materialize(1);
  model->train(true);
  merak::optim::AdamWOptions ao;
  ao.lr = 3e-4;
  merak::optim::AdamW opt(merak::optim::make_params(model->named_parameters()), ao);

  merak::models::Batch batch;
  std::mt19937_64 rng(5);
  std::vector<int64_t> tokens, targets;
  for (int64_t i = 0; i < o.batch * o.seq; ++i) {
    tokens.push_back(int64_t(rng() % uint64_t(s.vocab)));
    targets.push_back(int64_t(rng() % uint64_t(s.vocab)));
  }
  batch.tokens = Tensor::from_vector(tokens, {o.batch, o.seq});
  batch.targets = Tensor::from_vector(targets, {o.batch, o.seq});

  std::vector<double> step, fwd, bwd, clip, adamw;
  merak::optim::GradNormTracker norms(opt.params());
  for (int i = 0; i < o.warmup + o.steps; ++i) {
    const auto t0 = clock_type::now();
    opt.zero_grad();
    const Tensor loss = model->loss(batch);
    const double t_fwd = seconds_since(t0);
    const Tensor seed = Tensor::ones(loss.shape(), loss.dtype(), loss.device());
    merak::autograd::backward({loss}, {seed}, norms.on_leaf_ready());
    const double t_bwd = seconds_since(t0);
    const double norm = norms.norm();
    const double t_clip = seconds_since(t0);
    opt.step(3e-4, merak::optim::clip_coefficient(norm, 1.0));
    const double t_all = seconds_since(t0);
    std::fprintf(stderr, "  merak %s step %d: %.1f ms (loss %.4f)\n", s.name.c_str(), i,
                 1e3 * t_all, loss.item());
    if (i < o.warmup) continue;
    step.push_back(t_all);
    fwd.push_back(t_fwd);
    bwd.push_back(t_bwd - t_fwd);
    clip.push_back(t_clip - t_bwd);
    adamw.push_back(t_all - t_clip);
  }
  Timing t;
  t.step = median(step), t.forward = median(fwd), t.backward = median(bwd);
  t.clip = median(clip), t.adamw = median(adamw);
  t.params = model->num_parameters();
  t.flops_per_token = model->flops_per_token(o.seq);
  t.others = busy.others_cores();
  return t;
}

// tools/bench/bench_train_vs_torch.py: next to the working directory under `bazel run`, else in
// the binary's runfiles.
std::string torch_script(const char* argv0) {
  const std::string rel = "tools/bench/bench_train_vs_torch.py";
  std::vector<std::string> candidates = {rel, std::string(argv0) + ".runfiles/merak/" + rel};
  if (const char* r = std::getenv("RUNFILES_DIR")) candidates.push_back(std::string(r) + "/merak/" + rel);
  for (const auto& c : candidates)
    if (std::ifstream(c).good()) return c;
  return "";
}

// One way to run PyTorch: a name and the `env` arguments that set it up (see the top comment).
struct TorchSetting {
  std::string name, env;
};

std::vector<TorchSetting> torch_settings(const Options& o) {
  const std::string common = "env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OPENBLAS_NUM_THREADS=" +
                             std::to_string(o.threads) + " OMP_NUM_THREADS=" +
                             std::to_string(o.threads) + " OMP_WAIT_POLICY=PASSIVE";
  std::vector<std::pair<std::string, std::string>> cores = {{"OpenBLAS's choice", ""}};
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) cores.push_back({"SkylakeX", " OPENBLAS_CORETYPE=SkylakeX"});
  // glibc's malloc hands large blocks back to the kernel at free, so each step faults its
  // temporaries in afresh (about 10 us a 4 KiB page on a paravirtualised guest: PyTorch's 124M
  // step took 4.9 s here, 1.2 s without it). PyTorch's CPU tuning advice is a caching malloc
  // (jemalloc, tcmalloc); glibc's tunables do the same: keep freed memory in the heap.
  const std::string kept_heap = " MALLOC_MMAP_THRESHOLD_=17179869184"
                                " MALLOC_TRIM_THRESHOLD_=17179869184 MALLOC_TOP_PAD_=1073741824";
  std::vector<TorchSetting> settings;
  for (const auto& [name, env] : cores) {
    settings.push_back({name, common + env});
    settings.push_back({name + ", heap kept", common + env + kept_heap});
  }
  return settings;
}

// Runs the PyTorch side for one shape; returns its median step seconds and phases (0 on error).
Timing time_torch(const std::string& script, const TorchSetting& setting, const Shape& s,
                  const Options& o) {
  std::ostringstream cmd;
  cmd << setting.env << " /usr/bin/python3 " << script << " --threads " << o.threads << " --batch " << o.batch
      << " --seq " << o.seq << " --warmup " << o.warmup << " --steps " << o.steps
      << " --layers " << s.layers << " --hidden " << s.hidden << " --heads " << s.heads
      << " --vocab " << s.vocab << " --max-seq " << (s.max_seq > 0 ? s.max_seq : o.seq);
  Timing t;
  const Busy busy;
  FILE* p = popen(cmd.str().c_str(), "r");
  if (!p) return t;
  char line[4096];
  char core[64] = "";
  while (std::fgets(line, sizeof line, p)) {
    if (std::sscanf(line, "RESULT step %lf forward %lf backward %lf clip %lf adamw %lf core %63s",
                    &t.step, &t.forward, &t.backward, &t.clip, &t.adamw, core) == 6) {
      t.core = core;
      continue;
    }
    std::fputs(line, stderr);  // the script's own notes (BLAS in use, per-step times)
  }
  if (pclose(p) != 0) t.step = 0;
  t.others = busy.others_cores();
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  merak::set_num_threads(o.threads);
  const double peak_core = o.peak > 0 ? o.peak : merak::bench::measured_fma_peak_gflops();
  const double peak = peak_core * o.threads;
  std::printf("threads %d, batch %lld x seq %lld, warm-up %d, timed %d (median); peak %.1f "
              "GFLOP/s per core (%s) x %d = %.1f GFLOP/s\n",
              o.threads, (long long)o.batch, (long long)o.seq, o.warmup, o.steps, peak_core,
              o.peak > 0 ? "given" : merak::bench::fma_peak_isa(), o.threads, peak);
  std::fflush(stdout);

  const std::string script = o.torch ? torch_script(argv[0]) : "";
  if (o.torch && script.empty())
    std::fprintf(stderr, "bench: tools/bench/bench_train_vs_torch.py not found; PyTorch skipped\n");

  const double tokens = double(o.batch * o.seq);
  const std::vector<TorchSetting> settings =
      script.empty() ? std::vector<TorchSetting>() : torch_settings(o);
  struct Row {
    Shape shape;
    std::vector<Timing> merak_rounds;
    std::vector<std::vector<Timing>> torch_rounds;  // [setting][round]
    Timing merak;                                    // medians over the rounds
    std::vector<Timing> by_setting;                  // medians over the rounds, per setting
    size_t best = SIZE_MAX;                          // the fastest setting that ran
    Timing torch() const { return best < by_setting.size() ? by_setting[best] : Timing(); }
  };
  std::vector<Row> rows;
  for (const auto& name : o.shapes) {
    rows.push_back({kShapes.at(name), {}, {}, {}, {}, SIZE_MAX});
    rows.back().torch_rounds.resize(settings.size());
  }
  // Turns: every Merak run, then every PyTorch run, per round, so the two never share the cores
  // and drift in the machine's speed reaches both alike.
  for (int round = 0; round < o.rounds; ++round) {
    std::fprintf(stderr, "round %d of %d\n", round + 1, o.rounds);
    for (auto& r : rows) r.merak_rounds.push_back(time_merak(r.shape, o));
    for (auto& r : rows)
      for (size_t k = 0; k < settings.size(); ++k) {
        std::fprintf(stderr, "  torch, %s: %s\n", settings[k].name.c_str(),
                     settings[k].env.c_str());
        r.torch_rounds[k].push_back(time_torch(script, settings[k], r.shape, o));
      }
  }
  for (auto& r : rows) {
    r.merak = median_of(r.merak_rounds);
    for (size_t k = 0; k < settings.size(); ++k) {
      const auto& runs = r.torch_rounds[k];
      const bool failed =
          std::any_of(runs.begin(), runs.end(), [](const Timing& t) { return t.step <= 0; });
      Timing t = median_of(runs);
      if (failed) t.step = 0;
      r.by_setting.push_back(t);
      if (t.step > 0 && (r.torch().step <= 0 || t.step < r.torch().step)) r.best = k;
    }
  }

  std::printf("\n%-17s %9s %8s %9s %8s %7s | %9s %8s | %7s\n", "shape", "params", "merak ms",
              "tokens/s", "GFLOP/s", "of peak", "torch ms", "tokens/s", "ratio");
  for (const auto& r : rows) {
    const double gflops = r.merak.flops_per_token * tokens / r.merak.step / 1e9;
    std::printf("%-17s %8.1fM %8.1f %9.0f %8.1f %6.1f%% |", r.shape.name.c_str(),
                double(r.merak.params) / 1e6, 1e3 * r.merak.step, tokens / r.merak.step, gflops,
                100 * gflops / peak);
    if (r.torch().step > 0)
      std::printf(" %9.1f %8.0f | %6.2fx\n", 1e3 * r.torch().step, tokens / r.torch().step,
                  r.torch().step / r.merak.step);
    else
      std::printf(" %9s %8s | %7s\n", "-", "-", "-");
  }
  if (!settings.empty()) {
    std::printf("\nPyTorch's settings (median ms a step; OMP_WAIT_POLICY=PASSIVE, %d threads); "
                "the fastest makes the ratio:\n", o.threads);
    for (const auto& r : rows) {
      std::printf("  %s\n", r.shape.name.c_str());
      for (size_t k = 0; k < settings.size(); ++k) {
        const Timing& t = r.by_setting[k];
        std::printf("    %-32s core %-12s ", settings[k].name.c_str(),
                    t.core.empty() ? "?" : t.core.c_str());
        if (t.step > 0) std::printf("%9.1f%s\n", 1e3 * t.step, k == r.best ? " *" : "");
        else std::printf("%9s\n", "failed");
      }
    }
  }
  std::printf("\nratio = merak tokens/s / PyTorch's (its fastest setting). Median phases (ms): forward / backward "
              "/ clip / AdamW\n(merak's clip is the norm left after backward, which takes it as "
              "gradients complete; its scaling is inside AdamW)\n");
  for (const auto& r : rows) {
    std::printf("  %-17s merak %6.1f / %6.1f / %5.1f / %5.1f (others %.2f cores)",
                r.shape.name.c_str(), 1e3 * r.merak.forward, 1e3 * r.merak.backward,
                1e3 * r.merak.clip, 1e3 * r.merak.adamw, r.merak.others);
    if (r.torch().step > 0)
      std::printf("   torch %6.1f / %6.1f / %5.1f / %6.1f (others %.2f cores)",
                  1e3 * r.torch().forward, 1e3 * r.torch().backward, 1e3 * r.torch().clip,
                  1e3 * r.torch().adamw, r.torch().others);
    std::printf("\n");
  }
  // Other processes' load skews the figures; say so rather than print them as if clean.
  double worst = 0;
  for (const auto& r : rows) {
    worst = std::max(worst, r.merak.others);
    for (const Timing& t : r.by_setting) worst = std::max(worst, t.others);
  }
  std::printf("\nother processes used up to %.2f cores during a run%s\n", worst,
              worst > 0.1 ? " -- the machine was busy: the figures above are skewed, rerun" : "");
  return 0;
}
