// cross_entropy and cross_entropy_grad over the last dim. The forward takes each row's
// log-sum-exp in one online pass (a warp or block per row), keeps the row losses in double, and
// one block averages them in a fixed order; the backward rebuilds softmax from the saved lse.
// The number of counted rows is found on the device, so nothing waits for the host.
// loss, lse and dloss are f32 whatever the logits' element type (op_util.h's stat_dtype): a
// 16-bit loss would overflow f16 once scaled, and a rounded lse would skew the softmax.
#include "kernels/cuda/nn/cross_entropy.h"

#include "kernels/cuda/nn/reduce.cuh"

namespace merak::cuda_kernels::nn {
namespace {

template <typename S, typename I, int G>
__global__ void cross_entropy_rows(const S* x, const I* t, float* lse, double* row_loss,
                                   int64_t rows, int64_t V, int64_t ignore) {
  using R = RowGroup<G>;
  using St = Storage<S>;
  for (int64_t r = R::first_row(); r < rows; r += R::row_step()) {
    const S* xr = x + r * V;
    MaxSum st = max_sum_empty();
    for (int64_t i = R::lane(); i < V; i += G) st = max_sum_add(st, St::load(xr[i]));
    st = R::reduce(st, MergeMaxSum());
    if (R::lane() == 0) {
      const float l = st.m + logf(st.s);
      lse[r] = l;
      const int64_t target = int64_t(t[r]);
      double loss = 0.0;  // an ignored row adds nothing
      if (target != ignore)
        loss = target >= 0 && target < V ? double(l) - double(St::load(xr[target])) : double(NAN);
      row_loss[r] = loss;
    }
  }
}

// How many targets are not ignore_index, over the whole block.
template <typename I>
__device__ long long count_targets(const I* t, int64_t rows, int64_t ignore) {
  long long count = 0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) count += int64_t(t[r]) != ignore;
  return block_reduce(count, Add());
}

// One block: loss = sum(row_loss) / count.
template <typename I>
__global__ void cross_entropy_mean(const double* row_loss, const I* t, float* loss, int64_t rows,
                                   int64_t ignore) {
  double s = 0.0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) s += row_loss[r];
  s = block_reduce(s, Add());
  const long long count = count_targets(t, rows, ignore);
  if (threadIdx.x == 0) *loss = count ? float(s / double(count)) : 0.f;
}

// One block: scale = dloss / count (0 when every row is ignored).
template <typename I>
__global__ void cross_entropy_scale(const float* dloss, const I* t, float* scale, int64_t rows,
                                    int64_t ignore) {
  const long long count = count_targets(t, rows, ignore);
  if (threadIdx.x == 0) *scale = count ? *dloss / float(count) : 0.f;
}

template <typename S, typename I, int G>
__global__ void cross_entropy_grad_rows(const S* x, const I* t, const float* lse,
                                        const float* scale, S* dx, int64_t rows, int64_t V,
                                        int64_t ignore) {
  using R = RowGroup<G>;
  using St = Storage<S>;
  const float sc = *scale;
  for (int64_t r = R::first_row(); r < rows; r += R::row_step()) {
    const S* xr = x + r * V;
    S* dxr = dx + r * V;
    const int64_t target = int64_t(t[r]);
    if (target == ignore) {
      for (int64_t i = R::lane(); i < V; i += G) dxr[i] = St::store(0.f);
    } else if (target < 0 || target >= V) {
      for (int64_t i = R::lane(); i < V; i += G) dxr[i] = St::store(NAN);
    } else {
      const float l = lse[r];
      for (int64_t i = R::lane(); i < V; i += G) {
        float v = expf(St::load(xr[i]) - l) * sc;
        if (i == target) v -= sc;
        dxr[i] = St::store(v);
      }
    }
  }
}

}  // namespace

int64_t cross_entropy_scratch_bytes(int64_t rows) { return rows * int64_t(sizeof(double)); }

void launch_cross_entropy(const void* logits, const void* targets, float* loss, float* lse,
                          int64_t rows, int64_t V, int64_t ignore_index, void* scratch, int elem,
                          int index, cudaStream_t stream) {
  double* row_loss = static_cast<double*>(scratch);
  with_storage(elem, [&]<typename S>() {
    with_index(index, [&]<typename I>() {
      const I* t = static_cast<const I*>(targets);
      if (rows > 0) {
        with_row_group(V, [&]<int G>() {
          cross_entropy_rows<S, I, G><<<RowGroup<G>::grid(rows), kThreads, 0, stream>>>(
              static_cast<const S*>(logits), t, lse, row_loss, rows, V, ignore_index);
        });
      }
      cross_entropy_mean<I><<<1, kThreads, 0, stream>>>(row_loss, t, loss, rows, ignore_index);
    });
  });
}

int64_t cross_entropy_grad_scratch_bytes() { return int64_t(sizeof(float)); }

void launch_cross_entropy_grad(const float* dloss, const void* logits, const void* targets,
                               const float* lse, void* dlogits, int64_t rows, int64_t V,
                               int64_t ignore_index, void* scratch, int elem, int index,
                               cudaStream_t stream) {
  if (rows == 0) return;
  float* scale = static_cast<float*>(scratch);
  with_storage(elem, [&]<typename S>() {
    with_index(index, [&]<typename I>() {
      const I* t = static_cast<const I*>(targets);
      cross_entropy_scale<I><<<1, kThreads, 0, stream>>>(dloss, t, scale, rows, ignore_index);
      with_row_group(V, [&]<int G>() {
        cross_entropy_grad_rows<S, I, G><<<RowGroup<G>::grid(rows), kThreads, 0, stream>>>(
            static_cast<const S*>(logits), t, lse, scale, static_cast<S*>(dlogits), rows, V,
            ignore_index);
      });
    });
  });
}

}  // namespace merak::cuda_kernels::nn
