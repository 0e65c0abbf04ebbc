// The vocabulary-parallel kernels. The embedding is a row gather that writes zeros for ids of
// other members. The cross entropy reads its logits once: each row's local maximum and sum of
// exponentials in one online pass (a warp or block per row, fixed reduction trees), the sums
// rescaled to the group's maximum once that is known, and one block that turns the group's sums
// into lse and the mean loss, in double and in a fixed order. The backward rebuilds softmax from
// the saved lse. Values are computed in f32 whatever the storage type.
#include "kernels/cuda/tp/tp_kernels.h"

#include "kernels/cuda/nn/reduce.cuh"

namespace merak::cuda_kernels::tp {
namespace {

using nn::Add;
using nn::block_reduce;
using nn::MaxSum;
using nn::MergeMaxSum;
using nn::RowGroup;
using nn::with_index;
using nn::with_row_group;

template <typename S, typename I, int G>
__global__ void tp_embedding_rows(const S* w, const I* ids, S* out, int64_t n, int64_t V,
                                  int64_t D, int64_t start) {
  using R = RowGroup<G>;
  for (int64_t r = R::first_row(); r < n; r += R::row_step()) {
    const int64_t row = int64_t(ids[r]) - start;
    S* o = out + r * D;
    if (row >= 0 && row < V) {
      const S* src = w + row * D;
      for (int64_t c = R::lane(); c < D; c += G) o[c] = src[c];
    } else {
      for (int64_t c = R::lane(); c < D; c += G) o[c] = Storage<S>::store(0.f);
    }
  }
}

template <typename I>
__global__ void shift_ids(const I* ids, int64_t* shifted, int64_t n, int64_t start) {
  for (int64_t r = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; r < n;
       r += int64_t(gridDim.x) * blockDim.x)
    shifted[r] = int64_t(ids[r]) - start;
}

template <typename S, typename I, int G>
__global__ void tp_ce_local_rows(const S* x, const I* t, float* row_max, float* local_max,
                                 float* sums, int64_t rows, int64_t V, int64_t start,
                                 int64_t ignore) {
  using R = RowGroup<G>;
  using St = Storage<S>;
  for (int64_t r = R::first_row(); r < rows; r += R::row_step()) {
    const S* xr = x + r * V;
    MaxSum st = nn::max_sum_empty();
    for (int64_t i = R::lane(); i < V; i += G) st = nn::max_sum_add(st, St::load(xr[i]));
    st = R::reduce(st, MergeMaxSum());
    if (R::lane() == 0) {
      row_max[r] = st.m;
      local_max[r] = st.m;
      sums[r] = st.s;
      const int64_t target = int64_t(t[r]), c = target - start;
      sums[rows + r] = target != ignore && c >= 0 && c < V ? St::load(xr[c]) : 0.f;
    }
  }
}

// A member whose row maximum is below the group's scales its sum down; one whose every logit is
// -inf has sum 0 and adds nothing (exp(-inf) = 0), unless the whole row is -inf everywhere,
// which gives NaN as on the CPU (exp(-inf - -inf)).
__global__ void tp_ce_rescale(const float* row_max, const float* local_max, float* sums,
                              int64_t rows) {
  for (int64_t r = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; r < rows;
       r += int64_t(gridDim.x) * blockDim.x)
    sums[r] *= expf(local_max[r] - row_max[r]);
}

// One block: every row's lse, and the mean loss over the rows that count.
template <typename S, typename I>
__global__ void tp_ce_finish(const float* row_max, const float* sums, const I* t, S* lse, S* loss,
                             int64_t rows, int64_t ignore) {
  double total = 0.0;
  long long count = 0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
    const float l = row_max[r] + logf(sums[r]);
    lse[r] = Storage<S>::store(l);
    const int64_t target = int64_t(t[r]);
    if (target == ignore) continue;
    ++count;
    total += target >= 0 ? double(l) - double(sums[rows + r]) : double(NAN);
  }
  total = block_reduce(total, Add());
  count = block_reduce(count, Add());
  if (threadIdx.x == 0) *loss = Storage<S>::store(count ? float(total / double(count)) : 0.f);
}

// One block: scale = dloss / count (0 when every row is ignored).
template <typename T, typename I>
__global__ void tp_ce_scale(const T* dloss, const I* t, float* scale, int64_t rows,
                            int64_t ignore) {
  long long count = 0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) count += int64_t(t[r]) != ignore;
  count = block_reduce(count, Add());
  if (threadIdx.x == 0) *scale = count ? Storage<T>::load(*dloss) / float(count) : 0.f;
}

