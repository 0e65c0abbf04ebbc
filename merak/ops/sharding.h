// Sharding rules that many ops share, for their registry entries (the types are in registry.h).
#pragma once

#include <cstdint>
#include <vector>

#include "merak/ops/dropout_piece.h"
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

// Dropout's piece of the unsplit tensor for input shape x, from its attributes split_dim (-1:
// whole), split_size, split_start and split_runs (see dropout_piece.h), placed in the global
// batch by first_row and rows (rows 0: not placed); an Error naming them when they do not
// describe a piece of x's shape.
DropoutPiece dropout_piece(const Attrs& a, const Shape& x);

}  // namespace merak::ops
