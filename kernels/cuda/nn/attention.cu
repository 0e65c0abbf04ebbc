// Scaled dot-product attention, flash-attention style: a block works on a T x T tile of scores
// at a time, in shared memory, so no Tq x Tk matrix is ever written to global memory.
//
// Forward: a block owns T query rows of one head and walks the key tiles, keeping the running
// max m and sum l of every row (online softmax) and the unnormalised output in registers; at
// the end out = O / l and lse = m + log l.
// Backward, with P = exp(scale q k^T - lse) recomputed per tile, M dropout's factors (1
// without dropout) and dS = P * (M dO v^T - delta), delta = rowsum(dO * out):
//   dV = (P M)^T dO and dK = scale dS^T Q, by a block per key tile walking the query tiles;
//   dQ = scale dS K, by a block per query tile walking the key tiles.
// Each gradient element is summed by one thread in a fixed order: no atomics, deterministic.
//
// Everything is computed in f32 on CUDA cores (tiles are stored in shared memory as f32), and
// lse is stored in f32 whatever the element type (op_util.h's stat_dtype), as flash attention
// keeps it: the backward exponentiates scores against it. A
// block is 256 threads in a 16 x 16 grid (ty, tx); in every tile, of scores or of outputs,
// thread (ty, tx) owns rows ty * R + u and columns tx + 16 c.
// Shared rows are padded to an odd length so that the column walks are free of bank conflicts.
#include "kernels/cuda/nn/attention.h"

#include "kernels/cuda/elementwise/philox.cuh"
#include "kernels/cuda/nn/reduce.cuh"

