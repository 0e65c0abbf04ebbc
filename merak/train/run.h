// merak_train's work as library code: the one training loop with what it prints (a start-up
// report, a line per logged step, a progress bar on a terminal, JSON metrics, a Chrome trace and
// a summary), the same for one process and for every rank of a dp x pp x tp job; and the dry run
// that stops at the plan.
#pragma once

#include <functional>
#include <stdexcept>
#include <string>

#include "merak/comm/grid.h"
#include "merak/config/config.h"

namespace merak::train {

struct RunOptions {
  // JSON lines, one a step (rank 0 writes them). A fresh run starts the file anew; a resumed
  // one keeps its lines up to the step it resumed from and appends.
  std::string metrics;
  std::string trace;    // Chrome trace of every rank's instructions in the last 10 steps (rank 0)
  // A checkpoint to continue from: a step directory, a checkpoint directory (its latest), or
  // "auto" (checkpoint.dir's latest if it has one, else a fresh start). Empty: a fresh start.
  std::string resume;
  // A TensorBoard event file goes in this directory (rank 0 writes it); empty: none.
  std::string tensorboard;
  // Asked after every step: the signal that asks this rank to stop (SIGINT, SIGTERM, SIGUSR1),
  // or 0. When any rank is asked, every rank ends after that step, saving a checkpoint first
  // where checkpoint.dir is set, and run returns 128 + the signal. Unset: never asked.
  std::function<int()> stop_signal;
  // Called once as the step loop begins (unset: not called). Before it nothing would be saved on
  // a stop, so a launcher may end the process at once on a signal (merak_train does).
  std::function<void()> steps_begin;
};

// Trains as the config says on `grid` (its shape is the config's layout; one process is
// Grid::single_process()). Rank 0 reports. Returns the exit code; throws SetupError for what the
// user can fix (every rank alike), an output path it cannot write included, before training.
int run(const config::Config& config, comm::Grid& grid, const RunOptions& options);

// A file rank 0 writes during the run (--metrics, --tensorboard) that cannot take a step's line,
// a full disk say: the job ends with exit 2 and this one line, as a failed checkpoint write
// does (rank 0 alone finds it: the launcher ends its peers).
class OutputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// What a dry run plans for: a job of `world` ranks (0: the config's dp x pp x tp), nodes of
// `devices_per_node` devices (0: the hardware profile's).
struct DryRunOptions {
  int64_t world = 0, devices_per_node = 0;
  bool json = false;
};

// The plan the config's run would use, explained as merak_partition explains it (or its JSON),
// without ranks, devices or data; with auto keys, the layout search's table first (in JSON, its
// "search", "layout" and "predicted"). Throws SetupError when the model cannot be split, does
// not fit, or the fixed layout is not `world` ranks.
std::string dry_run(const config::Config& config, const DryRunOptions& options);

}  // namespace merak::train
