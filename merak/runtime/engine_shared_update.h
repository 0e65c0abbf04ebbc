// The optimizer step of data-parallel replicas that share one copy of their parameters
// (GradBuckets::share_parameters, replicas on one node): each member runs AdamW on the pieces of
// its segments of the buckets, whose gradient sums it added up itself, keeping moments for those
// pieces only, and a barrier then hands everyone the updated copy. AdamW is elementwise, so this
// equals every replica updating everything, with 1/dp of the work and state a member and no
// parameter copied between them.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "merak/comm/shared_array.h"
#include "merak/optim/adamw.h"
#include "merak/runtime/engine_buckets.h"

namespace merak::runtime {

class SharedUpdate {
 public:
  // `params`: the engine's parameters (already moved into the shared copy); `mine`: this
  // member's pieces of them; `shared`: the copy, for its barrier.
  SharedUpdate(const std::vector<optim::Param>& params, std::vector<ParamPiece> mine,
               comm::SharedArray& shared, optim::AdamWOptions options);

  // Sum of squares of this member's pieces of the (summed) gradients of the parameters
  // `count` accepts.
  double sum_of_squares(const std::function<bool(size_t)>& count) const;
  // Updates this member's pieces from their parameters' gradients, then waits until every
  // member has updated its own.
  void step(double lr, float grad_scale);
  // Checkpoints: the optimizer and this member's pieces, its tensors' places.
  optim::AdamW& adamw() { return *adamw_; }
  const std::vector<ParamPiece>& pieces() const { return mine_; }

 private:
  const std::vector<optim::Param>& params_;
  std::vector<ParamPiece> mine_;
  std::vector<Tensor> values_;  // per piece: a view of its elements of the parameter
  comm::SharedArray& shared_;
  std::unique_ptr<optim::AdamW> adamw_;
};

}  // namespace merak::runtime