namespace merak::cuda_kernels::nn {
namespace {

constexpr int kAttnThreads = 256;

// Tile sizes (query rows = keys per tile) by head-dim bound, chosen so that shared memory stays
// under an A100's 163 KiB and the per-thread accumulators in registers.
template <int kMaxDim>
constexpr int forward_tile() { return kMaxDim <= 128 ? 64 : 32; }
template <int kMaxDim>
constexpr int backward_tile() { return kMaxDim <= 64 ? 64 : 32; }

__host__ __device__ inline int padded(int64_t n) { return int(n | 1); }

// Floats of shared memory. Forward: Q, K, V tiles, scores, and per row m, l and the rescale.
// Backward (the key-tile kernel; the query-tile one needs less): K, V, Q, dO tiles, P, dS, and
// per row lse and delta.
int64_t forward_floats(int T, int64_t D, int64_t Dv) {
  return int64_t(T) * (2 * padded(D) + padded(Dv) + (T + 1) + 3);
}
int64_t backward_floats(int T, int64_t D, int64_t Dv) {
  return int64_t(T) * (2 * padded(D) + 2 * padded(Dv) + 2 * (T + 1) + 2);
}

template <typename F>
void with_head_dim(int64_t dim, F&& f) {
  if (dim <= 64) f.template operator()<64>();
  else if (dim <= 128) f.template operator()<128>();
  else f.template operator()<256>();
}

int64_t max_dim(const AttnShape& p) { return p.D > p.Dv ? p.D : p.Dv; }

// ---- device pieces ------------------------------------------------------------------------

// Keys [0, visible(i)) are the ones query row i may see before the padding mask.
__device__ inline int64_t visible(const AttnShape& p, int64_t i) {
  if (!p.causal) return p.Tk;
  const int64_t n = i + p.Tk - p.Tq + 1;
  return n < 0 ? 0 : (n > p.Tk ? p.Tk : n);
}

// Whether query row i attends key j; keep is the head's [Tk] mask row, or null.
__device__ inline bool attends(const AttnShape& p, const uint8_t* keep, int64_t i, int64_t j) {
  return j < visible(p, i) && (keep == nullptr || keep[j] != 0);
}

// Dropout's draws (AttnShape's): the block of query rows [4q, 4q + 4) and key j of head bh is
// Philox(key, base(bh) + q * Tk + j, stream), its word i % 4 that of row i. A thread's R rows
// (ty * R + u, R = 2 or 4, tiles starting at multiples of 32) lie in one such group of four, so a
// thread draws one block per key column and reads a word per row.
__device__ inline uint64_t dropout_base(const AttnShape& p, int64_t bh) {
  const int64_t head = (p.first_row + bh / p.H) * p.heads + p.head_start + bh % p.H;
  return uint64_t(head * ((p.Tq + 3) / 4) * p.Tk);
}
__device__ inline PhiloxBlock dropout_block(const AttnShape& p, uint64_t base, int64_t i,
                                            int64_t j) {
  return philox_at(p.key, base + uint64_t((i / 4) * p.Tk + j), p.stream);
}
// Row i's keep factor in block b: keep_scale or 0.
__device__ inline float keep_factor(const AttnShape& p, const PhiloxBlock& b, int64_t i) {
  const int w = int(i & 3);
  const uint32_t bits = w == 0 ? b.v[0] : w == 1 ? b.v[1] : w == 2 ? b.v[2] : b.v[3];
  return (bits >> 8) >= p.threshold ? p.keep_scale : 0.f;
}

// Rows [row0, row0 + rows) of a row-major [total_rows, width] matrix into dst [rows][ld] as f32,
// rows past the end as zeros (so padding rows and keys add nothing, and never NaN).
template <typename S>
__device__ void load_tile(float* dst, int ld, const S* src, int64_t row0, int rows,
                          int64_t total_rows, int64_t width) {
  const int w = int(width);
  for (int idx = threadIdx.x; idx < rows * w; idx += blockDim.x) {
    const int r = idx / w, c = idx - r * w;
    dst[r * ld + c] = row0 + r < total_rows ? Storage<S>::load(src[(row0 + r) * width + c]) : 0.f;
  }
}

// acc[u][c] = sum_{d < len} A[(a0 + u) * lda + d] * B[(tx + 16 c) * ldb + d]: R rows of A
// against rows tx, tx + 16, ... of B.
template <int R, int C>
__device__ void dot_tile(float (&acc)[R][C], const float* A, int lda, int a0, const float* B,
                         int ldb, int tx, int len) {
#pragma unroll
  for (int u = 0; u < R; ++u)
#pragma unroll
    for (int c = 0; c < C; ++c) acc[u][c] = 0.f;
  for (int d = 0; d < len; ++d) {
    float a[R], b[C];
#pragma unroll
    for (int u = 0; u < R; ++u) a[u] = A[(a0 + u) * lda + d];
#pragma unroll
    for (int c = 0; c < C; ++c) b[c] = B[(tx + 16 * c) * ldb + d];
#pragma unroll
    for (int u = 0; u < R; ++u)
#pragma unroll
      for (int c = 0; c < C; ++c) acc[u][c] = fmaf(a[u], b[c], acc[u][c]);
  }
}

// acc[u][c] += sum_{t < len} A[(a0 + u) * a_row + t * a_step] * B[t * ldb + tx + 16 c]: a product
// whose A is read by rows (a_step 1) or by columns (a_row 1). Columns of B at or past `width`
// read column width - 1 instead (in bounds); their results are never stored.
template <int R, int C>
__device__ void mma_tile(float (&acc)[R][C], const float* A, int a_row, int a_step, int a0,
                         const float* B, int ldb, int tx, int width, int len) {
  const int last = width > 0 ? width - 1 : 0;
  int col[C];
#pragma unroll
  for (int c = 0; c < C; ++c) col[c] = min(tx + 16 * c, last);
  for (int t = 0; t < len; ++t) {
    float a[R], b[C];
#pragma unroll
    for (int u = 0; u < R; ++u) a[u] = A[(a0 + u) * a_row + t * a_step];
#pragma unroll
    for (int c = 0; c < C; ++c) b[c] = B[t * ldb + col[c]];
#pragma unroll
    for (int u = 0; u < R; ++u)
#pragma unroll
      for (int c = 0; c < C; ++c) acc[u][c] = fmaf(a[u], b[c], acc[u][c]);
  }
}

// Stores rows [row0, ...) of a thread's R x C output tile into a [rows, width] matrix, times
// `scale`: row ty * R + u, column tx + 16 c.
template <typename S, int R, int C>
__device__ void store_tile(S* dst, const float (&acc)[R][C], int64_t row0, int64_t rows,
                           int64_t width, float scale, int ty, int tx) {
#pragma unroll
  for (int u = 0; u < R; ++u) {
    const int64_t r = row0 + ty * R + u;
    if (r >= rows) continue;
#pragma unroll
    for (int c = 0; c < C; ++c) {
      const int64_t col = tx + 16 * c;
      if (col < width) dst[r * width + col] = Storage<S>::store(acc[u][c] * scale);
    }
  }
}

// The backward's tile of probabilities and score gradients, queries i0 + [0, T) against keys
// j0 + [0, T): P = exp(scale q.k - lse) and dS = P * (M dO.v - delta) where the query attends
// the key (and its row attends any key), else 0, M being dropout's factor (1 without). Writes
// dS, and the dropped probabilities P M when sP is set.
template <int T>
__device__ void probs_and_grads(const AttnShape& p, int64_t bh, const uint8_t* keep, int64_t i0,
                                int64_t j0,
                                const float* sQ, const float* sK, const float* sdO,
                                const float* sV, const float* sLse, const float* sDelta,
                                float* sP, float* sdS) {
  constexpr int R = T / 16;
  static_assert(4 % R == 0, "a thread's rows must lie in one of dropout's groups of four");
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  const int ldqk = padded(p.D), ldv = padded(p.Dv), lds = T + 1;
  float s[R][R], dp[R][R];
  dot_tile(s, sQ, ldqk, ty * R, sK, ldqk, tx, int(p.D));
  dot_tile(dp, sdO, ldv, ty * R, sV, ldv, tx, int(p.Dv));
  PhiloxBlock drawn[R];  // dropout's block of each of the thread's key columns
  if (p.dropout) {
    const uint64_t base = dropout_base(p, bh);
#pragma unroll
    for (int c = 0; c < R; ++c) drawn[c] = dropout_block(p, base, i0 + ty * R, j0 + tx + 16 * c);
  }
#pragma unroll
  for (int u = 0; u < R; ++u) {
    const int il = ty * R + u;
    const float lse = sLse[il];
#pragma unroll
    for (int c = 0; c < R; ++c) {
      const int jl = tx + 16 * c;
      float pr = 0.f, ds = 0.f;
      if (lse != -INFINITY && attends(p, keep, i0 + il, j0 + jl)) {
        const float m = p.dropout ? keep_factor(p, drawn[c], i0 + il) : 1.f;
        pr = expf(s[u][c] * p.scale - lse);
        ds = pr * (dp[u][c] * m - sDelta[il]);
        pr *= m;
      }
      if (sP) sP[il * lds + jl] = pr;
      sdS[il * lds + jl] = ds;
    }
  }
}

// ---- forward ------------------------------------------------------------------------------

template <typename S, int kMaxDim>
__global__ void __launch_bounds__(kAttnThreads)
    sdpa_forward_kernel(AttnShape p, const S* q, const S* k, const S* v, const uint8_t* mask,
                        S* out, float* lse) {
  constexpr int T = forward_tile<kMaxDim>();
  constexpr int R = T / 16, CD = kMaxDim / 16;
  static_assert(4 % R == 0, "a thread's rows must lie in one of dropout's groups of four");
  constexpr int kRowThreads = kAttnThreads / T;  // threads sharing a row in the softmax step
  const int tid = threadIdx.x, ty = tid / 16, tx = tid % 16;
  const int64_t q_tiles = (p.Tq + T - 1) / T;
  const int64_t bh = blockIdx.x / q_tiles, i0 = (blockIdx.x % q_tiles) * T;
  const int ldqk = padded(p.D), ldv = padded(p.Dv), lds = T + 1;

  extern __shared__ float smem[];
  float* sQ = smem;
  float* sK = sQ + T * ldqk;
  float* sV = sK + T * ldqk;
  float* sS = sV + T * ldv;
  float* sM = sS + T * lds;  // running max of each row
  float* sL = sM + T;        // running sum of exp(s - m)
  float* sA = sL + T;        // this tile's rescale of the row's accumulators

  const S* kh = k + bh * p.Tk * p.D;
  const S* vh = v + bh * p.Tk * p.Dv;
  const uint8_t* keep = mask ? mask + (bh / p.H) * p.Tk : nullptr;

  load_tile(sQ, ldqk, q + bh * p.Tq * p.D, i0, T, p.Tq, p.D);
  for (int r = tid; r < T; r += kAttnThreads) {
    sM[r] = -INFINITY;
    sL[r] = 0.f;
  }
  float o[R][CD];
#pragma unroll
  for (int u = 0; u < R; ++u)
#pragma unroll
    for (int c = 0; c < CD; ++c) o[u][c] = 0.f;
  // Keys past what the tile's last row sees are masked for every row: skip their tiles.
  const int64_t kn = visible(p, (i0 + T < p.Tq ? i0 + T : p.Tq) - 1);
  __syncthreads();

  for (int64_t j0 = 0; j0 < kn; j0 += T) {
    load_tile(sK, ldqk, kh, j0, T, p.Tk, p.D);
    load_tile(sV, ldv, vh, j0, T, p.Tk, p.Dv);
    __syncthreads();

    {  // scores, -inf where masked
      float s[R][R];
      dot_tile(s, sQ, ldqk, ty * R, sK, ldqk, tx, int(p.D));
#pragma unroll
      for (int u = 0; u < R; ++u)
#pragma unroll
        for (int c = 0; c < R; ++c) {
          const int il = ty * R + u, jl = tx + 16 * c;
          sS[il * lds + jl] = attends(p, keep, i0 + il, j0 + jl) ? s[u][c] * p.scale : -INFINITY;
        }
    }
    __syncthreads();

    {  // online softmax: new max, scores -> exp(s - m), rescale of what came before
      const int row = tid / kRowThreads, part = tid % kRowThreads;
      float* srow = sS + row * lds;
      const float m_old = sM[row], l_old = sL[row];
      float mx = -INFINITY;
      for (int c = part; c < T; c += kRowThreads) mx = fmaxf(mx, srow[c]);
#pragma unroll
      for (int o = kRowThreads / 2; o > 0; o >>= 1) mx = fmaxf(mx, shfl_xor(mx, o));
      const float m_new = fmaxf(m_old, mx);
      float sum = 0.f;
      for (int c = part; c < T; c += kRowThreads) {
        const float e = srow[c] == -INFINITY ? 0.f : expf(srow[c] - m_new);
        srow[c] = e;
        sum += e;
      }
#pragma unroll
      for (int o = kRowThreads / 2; o > 0; o >>= 1) sum += shfl_xor(sum, o);
      __syncwarp();  // every lane of the row has read m_old and l_old
      if (part == 0) {
        const float alpha = m_old == -INFINITY ? 0.f : expf(m_old - m_new);
        sM[row] = m_new;
        sL[row] = l_old * alpha + sum;
        sA[row] = alpha;
      }
    }
    __syncthreads();

    if (p.dropout) {  // the sums above are of every key; P V takes the dropped probabilities
      const uint64_t base = dropout_base(p, bh);
#pragma unroll
      for (int c = 0; c < R; ++c) {
        const int jl = tx + 16 * c;
        const PhiloxBlock drawn = dropout_block(p, base, i0 + ty * R, j0 + jl);
#pragma unroll
        for (int u = 0; u < R; ++u) {
          const int il = ty * R + u;
          sS[il * lds + jl] *= keep_factor(p, drawn, i0 + il);
        }
      }
      __syncthreads();
    }

#pragma unroll
    for (int u = 0; u < R; ++u) {
      const float alpha = sA[ty * R + u];
#pragma unroll
      for (int c = 0; c < CD; ++c) o[u][c] *= alpha;
    }
    mma_tile(o, sS, lds, 1, ty * R, sV, ldv, tx, int(p.Dv), T);  // O += P V
    __syncthreads();
  }

  // out = O / l; a row that attends nothing gets zeros and lse -inf (as on the CPU).
#pragma unroll
  for (int u = 0; u < R; ++u) {
    const int il = ty * R + u;
    const int64_t i = i0 + il;
    if (i >= p.Tq) continue;
    const bool empty = sM[il] == -INFINITY;
    const float inv = empty ? 0.f : 1.f / sL[il];
#pragma unroll
    for (int c = 0; c < CD; ++c) o[u][c] *= inv;
    if (tx == 0) lse[bh * p.Tq + i] = empty ? -INFINITY : sM[il] + logf(sL[il]);
  }
  store_tile(out + bh * p.Tq * p.Dv, o, i0, p.Tq, p.Dv, 1.f, ty, tx);
}

// ---- backward -----------------------------------------------------------------------------

// delta[r] = dO[r] . out[r], one warp per row.
template <typename S>
__global__ void sdpa_delta(const S* dout, const S* out, float* delta, int64_t rows, int64_t Dv) {
  using R = RowGroup<32>;
  for (int64_t r = R::first_row(); r < rows; r += R::row_step()) {
    float s = 0.f;
    for (int64_t c = R::lane(); c < Dv; c += 32)
      s += Storage<S>::load(dout[r * Dv + c]) * Storage<S>::load(out[r * Dv + c]);
    s = R::reduce(s, Add());
    if (R::lane() == 0) delta[r] = s;
  }
}

// Loads query rows i0 + [0, T) of one head: Q and dO tiles, lse (-inf past the end) and delta.
template <typename S, int T>
__device__ void load_query_tile(const AttnShape& p, const S* qh, const S* doh, const float* lseh,
                                const float* deltah, int64_t i0, float* sQ, float* sdO,
                                float* sLse, float* sDelta) {
  load_tile(sQ, padded(p.D), qh, i0, T, p.Tq, p.D);
  load_tile(sdO, padded(p.Dv), doh, i0, T, p.Tq, p.Dv);
  for (int r = threadIdx.x; r < T; r += blockDim.x) {
    const int64_t i = i0 + r;
    sLse[r] = i < p.Tq ? lseh[i] : -INFINITY;
    sDelta[r] = i < p.Tq ? deltah[i] : 0.f;
  }
}

// dK and dV of T keys of one head.
template <typename S, int kMaxDim>
__global__ void __launch_bounds__(kAttnThreads)
    sdpa_dkdv_kernel(AttnShape p, const S* q, const S* k, const S* v, const uint8_t* mask,
                     const S* dout, const float* lse, const float* delta, S* dk, S* dv) {
  constexpr int T = backward_tile<kMaxDim>();
  constexpr int R = T / 16, CD = kMaxDim / 16;
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  const int64_t k_tiles = (p.Tk + T - 1) / T;
  const int64_t bh = blockIdx.x / k_tiles, j0 = (blockIdx.x % k_tiles) * T;
  const int ldqk = padded(p.D), ldv = padded(p.Dv), lds = T + 1;

  extern __shared__ float smem[];
  float* sK = smem;
  float* sV = sK + T * ldqk;
  float* sQ = sV + T * ldv;
  float* sdO = sQ + T * ldqk;
  float* sP = sdO + T * ldv;
  float* sdS = sP + T * lds;
  float* sLse = sdS + T * lds;
  float* sDelta = sLse + T;

  const S* qh = q + bh * p.Tq * p.D;
  const S* doh = dout + bh * p.Tq * p.Dv;
  const float* lseh = lse + bh * p.Tq;
  const float* deltah = delta + bh * p.Tq;
  const uint8_t* keep = mask ? mask + (bh / p.H) * p.Tk : nullptr;

  load_tile(sK, ldqk, k + bh * p.Tk * p.D, j0, T, p.Tk, p.D);
  load_tile(sV, ldv, v + bh * p.Tk * p.Dv, j0, T, p.Tk, p.Dv);
  float dk_acc[R][CD], dv_acc[R][CD];
#pragma unroll
  for (int u = 0; u < R; ++u)
#pragma unroll
    for (int c = 0; c < CD; ++c) dk_acc[u][c] = dv_acc[u][c] = 0.f;

  // Causal: row i sees key j iff j <= i + Tk - Tq, so rows before j0 - (Tk - Tq) see none of
  // this tile's keys; their tiles are skipped.
  int64_t first = 0;
  if (p.causal) {
    first = j0 - (p.Tk - p.Tq);
    first = first < 0 ? 0 : first / T * T;
  }
  for (int64_t i0 = first; i0 < p.Tq; i0 += T) {
    load_query_tile<S, T>(p, qh, doh, lseh, deltah, i0, sQ, sdO, sLse, sDelta);
    __syncthreads();
    probs_and_grads<T>(p, bh, keep, i0, j0, sQ, sK, sdO, sV, sLse, sDelta, sP, sdS);
    __syncthreads();
    // Key rows j = ty * R + u: dV[j] += sum_i P[i][j] dO[i], dK[j] += sum_i dS[i][j] Q[i].
    mma_tile(dv_acc, sP, 1, lds, ty * R, sdO, ldv, tx, int(p.Dv), T);
    mma_tile(dk_acc, sdS, 1, lds, ty * R, sQ, ldqk, tx, int(p.D), T);
    __syncthreads();
  }
  store_tile(dk + bh * p.Tk * p.D, dk_acc, j0, p.Tk, p.D, p.scale, ty, tx);
  store_tile(dv + bh * p.Tk * p.Dv, dv_acc, j0, p.Tk, p.Dv, 1.f, ty, tx);
}

// dQ of T query rows of one head.
template <typename S, int kMaxDim>
__global__ void __launch_bounds__(kAttnThreads)
    sdpa_dq_kernel(AttnShape p, const S* q, const S* k, const S* v, const uint8_t* mask,
                   const S* dout, const float* lse, const float* delta, S* dq) {
  constexpr int T = backward_tile<kMaxDim>();
  constexpr int R = T / 16, CD = kMaxDim / 16;
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  const int64_t q_tiles = (p.Tq + T - 1) / T;
  const int64_t bh = blockIdx.x / q_tiles, i0 = (blockIdx.x % q_tiles) * T;
  const int ldqk = padded(p.D), ldv = padded(p.Dv), lds = T + 1;

  extern __shared__ float smem[];
  float* sQ = smem;
  float* sdO = sQ + T * ldqk;
  float* sK = sdO + T * ldv;
  float* sV = sK + T * ldqk;
  float* sdS = sV + T * ldv;
  float* sLse = sdS + T * lds;
  float* sDelta = sLse + T;

  const S* kh = k + bh * p.Tk * p.D;
  const S* vh = v + bh * p.Tk * p.Dv;
  const uint8_t* keep = mask ? mask + (bh / p.H) * p.Tk : nullptr;

  load_query_tile<S, T>(p, q + bh * p.Tq * p.D, dout + bh * p.Tq * p.Dv, lse + bh * p.Tq,
                        delta + bh * p.Tq, i0, sQ, sdO, sLse, sDelta);
  float dq_acc[R][CD];
#pragma unroll
  for (int u = 0; u < R; ++u)
#pragma unroll
    for (int c = 0; c < CD; ++c) dq_acc[u][c] = 0.f;
  const int64_t kn = visible(p, (i0 + T < p.Tq ? i0 + T : p.Tq) - 1);
  __syncthreads();

  for (int64_t j0 = 0; j0 < kn; j0 += T) {
    load_tile(sK, ldqk, kh, j0, T, p.Tk, p.D);
    load_tile(sV, ldv, vh, j0, T, p.Tk, p.Dv);
    __syncthreads();
    probs_and_grads<T>(p, bh, keep, i0, j0, sQ, sK, sdO, sV, sLse, sDelta, nullptr, sdS);
    __syncthreads();
    mma_tile(dq_acc, sdS, lds, 1, ty * R, sK, ldqk, tx, int(p.D), T);  // dQ[i] += sum_j dS[i][j] K[j]
    __syncthreads();
  }
  store_tile(dq + bh * p.Tq * p.D, dq_acc, i0, p.Tq, p.D, p.scale, ty, tx);
}

// Launches kernel<<<blocks, 256, smem_bytes>>>, first raising its dynamic shared-memory limit
// when it needs more than the default 48 KiB (an error there shows up in check_launch).
template <typename Kernel, typename... Args>
void launch_attn(Kernel kernel, int64_t blocks, int64_t smem_bytes, cudaStream_t stream,
                 Args... args) {
  if (smem_bytes > 48 * 1024)
    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem_bytes));
  kernel<<<unsigned(blocks), kAttnThreads, size_t(smem_bytes), stream>>>(args...);
}

}  // namespace

