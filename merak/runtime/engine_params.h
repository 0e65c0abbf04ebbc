// A rank's parameters, materialised from its RankProgram: only the shards it holds, each drawn
// at its place in the full tensor by the (seed, global name)-keyed initialiser, so any layout
// starts from the same full weights as one process.
#pragma once

#include <cstdint>

#include "merak/core/tensor.h"
#include "merak/graph/graph.pb.h"
#include "merak/partition/plan.pb.h"

namespace merak::runtime {

// The local tensor of a shard: its boxes of the full tensor, concatenated along concat_dim.
// `full` is the whole parameter when the graph carries its values (an imported model), else
// undefined and the boxes are drawn from shard.init.
Tensor materialize_shard(const partition::ParamShard& shard, uint64_t seed,
                         const Tensor& full = Tensor());

// The rank's stage graph as a model whose initializers carry their local values, ready for
// graph::Executor. Throws naming the parameter when a shard's boxes do not make its local type.
graph::Model stage_model(const partition::RankProgram& program, uint64_t seed);

}  // namespace merak::runtime
