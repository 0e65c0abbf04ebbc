#include "merak/train/plan.h"

#include "merak/partition/cost.h"
#include "merak/partition/hardware.h"
#include "merak/partition/plan_builder.h"
#include "merak/runtime/engine_comm.h"
#include "merak/train/model_graph.h"

namespace merak::train {

void agree(comm::Communicator& host, const std::string& problem) {
  for (const std::string& p : runtime::all_gather_bytes(host, problem))
    if (!p.empty()) throw SetupError(p);
}
namespace {

// Prefixes of the broadcast plan: the plan's bytes, or an error to rethrow.
constexpr char kPlan = 'P', kSetupError = 'S', kOtherError = 'E';

std::string layout_str(const config::ParallelConfig& p) {
  return "dp " + std::to_string(p.dp) + ", pp " + std::to_string(p.pp) + ", tp " +
         std::to_string(p.tp);
}

}  // namespace

bool replicas_sum_in_shared_memory(const config::Config& c, const partition::Hardware& hw) {
  const config::ParallelConfig& p = c.parallel;
  const partition::Precision precision = partition::parse_precision(c.train.precision);
  const bool cpu = c.train.device != "cuda" && hw.shared_node;
  return cpu && p.dp > 1 && precision == partition::Precision::F32 && p.dp_shared_memory &&
         partition::CostModel(hw, precision, {p.dp, p.pp, p.tp}).dp_within_node();
}

bool replicas_share_update(const config::Config& c, const partition::Hardware& hw) {
  return replicas_sum_in_shared_memory(c, hw) && c.parallel.dp_shared_params;
}

PartitionInput partition_input(const config::Config& c, const graph::Model* traced,
                               int64_t devices_per_node) {
  const config::ParallelConfig& p = c.parallel;
  PartitionInput in;
  partition::Request& req = in.request;
  req.dp = p.dp;
  // Interleaved: pp * virtual_stages model stages, each rank running every pp-th (the engine
  // maps them); the partitioner fits a rank's chunks together in its memory.
  req.pp = p.pp;
  req.virtual_stages = p.virtual_stages;
  req.schedule = p.schedule;
  req.tp = p.tp;
  try {
    req.hardware = partition::load_hardware(partition::find_hardware(p.hardware));
  } catch (const partition::HardwareError& e) {
    throw SetupError(c.path + ": key 'parallel.hardware': " + e.what());
  }
  if (devices_per_node > 0) req.hardware.devices_per_node = devices_per_node;
  // The precision the run computes in (its f32 master weights and moments are costed with it).
  req.memory.precision = partition::parse_precision(c.train.precision);
  if (req.hardware.peak(req.memory.precision) <= 0)
    throw SetupError(c.path + ": key 'parallel.hardware': profile '" + p.hardware + "' has no " +
                     c.train.precision + " peak to cost train.precision " + c.train.precision +
                     " with");
  req.memory.schedule = p.schedule == "gpipe" ? partition::Schedule::GPipe
                        : p.schedule == "zb"  ? partition::Schedule::ZeroBubble
                                              : partition::Schedule::OneFOneB;
  req.memory.micro_batches = config::model_micro_batches_per_replica(c);
  // Merak's ratio rule recomputes wherever its ratio is above 0: the model costs it as full.
  req.memory.recompute = partition::parse_recompute(p.recompute == "ratio" ? "full" : p.recompute);
  req.memory.zero1 = p.zero1;
  req.memory.shared_update = replicas_share_update(c, req.hardware);
  req.memory.dp_window = replicas_sum_in_shared_memory(c, req.hardware);
  if (traced) {
    in.model = *traced;
    return in;
  }
  in.model = model_graph(c, config::model_micro_batch_size(c));
  return in;
}

partition::Result partition_config(const config::Config& c, const PartitionInput& in) {
  const config::ParallelConfig& p = c.parallel;
  try {
    return partition::run_partition(in.model, in.request);
  } catch (const partition::NoFit& e) {
    throw SetupError(c.path + ": the model does not fit " + layout_str(p) + " on '" +
                     p.hardware + "': " + e.what() + "; the best split needs " +
                     partition::memory_text(e.needed) +
                     " per device (try more stages, tp, parallel.zero1 or parallel.recompute)");
  } catch (const Error& e) {
    throw SetupError(c.path + ": cannot split the model over " + layout_str(p) + ": " + e.what());
  }
}

partition::Plan shared_plan(comm::Communicator& world, const config::Config& c,
                            ModelFacts* facts) {
  std::string bytes;
  if (world.rank() == 0) {
    try {
      graph::Model traced;
      if (facts) *facts = model_facts(c, 0, true, &traced);
      const PartitionInput in = partition_input(c, facts ? &traced : nullptr);
      bytes = kPlan + partition::plan_bytes(partition_config(c, in).plan);
    } catch (const SetupError& e) {
      bytes = kSetupError + std::string(e.what());
    } catch (const std::exception& e) {
      bytes = kOtherError + std::string(e.what());
    }
  }
  bytes = runtime::broadcast_bytes(world, bytes, 0);
  MERAK_CHECK(!bytes.empty(), "no plan came from rank 0");
  const std::string body = bytes.substr(1);
  if (bytes[0] == kSetupError) throw SetupError(body);
  if (bytes[0] == kOtherError) throw Error(body);
  partition::Plan plan;
  MERAK_CHECK(plan.ParseFromString(body), "the plan from rank 0 does not parse");
  return plan;
}

}  // namespace merak::train
