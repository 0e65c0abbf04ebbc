// Counter-based random numbers (Philox 4x32-10, Salmon et al. 2011). A value depends only on
// (key, element index, stream), so any slice of a tensor can be drawn alone and equals the same
// slice of the whole: the basis of layout-independent initialisation and re-derivable dropout.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <string_view>

#include "merak/core/tensor.h"

namespace merak {

// 64-bit key from a seed and a name (FNV-1a over the name, mixed with the seed).
uint64_t philox_key(uint64_t seed, std::string_view name);

// One Philox4x32-10 block: counter (c0..c3) under a 64-bit key.
std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> counter, uint64_t key);

// Element `index` of stream `stream`: counter = (index lo, index hi, stream lo, stream hi).
inline std::array<uint32_t, 4> philox_at(uint64_t key, uint64_t index, uint64_t stream = 0) {
  return philox4x32({uint32_t(index), uint32_t(index >> 32), uint32_t(stream),
                     uint32_t(stream >> 32)},
                    key);
}

// out[i] = philox_at(key, first + i, stream) for i < n: for kernels that draw a run of
// consecutive counters (eight blocks at a time in AVX2 registers where the CPU has them).
void philox_run(uint64_t key, uint64_t first, uint64_t stream, int64_t n,
                std::array<uint32_t, 4>* out);

// Uniform in [0, 1) from 24 random bits (exact in f32).
inline float uniform01(uint32_t bits) { return float(bits >> 8) * (1.0f / 16777216.0f); }
// Dropout keeps a draw when double(uniform01(bits)) >= p (p itself, not its f32 rounding, is the
// threshold): exactly when bits >> 8 >= keep_threshold(p), the scaling by 2^24 being exact. A
// kernel compares integers with it (at most 2^24 for p < 1).
inline uint32_t keep_threshold(double p) { return uint32_t(std::ceil(p * 16777216.0)); }
float philox_uniform(uint64_t key, uint64_t index, uint64_t stream = 0);
float philox_normal(uint64_t key, uint64_t index, uint64_t stream = 0);  // Box-Muller

// Where the micro-batch being computed draws its dropout masks: a trainer sets it before each
// micro-batch's forward, and recomputation restores what the forward saw, so recomputed masks
// are identical. Per thread. The engine gives every micro-batch of a step the step's stream and
// places it in the global batch (its first row and row count), so that each sample's masks are
// the same however the batch is cut into micro-batches; rows 0: not placed, masks follow the
// element's index in the tensor alone.
struct RngPlace {
  uint64_t stream = 0;
  int64_t first_row = 0, rows = 0;
};
RngPlace rng_place();
void set_rng_place(const RngPlace& place);
// The stream alone, not placed in a batch (eager models, tests).
uint64_t rng_stream();
void set_rng_stream(uint64_t stream);

// Where a tensor sits inside a larger one: element (i0, i1, ...) of the tensor is element
// (offsets[0] + i0, ...) of a tensor of `full_shape`, and is drawn with that global index.
// Empty full_shape means the tensor is the whole.
struct SliceOf {
  Shape full_shape;
  Shape offsets;
};

// Fill a contiguous floating tensor (f32, f64, bf16, f16) with draws keyed by `key`.
void fill_uniform(const Tensor& t, uint64_t key, double lo, double hi, const SliceOf& slice = {});
void fill_normal(const Tensor& t, uint64_t key, double mean, double stddev,
                 const SliceOf& slice = {});

}  // namespace merak
