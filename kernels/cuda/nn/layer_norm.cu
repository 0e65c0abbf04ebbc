// layer_norm and layer_norm_grad. Forward: a warp or block per row, two passes (mean, then
// squared deviations) as on the CPU, which avoids E[x^2] - E[x]^2 cancellation.
// Backward: dx per row likewise; dweight and dbias are column sums over all rows, taken per
// fixed chunk of rows (partials in f32 scratch) and then over the chunks in order - the same
// order on every run and every GPU, without atomics.
// mean and rstd are f32 whatever the element type (op_util.h's stat_dtype: f32 for f32, bf16
// and f16, the types these kernels take), so the backward reads them unrounded.
#include "kernels/cuda/nn/layer_norm.h"

#include "kernels/cuda/nn/reduce.cuh"

namespace merak::cuda_kernels::nn {
namespace {

template <typename S, int G>
__global__ void layer_norm_rows(const S* x, const S* w, const S* b, float eps, S* y,
                                float* mean, float* rstd, int64_t rows, int64_t D) {
  using R = RowGroup<G>;
  using St = Storage<S>;
  for (int64_t r = R::first_row(); r < rows; r += R::row_step()) {
    const S* xr = x + r * D;
    S* yr = y + r * D;
    float s = 0.f;
    for (int64_t i = R::lane(); i < D; i += G) s += St::load(xr[i]);
    const float m = R::reduce(s, Add()) / float(D);
    float q = 0.f;
    for (int64_t i = R::lane(); i < D; i += G) {
      const float d = St::load(xr[i]) - m;
      q += d * d;
    }
    const float rs = 1.f / sqrtf(R::reduce(q, Add()) / float(D) + eps);
    if (R::lane() == 0) {
      mean[r] = m;
      rstd[r] = rs;
    }
    for (int64_t i = R::lane(); i < D; i += G) {
      float v = (St::load(xr[i]) - m) * rs;
      if (w) v *= St::load(w[i]);
      if (b) v += St::load(b[i]);
      yr[i] = St::store(v);
    }
  }
}

// With xhat = (x - mean) * rstd and g = dy * weight:
//   dx = rstd * (g - mean(g) - xhat * mean(g * xhat)).
template <typename S, int G>
__global__ void layer_norm_grad_rows(const S* dy, const S* x, const S* w, const float* mean,
                                     const float* rstd, S* dx, int64_t rows, int64_t D) {
  using R = RowGroup<G>;
  using St = Storage<S>;
  for (int64_t r = R::first_row(); r < rows; r += R::row_step()) {
    const int64_t base = r * D;
    const float m = mean[r], rs = rstd[r];
    float2 acc = {0.f, 0.f};  // sum g, sum g * xhat
    for (int64_t i = R::lane(); i < D; i += G) {
      const float xhat = (St::load(x[base + i]) - m) * rs;
      const float g = w ? St::load(dy[base + i]) * St::load(w[i]) : St::load(dy[base + i]);
      acc.x += g;
      acc.y += g * xhat;
    }
    acc = R::reduce(acc, Add());
    const float g_mean = acc.x / float(D), gx_mean = acc.y / float(D);
    for (int64_t i = R::lane(); i < D; i += G) {
      const float xhat = (St::load(x[base + i]) - m) * rs;
      const float g = w ? St::load(dy[base + i]) * St::load(w[i]) : St::load(dy[base + i]);
      dx[base + i] = St::store(rs * (g - g_mean - xhat * gx_mean));
    }
  }
}

// dweight / dbias partials: block (chunk, column tile) sums rows [chunk * kChunkRows, ...) of
// 32 columns; its 8 thread rows take every 8th row and are added in order at the end.
constexpr int64_t kChunkRows = 64;
constexpr int kTileCols = 32, kTileRows = 8;

template <typename S>
__global__ void layer_norm_param_partials(const S* dy, const S* x, const float* mean,
                                          const float* rstd, float* partial, int64_t rows,
                                          int64_t D) {
  using St = Storage<S>;
  const int tx = threadIdx.x % kTileCols, ty = threadIdx.x / kTileCols;
  const int64_t chunk = blockIdx.x;
  const int64_t c = int64_t(blockIdx.y) * kTileCols + tx;
  const int64_t r_end = min(rows, (chunk + 1) * kChunkRows);
  float dw = 0.f, db = 0.f;
  if (c < D) {
    for (int64_t r = chunk * kChunkRows + ty; r < r_end; r += kTileRows) {
      const float g = St::load(dy[r * D + c]);
      dw += g * ((St::load(x[r * D + c]) - mean[r]) * rstd[r]);
      db += g;
    }
  }
  __shared__ float sdw[kTileRows][kTileCols + 1], sdb[kTileRows][kTileCols + 1];
  sdw[ty][tx] = dw;
  sdb[ty][tx] = db;
  __syncthreads();
  if (ty == 0 && c < D) {
    for (int k = 1; k < kTileRows; ++k) {
      dw += sdw[k][tx];
      db += sdb[k][tx];
    }
    partial[(2 * chunk) * D + c] = dw;
    partial[(2 * chunk + 1) * D + c] = db;
  }
}

template <typename S>
__global__ void layer_norm_param_sums(const float* partial, S* dweight, S* dbias, int64_t chunks,
                                      int64_t D) {
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < D;
       c += int64_t(gridDim.x) * blockDim.x) {
    float dw = 0.f, db = 0.f;
    for (int64_t k = 0; k < chunks; ++k) {
      dw += partial[(2 * k) * D + c];
      db += partial[(2 * k + 1) * D + c];
    }
    dweight[c] = Storage<S>::store(dw);
    dbias[c] = Storage<S>::store(db);
  }
}

int64_t chunks_of(int64_t rows) { return (rows + kChunkRows - 1) / kChunkRows; }

}  // namespace

