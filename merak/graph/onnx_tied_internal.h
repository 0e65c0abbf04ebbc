// Tied weights an exporter untied: PyTorch's constant folding (on by default) turns the LM head's
// wte.weight.t() into an initializer of its own ("onnx::MatMul_118"), a copy that would train
// apart from the embedding. Found by value, so the import can tie them again.
#pragma once

#include <onnx/onnx_pb.h>

#include <map>
#include <string>

#include "merak/graph/graph.pb.h"

namespace merak::graph::onnx_detail {

// Matrix weights that hold another one's transpose, value for value, where the copy has an
// exporter's name ("onnx::...") and the original the model's: copy name -> original name.
// `external`: where weights in external data lie (read here only for candidates of transposed
// shapes).
std::map<std::string, std::string> folded_transposes(
    const onnx::GraphProto& g, const std::map<std::string, ExternalData>& external);

}  // namespace merak::graph::onnx_detail
