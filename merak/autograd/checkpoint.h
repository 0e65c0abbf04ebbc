// Recomputation (activation checkpointing): a segment runs without keeping its activations, and
// they are rebuilt by running it again, either when the backward reaches it or earlier through
// recompute() (the runtime overlaps that with a gradient receive). Dropout inside a segment
// re-derives the same mask from its Philox key, so the recomputation is exact.
#pragma once

#include <functional>
#include <vector>

#include "merak/core/tensor.h"

namespace merak::autograd {

using SegmentFn = std::function<std::vector<Tensor>(const std::vector<Tensor>& inputs)>;

// Runs fn(inputs) keeping only the inputs; the outputs carry one node that recomputes.
std::vector<Tensor> checkpoint(const SegmentFn& fn, const std::vector<Tensor>& inputs);

// Rebuilds the saved activations of the segment that produced `output` now, ahead of its
// backward. No-op when `output` does not come from checkpoint() or was already recomputed.
void recompute(const Tensor& output);

}  // namespace merak::autograd
