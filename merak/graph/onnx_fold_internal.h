// Constant folding: evaluates ONNX nodes whose inputs are all known at import time (shape
// arithmetic, masks, Constant nodes), so only the model's real computation becomes graph nodes.
#pragma once

#include <onnx/onnx_pb.h>

#include <vector>

#include "merak/core/tensor.h"

namespace merak::graph::onnx_detail {

// Evaluates `node` on constant `inputs` (contiguous CPU tensors; undefined for an absent
// optional input) into `outputs`. Returns false, leaving `outputs` empty, for ops it does not
// evaluate. Throws merak::Error when the inputs are invalid for the op or a result would exceed
// kMaxConstantBytes.
bool fold_node(const onnx::NodeProto& node, const std::vector<Tensor>& inputs,
               std::vector<Tensor>& outputs);

// Shape and Size of a value whose shape is known (its data need not be): int64 results.
Tensor shape_value(const onnx::NodeProto& node, const Shape& shape);
Tensor size_value(const Shape& shape);

}  // namespace merak::graph::onnx_detail
