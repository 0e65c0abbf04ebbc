// Conversions between the graph protobuf and the runtime's types.
#pragma once

#include <map>
#include <string>

#include "merak/core/tensor.h"
#include "merak/graph/graph.pb.h"
#include "merak/ops/attrs.h"

namespace merak::graph {

DataType to_proto(DType t);
DType from_proto(DataType t);  // throws on DT_UNDEFINED

TensorType tensor_type(const Shape& shape, DType dtype);
// Fixed shape of a type; throws naming `what` if a dim is symbolic.
Shape fixed_shape(const TensorType& type, const std::string& what);
// Shape with symbols replaced from `bindings`; throws naming the unbound symbol.
Shape bind_shape(const TensorType& type, const std::map<std::string, int64_t>& bindings,
                 const std::string& what);

Attribute to_proto(const ops::AttrValue& v);
ops::AttrValue from_proto(const Attribute& a);
ops::Attrs attrs_of(const Node& node);
void set_attrs(Node& node, const ops::Attrs& attrs);

// Raw little-endian bytes of a contiguous CPU tensor, and back.
std::string tensor_bytes(const Tensor& t);
Tensor tensor_from_bytes(const std::string& bytes, const Shape& shape, DType dtype,
                         const std::string& what);

}  // namespace merak::graph
