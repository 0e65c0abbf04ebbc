// CUDA kernels of matmul (batched, broadcasting, transpose flags), linear (x W^T + b) and
// linear_gelu, as cuBLASLt GEMMs (cublaslt.h). Defs in merak/ops/defs/matmul.cc.
#include <vector>

#include "kernels/cuda/common.h"
#include "kernels/cuda/nn/cublaslt.h"
#include "merak/ops/op_util.h"

namespace merak::cuda_kernels::nn {
namespace {

using ops::Attrs;

// One batch dim of the output: its size, and how far (in elements) each of A, B and C moves
// from one index to the next - 0 for an operand that broadcasts along it.
struct BatchDim {
  int64_t size, sa, sb, sc;
};

// The output's batch dims (a's and b's batch dims right-aligned against it), with size-1 dims
// dropped and neighbours that step through all three operands as one dim merged: what is left
// is usually a single dim, which cuBLASLt runs as one strided batch.
std::vector<BatchDim> batch_dims(const Shape& as, const Shape& bs, const Shape& cs) {
  const int64_t nc = int64_t(cs.size()) - 2;
  const int64_t na = int64_t(as.size()) - 2, nb = int64_t(bs.size()) - 2;
  int64_t sa = as[size_t(na)] * as[size_t(na) + 1];  // one matrix of each
  int64_t sb = bs[size_t(nb)] * bs[size_t(nb) + 1];
  int64_t sc = cs[size_t(nc)] * cs[size_t(nc) + 1];
  std::vector<BatchDim> dims(static_cast<size_t>(nc));
  for (int64_t d = nc - 1; d >= 0; --d) {
    const int64_t da = d - (nc - na), db = d - (nc - nb);
    const int64_t size_a = da >= 0 ? as[size_t(da)] : 1;
    const int64_t size_b = db >= 0 ? bs[size_t(db)] : 1;
    dims[size_t(d)] = {cs[size_t(d)], size_a == 1 ? 0 : sa, size_b == 1 ? 0 : sb, sc};
    sa *= size_a;
    sb *= size_b;
    sc *= cs[size_t(d)];
  }
  std::vector<BatchDim> merged;
  for (const BatchDim& d : dims) {
    if (d.size == 1) continue;
    if (!merged.empty()) {
      BatchDim& o = merged.back();
      if (o.sa == d.sa * d.size && o.sb == d.sb * d.size && o.sc == d.sc * d.size) {
        o = {o.size * d.size, d.sa, d.sb, d.sc};
        continue;
      }
    }
    merged.push_back(d);
  }
  return merged;
}

int64_t elem_bytes(Elem e) { return e == Elem::F32 ? 4 : 2; }

void zero(const Tensor& t, cudaStream_t stream) {
  merak::cuda::check(cudaMemsetAsync(t.device_data(), 0, size_t(t.nbytes()), stream),
                     "cudaMemsetAsync");
}

void matmul_kernel(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& a) {
  const Tensor &lhs = in[0], &rhs = in[1], &res = out[0];
  const bool ta = a.b("trans_a"), tb = a.b("trans_b");
  const Elem elem = elem_of(lhs, "matmul");
  const Shape &as = lhs.shape(), &bs = rhs.shape(), &cs = res.shape();
  const size_t ra = as.size(), rb = bs.size(), rc = cs.size();
  const int64_t M = cs[rc - 2], N = cs[rc - 1], K = ta ? as[ra - 2] : as[ra - 1];
  if (res.numel() == 0) return;
  const cudaStream_t stream = stream_of(res);
  if (K == 0) {  // empty sums
    zero(res, stream);
    return;
  }

  GemmArgs g;
  g.elem = elem;
  g.trans_a = ta;
  g.trans_b = tb;
  g.M = M;
  g.N = N;
  g.K = K;
  g.A = lhs.device_data();
  g.lda = as[ra - 1];
  g.B = rhs.device_data();
  g.ldb = bs[rb - 1];
  g.C = res.device_data();
  g.ldc = N;

  std::vector<BatchDim> dims = batch_dims(as, bs, cs);
  // A b shared by every matrix of an untransposed, densely stacked a: one tall GEMM over the
  // stacked rows (as on the CPU).
  while (!dims.empty() && !ta && dims.back().sb == 0 && dims.back().sa == g.M * K &&
         dims.back().sc == g.M * N) {
    g.M *= dims.back().size;
    dims.pop_back();
  }
  if (!dims.empty()) {
    g.batch = dims.back().size;
    g.stride_a = dims.back().sa;
    g.stride_b = dims.back().sb;
    g.stride_c = dims.back().sc;
    dims.pop_back();
  }
  // Whatever batch dims remain (only when broadcasting interleaves) run as one strided batch
  // per index, in row-major order.
  int64_t outer = 1;
  for (const BatchDim& d : dims) outer *= d.size;
  const int64_t esize = elem_bytes(elem);
  for (int64_t idx = 0; idx < outer; ++idx) {
    int64_t rest = idx, oa = 0, ob = 0, oc = 0;
    for (size_t d = dims.size(); d-- > 0;) {
      const int64_t i = rest % dims[d].size;
      rest /= dims[d].size;
      oa += i * dims[d].sa;
      ob += i * dims[d].sb;
      oc += i * dims[d].sc;
    }
    GemmArgs gi = g;
    gi.A = static_cast<const char*>(g.A) + oa * esize;
    gi.B = static_cast<const char*>(g.B) + ob * esize;
    gi.C = static_cast<char*>(g.C) + oc * esize;
    gemm(gi, res.device().index, stream, "matmul");
  }
  check_launch("matmul");
}

// The GEMM y [M, out] = x [M, in] W^T of a linear layer; bias and epilogue left to the caller.
GemmArgs linear_gemm(const Tensor& x, const Tensor& w, const Tensor& y, int64_t M, const char* op) {
  GemmArgs g;
  g.elem = elem_of(x, op);
  g.trans_b = true;
  g.M = M;
  g.N = w.size(0);
  g.K = w.size(1);
  g.A = x.device_data();
  g.lda = g.K;
  g.B = w.device_data();
  g.ldb = g.K;
  g.C = y.device_data();
  g.ldc = g.N;
  return g;
}

// y [M, out] = x [M, in] W^T + bias, with every leading dim of x folded into M.
void linear_kernel(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&) {
  const Tensor &x = in[0], &w = in[1], &y = out[0];
  const Tensor bias = in.size() > 2 ? in[2] : Tensor();
  const int64_t n_in = w.size(1), n_out = w.size(0);
  const int64_t M = numel(Shape(x.shape().begin(), x.shape().end() - 1));
  if (M == 0 || n_out == 0) return;
  const cudaStream_t stream = stream_of(y);

  GemmArgs g = linear_gemm(x, w, y, M, "linear");
  if (bias.defined()) {
    if (n_in > 0 && bias_epilogue_ok(bias.device_data())) {
      g.bias = bias.device_data();
    } else {
      // The bias goes into y first and the product is added to it.
      y.view({M, n_out}).copy_(bias.view({1, n_out}).expand({M, n_out}));
      g.accumulate = true;
    }
  } else if (n_in == 0) {
    zero(y, stream);
  }
  if (n_in > 0) gemm(g, y.device().index, stream, "linear");
  check_launch("linear");
}

// gelu(x W^T + bias) and the product before GELU. GPT-2's tanh form runs as one cuBLASLt GEMM
// with the GELU_AUX epilogue (which writes both); the exact erf form, which cuBLASLt does not
// offer, and shapes the epilogue refuses run the linear kernel and then the gelu kernel.
void linear_gelu_kernel(const std::vector<Tensor>& in, const std::vector<Tensor>& out,
                        const Attrs& a) {
  const Tensor &x = in[0], &w = in[1], &y = out[0], &pre = out[1];
  const Tensor bias = in.size() > 2 ? in[2] : Tensor();
  const int64_t n_in = w.size(1), n_out = w.size(0);
  const int64_t M = numel(Shape(x.shape().begin(), x.shape().end() - 1));
  if (M == 0 || n_out == 0) return;
  const bool fused = a.s("approximate") == "tanh" && n_in > 0 &&
                     gelu_epilogue_ok(n_out, pre.device_data()) &&
                     (!bias.defined() || bias_epilogue_ok(bias.device_data()));
  if (!fused) {
    linear_kernel(in, {pre}, a);
    const ops::KernelFn* gelu = ops::Registry::get().kernel("gelu", DeviceType::CUDA);
    MERAK_CHECK(gelu, "linear_gelu: no CUDA gelu kernel is registered");
    (*gelu)({pre}, {y}, a);
    return;
  }
  GemmArgs g = linear_gemm(x, w, y, M, "linear_gelu");
  g.bias = bias.defined() ? bias.device_data() : nullptr;
  g.gelu_aux = pre.device_data();
  gemm(g, y.device().index, stream_of(y), "linear_gelu");
  check_launch("linear_gelu");
}

}  // namespace

MERAK_REGISTER_KERNEL(matmul, CUDA, matmul_kernel);
MERAK_REGISTER_KERNEL(linear, CUDA, linear_kernel);
MERAK_REGISTER_KERNEL(linear_gelu, CUDA, linear_gelu_kernel);

}  // namespace merak::cuda_kernels::nn
