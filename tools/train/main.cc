// merak_train: trains the model a config describes (merak/train/run.h does the work).
//
//   merak_train --config configs/gpt-tiny.yaml [--set key=value ...] [--metrics FILE]
//               [--trace FILE.json] [--tensorboard DIR] [--log-level LEVEL]
//   mpirun -np N merak_train --config configs/gpt-tiny-3d.yaml [...]
//   merak_train --config FILE.yaml --dry-run [--world N] [--gpus-per-node G] [--hardware NAME]
//               [--json]        the plan (and with auto keys the layout search), explained; no
//                               ranks, no device
//   merak_train --config FILE.yaml --resume PATH|auto    continue from a checkpoint (any layout)
//
// One process started without a launcher is the (1, 1, 1) layout of the same engine and starts
// no MPI (under mpirun -np 1 it is a job of one rank); a job's size must equal the config's
// dp * pp * tp, or the layout search (parallel: auto) chooses a layout of that size.
//
// Exit codes: 0 done, 2 bad command line or config, or a setup the user can fix (one line naming
// the file and key), 1 any other failure.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "merak/comm/grid.h"
#include "merak/comm/mpi_communicator.h"
#include "merak/comm/mpi_env.h"
#include "merak/comm/self_communicator.h"
#include "merak/core/parallel.h"
#include "merak/data/dataset.h"
#include "merak/log/log.h"
#include "merak/train/layout_search.h"
#include "merak/train/plan.h"
#include "merak/train/run.h"
#include "merak/train/trainer.h"
#include "tools/common/cli.h"

namespace {

struct Args {
  std::string config;
  std::vector<std::string> overrides;
  merak::train::RunOptions run;
  bool dry_run = false, json = false;
  merak::log::Level log_level = merak::log::Level::Info;
  merak::train::DryRunOptions plan;  // --world, --gpus-per-node (--json too)
};

constexpr const char* kUsage =
    "usage: [mpirun -np N] merak_train --config FILE.yaml [--set key=value ...] "
    "[--metrics FILE.jsonl] [--trace FILE.json]\n"
    "       [--tensorboard DIR] [--resume STEP_DIR|CHECKPOINT_DIR|auto]\n"
    "       [--log-level debug|info|warn|error|off]\n"
    "       merak_train --config FILE.yaml [--set key=value ...] --dry-run [--world N]\n"
    "                   [--gpus-per-node G] [--hardware NAME] [--json]\n";

[[noreturn]] void usage(const std::string& problem) {
  std::fprintf(stderr, "merak_train: %s\n%s", problem.c_str(), kUsage);
  std::exit(2);
}

// A positive count given to `flag`.
int64_t count(const std::string& text, const std::string& flag) {
  const std::optional<int64_t> v = merak::cli::whole_number(text);
  if (!v || *v < 1) usage(flag + " needs a positive whole number, got '" + text + "'");
  return *v;
}

Args parse_args(int argc, char** argv) {
  Args a;
  // Flags with a value, but --set: a second one would replace it (cli::Args::one's rule in the
  // other tools, which parse through tools/common/cli).
  std::set<std::string> given;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(arg + " needs a value");
      if (arg != "--set" && !given.insert(arg).second) usage(arg + " given more than once");
      // An empty value is a variable that expanded to nothing, not a choice of none.
      if (argv[i + 1][0] == '\0') usage(arg + " needs a value, got ''");
      return argv[++i];
    };
    auto flag = [&]() {
      if (!given.insert(arg).second) usage(arg + " given more than once");
      return true;
    };
    if (arg == "--config") a.config = value();
    else if (arg == "--set") a.overrides.push_back(value());
    else if (arg == "--metrics") a.run.metrics = value();
    else if (arg == "--trace") a.run.trace = value();
    else if (arg == "--resume") a.run.resume = value();
    else if (arg == "--tensorboard") a.run.tensorboard = value();
    else if (arg == "--log-level") {
      try {
        a.log_level = merak::log::parse_level(value());
      } catch (const std::invalid_argument& e) {
        usage(std::string("--log-level: ") + e.what());
      }
    }
    else if (arg == "--dry-run") a.dry_run = flag();
    else if (arg == "--json") a.json = flag();
    else if (arg == "--world") a.plan.world = count(value(), arg);
    else if (arg == "--gpus-per-node") a.plan.devices_per_node = count(value(), arg);
    else if (arg == "--hardware") a.overrides.push_back("parallel.hardware=" + value());
    else if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);  // asked for: not an error
      std::exit(0);
    }
    else usage("unknown argument '" + arg + "'");
  }
  if (a.config.empty()) usage("--config is required");
  if (a.json && !a.dry_run) usage("--json goes with --dry-run");
  if ((a.plan.world > 0 || a.plan.devices_per_node > 0) && !a.dry_run)
    usage("--world and --gpus-per-node go with --dry-run (a job's size is its launcher's)");
  a.plan.json = a.json;
  if (!a.run.resume.empty() && a.dry_run) usage("--resume trains: it does not go with --dry-run");
  if (!a.run.tensorboard.empty() && a.dry_run)
    usage("--tensorboard records training: it does not go with --dry-run");
  return a;
}

