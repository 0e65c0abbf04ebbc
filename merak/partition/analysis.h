// A graph as the partitioner sees it: every value's type, producer and readers, every node's
// registry cost, and which values autograd keeps for backward (the activation memory). Read
// once from the graph and the op registry; everything else in merak/partition works on this.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "merak/graph/graph.pb.h"
#include "merak/ops/registry.h"

namespace merak::partition {

struct ValueFacts {
  enum class Kind { Input, Param, Constant, Node };
  std::string name;
  ops::TensorMeta meta;
  Kind kind = Kind::Node;
  int producer = -1;            // node index (Kind::Node), else -1
  std::vector<int> readers;     // node indices, ascending, each once
  bool requires_grad = false;   // depends on a trainable parameter through differentiable ops
  int root = -1;                // the value whose storage this one shares (a view), or itself
  bool contiguous = true;       // whether a view op's output is laid out densely
};

struct NodeFacts {
  const graph::Node* node = nullptr;
  const ops::OpDef* op = nullptr;
  ops::Attrs attrs;             // completed with the schema's defaults
  std::vector<int> inputs;      // value indices; -1 for an absent optional input
  std::vector<int> outputs;
  ops::OpCost cost;
  bool recorded = false;        // autograd records it (an input requires grad, op has backward)
  std::vector<int> saved;       // storage roots it keeps alive for backward
};

struct GraphFacts {
  std::vector<ValueFacts> values;
  std::map<std::string, int> index;  // value name -> index
  std::vector<NodeFacts> nodes;      // graph order (topological)
  std::vector<int> outputs;          // graph outputs

  int find(const std::string& name) const;  // -1 when absent
};

// Infers every value's type from the graph inputs and initializers (symbolic dims taken from
// `bindings`). Throws naming the node on an unknown op, an undefined input or a bad shape.
GraphFacts analyze(const graph::Graph& graph, const std::map<std::string, int64_t>& bindings = {});

}  // namespace merak::partition
