// merak_train's work as library code: the one training loop with what it prints (a start-up
// report, a line per logged step, a progress bar on a terminal, JSON metrics, a Chrome trace and
// a summary), the same for one process and for every rank of a dp x pp x tp job; and the dry run
// that stops at the plan.
#pragma once

#include <string>

#include "merak/comm/grid.h"
#include "merak/config/config.h"

namespace merak::train {

struct RunOptions {
  std::string metrics;  // JSON lines, one a step (rank 0 writes them)
  std::string trace;    // Chrome trace of every rank's instructions (rank 0 writes it)
  // A checkpoint to continue from: a step directory, a checkpoint directory (its latest), or
  // "auto" (checkpoint.dir's latest if it has one, else a fresh start). Empty: a fresh start.
  std::string resume;
};

// Trains as the config says on `grid` (its shape is the config's layout; one process is
// Grid::single_process()). Rank 0 reports. Returns the exit code; throws SetupError for what the
// user can fix (every rank alike).
int run(const config::Config& config, comm::Grid& grid, const RunOptions& options);

// The plan the config's run would use, explained as merak_partition explains it (or its JSON),
// without ranks, devices or data. Throws SetupError when the model cannot be split or does not
// fit.
std::string dry_run(const config::Config& config, bool json);

}  // namespace merak::train
