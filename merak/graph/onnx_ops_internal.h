// Mapping of ONNX nodes that constant folding could not evaluate onto registry ops.
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <string>

#include "merak/graph/onnx_builder_internal.h"

namespace merak::graph::onnx_detail {

// The registry op that computes ONNX op `onnx_op` from the same inputs (its attributes put
// into the registry op's form by the caller): Add -> add, Sqrt -> sqrt, Equal -> eq,
// Max -> maximum (n-ary Max chains it), ReduceSum -> sum, ...; null when no single registry op
// does (Pow: pow or pow_tensor, by its exponent). Conversion and constant folding
// both read this one table, so a folded constant is what the emitted op would compute.
const char* registry_op(const std::string& onnx_op);

// Emits the registry ops computing `node` (opset = the model's default-domain opset). Throws
// Unsupported for an op (or a form of it) without a mapping, merak::Error when it is invalid.
void convert_node(Builder& b, const onnx::NodeProto& node, int64_t opset);

}  // namespace merak::graph::onnx_detail
