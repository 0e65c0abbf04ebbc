// The tensor-parallel pass (Megatron-style), recognised from the graph's structure, not from
// module names, so it works on imported ONNX graphs too. What each op allows comes from the
// sharding rule in its registry entry (SBP signatures, registry.h), never from its name.
// "Linear" below is any op whose signatures split a weight parameter (linear, a matmul by a 2-D
// parameter as exports with folded transposes contain), its bias either an input or an add
// after it.
//   - a column-parallel linear feeding a region of ops that keep its output's feature split
//     (elementwise chains such as GELU; reshapes, permutes, splits, attention over heads) that
//     ends in a row-parallel linear: the MLP (fc column-split, proj row-split) and attention
//     (QKV column-split by heads, output projection row-split); reshape attributes are
//     rewritten for the local heads; tp_copy (identity forward, all-reduce of the gradient)
//     goes before the column-parallel input, tp_all_reduce after the row-parallel product, its
//     bias added after the reduction;
//   - token embeddings (tables indexed by a graph input) vocab-parallel: tp_embedding then
//     tp_all_reduce;
//   - LM heads (linears whose logits feed only cross_entropy, or only leave the graph)
//     column-split over the vocabulary, the loss computed by tp_cross_entropy, or the logits
//     gathered by tp_all_gather;
//   a table is split this way when every use of it is one of these and it has at least 1024
//   rows or is tied between embedding and head (small tables, like segment types or a
//   next-sentence classifier, stay whole).
// Vocabulary splits may be uneven (50257 over 8 ranks: 6283 rows on rank 0, 6282 on the others;
// the numerics do not change, unlike padding the vocabulary). Heads, hidden or ffn sizes not
// divisible by tp are an Error naming the value and the sizes. Linears the pass does not
// recognise stay whole on every rank (listed in the notes). Dropout inside a split region draws
// the unsplit run's masks: sdpa's by its heads' offset, an elementwise dropout (an imported
// network's, on attention probabilities or hidden features) by its elements' unsplit indices;
// both registry entries localise their attributes.
#pragma once

#include <string>
#include <vector>

#include "merak/partition/shards.h"

namespace merak::partition {

struct TpPass {
  std::vector<TpRank> ranks;       // one per tensor-parallel rank
  std::vector<std::string> notes;  // what was recognised, one line each
};

TpPass shard_tensor_parallel(const graph::Model& model, int64_t tp);

}  // namespace merak::partition
