// The typed op API: one function per registry op (plus a few compositions). Every function goes
// through the registry, so it is recorded by autograd and the tracer and runs on any device.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "merak/core/tensor.h"

namespace merak::ops {

// --- elementwise, broadcasting (defs/elementwise.cc) ---
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor add_scalar(const Tensor& x, double value);  // x + value
Tensor mul_scalar(const Tensor& x, double value);  // x * value
Tensor neg(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor pow(const Tensor& x, double exponent);
Tensor pow_tensor(const Tensor& a, const Tensor& b);            // a^b, broadcasting
Tensor maximum(const Tensor& a, const Tensor& b);               // broadcasting; NaN wins
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor abs(const Tensor& x);
Tensor sign(const Tensor& x);                                   // -1, 0, 1
Tensor floor(const Tensor& x);
Tensor ceil(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor erf(const Tensor& x);
Tensor relu(const Tensor& x);
Tensor relu_grad(const Tensor& dy, const Tensor& y);            // dy * (y > 0)
Tensor gelu(const Tensor& x, const std::string& approximate = "tanh");  // "tanh" or "none" (erf)
Tensor gelu_grad(const Tensor& dy, const Tensor& x, const std::string& approximate = "tanh");
Tensor eq(const Tensor& a, const Tensor& b);                    // bool, broadcasting
Tensor lt(const Tensor& a, const Tensor& b);                    // a < b, bool, broadcasting
Tensor gt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor logical_and(const Tensor& a, const Tensor& b);          // bool inputs, broadcasting
Tensor logical_or(const Tensor& a, const Tensor& b);
Tensor logical_xor(const Tensor& a, const Tensor& b);
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);  // cond ? a : b
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);  // mask ? value : x
Tensor cast(const Tensor& x, DType dtype);

// --- reductions (defs/reduce.cc); empty dims = all dims ---
Tensor sum(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor max(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor min(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor prod(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
// Sums a broadcast gradient back to `shape` (the inverse of broadcasting); identity if equal.
Tensor sum_to(const Tensor& x, const Shape& shape);

// --- shape ops (defs/shape.cc): views where the layout allows ---
Tensor reshape(const Tensor& x, const Shape& shape);  // -1 allowed; copies only if it must
Tensor permute(const Tensor& x, const std::vector<int64_t>& order);
Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1);
Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end);  // [start, end)
Tensor expand(const Tensor& x, const Shape& shape);
Tensor concat(const std::vector<Tensor>& xs, int64_t dim);
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim);
Tensor contiguous(const Tensor& x);  // reshape to its own shape when already contiguous
// i64 [n] = 0, 1, ..., n-1 with n = x.size(dim), on x's device (defs/arange.cc): position ids.
Tensor arange(const Tensor& x, int64_t dim = -1);

// --- matmul (defs/matmul.cc) ---
// a [..., M, K] (or [..., K, M] with trans_a) times b [..., K, N] (or [..., N, K] with
// trans_b); batch dims broadcast.
Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false);
// x [..., in] times weight [out, in] transposed, plus bias [out] when defined.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());
// gelu(linear(x, weight, bias), approximate) as one op (a GEMM epilogue where the device has one).
Tensor linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
                   const std::string& approximate = "tanh");

// --- neural-network ops (defs/nn.cc) ---
Tensor softmax(const Tensor& x, int64_t dim = -1);
Tensor log_softmax(const Tensor& x, int64_t dim = -1);
Tensor softmax_grad(const Tensor& dy, const Tensor& y, int64_t dim = -1);
Tensor log_softmax_grad(const Tensor& dy, const Tensor& y, int64_t dim = -1);
// Normalises the last dim; weight and bias [D] may be undefined.
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-5);
// weight [V, D], ids int32/int64 [...] -> [..., D]
Tensor embedding(const Tensor& weight, const Tensor& ids);
Tensor embedding_grad(const Tensor& dy, const Tensor& ids, int64_t num_embeddings);
// logits [..., V], targets int [...]; mean over targets != ignore_index.
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index = -100);
// Keeps element i with probability 1 - p, scaled by 1 / (1 - p); the mask is Philox(key, i,
// stream), so the backward (and a recomputation) re-derives it instead of storing it.
Tensor dropout(const Tensor& x, double p, uint64_t key, uint64_t stream);

// --- attention (defs/attention.cc) ---
// q [B, H, Tq, D], k and v [B, H, Tk, D]; key_padding_mask bool [B, Tk] (true = attend) may be
// undefined; scale <= 0 means 1/sqrt(D). Backward recomputes probabilities from a saved
// log-sum-exp: no Tq x Tk matrix is kept.
// Dropout of the probabilities at rate p (0: none), its mask drawn by Philox from (key, the
// element's place in [B, H, Tq, Tk], stream) and re-derived by the backward, as dropout's is.
struct AttentionDropout {
  double p = 0;
  uint64_t key = 0, stream = 0;
};
Tensor sdpa(const Tensor& q, const Tensor& k, const Tensor& v,
            const Tensor& key_padding_mask = Tensor(), bool causal = false, double scale = 0,
            const AttentionDropout& dropout = {});

}  // namespace merak::ops

// --- tensor-parallel ops (defs/tp_ops.cc), inserted by the partitioner's tensor-parallel pass.
// `group` names the communicator group (the plan's tp group, e.g. "tp.pp3.dp0") and `size` its
// member count. Their kernels reduce through the collectives of the calling thread's ops::TpScope
// (merak/ops/collectives.h: the runtime's over its tp communicator); a group of one needs none.
namespace merak::ops {

// Sum over the group forward; the gradient passes through (Megatron's g).
Tensor tp_all_reduce(const Tensor& x, const std::string& group, int64_t size);
// Identity forward; the gradient is summed over the group (Megatron's f).
Tensor tp_copy(const Tensor& x, const std::string& group, int64_t size);
// The members' parts concatenated along dim (sizes[i]: member i's part; this one is `index`);
// the gradient is this member's slice.
Tensor tp_all_gather(const Tensor& x, const std::string& group, int64_t size, int64_t index,
                     const std::vector<int64_t>& sizes, int64_t dim = -1);
// Rows [start, start + V_local) of a vocabulary-parallel table: ids outside give zero rows.
Tensor tp_embedding(const Tensor& weight, const Tensor& ids, int64_t start);
Tensor tp_embedding_grad(const Tensor& dy, const Tensor& ids, int64_t start,
                         int64_t num_embeddings);
// cross_entropy over logits split along the vocabulary: this member holds classes
// [start, start + V_local); the row maxima, exponential sums and target logits are reduced over
// the group, so every member gets the full loss (and the lse per row).
Tensor tp_cross_entropy(const Tensor& logits, const Tensor& targets, int64_t start,
                        const std::string& group, int64_t size, int64_t ignore_index = -100);

}  // namespace merak::ops
