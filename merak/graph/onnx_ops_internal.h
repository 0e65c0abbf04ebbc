// Mapping of ONNX nodes that constant folding could not evaluate onto registry ops.
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>

#include "merak/graph/onnx_builder_internal.h"

namespace merak::graph::onnx_detail {

// Emits the registry ops computing `node` (opset = the model's default-domain opset). Throws
// Unsupported for an op (or a form of it) without a mapping, merak::Error when it is invalid.
void convert_node(Builder& b, const onnx::NodeProto& node, int64_t opset);

}  // namespace merak::graph::onnx_detail
