// CUDA kernels of the tensor-parallel ops (defs in merak/ops/defs/tp_ops.cc), with the CPU
// kernels' semantics: the collectives reduce through the device collective (collective.h), the
// vocabulary-parallel ones compute in f32 for f32, bf16 and f16 storage. Where the CPU kernels
// throw on a negative target that is not ignore_index, these give NaN (as the nn kernels do).
#include "kernels/cuda/common.h"
#include "kernels/cuda/nn/embedding.h"
#include "kernels/cuda/nn/util.h"
#include "kernels/cuda/tp/collective.h"
#include "kernels/cuda/tp/tp_kernels.h"
#include "merak/ops/op_util.h"

namespace merak::cuda_kernels::tp {
namespace {

using ops::TpReduce;
using nn::index_of;
using nn::scratch;
using ops::Attrs;

void check(cudaError_t e, const char* op) { merak::cuda::check(e, op); }

// The Elem of the loss (or dloss) and lse, which share one: the logits' dtype as the op defs
// give it today, or f32 should they keep these statistics in f32 as the nn ops do
// (op_util.h's stat_dtype). The kernels take either.
Elem stat_elem(const Tensor& loss, const char* loss_name, const Tensor& lse, const char* op) {
  MERAK_CHECK(loss.dtype() == lse.dtype(), op, ": ", loss_name, " ", loss.str(), " and lse ",
              lse.str(), " must have one dtype");
  return elem_of(lse, op);
}

}  // namespace

// in: x; out: y = x summed over the group
MERAK_REGISTER_KERNEL(tp_all_reduce, CUDA, [](const std::vector<Tensor>& in,
                                              const std::vector<Tensor>& out, const Attrs& a) {
  const Tensor &x = in[0], &y = out[0];
  if (x.nbytes())
    check(cudaMemcpyAsync(y.device_data(), x.device_data(), size_t(x.nbytes()),
                          cudaMemcpyDeviceToDevice, stream_of(x)),
          "tp_all_reduce");
  tp_device_reduce("tp_all_reduce", y, TpReduce::Sum, a.s("group"), a.i("size"));
});

// in: x [..., sizes[index], ...]; out: y [..., sum(sizes), ...]. As on the CPU, our part goes
// into its place of a zero tensor and a sum over the group fills in the rest: the hook offers
// reductions only.
MERAK_REGISTER_KERNEL(tp_all_gather, CUDA, [](const std::vector<Tensor>& in,
                                              const std::vector<Tensor>& out, const Attrs& a) {
  const Tensor &x = in[0], &y = out[0];
  const int64_t dim = normalize_dim(a.i("dim"), x.dim());
  const std::vector<int64_t>& sizes = a.ints("sizes");
  int64_t start = 0;
  for (int64_t i = 0; i < a.i("index"); ++i) start += sizes[size_t(i)];
  int64_t outer = 1, inner = int64_t(dtype_size(x.dtype()));  // inner in bytes
  for (int64_t d = 0; d < dim; ++d) outer *= x.size(d);
  for (int64_t d = dim + 1; d < x.dim(); ++d) inner *= x.size(d);
  const int64_t part = x.size(dim), total = y.size(dim);
  const cudaStream_t stream = stream_of(x);
  if (y.nbytes())
    check(cudaMemsetAsync(y.device_data(), 0, size_t(y.nbytes()), stream), "tp_all_gather");
  char* dst = static_cast<char*>(y.device_data()) + start * inner;
  if (outer == 1 && part * inner > 0)  // one block: no pitch (a 2-D copy's is limited)
    check(cudaMemcpyAsync(dst, x.device_data(), size_t(part * inner), cudaMemcpyDeviceToDevice,
                          stream),
          "tp_all_gather");
  else if (outer * part * inner > 0)  // `outer` rows of part * inner bytes, pitch total * inner
    check(cudaMemcpy2DAsync(dst, size_t(total * inner), x.device_data(), size_t(part * inner),
                            size_t(part * inner), size_t(outer), cudaMemcpyDeviceToDevice,
                            stream),
          "tp_all_gather");
  tp_device_reduce("tp_all_gather", y, TpReduce::Sum, a.s("group"), a.i("size"));
});

// in: weight [V_local, D], ids [...]; out: y [..., D]
MERAK_REGISTER_KERNEL(tp_embedding, CUDA, [](const std::vector<Tensor>& in,
                                             const std::vector<Tensor>& out, const Attrs& a) {
  const Tensor &w = in[0], &ids = in[1];
  const Elem elem = elem_of(w, "tp_embedding");
  const int index = index_of(ids, "tp_embedding", "ids");
  launch_tp_embedding(w.device_data(), ids.device_data(), out[0].device_data(), ids.numel(),
                      w.size(0), w.size(1), a.i("start"), int(elem), index, stream_of(w));
  check_launch("tp_embedding");
});

// in: dy [..., D], ids [...]; out: dweight [num_embeddings, D]. embedding_grad's deterministic
// sort-and-sum over the ids shifted to this member's rows: the others' fall outside and are
// skipped, and every row no id names stays zero.
MERAK_REGISTER_KERNEL(tp_embedding_grad, CUDA, [](const std::vector<Tensor>& in,
                                                  const std::vector<Tensor>& out,
                                                  const Attrs& a) {
  const Tensor &dy = in[0], &ids = in[1];
  const Elem elem = elem_of(dy, "tp_embedding_grad");
  const int index = index_of(ids, "tp_embedding_grad", "ids");
  const int64_t n = ids.numel(), V = a.i("num_embeddings"), D = dy.size(-1);
  MERAK_CHECK(n < (int64_t(1) << 31), "tp_embedding_grad: ids ", ids.str(),
              " has more than 2^31 - 1 elements, the CUDA kernel's limit");
  MERAK_CHECK(V < (int64_t(1) << 31), "tp_embedding_grad: num_embeddings ", V,
              " is beyond the CUDA kernel's limit of 2^31 - 1");
  const cudaStream_t stream = stream_of(dy);  // makes dy's device current for CUB's size query
  const Tensor shifted = Tensor::empty({n}, DType::I64, dy.device());
  launch_shift_ids(ids.device_data(), static_cast<int64_t*>(shifted.device_data()), n,
                   a.i("start"), index, stream);
  check_launch("tp_embedding_grad (shift ids)");
  const Tensor tmp = scratch(nn::embedding_grad_scratch_bytes(n, V), dy.device());
  nn::launch_embedding_grad(dy.device_data(), shifted.device_data(), out[0].device_data(), n, V,
                            D, tmp.device_data(), int(elem), /*index=*/1, stream);
  check_launch("tp_embedding_grad");
});

// in: logits [..., V_local], targets [...]; out: loss [], lse [...] (one dtype: see
// stat_elem). The group's row maxima, then the group's sums of exponentials and target logits
// (one reduction of both): two collectives where the CPU kernel makes three, same result.
MERAK_REGISTER_KERNEL(tp_cross_entropy, CUDA, [](const std::vector<Tensor>& in,
                                                 const std::vector<Tensor>& out,
                                                 const Attrs& a) {
  const Tensor &x = in[0], &t = in[1];
  const Elem elem = elem_of(x, "tp_cross_entropy");
  const Elem stat = stat_elem(out[0], "loss", out[1], "tp_cross_entropy");
  const int index = index_of(t, "tp_cross_entropy", "targets");
  const int64_t V = x.size(-1), rows = x.numel() / V;
  const std::string& group = a.s("group");
  const int64_t size = a.i("size");
  const cudaStream_t stream = stream_of(x);
  // f32 whatever the logits: every member reduces the same dtype, and sums stay accurate.
  const Tensor row_max = Tensor::empty({rows}, DType::F32, x.device());
  const Tensor local_max = Tensor::empty({rows}, DType::F32, x.device());
  const Tensor sums = Tensor::empty({2, rows}, DType::F32, x.device());
  float* m = static_cast<float*>(row_max.device_data());
  float* ml = static_cast<float*>(local_max.device_data());
  float* s = static_cast<float*>(sums.device_data());
  launch_tp_ce_local(x.device_data(), t.device_data(), m, ml, s, rows, V, a.i("start"),
                     a.i("ignore_index"), int(elem), index, stream);
  check_launch("tp_cross_entropy (local pass)");
  tp_device_reduce("tp_cross_entropy", row_max, TpReduce::Max, group, size);
  launch_tp_ce_rescale(m, ml, s, rows, stream);
  check_launch("tp_cross_entropy (rescale)");
  tp_device_reduce("tp_cross_entropy", sums, TpReduce::Sum, group, size);
  launch_tp_ce_finish(m, s, t.device_data(), out[1].device_data(), out[0].device_data(), rows,
                      a.i("ignore_index"), int(stat), index, stream);
  check_launch("tp_cross_entropy");
});

// in: dloss [], logits [..., V_local], targets [...], lse [...] (dloss and lse in one dtype);
// out: dlogits [..., V_local]
MERAK_REGISTER_KERNEL(tp_cross_entropy_grad, CUDA, [](const std::vector<Tensor>& in,
                                                      const std::vector<Tensor>& out,
                                                      const Attrs& a) {
  const Tensor &x = in[1], &t = in[2];
  const Elem elem = elem_of(x, "tp_cross_entropy_grad");
  const int index = index_of(t, "tp_cross_entropy_grad", "targets");
  const int64_t V = x.size(-1), rows = x.numel() / V;
  const Elem stat = stat_elem(in[0], "dloss", in[3], "tp_cross_entropy_grad");
  const Tensor scale = scratch(tp_ce_grad_scratch_bytes(), x.device());
  launch_tp_ce_grad(in[0].device_data(), x.device_data(), t.device_data(), in[3].device_data(),
                    out[0].device_data(), rows, V, a.i("start"), a.i("ignore_index"),
                    scale.device_data(), int(elem), int(stat), index, stream_of(x));
  check_launch("tp_cross_entropy_grad");
});

}  // namespace merak::cuda_kernels::tp
