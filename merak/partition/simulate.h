// A plan run in one process: the pipeline's stages one after another with the boundary tensors
// handed over by hand (forward in stage order, backward in reverse), the tensor-parallel ranks
// of a stage in threads whose collectives meet in memory. Each rank materialises only its
// shards, drawn as the full tensors would be, so the result must equal the unsplit graph's:
// what the tests check, and a way to try a plan before a job runs it.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "merak/core/tensor.h"
#include "merak/graph/graph.pb.h"
#include "merak/ops/collectives.h"
#include "merak/partition/plan.pb.h"

namespace merak::partition {

// The part of a parameter a rank holds: its boxes drawn from the init spec keyed by
// (seed, name) at their place in the full tensor, concatenated along concat_dim.
Tensor shard_values(const ParamShard& shard, uint64_t seed);

// A rank's graph ready for graph::Executor: shards that are not whole tensors get their values
// as initializer data (whole ones are drawn by the executor itself, the same way).
graph::Model rank_model(const Plan& plan, const RankProgram& rank, uint64_t seed);

// Collectives among threads of one process: every member of a group calls with its own tensor;
// the last to arrive combines them in member order (deterministic) and all copy the result.
// Each thread runs its graph under an ops::TpScope of its Member.
class InProcessCollective {
 public:
  // Member `index`'s collectives (the thread that plays it installs them).
  class Member : public ops::TpCollectives {
   public:
    Member(InProcessCollective& meeting, int64_t index) : meeting_(meeting), index_(index) {}
    void reduce(const Tensor& t, ops::TpReduce op, const std::string& group,
                int64_t size) override {
      meeting_.meet(t, op, group, size, index_);
    }

   private:
    InProcessCollective& meeting_;
    int64_t index_;
  };
  // Wakes every waiting member with an error (a member failed and will not arrive).
  void abort();

 private:
  void meet(const Tensor& t, ops::TpReduce op, const std::string& group, int64_t size,
            int64_t member);
  struct Meeting;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::shared_ptr<Meeting>> meetings_;
  bool aborted_ = false;
};

struct StepResult {
  double loss = 0;  // the first graph output (summed when it is not a scalar)
  // Gradients of every trainable parameter at full shape, by global name: tensor-parallel
  // shards placed by their boxes, tied copies summed.
  std::map<std::string, Tensor> grads;
};

// One forward and backward of a dp = 1 plan over `batch` (graph input name -> tensor), every
// graph output seeded with a gradient of ones (the loss; logits of an exported model).
StepResult run_step(const Plan& plan, const std::map<std::string, Tensor>& batch, uint64_t seed);

}  // namespace merak::partition
