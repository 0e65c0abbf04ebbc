// How each rank of a tensor-parallel group holds the model: its local graph (local shapes,
// collectives inserted) and, per parameter, which part of the full tensor it holds. Made by the
// tensor-parallel pass (tensor_parallel.h); with tp = 1 every parameter is whole.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "merak/core/shape.h"
#include "merak/graph/graph.pb.h"

namespace merak::partition {

struct BoxSpec {
  Shape offsets, sizes;
};

struct ShardSpec {
  std::string split = "replicated";  // "replicated", "column", "row", "vocab"
  Shape full_shape;
  int64_t concat_dim = 0;            // the local tensor is the boxes concatenated along it
  std::vector<BoxSpec> boxes;
};

struct TpRank {
  graph::Model model;                        // this rank's graph over the whole pipeline
  std::map<std::string, ShardSpec> shards;   // by initializer name
};

// The graph as every rank of a one-member group holds it: whole parameters.
TpRank whole_model(const graph::Model& model);

// Group attribute the tensor-parallel pass writes on collective nodes; the plan replaces it
// with the rank's own group name ("tp.pp3.dp0").
constexpr const char* kTpGroupPlaceholder = "tp";

}  // namespace merak::partition
