// CUDA kernels of embedding and embedding_grad (defs in merak/ops/defs/nn.cc).
#include "kernels/cuda/common.h"
#include "kernels/cuda/nn/embedding.h"
#include "kernels/cuda/nn/util.h"
#include "merak/ops/op_util.h"

namespace merak::cuda_kernels::nn {

using ops::Attrs;

// in: weight [V, D], ids [...]; out: y [..., D]
MERAK_REGISTER_KERNEL(embedding, CUDA, [](const std::vector<Tensor>& in,
                                          const std::vector<Tensor>& out, const Attrs&) {
  const Tensor &weight = in[0], &ids = in[1];
  const Elem elem = elem_of(weight, "embedding");
  const int index = index_of(ids, "embedding", "ids");
  launch_embedding(weight.device_data(), ids.device_data(), out[0].device_data(), ids.numel(),
                   weight.size(0), weight.size(1), int(elem), index, stream_of(weight));
  check_launch("embedding");
});

// in: dy [..., D], ids [...]; out: dweight [num_embeddings, D]
MERAK_REGISTER_KERNEL(embedding_grad, CUDA, [](const std::vector<Tensor>& in,
                                               const std::vector<Tensor>& out, const Attrs& a) {
  const Tensor &dy = in[0], &ids = in[1];
  const Elem elem = elem_of(dy, "embedding_grad");
  const int index = index_of(ids, "embedding_grad", "ids");
  const int64_t n = ids.numel(), V = a.i("num_embeddings"), D = dy.size(-1);
  MERAK_CHECK(n < (int64_t(1) << 31), "embedding_grad: ids ", ids.str(),
              " has more than 2^31 - 1 elements, the CUDA kernel's limit");
  MERAK_CHECK(V < (int64_t(1) << 31), "embedding_grad: num_embeddings ", V,
              " is beyond the CUDA kernel's limit of 2^31 - 1");
  const cudaStream_t stream = stream_of(dy);  // makes dy's device current for CUB's size query
  const Tensor tmp = scratch(embedding_grad_scratch_bytes(n, V), dy.device());
  launch_embedding_grad(dy.device_data(), ids.device_data(), out[0].device_data(), n, V, D,
                        tmp.device_data(), int(elem), index, stream);
  check_launch("embedding_grad");
});

}  // namespace merak::cuda_kernels::nn