int64_t sdpa_forward_smem_bytes(const AttnShape& p) {
  int64_t floats = 0;
  with_head_dim(max_dim(p), [&]<int kMaxDim>() {
    floats = forward_floats(forward_tile<kMaxDim>(), p.D, p.Dv);
  });
  return floats * int64_t(sizeof(float));
}

int64_t sdpa_backward_smem_bytes(const AttnShape& p) {
  int64_t floats = 0;
  with_head_dim(max_dim(p), [&]<int kMaxDim>() {
    floats = backward_floats(backward_tile<kMaxDim>(), p.D, p.Dv);
  });
  return floats * int64_t(sizeof(float));
}

int64_t sdpa_backward_scratch_bytes(const AttnShape& p) {
  return p.B * p.H * p.Tq * int64_t(sizeof(float));
}

void launch_sdpa_forward(const AttnShape& p, const void* q, const void* k, const void* v,
                         const uint8_t* mask, void* out, float* lse, int elem,
                         cudaStream_t stream) {
  if (p.B * p.H * p.Tq == 0) return;
  const int64_t smem = sdpa_forward_smem_bytes(p);
  with_storage(elem, [&]<typename S>() {
    with_head_dim(max_dim(p), [&]<int kMaxDim>() {
      constexpr int T = forward_tile<kMaxDim>();
      launch_attn(sdpa_forward_kernel<S, kMaxDim>, p.B * p.H * ((p.Tq + T - 1) / T), smem, stream,
                  p, static_cast<const S*>(q), static_cast<const S*>(k), static_cast<const S*>(v),
                  mask, static_cast<S*>(out), lse);
    });
  });
}

