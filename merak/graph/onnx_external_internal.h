// ONNX external data (tensors whose values lie in a file beside the model, as exports past
// protobuf's 2 GiB must be saved): where an initializer's values lie, checked at import; the
// values themselves are read only when needed (graph/initializer_values.h).
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <map>
#include <string>

#include "merak/graph/graph.pb.h"

namespace merak::graph::onnx_detail {

bool is_external(const onnx::TensorProto& t);

// Where tensor t's `bytes` bytes lie: its `location` under `model_dir` (the model file's
// directory; empty for a model given as bytes, which has none), from `offset`. An Error naming
// the tensor when the location is absolute or leaves that directory (a file must not make the
// importer read elsewhere, symbolic links resolved), when offset or length is not a valid count,
// when length differs from `bytes`, or when the file does not hold them.
ExternalData external_data(const onnx::TensorProto& t, const std::string& model_dir,
                           int64_t bytes);

// Checks where every initializer in external data lies (external_data), and reads those that
// become constants (becomes_parameter: index tables, shapes) into raw_data, where ONNX's shape
// inference and folding need them (at most max_constant_bytes together). The weights stay where
// they are: returns where each lies, by initializer name. Run before ONNX's checker, which would
// look for the files elsewhere.
std::map<std::string, ExternalData> resolve_external_initializers(onnx::GraphProto& g,
                                                                  const std::string& model_dir,
                                                                  int64_t max_constant_bytes);

}  // namespace merak::graph::onnx_detail
