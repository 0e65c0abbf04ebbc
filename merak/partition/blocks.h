// The repeated blocks of a model, read from the module paths on its nodes: the numbered
// children of one module list ("blocks.0", "blocks.1", ...; "encoder.layer.3" in an ONNX
// export). The layer-count baselines cut only between blocks, keeping whatever comes before the
// first block (embeddings) on the first stage and whatever follows the last (head, loss) on the
// last stage.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "merak/graph/graph.pb.h"

namespace merak::partition {

struct Blocks {
  std::string prefix;                // "blocks"
  std::vector<int64_t> starts;       // first node of each block, ascending
  int64_t end = 0;                   // one past the last block's last node
  bool found() const { return !starts.empty(); }
};

// Empty (found() false) when no module list is seen or its blocks are not contiguous in node
// order. Nodes without a block between two blocks' nodes belong to the block before them.
Blocks find_blocks(const graph::Graph& g);

}  // namespace merak::partition
