// Pieces of parameters: what one data-parallel replica updates when the update is split over
// the replicas (ZeRO-1's segments, or its segments of the buckets when they share parameters).
// The parameters are laid end to end, flattened, in some order; a member owns a range of that
// layout, which cuts it into pieces of whole or partial parameters.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "merak/optim/adamw.h"

namespace merak::runtime {

// Elements [begin, begin + length) of parameter `param`, flattened.
struct ParamPiece {
  size_t param;
  int64_t begin, length;
};

// Appends to *out the pieces of range [lo, hi) of `params` laid end to end in `order`, the
// first starting at `start`. Returns where the last one ends.
int64_t append_pieces(const std::vector<optim::Param>& params, const std::vector<size_t>& order,
                      int64_t start, int64_t lo, int64_t hi, std::vector<ParamPiece>* out);

// A view of a piece's elements of `whole` (its parameter, or that parameter's gradient).
Tensor piece_of(const Tensor& whole, const ParamPiece& piece);

// One run of a parameter's optimizer state, for checkpoints: elements [begin, begin + length) of
// parameter `param` flattened, and the AdamW moments of those elements (f32 views).
struct OptimizerSlice {
  size_t param;
  int64_t begin, length;
  Tensor exp_avg, exp_avg_sq;
};

// `adamw`'s moments as slices: its i-th tensor is pieces[i] of the engine's parameters (the
// engine makes the moments when it starts).
std::vector<OptimizerSlice> optimizer_slices(const optim::AdamW& adamw,
                                             const std::vector<ParamPiece>& pieces);

// AdamW over the pieces of `params` (each a view, with its parameter's name and decay); the
// views go to *values, in order, for the caller to give gradients.
std::unique_ptr<optim::AdamW> piece_adamw(const std::vector<optim::Param>& params,
                                          const std::vector<ParamPiece>& pieces,
                                          optim::AdamWOptions options,
                                          std::vector<Tensor>* values);

}  // namespace merak::runtime
