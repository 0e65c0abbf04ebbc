// Where a tensor-parallel rank's piece of dropout's input lies in the unsplit tensor, so that the
// rank draws the masks the unsplit run draws (dropout keys element i's draw by its index).
// Plain constexpr code: the CPU kernel and the CUDA kernel (nvcc's relaxed constexpr) share it.
#pragma once

#include <cstdint>

namespace merak::ops {

// x viewed as [outer, local, inner] around the split dim holds `local` of the unsplit tensor's
// `size` indices there, in local / run equal runs: run j starts at j * gap + start, where gap is
// size / runs (a fused QKV split: one run in each of Q, K and V). size 0: x is whole.
// `offset`: where the unsplit tensor starts in the global batch's (its first sample's first
// element), so that a sample draws the same masks in any micro-batch.
struct DropoutPiece {
  int64_t inner = 1, local = 0, size = 0, start = 0, run = 0, gap = 0, offset = 0;

  constexpr bool whole() const { return size == 0; }
  // The global batch's element index of x's element i.
  constexpr int64_t global(int64_t i) const {
    if (size == 0) return offset + i;
    const int64_t k = i % inner, row = i / inner;
    const int64_t d = row % local, o = row / local;
    return offset + (o * size + (d / run) * gap + start + d % run) * inner + k;
  }
  // How many elements from i on (before n) have consecutive unsplit indices: to the end of i's
  // run (its rows of inner elements lie back to back in the unsplit tensor too).
  constexpr int64_t consecutive(int64_t i, int64_t n) const {
    if (size == 0) return n - i;
    const int64_t k = i % inner, d = (i / inner) % local;
    const int64_t left = (run - d % run) * inner - k;
    return left < n - i ? left : n - i;
  }
};

}  // namespace merak::ops
