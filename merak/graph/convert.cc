#include "merak/graph/convert.h"

#include <cstring>

namespace merak::graph {

DataType to_proto(DType t) {
  switch (t) {
    case DType::F32: return DT_F32;
    case DType::BF16: return DT_BF16;
    case DType::F16: return DT_F16;
    case DType::I32: return DT_I32;
    case DType::I64: return DT_I64;
    case DType::Bool: return DT_BOOL;
    case DType::F64: return DT_F64;
  }
  return DT_UNDEFINED;
}

DType from_proto(DataType t) {
  switch (t) {
    case DT_F32: return DType::F32;
    case DT_BF16: return DType::BF16;
    case DT_F16: return DType::F16;
    case DT_I32: return DType::I32;
    case DT_I64: return DType::I64;
    case DT_BOOL: return DType::Bool;
    case DT_F64: return DType::F64;
    default: MERAK_FAIL("graph: undefined or unknown data type ", int(t));
  }
}

TensorType tensor_type(const Shape& shape, DType dtype) {
  TensorType type;
  type.set_dtype(to_proto(dtype));
  for (int64_t d : shape) type.add_dims()->set_size(d);
  return type;
}

Shape fixed_shape(const TensorType& type, const std::string& what) {
  Shape s;
  for (const Dim& d : type.dims()) {
    MERAK_CHECK(d.value_case() == Dim::kSize, what, ": dim '", d.symbol(), "' is symbolic");
    s.push_back(d.size());
  }
  return s;
}

Shape bind_shape(const TensorType& type, const std::map<std::string, int64_t>& bindings,
                 const std::string& what) {
  Shape s;
  for (const Dim& d : type.dims()) {
    if (d.value_case() == Dim::kSize) {
      s.push_back(d.size());
      continue;
    }
    auto it = bindings.find(d.symbol());
    MERAK_CHECK(it != bindings.end(), what, ": symbolic dim '", d.symbol(), "' is not bound");
    s.push_back(it->second);
  }
  return s;
}

Attribute to_proto(const ops::AttrValue& v) {
  Attribute a;
  switch (ops::attr_kind_of(v)) {
    case ops::AttrKind::Int: a.set_i(std::get<int64_t>(v)); break;
    case ops::AttrKind::Float: a.set_f(std::get<double>(v)); break;
    case ops::AttrKind::Bool: a.set_b(std::get<bool>(v)); break;
    case ops::AttrKind::String: a.set_s(std::get<std::string>(v)); break;
    case ops::AttrKind::Ints: {
      // mutable_ints() sets the oneof, so an empty list (e.g. reduce over all dims) survives.
      auto* ints = a.mutable_ints();
      for (int64_t x : std::get<std::vector<int64_t>>(v)) ints->add_values(x);
      break;
    }
  }
  return a;
}

ops::AttrValue from_proto(const Attribute& a) {
  switch (a.value_case()) {
    case Attribute::kI: return a.i();
    case Attribute::kF: return a.f();
    case Attribute::kB: return a.b();
    case Attribute::kS: return a.s();
    case Attribute::kInts:
      return std::vector<int64_t>(a.ints().values().begin(), a.ints().values().end());
    default: MERAK_FAIL("graph: attribute without a value");
  }
}

ops::Attrs attrs_of(const Node& node) {
  ops::Attrs attrs;
  for (const auto& [name, a] : node.attrs()) {
    try {
      attrs.set_value(name, from_proto(a));
    } catch (const Error& e) {
      MERAK_FAIL("node '", node.name(), "' attribute '", name, "': ", e.what());
    }
  }
  return attrs;
}

void set_attrs(Node& node, const ops::Attrs& attrs) {
  for (const auto& [name, v] : attrs.values()) (*node.mutable_attrs())[name] = to_proto(v);
}

std::string tensor_bytes(const Tensor& t) {
  const Tensor c = t.contiguous();
  return std::string(static_cast<const char*>(c.raw_data()), size_t(c.nbytes()));
}

Tensor tensor_from_bytes(const std::string& bytes, const Shape& shape, DType dtype,
                         const std::string& what) {
  Tensor t = Tensor::empty(shape, dtype);
  MERAK_CHECK(int64_t(bytes.size()) == t.nbytes(), what, ": holds ", bytes.size(),
              " bytes, its type ", dtype_name(dtype), shape_str(shape), " needs ", t.nbytes());
  if (!bytes.empty()) std::memcpy(t.raw_data(), bytes.data(), bytes.size());
  return t;
}

}  // namespace merak::graph
