// From a config to the plan that runs: the one function that builds the partition request
// (merak_train runs its plan, merak_partition and `merak_train --dry-run` explain it, so the plan
// explained is the plan that runs), and the plan shared by every rank of a job.
#pragma once

#include <stdexcept>
#include <string>

#include "merak/comm/communicator.h"
#include "merak/config/config.h"
#include "merak/graph/graph.pb.h"
#include "merak/partition/partitioner.h"

namespace merak::train {

struct ModelFacts;  // model_graph.h

// Something the user can fix (a hardware profile not found, a layout the model cannot be split
// into, a device that is not there): merak_train exits with 2 and this one line.
class SetupError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Collective over `host`: every rank's `problem` (empty when it has none); the first one is
// thrown as a SetupError on every rank, so they all stop together, none left waiting on another.
void agree(comm::Communicator& host, const std::string& problem);

// What the partitioner is asked: the config's model traced on Meta tensors at one micro-batch,
// and the layout, hardware profile, precision, schedule, micro-batches, recomputation and ZeRO-1
// the run uses. Throws SetupError naming the key at fault.
struct PartitionInput {
  graph::Model model;
  partition::Request request;
};
// Whether the data-parallel replicas sum their gradients through a shared-memory window, as
// runtime::make_data_parallel picks for f32 replicas within one CPU node with
// parallel.dp_shared_memory on (the default): `hw` is the profile with the job's node size.
bool replicas_sum_in_shared_memory(const config::Config& config, const partition::Hardware& hw);
// Whether they also keep one shared parameter copy, each updating its 1/dp share
// (parallel.dp_shared_params, on by default).
bool replicas_share_update(const config::Config& config, const partition::Hardware& hw);

// `traced`: the model already traced at this config's micro-batch size (a layout search costs
// many layouts of one trace); `devices_per_node` > 0 replaces the profile's (--gpus-per-node).
PartitionInput partition_input(const config::Config& config,
                               const graph::Model* traced = nullptr,
                               int64_t devices_per_node = 0);

// The partitioner's answer for `in` (made from `config` by partition_input). Throws SetupError
// (naming the layout, the profile and, when nothing fits, the memory the best split needs).
partition::Result partition_config(const config::Config& config, const PartitionInput& in);

// partition_config on rank 0 of `world`, its plan broadcast: every rank gets the same plan. An
// error on rank 0 is thrown on every rank (SetupError stays SetupError), so no rank waits.
// With `facts`, rank 0 stores there the model's facts, weights included, from the import its
// plan was made from (an imported network's file is then read once there); the other ranks
// leave it as it was.
partition::Plan shared_plan(comm::Communicator& world, const config::Config& config,
                            ModelFacts* facts = nullptr);

}  // namespace merak::train