// The job's size and this process's rank as its launcher tells them, before MPI starts (so a
// single-process run never initialises MPI): mpirun (Open MPI), MPICH's PMI, PMIx, or a Slurm
// job step (srun). Slurm's variables count only inside a step: a batch script's shell has
// SLURM_NTASKS too, and a merak_train started there directly is one process.
struct Launch {
  int size = 1, rank = 0;
  bool launched = false;  // by a launcher: even one rank is a job (a grid over MPI)
};

Launch launcher() {
  auto value = [](std::initializer_list<const char*> names) -> const char* {
    for (const char* name : names)
      if (const char* v = std::getenv(name)) return v;
    return nullptr;
  };
  const bool slurm_step = value({"SLURM_STEP_ID", "SLURM_STEPID"}) != nullptr;
  const char* size = value({"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"});
  const char* rank = value({"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"});
  if (slurm_step) {
    if (!size) size = value({"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"});
    if (!rank) rank = value({"SLURM_PROCID"});
  }
  Launch l;
  l.launched = size != nullptr;
  if (size) l.size = std::atoi(size);
  if (rank) l.rank = std::atoi(rank);
  return l;
}

// Every rank of a job. Setup errors reach every rank alike (exit 2, printed once); anything else
// ends the whole job with a message, so no rank is left waiting.
int job_main(int argc, char** argv, const merak::config::Config& cfg, const Args& args) {
  using namespace merak;
  comm::MpiSession session(&argc, &argv);
  // Outside the try: a setup error every rank agreed on unwinds with the grid still whole, and
  // the grid goes after the catch, with its communicators' collective clean-up (skipped while an
  // exception unwinds, since a rank failing alone would wait there for peers that never come).
  std::unique_ptr<comm::Grid> grid;
  try {
    config::Config resolved = cfg;
    if (!cfg.parallel.auto_keys.empty()) {  // the layout search on rank 0, its answer for all
      MPI_Comm dup;
      comm::check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &dup), "merak_train: MPI_Comm_dup");
      comm::MpiCommunicator world(dup, "world");
      resolved = train::resolve_layout(cfg, world);
    }
    grid = train::make_grid(resolved);
    return train::run(resolved, *grid, args.run);
  } catch (const train::SetupError& e) {
    if (comm::world_rank() == 0) std::fprintf(stderr, "merak_train: %s\n", e.what());
    grid.reset();
    return 2;
  } catch (const data::DataError& e) {  // found by one rank mid-run: its peers wait in a step
    comm::abort_job(std::string("merak_train: ") + e.what(), 2);
  } catch (const train::OutputError& e) {  // rank 0's alone, as the data's
    comm::abort_job(std::string("merak_train: ") + e.what(), 2);
  } catch (const std::exception& e) {
    comm::abort_job(std::string("merak_train: error: ") + e.what());
  }
}

