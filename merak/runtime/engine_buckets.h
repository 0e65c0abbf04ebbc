// Data-parallel gradient sums that overlap backward. Parameters are grouped, last first (the
// order backward finishes them), into buckets of about bucket_bytes. During the step's last
// backward the engine reports each parameter whose gradient is final; once a bucket's members
// are all final its all-reduce is posted, and posted ones are polled so MPI moves them along
// while backward computes. finish() posts what is left and waits for everything.
#pragma once

#include <cstdint>
#include <vector>

#include "merak/comm/communicator.h"
#include "merak/optim/adamw.h"

namespace merak::runtime {

class GradBuckets {
 public:
  // `params` must be the same shapes in the same order on every member of `group`.
  GradBuckets(comm::Communicator& group, const std::vector<optim::Param>& params,
              int64_t bucket_bytes);
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
  int buckets() const { return int(buckets_.size()); }

 private:
  struct Bucket {
    std::vector<size_t> members;  // parameter indices
    int missing = 0;              // members not yet final this step
    Tensor flat;
    comm::Work work;
    bool posted = false;
  };
  void post(Bucket& b);

  comm::Communicator& group_;
  std::vector<optim::Param> params_;
  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_;      // per parameter
  std::vector<bool> final_;            // per parameter, this step
  int posted_early_ = 0;
};

}  // namespace merak::runtime
