#include "kernels/cuda/tp/collective.h"

#include "kernels/cuda/common.h"

namespace merak::cuda_kernels {

void tp_device_reduce(const char* op, const Tensor& t, ops::TpReduce r, const std::string& group,
                      int64_t size) {
  if (size == 1) return;
  ops::TpCollectives& collectives = ops::tp_collectives(op, group, size);
  // The collectives order their work after a stream of their own choosing, not necessarily the
  // one that wrote `t`: finishing that stream first is correct whatever they chose.
  cuda::check(cudaStreamSynchronize(stream_of(t)), op);
  collectives.reduce(t, r, group, size);
}

}  // namespace merak::cuda_kernels