// One process, no MPI.
int process_main(const merak::config::Config& cfg, const Args& args) {
  using namespace merak;
  try {
    if (args.dry_run) {
      std::fputs(train::dry_run(cfg, args.plan).c_str(), stdout);
      return 0;
    }
    config::Config resolved = cfg;
    if (!cfg.parallel.auto_keys.empty()) {  // a layout of one rank: micro-batch, recompute
      comm::SelfCommunicator self("world");
      resolved = train::resolve_layout(cfg, self);
    }
    const std::unique_ptr<comm::Grid> grid = train::make_grid(resolved);
    return train::run(resolved, *grid, args.run);
  } catch (const train::SetupError& e) {
    std::fprintf(stderr, "merak_train: %s\n", e.what());
    return 2;
  } catch (const data::DataError& e) {
    std::fprintf(stderr, "merak_train: %s\n", e.what());
    return 2;
  } catch (const train::OutputError& e) {
    std::fprintf(stderr, "merak_train: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "merak_train: error: %s\n", e.what());
    return 1;
  }
}

// The first SIGINT or SIGTERM asks the run to stop after its step (saving a checkpoint where
// one is configured); the handler then resets, so a second one ends the process at once.
// SIGUSR1 asks the same: mpirun passes it on to every rank and kills nobody, where its
// Ctrl-C or SIGTERM becomes a SIGTERM to the ranks followed a second later by SIGKILL. Before
// the steps begin there is nothing to save, and setting up may take long (a corpus tokenized, a
// checkpoint read): the first one ends the process there and then, with 128 + the signal.
// One of several ranks leaves set-up quietly: there the signal is most often the launcher
// ending the job because another rank failed, whose own message says why.
volatile std::sig_atomic_t g_stop_signal = 0, g_in_steps = 0, g_quiet_setup_stop = 0;

void ask_to_stop(int signal) {
  if (g_in_steps) {
    g_stop_signal = signal;
    return;
  }
  if (!g_quiet_setup_stop) {
    const char message[] = "merak_train: stopped by a signal before training\n";
    ssize_t ignored = ::write(2, message, sizeof message - 1);  // async-signal-safe, as _exit is
    (void)ignored;
  }
  ::_exit(128 + signal);
}

void watch_stop_signals(bool several_ranks) {
  g_quiet_setup_stop = several_ranks;
  struct sigaction action = {};
  action.sa_handler = ask_to_stop;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESETHAND | SA_RESTART;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGUSR1, &action, nullptr);
}

// Exit code 2 for a job refused before MPI starts, where only rank 0 says why: the other ranks
// leave a moment later, since a launcher stops the whole job at the first rank that fails and
// could cut rank 0 off before its message is out.
int refused(bool speaker) {
  if (!speaker) std::this_thread::sleep_for(std::chrono::seconds(2));
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace merak;
  // A file grown past the process's size limit (ulimit -f) fails its write with EFBIG, which the
  // checkpoint writer reports like a full disk, instead of the signal killing the process.
  std::signal(SIGXFSZ, SIG_IGN);
  const Args args = parse_args(argc, argv);
  const Launch launch = launcher();
  log::setup(launch.rank, args.log_level);
  const int world = launch.size;
  const bool speaker = launch.rank == 0;
  config::Config cfg;
  try {
    cfg = config::load(args.config, args.overrides);
  } catch (const config::ConfigError& e) {
    if (speaker) std::fprintf(stderr, "merak_train: %s\n", e.what());
    return refused(speaker);
  }
  try {
    threads_from_environment();
  } catch (const Error& e) {
    if (speaker) std::fprintf(stderr, "merak_train: %s\n", e.what());
    return refused(speaker);
  }
  if (args.dry_run) {
    if (world > 1) usage("--dry-run plans without ranks: run it as one process");
    return process_main(cfg, args);
  }
  const int64_t ranks = cfg.parallel.dp * cfg.parallel.pp * cfg.parallel.tp;
  const auto& autos = cfg.parallel.auto_keys;
  const bool layout_auto = std::find(autos.begin(), autos.end(), "parallel.dp") != autos.end() ||
                           std::find(autos.begin(), autos.end(), "parallel.pp") != autos.end() ||
                           std::find(autos.begin(), autos.end(), "parallel.tp") != autos.end();
  if (world != ranks && !layout_auto) {
    if (speaker)
      std::fprintf(stderr,
                   "merak_train: %s: key 'parallel': dp %lld x pp %lld x tp %lld needs %lld "
                   "rank%s, but the job has %d (start it with %smpirun -np %lld or srun -n "
                   "%lld)\n",
                   cfg.path.c_str(), (long long)cfg.parallel.dp, (long long)cfg.parallel.pp,
                   (long long)cfg.parallel.tp, (long long)ranks, ranks == 1 ? "" : "s", world,
                   ranks == 1 ? "no launcher, " : "", (long long)ranks, (long long)ranks);
    return refused(speaker);
  }
  watch_stop_signals(launch.size > 1);
  Args run_args = args;
  run_args.run.stop_signal = [] { return int(g_stop_signal); };
  run_args.run.steps_begin = [] { g_in_steps = 1; };
  // `mpirun -np 1` is a job of one rank: its groups are real communicators (NCCL ones on a GPU).
  return launch.launched ? job_main(argc, argv, cfg, run_args) : process_main(cfg, run_args);
}
