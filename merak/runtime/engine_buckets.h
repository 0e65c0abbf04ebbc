// Data-parallel gradient sums that overlap backward. Parameters are grouped, last first (the
// order backward finishes them), into buckets of about bucket_bytes. During the step's last
// backward the engine reports each parameter whose gradient is final; once a bucket's members
// are all final its all-reduce is posted, and posted ones are polled so MPI moves them along
// while backward computes. finish() posts what is left and waits for everything.
// When the replicas share one node (CPU processes on one host) the sums go through shared
// memory (comm::NodeSum) rather than MPI messages: no progress engine to drive, each member
// adding up its share of every bucket, and the summed gradients are views of the shared window
// until release(). Otherwise, or when asked, MPI's non-blocking all-reduce.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "merak/comm/communicator.h"
#include "merak/comm/node_sum.h"
#include "merak/comm/shared_array.h"
#include "merak/optim/adamw.h"
#include "merak/runtime/engine_pieces.h"

namespace merak::runtime {

class GradBuckets {
 public:
  // `params` must be the same shapes in the same order on every member of `group`.
  // `shared_memory`: sum through shared memory when the group allows it (an MPI group on one
  // node, within comm::NodeSum::kMaxBytes a member).
  GradBuckets(comm::Communicator& group, const std::vector<optim::Param>& params,
              int64_t bucket_bytes, bool shared_memory);
  ~GradBuckets();
  GradBuckets(const GradBuckets&) = delete;
  GradBuckets& operator=(const GradBuckets&) = delete;

  // Parameter `index`'s gradient is final for this step (defined, contiguous f32).
  void ready(size_t index);
  void poll();  // progresses the posted all-reduces
  // Posts every bucket not yet posted (a parameter without a gradient gets zeros), waits for all
  // and leaves each parameter's gradient summed over the group. Ends the step's reduction;
  // returns how many buckets were posted before it (overlapped with backward).
  int finish();
  // The gradients finish() left are gone (cleared): the shared sums may be overwritten. Call it
  // before the next step's backward.
  void release();
  int buckets() const { return int(buckets_.size()); }
  // Whether finish() leaves gradients as views of memory the replicas share (read-only then).
  bool shares_sums() const { return node_sum_ != nullptr; }

  // With shared-memory sums, moves the parameters into one copy the group shares, laid out as
  // the buckets (member 0's values: every replica starts from the same), and sets *mine to the
  // pieces of this member's segments of the buckets: the sums it adds up, the part of the update
  // it can do alone. Collective. False, moving nothing, with the reason in *why_not otherwise.
  bool share_parameters(std::vector<ParamPiece>* mine, std::string* why_not);
  comm::SharedArray* parameter_copy() const { return shared_params_.get(); }  // null: not shared
  // This member's part of the shared memory (sums, parameters), which no allocator counts.
  int64_t shared_bytes() const {
    return (node_sum_ ? node_sum_->bytes() : 0) + (shared_params_ ? shared_params_->bytes() : 0);
  }
  // How the sums travel, for the start-up report: "shared memory" or "MPI all-reduce (why)".
  const std::string& transport() const { return transport_; }

 private:
  struct Bucket {
    std::vector<size_t> members;  // parameter indices
    int64_t floats = 0;
    int missing = 0;              // members not yet final this step
    Tensor flat;
    std::vector<Tensor> inputs;  // shared memory: the gradients posted, until collected
    comm::Work work;
    bool posted = false;
  };
  void post(size_t index);

  comm::Communicator& group_;
  std::vector<optim::Param> params_;
  std::vector<Bucket> buckets_;
  std::unique_ptr<comm::NodeSum> node_sum_;  // null: MPI all-reduce
  std::unique_ptr<comm::SharedArray> shared_params_;  // null: each member has its own
  std::string transport_;
  std::vector<size_t> bucket_of_;      // per parameter
  std::vector<bool> final_;            // per parameter, this step
  int posted_early_ = 0;
};

}  // namespace merak::runtime
