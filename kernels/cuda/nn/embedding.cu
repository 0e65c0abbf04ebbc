// embedding (a row gather) and embedding_grad (a scatter-add made deterministic by sorting).
// The gradient sorts 64-bit keys (id << 32 | position) with CUB's radix sort, so every id's
// positions end up together and in increasing order; one block per run of equal ids then adds
// those dy rows in that order, in f32, and stores each dweight element once. Rows no id names
// stay zero. Nothing depends on scheduling, and no floating-point atomics are used.
#include "kernels/cuda/nn/embedding.h"

#include <cub/device/device_radix_sort.cuh>

#include "kernels/cuda/nn/reduce.cuh"

namespace merak::cuda_kernels::nn {
namespace {

template <typename S, typename I, int G>
__global__ void embedding_rows(const S* w, const I* ids, S* out, int64_t n, int64_t V,
                               int64_t D) {
  using R = RowGroup<G>;
  for (int64_t r = R::first_row(); r < n; r += R::row_step()) {
    const int64_t id = int64_t(ids[r]);
    S* o = out + r * D;
    if (id >= 0 && id < V) {
      const S* src = w + id * D;
      for (int64_t c = R::lane(); c < D; c += G) o[c] = src[c];
    } else {
      for (int64_t c = R::lane(); c < D; c += G) o[c] = Storage<S>::store(NAN);
    }
  }
}

// Keys of the sort: the id (V for one out of range, which sorts last and is skipped) above
// the position.
template <typename I>
__global__ void embedding_keys(const I* ids, uint64_t* keys, int64_t n, int64_t V) {
  for (int64_t r = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; r < n;
       r += int64_t(gridDim.x) * blockDim.x) {
    const int64_t id = int64_t(ids[r]);
    const uint64_t row = id >= 0 && id < V ? uint64_t(id) : uint64_t(V);
    keys[r] = (row << 32) | uint64_t(r);
  }
}

// Block p handles sorted position p when it starts a run of equal ids: its threads take columns
// and each sums the run's dy rows in position order.
template <typename S>
__global__ void embedding_grad_runs(const S* dy, const uint64_t* sorted, S* dw, int64_t n,
                                    int64_t V, int64_t D) {
  for (int64_t p = blockIdx.x; p < n; p += gridDim.x) {
    const uint64_t id = sorted[p] >> 32;
    if (id >= uint64_t(V)) continue;                     // out-of-range ids (all at the end)
    if (p > 0 && (sorted[p - 1] >> 32) == id) continue;  // not the start of its run
    int64_t end = p + 1;
    while (end < n && (sorted[end] >> 32) == id) ++end;
    for (int64_t c = threadIdx.x; c < D; c += blockDim.x) {
      float acc = 0.f;
      for (int64_t q = p; q < end; ++q)
        acc += Storage<S>::load(dy[int64_t(sorted[q] & 0xffffffffu) * D + c]);
      dw[int64_t(id) * D + c] = Storage<S>::store(acc);
    }
  }
}

// Bits of the sort keys: 32 for the position, and enough for ids 0..V.
int key_bits(int64_t V) {
  int bits = 1;
  while (bits < 32 && (uint64_t(1) << bits) <= uint64_t(V)) ++bits;
  return 32 + bits;
}

int64_t align256(int64_t bytes) { return (bytes + 255) / 256 * 256; }

size_t sort_temp_bytes(int64_t n, int64_t V) {
  size_t bytes = 0;
  cub::DeviceRadixSort::SortKeys(nullptr, bytes, static_cast<const uint64_t*>(nullptr),
                                 static_cast<uint64_t*>(nullptr), int(n), 0, key_bits(V));
  return bytes;
}

}  // namespace

void launch_embedding(const void* weight, const void* ids, void* out, int64_t n, int64_t V,
                      int64_t D, int elem, int index, cudaStream_t stream) {
  if (n * D == 0) return;
  with_storage(elem, [&]<typename S>() {
    with_index(index, [&]<typename I>() {
      with_row_group(D, [&]<int G>() {
        embedding_rows<S, I, G><<<RowGroup<G>::grid(n), kThreads, 0, stream>>>(
            static_cast<const S*>(weight), static_cast<const I*>(ids), static_cast<S*>(out), n, V,
            D);
      });
    });
  });
}

int64_t embedding_grad_scratch_bytes(int64_t n, int64_t V) {
  if (n == 0) return 0;
  return 2 * align256(n * int64_t(sizeof(uint64_t))) + int64_t(sort_temp_bytes(n, V));
}

void launch_embedding_grad(const void* dy, const void* ids, void* dweight, int64_t n, int64_t V,
                           int64_t D, void* scratch, int elem, int index, cudaStream_t stream) {
  if (V * D == 0) return;
  const int64_t elem_bytes = elem == 0 ? 4 : 2;
  cudaMemsetAsync(dweight, 0, size_t(V * D * elem_bytes), stream);  // all-zero bits: 0 in every dtype
  if (n == 0) return;
  char* base = static_cast<char*>(scratch);
  uint64_t* keys = reinterpret_cast<uint64_t*>(base);
  uint64_t* sorted = reinterpret_cast<uint64_t*>(base + align256(n * int64_t(sizeof(uint64_t))));
  void* temp = base + 2 * align256(n * int64_t(sizeof(uint64_t)));
  size_t temp_bytes = sort_temp_bytes(n, V);
  with_index(index, [&]<typename I>() {
    embedding_keys<I><<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const I*>(ids), keys, n,
                                                              V);
  });
  cub::DeviceRadixSort::SortKeys(temp, temp_bytes, keys, sorted, int(n), 0, key_bits(V), stream);
  const int threads = D >= kThreads ? kThreads : int((D + 31) / 32 * 32);
  with_storage(elem, [&]<typename S>() {
    embedding_grad_runs<S><<<grid_for(n, 1), threads, 0, stream>>>(
        static_cast<const S*>(dy), sorted, static_cast<S*>(dweight), n, V, D);
  });
}

}  // namespace merak::cuda_kernels::nn