void launch_layer_norm(const void* x, const void* weight, const void* bias, float eps, void* y,
                       float* mean, float* rstd, int64_t rows, int64_t D, int elem,
                       cudaStream_t stream) {
  if (rows * D == 0) return;
  with_storage(elem, [&]<typename S>() {
    with_row_group(D, [&]<int G>() {
      layer_norm_rows<S, G><<<RowGroup<G>::grid(rows), kThreads, 0, stream>>>(
          static_cast<const S*>(x), static_cast<const S*>(weight), static_cast<const S*>(bias),
          eps, static_cast<S*>(y), mean, rstd, rows, D);
    });
  });
}

int64_t layer_norm_grad_scratch_bytes(int64_t rows, int64_t D) {
  return chunks_of(rows) * 2 * D * int64_t(sizeof(float));
}

void launch_layer_norm_grad(const void* dy, const void* x, const void* weight, const float* mean,
                            const float* rstd, void* dx, void* dweight, void* dbias, int64_t rows,
                            int64_t D, void* scratch, int elem, cudaStream_t stream) {
  if (D == 0) return;
  with_storage(elem, [&]<typename S>() {
    const S* dys = static_cast<const S*>(dy);
    const S* xs = static_cast<const S*>(x);
    float* partial = static_cast<float*>(scratch);
    const int64_t chunks = chunks_of(rows);
    if (rows > 0) {
      with_row_group(D, [&]<int G>() {
        layer_norm_grad_rows<S, G><<<RowGroup<G>::grid(rows), kThreads, 0, stream>>>(
            dys, xs, static_cast<const S*>(weight), mean, rstd, static_cast<S*>(dx), rows, D);
      });
      const dim3 grid(unsigned(chunks), unsigned((D + kTileCols - 1) / kTileCols));
      layer_norm_param_partials<S><<<grid, kTileCols * kTileRows, 0, stream>>>(
          dys, xs, mean, rstd, partial, rows, D);
    }
    // With no rows there are no chunks, and the sums are zeros.
    layer_norm_param_sums<S><<<blocks_for(D), kThreads, 0, stream>>>(
        partial, static_cast<S*>(dweight), static_cast<S*>(dbias), chunks, D);
  });
}

}  // namespace merak::cuda_kernels::nn
