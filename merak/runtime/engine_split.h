// Sub-pipelined tensor parallelism: a schedule slot holds two of the plan's micro-batches side
// by side along the batch dimension; they are cut apart, run interleaved by the graph executor
// (Executor::run_parts), and the stage's outputs put back together with recorded ops, so
// backward hands each half its part of the gradients and walks the two halves interleaved too.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "merak/core/tensor.h"

namespace merak::runtime {

// Every input has the slot's batch as dim 0 (tokens [B, T], boundary activations [B, T, C]);
// B must be even and the same for all. Recorded, so gradients reach received activations.
std::vector<std::map<std::string, Tensor>> split_halves(const std::map<std::string, Tensor>& inputs,
                                                        int rank);

// The graph outputs for the whole slot: each concatenated along dim 0, except the loss (output
// `loss_output`), the sum of the two micro-batches' losses (each is seeded as one micro-batch).
std::vector<Tensor> join_halves(const std::vector<std::vector<Tensor>>& halves, int loss_output);


}  // namespace merak::runtime
