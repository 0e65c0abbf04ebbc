// softmax / log_softmax and their gradients. When the reduced dim is the last one (inner == 1)
// a warp or block owns each row; otherwise each thread owns one (outer, inner) column and walks
// it, neighbouring threads reading neighbouring elements.
#include "kernels/cuda/nn/softmax.h"

#include "kernels/cuda/nn/reduce.cuh"

namespace merak::cuda_kernels::nn {
namespace {

// y = exp(x - m) / s, or x - (m + log s): m the max, s the sum of exp(x - m), both found in one
// pass (online softmax).
template <typename S, int G, bool kLog>
__global__ void softmax_rows(const S* x, S* y, int64_t rows, int64_t n) {
  using R = RowGroup<G>;
  using St = Storage<S>;
  for (int64_t r = R::first_row(); r < rows; r += R::row_step()) {
    const S* xr = x + r * n;
    S* yr = y + r * n;
    MaxSum st = max_sum_empty();
    for (int64_t i = R::lane(); i < n; i += G) st = max_sum_add(st, St::load(xr[i]));
    st = R::reduce(st, MergeMaxSum());
    if (kLog) {
      const float c = st.m + logf(st.s);
      for (int64_t i = R::lane(); i < n; i += G) yr[i] = St::store(St::load(xr[i]) - c);
    } else {
      const float inv = 1.f / st.s;
      for (int64_t i = R::lane(); i < n; i += G)
        yr[i] = St::store(expf(St::load(xr[i]) - st.m) * inv);
    }
  }
}

template <typename S, bool kLog>
__global__ void softmax_cols(const S* x, S* y, int64_t outer, int64_t n, int64_t inner) {
  using St = Storage<S>;
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < outer * inner;
       t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t o = t / inner, k = t - o * inner;
    const S* xc = x + o * n * inner + k;
    S* yc = y + o * n * inner + k;
    MaxSum st = max_sum_empty();
    for (int64_t l = 0; l < n; ++l) st = max_sum_add(st, St::load(xc[l * inner]));
    if (kLog) {
      const float c = st.m + logf(st.s);
      for (int64_t l = 0; l < n; ++l) yc[l * inner] = St::store(St::load(xc[l * inner]) - c);
    } else {
      const float inv = 1.f / st.s;
      for (int64_t l = 0; l < n; ++l)
        yc[l * inner] = St::store(expf(St::load(xc[l * inner]) - st.m) * inv);
    }
  }
}

// The gradients' row term: sum(dy) for log_softmax, sum(dy * y) for softmax.
template <typename S, bool kLog>
__device__ float grad_term(const S& dy, const S& y) {
  return kLog ? Storage<S>::load(dy) : Storage<S>::load(dy) * Storage<S>::load(y);
}

template <typename S, bool kLog>
__device__ S grad_value(const S& dy, const S& y, float s) {
  using St = Storage<S>;
  const float d = St::load(dy), v = St::load(y);
  return St::store(kLog ? d - expf(v) * s : v * (d - s));
}

template <typename S, int G, bool kLog>
__global__ void softmax_grad_rows(const S* dy, const S* y, S* dx, int64_t rows, int64_t n) {
  using R = RowGroup<G>;
  for (int64_t r = R::first_row(); r < rows; r += R::row_step()) {
    const int64_t base = r * n;
    float s = 0.f;
    for (int64_t i = R::lane(); i < n; i += G) s += grad_term<S, kLog>(dy[base + i], y[base + i]);
    s = R::reduce(s, Add());
    for (int64_t i = R::lane(); i < n; i += G)
      dx[base + i] = grad_value<S, kLog>(dy[base + i], y[base + i], s);
  }
}

template <typename S, bool kLog>
__global__ void softmax_grad_cols(const S* dy, const S* y, S* dx, int64_t outer, int64_t n,
                                  int64_t inner) {
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < outer * inner;
       t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t o = t / inner, k = t - o * inner;
    const int64_t base = o * n * inner + k;
    float s = 0.f;
    for (int64_t l = 0; l < n; ++l) s += grad_term<S, kLog>(dy[base + l * inner], y[base + l * inner]);
    for (int64_t l = 0; l < n; ++l) {
      const int64_t e = base + l * inner;
      dx[e] = grad_value<S, kLog>(dy[e], y[e], s);
    }
  }
}

}  // namespace

void launch_softmax(const void* x, void* y, int64_t outer, int64_t len, int64_t inner, bool log,
                    int elem, cudaStream_t stream) {
  if (outer * len * inner == 0) return;
  with_storage(elem, [&]<typename S>() {
    const S* xs = static_cast<const S*>(x);
    S* ys = static_cast<S*>(y);
    if (inner == 1) {
      with_row_group(len, [&]<int G>() {
        const int grid = RowGroup<G>::grid(outer);
        if (log) softmax_rows<S, G, true><<<grid, kThreads, 0, stream>>>(xs, ys, outer, len);
        else softmax_rows<S, G, false><<<grid, kThreads, 0, stream>>>(xs, ys, outer, len);
      });
    } else {
      const int grid = blocks_for(outer * inner);
      if (log) softmax_cols<S, true><<<grid, kThreads, 0, stream>>>(xs, ys, outer, len, inner);
      else softmax_cols<S, false><<<grid, kThreads, 0, stream>>>(xs, ys, outer, len, inner);
    }
  });
}

void launch_softmax_grad(const void* dy, const void* y, void* dx, int64_t outer, int64_t len,
                         int64_t inner, bool log, int elem, cudaStream_t stream) {
  if (outer * len * inner == 0) return;
  with_storage(elem, [&]<typename S>() {
    const S* dys = static_cast<const S*>(dy);
    const S* ys = static_cast<const S*>(y);
    S* dxs = static_cast<S*>(dx);
    if (inner == 1) {
      with_row_group(len, [&]<int G>() {
        const int grid = RowGroup<G>::grid(outer);
        if (log)
          softmax_grad_rows<S, G, true><<<grid, kThreads, 0, stream>>>(dys, ys, dxs, outer, len);
        else
          softmax_grad_rows<S, G, false><<<grid, kThreads, 0, stream>>>(dys, ys, dxs, outer, len);
      });
    } else {
      const int grid = blocks_for(outer * inner);
      if (log)
        softmax_grad_cols<S, true><<<grid, kThreads, 0, stream>>>(dys, ys, dxs, outer, len, inner);
      else
        softmax_grad_cols<S, false><<<grid, kThreads, 0, stream>>>(dys, ys, dxs, outer, len,
                                                                   inner);
    }
  });
}

}  // namespace merak::cuda_kernels::nn
