// Sharding rules that many ops share, for their registry entries (the types are in registry.h).
#pragma once

#include <cstdint>
#include <vector>

#include "merak/ops/registry.h"

namespace merak::ops {

// For each dim d of the first input except `except` (-1: none): every defined input and every
// one of `outputs` outputs split along d. Ops that treat each position alike along d.
std::vector<SbpSignature> alike_splits(const std::vector<TensorMeta>& inputs, size_t outputs,
                                       int64_t except = -1);

// For each of the first `dims` output dims: each input split along the dim that broadcasting
// aligns with it, or broadcast where the input lacks that dim or has size 1 there; the single
// output split along it.
std::vector<SbpSignature> broadcast_splits(const std::vector<TensorMeta>& inputs,
                                           const Shape& output, int64_t dims);

// Rules for whole families of ops.
ShardingRule elementwise_sharding();   // alike_splits over every dim
ShardingRule broadcasting_sharding();  // broadcast_splits over every output dim

}  // namespace merak::ops
