// What a graph amounts to: its op histogram, parameter count and training FLOPs, all read from
// the graph and the op registry's cost functions (the numbers the partitioner's cost model sees).
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "merak/graph/graph.pb.h"

namespace merak::graph {

struct Summary {
  std::string name;
  int64_t nodes = 0;
  std::map<std::string, int64_t> ops;  // op -> number of nodes
  int64_t parameters = 0;              // elements of the trainable initializers
  int64_t constants = 0;               // elements of the other initializers
  int64_t tokens = 0;                  // tokens in the batch the graph is shaped for (0: unknown)
  double fwd_flops = 0;                // one forward of that batch, by the registry's cost
  double bwd_flops = 0;                // its backward (every input gradient)
  double bytes = 0;                    // forward bytes read and written

  double flops_per_token() const {
    return tokens > 0 ? (fwd_flops + bwd_flops) / double(tokens) : 0;
  }
};

// Shapes are inferred node by node from the graph inputs and initializers (symbolic dims taken
// from `bindings`); an unknown op or an inconsistent node throws naming the node. Tokens: the
// model's "tokens" metadata (set by the tracer), else the size of the first integer graph input.
Summary summarize(const Model& model, const std::map<std::string, int64_t>& bindings = {});

// The summary as lines of text (what `merak_graph summary` prints).
std::string format_summary(const Summary& s);

}  // namespace merak::graph
