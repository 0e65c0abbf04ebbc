// ONNX protobuf access for the importer: element types, TensorProto data, node attributes, and
// size checks that keep a malformed file from asking for absurd allocations.
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <string>
#include <vector>

#include "merak/core/tensor.h"

namespace merak::graph::onnx_detail {

// Caps that keep a hostile file from making the importer allocate absurd amounts: bytes of one
// constant it computes or copies (a causal mask for 8192 positions in f32 is 256 MiB), elements
// of any value's shape (never allocated at import). The bytes of all constants together are
// ImportOptions::max_constant_bytes.
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
// Fuzz builds (tools/fuzz/Makefile) run the same checks with a smaller cap: a mutated file that
// asks for constants near the cap would otherwise slow the fuzzer tenfold with page faults.
constexpr int64_t kMaxConstantBytes = int64_t(1) << 20;
#else
constexpr int64_t kMaxConstantBytes = int64_t(1) << 28;
#endif
constexpr int64_t kMaxValueElements = int64_t(1) << 42;

// The product of `shape` with every dim >= 0; throws naming `what` when it exceeds `limit`.
int64_t checked_numel(const Shape& shape, int64_t limit, const std::string& what);

// ONNX TensorProto.DataType -> Merak dtype; throws naming `what` for types Merak lacks.
DType dtype_from_onnx(int32_t elem_type, const std::string& what);
const char* onnx_type_name(int32_t elem_type);

// A CPU tensor with a TensorProto's values (raw_data or the typed fields); external, segmented
// or mis-sized data, or more than max_bytes, is an error naming the tensor.
Tensor tensor_from_onnx(const onnx::TensorProto& t, int64_t max_bytes);

// Floating tensors of rank >= 1 are the model's weights. Integer and bool ones (index tables,
// masks) and floating scalars (constants some exporters store as initializers) cannot be
// trained meaningfully: they are constants, which lets folding see through them.
bool becomes_parameter(const onnx::TensorProto& t);
// The raw little-endian bytes of an initializer, as graph.proto stores them.
std::string onnx_tensor_bytes(const onnx::TensorProto& t, DType dtype, int64_t numel);
// The same, moved out of t's raw_data when it holds them there (t is left without values).
std::string take_onnx_tensor_bytes(onnx::TensorProto& t, DType dtype, int64_t numel);
Shape onnx_dims(const onnx::TensorProto& t);

// Node attributes. The getters with a fallback return it when the attribute is absent and
// throw when it is present with another type.
const onnx::AttributeProto* find_attr(const onnx::NodeProto& node, const std::string& name);
int64_t attr_int(const onnx::NodeProto& node, const std::string& name, int64_t fallback);
float attr_float(const onnx::NodeProto& node, const std::string& name, float fallback);
std::vector<int64_t> attr_ints(const onnx::NodeProto& node, const std::string& name,
                               const std::vector<int64_t>& fallback);
bool has_attr(const onnx::NodeProto& node, const std::string& name);

// Elementwise access to small constant tensors of any dtype (folding and pattern matching).
double element_as_double(const Tensor& t, int64_t i);
int64_t element_as_int(const Tensor& t, int64_t i);  // floats: toward zero, saturating
// Float -> int as ONNX Cast does (toward zero), saturating instead of overflowing; NaN -> 0.
int64_t saturating_int(double v);
// The values of a 0-D or 1-D integer tensor.
std::vector<int64_t> int_values(const Tensor& t, const std::string& what);

}  // namespace merak::graph::onnx_detail
