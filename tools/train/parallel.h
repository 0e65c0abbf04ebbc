// The parallel path of merak_train: the partitioner's plan for a config's layout, the engine's
// settings from the config, and the loop every rank of `mpirun -np dp*pp*tp merak_train` runs.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include "merak/comm/communicator.h"
#include "merak/config/config.h"
#include "merak/partition/plan.pb.h"
#include "merak/runtime/engine.h"
#include "tools/train/batches.h"

namespace merak::train {

// Something the user can fix (a hardware profile not found, a layout the model cannot be split
// into): merak_train exits with 2 and this one line.
class SetupError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The plan for the config's layout: the model traced at one micro-batch, partitioned on the
// config's hardware profile. Throws SetupError naming the key at fault.
partition::Plan make_plan(const config::Config& config);

// make_plan on rank 0 of `world`, its bytes broadcast: every rank gets the same plan. An error on
// rank 0 is thrown on every rank (SetupError stays SetupError), so no rank waits for a plan.
partition::Plan shared_plan(comm::Communicator& world, const config::Config& config);

// The engine settings a config describes (schedule, recomputation per stage, optimizer, seed).
runtime::EngineOptions engine_options(const config::Config& config);

// Micro-batch g of a step is rows [g * micro, (g + 1) * micro) of the step's global batch.
runtime::MicroBatchFn micro_batch_source(const BatchSource& source, int64_t micro);

struct ParallelRun {
  std::string metrics;  // JSON lines, one a step (rank 0)
  std::string trace;    // Chrome trace of every rank's instructions (rank 0 writes it)
};

// The whole run on this rank (MPI is initialised, the world's size equals dp * pp * tp): rank 0
// prints the layout, a line per logged step with the time breakdown, and a summary. Returns the
// exit code.
int run_parallel(const config::Config& config, const ParallelRun& run);

}  // namespace merak::train