// S: the logits' storage, T: the lse's.
template <typename S, typename T, typename I, int G>
__global__ void tp_ce_grad_rows(const S* x, const I* t, const T* lse, const float* scale, S* dx,
                                int64_t rows, int64_t V, int64_t start, int64_t ignore) {
  using R = RowGroup<G>;
  using St = Storage<S>;
  const float sc = *scale;
  for (int64_t r = R::first_row(); r < rows; r += R::row_step()) {
    const S* xr = x + r * V;
    S* dxr = dx + r * V;
    const int64_t target = int64_t(t[r]);
    if (target == ignore) {
      for (int64_t i = R::lane(); i < V; i += G) dxr[i] = St::store(0.f);
    } else if (target < 0) {
      for (int64_t i = R::lane(); i < V; i += G) dxr[i] = St::store(NAN);
    } else {
      const float l = Storage<T>::load(lse[r]);
      const int64_t c = target - start;  // outside [0, V): another member's class
      for (int64_t i = R::lane(); i < V; i += G) {
        float v = expf(St::load(xr[i]) - l) * sc;
        if (i == c) v -= sc;
        dxr[i] = St::store(v);
      }
    }
  }
}

}  // namespace

void launch_tp_embedding(const void* weight, const void* ids, void* out, int64_t n, int64_t V,
                         int64_t D, int64_t start, int elem, int index, cudaStream_t stream) {
  if (n * D == 0) return;
  with_storage(elem, [&]<typename S>() {
    with_index(index, [&]<typename I>() {
      with_row_group(D, [&]<int G>() {
        tp_embedding_rows<S, I, G><<<RowGroup<G>::grid(n), kThreads, 0, stream>>>(
            static_cast<const S*>(weight), static_cast<const I*>(ids), static_cast<S*>(out), n,
            V, D, start);
      });
    });
  });
}

void launch_shift_ids(const void* ids, int64_t* shifted, int64_t n, int64_t start, int index,
                      cudaStream_t stream) {
  if (n == 0) return;
  with_index(index, [&]<typename I>() {
    shift_ids<I><<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const I*>(ids), shifted, n,
                                                         start);
  });
}

void launch_tp_ce_local(const void* logits, const void* targets, float* row_max,
                        float* local_max, float* sums, int64_t rows, int64_t V, int64_t start,
                        int64_t ignore_index, int elem, int index, cudaStream_t stream) {
  if (rows == 0) return;
  with_storage(elem, [&]<typename S>() {
    with_index(index, [&]<typename I>() {
      with_row_group(V, [&]<int G>() {
        tp_ce_local_rows<S, I, G><<<RowGroup<G>::grid(rows), kThreads, 0, stream>>>(
            static_cast<const S*>(logits), static_cast<const I*>(targets), row_max, local_max,
            sums, rows, V, start, ignore_index);
      });
    });
  });
}

void launch_tp_ce_rescale(const float* row_max, const float* local_max, float* sums,
                          int64_t rows, cudaStream_t stream) {
  if (rows == 0) return;
  tp_ce_rescale<<<blocks_for(rows), kThreads, 0, stream>>>(row_max, local_max, sums, rows);
}

void launch_tp_ce_finish(const float* row_max, const float* sums, const void* targets, void* lse,
                         void* loss, int64_t rows, int64_t ignore_index, int stat_elem, int index,
                         cudaStream_t stream) {
  with_storage(stat_elem, [&]<typename S>() {
    with_index(index, [&]<typename I>() {
      tp_ce_finish<S, I><<<1, kThreads, 0, stream>>>(row_max, sums,
                                                     static_cast<const I*>(targets),
                                                     static_cast<S*>(lse), static_cast<S*>(loss),
                                                     rows, ignore_index);
    });
  });
}

int64_t tp_ce_grad_scratch_bytes() { return int64_t(sizeof(float)); }

void launch_tp_ce_grad(const void* dloss, const void* logits, const void* targets,
                       const void* lse, void* dlogits, int64_t rows, int64_t V, int64_t start,
                       int64_t ignore_index, void* scratch, int elem, int stat_elem, int index,
                       cudaStream_t stream) {
  if (rows == 0) return;
  float* scale = static_cast<float*>(scratch);
  with_storage(stat_elem, [&]<typename T>() {
    with_index(index, [&]<typename I>() {
      tp_ce_scale<T, I><<<1, kThreads, 0, stream>>>(static_cast<const T*>(dloss),
                                                    static_cast<const I*>(targets), scale, rows,
                                                    ignore_index);
    });
  });
  with_storage(elem, [&]<typename S>() {
    with_storage(stat_elem, [&]<typename T>() {
      with_index(index, [&]<typename I>() {
        with_row_group(V, [&]<int G>() {
          tp_ce_grad_rows<S, T, I, G><<<RowGroup<G>::grid(rows), kThreads, 0, stream>>>(
              static_cast<const S*>(logits), static_cast<const I*>(targets),
              static_cast<const T*>(lse), scale, static_cast<S*>(dlogits), rows, V, start,
              ignore_index);
        });
      });
    });
  });
}

}  // namespace merak::cuda_kernels::tp