void launch_sdpa_backward(const AttnShape& p, const void* dout, const void* q, const void* k,
                          const void* v, const uint8_t* mask, const void* out, const float* lse,
                          void* dq, void* dk, void* dv, void* scratch, int elem,
                          cudaStream_t stream) {
  if (p.B * p.H == 0) return;
  const int64_t smem = sdpa_backward_smem_bytes(p);
  float* delta = static_cast<float*>(scratch);
  with_storage(elem, [&]<typename S>() {
    const S* qs = static_cast<const S*>(q);
    const S* ks = static_cast<const S*>(k);
    const S* vs = static_cast<const S*>(v);
    const S* dos = static_cast<const S*>(dout);
    const int64_t rows = p.B * p.H * p.Tq;
    if (rows > 0)
      sdpa_delta<S><<<RowGroup<32>::grid(rows), kThreads, 0, stream>>>(
          dos, static_cast<const S*>(out), delta, rows, p.Dv);
    with_head_dim(max_dim(p), [&]<int kMaxDim>() {
      constexpr int T = backward_tile<kMaxDim>();
      // With no queries, dK and dV are zeros, which the key-tile kernel writes; with no keys,
      // dQ is, which the query-tile kernel writes.
      if (p.Tk > 0)
        launch_attn(sdpa_dkdv_kernel<S, kMaxDim>, p.B * p.H * ((p.Tk + T - 1) / T), smem, stream,
                    p, qs, ks, vs, mask, dos, lse, static_cast<const float*>(delta),
                    static_cast<S*>(dk), static_cast<S*>(dv));
      if (p.Tq > 0)
        launch_attn(sdpa_dq_kernel<S, kMaxDim>, p.B * p.H * ((p.Tq + T - 1) / T), smem, stream, p,
                    qs, ks, vs, mask, dos, lse, static_cast<const float*>(delta),
                    static_cast<S*>(dq));
    });
  });
}

}  // namespace merak::cuda_kernels::nn
