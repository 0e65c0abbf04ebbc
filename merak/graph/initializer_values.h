// An initializer's values: inline (data), in a file beside the graph (external: an ONNX export's
// external data, read only when asked, so a rank reads just the tensors it holds), or none (drawn
// from its init spec by whoever materialises it).
#pragma once

#include <string>

#include "merak/core/tensor.h"
#include "merak/graph/graph.pb.h"

namespace merak::graph {

bool has_values(const Initializer& init);
// The values as a CPU tensor of the initializer's type; undefined when it has none. An Error
// naming the initializer and the file when the file cannot be read or is too short.
Tensor initializer_values(const Initializer& init);
// Reads `bytes` bytes from external's offset of its file into `out`; an Error naming `what` and
// the file when it cannot.
void read_external(const ExternalData& external, void* out, int64_t bytes, const std::string& what);

}  // namespace merak::graph
