#include <cstring>
#include <limits>

#include "merak/graph/onnx_external_internal.h"
#include "merak/graph/onnx_proto_internal.h"

namespace merak::graph::onnx_detail {

int64_t checked_numel(const Shape& shape, int64_t limit, const std::string& what) {
  int64_t n = 1;
  for (int64_t d : shape) {
    MERAK_CHECK(d >= 0, what, ": negative dim ", d, " in ", shape_str(shape));
    // Divide instead of multiplying so the check itself cannot overflow.
    MERAK_CHECK(d == 0 || n <= limit / d, what, ": ", shape_str(shape), " has more than ", limit,
                " elements");
    n *= d;
  }
  return n;
}

DType dtype_from_onnx(int32_t elem_type, const std::string& what) {
  switch (elem_type) {
    case onnx::TensorProto::FLOAT: return DType::F32;
    case onnx::TensorProto::DOUBLE: return DType::F64;
    case onnx::TensorProto::FLOAT16: return DType::F16;
    case onnx::TensorProto::BFLOAT16: return DType::BF16;
    case onnx::TensorProto::INT32: return DType::I32;
    case onnx::TensorProto::INT64: return DType::I64;
    case onnx::TensorProto::BOOL: return DType::Bool;
    default:
      MERAK_FAIL(what, ": element type ", onnx_type_name(elem_type),
                 " is not supported (float, double, float16, bfloat16, int32, int64, bool)");
  }
}

const char* onnx_type_name(int32_t elem_type) {
  if (!onnx::TensorProto::DataType_IsValid(elem_type)) return "invalid";
  return onnx::TensorProto::DataType_Name(onnx::TensorProto::DataType(elem_type)).c_str();
}

Shape onnx_dims(const onnx::TensorProto& t) { return Shape(t.dims().begin(), t.dims().end()); }

namespace {

// How many values a TensorProto's typed field for `dtype` holds (ONNX keeps float16, bfloat16,
// bool and int32 in int32_data).
int64_t typed_count(const onnx::TensorProto& t, DType dtype) {
  switch (dtype) {
    case DType::F32: return t.float_data_size();
    case DType::F64: return t.double_data_size();
    case DType::I64: return t.int64_data_size();
    default: return t.int32_data_size();
  }
}

// Copies the n typed-field values (checked to be there) into `out`.
void copy_typed_fields(const onnx::TensorProto& t, DType dtype, int64_t n, char* out) {
  // An empty field's data() may be null, which memcpy must not be given even for 0 bytes.
  if (n == 0) return;
  switch (dtype) {
    case DType::F32: std::memcpy(out, t.float_data().data(), size_t(n) * 4); break;
    case DType::F64: std::memcpy(out, t.double_data().data(), size_t(n) * 8); break;
    case DType::I64: std::memcpy(out, t.int64_data().data(), size_t(n) * 8); break;
    case DType::I32: std::memcpy(out, t.int32_data().data(), size_t(n) * 4); break;
    case DType::F16:
    case DType::BF16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t v = uint16_t(t.int32_data(int(i)));
        std::memcpy(out + 2 * i, &v, 2);
      }
      break;
    case DType::Bool:
      for (int64_t i = 0; i < n; ++i) out[i] = t.int32_data(int(i)) != 0;
      break;
  }
}

std::string describe(const onnx::TensorProto& t) { return "tensor '" + t.name() + "'"; }

void check_raw_size(const onnx::TensorProto& t, size_t bytes) {
  MERAK_CHECK(t.raw_data().size() == bytes, describe(t), ": raw_data holds ", t.raw_data().size(),
              " bytes, its type and dims need ", bytes);
}

}  // namespace

std::string onnx_tensor_bytes(const onnx::TensorProto& t, DType dtype, int64_t numel) {
  const std::string what = describe(t);
  MERAK_CHECK(!is_external(t), what, ": external data is supported for initializers only (save "
              "the model's constants inside it)");
  MERAK_CHECK(!t.has_segment(), what, ": segmented tensors are not supported");
  const size_t bytes = size_t(numel) * dtype_size(dtype);
  if (t.has_raw_data()) {
    check_raw_size(t, bytes);
    std::string out = t.raw_data();
    // Bool bytes other than 0/1 are not valid C++ bools.
    if (dtype == DType::Bool)
      for (char& c : out) c = c != 0;
    return out;
  }
  // Checked before allocating: the dims of a hostile tensor may promise far more than it holds.
  const int64_t have = typed_count(t, dtype);
  MERAK_CHECK(have == numel, what, ": holds ", have, " values, its dims need ", numel);
  std::string out(bytes, '\0');
  copy_typed_fields(t, dtype, numel, out.data());
  return out;
}

std::string take_onnx_tensor_bytes(onnx::TensorProto& t, DType dtype, int64_t numel) {
  if (!t.has_raw_data() || dtype == DType::Bool || is_external(t) || t.has_segment())
    return onnx_tensor_bytes(t, dtype, numel);
  check_raw_size(t, size_t(numel) * dtype_size(dtype));
  std::string out;
  out.swap(*t.mutable_raw_data());
  return out;
}

Tensor tensor_from_onnx(const onnx::TensorProto& t, int64_t max_bytes) {
  const std::string what = describe(t);
  const DType dtype = dtype_from_onnx(t.data_type(), what);
  const Shape shape = onnx_dims(t);
  const int64_t n = checked_numel(shape, max_bytes / int64_t(dtype_size(dtype)), what);
  const std::string bytes = onnx_tensor_bytes(t, dtype, n);
  Tensor out = Tensor::empty(shape, dtype);
  if (!bytes.empty()) std::memcpy(out.raw_data(), bytes.data(), bytes.size());
  return out;
}

bool becomes_parameter(const onnx::TensorProto& t) {
  return is_floating(dtype_from_onnx(t.data_type(), describe(t))) && t.dims_size() > 0;
}

const onnx::AttributeProto* find_attr(const onnx::NodeProto& node, const std::string& name) {
  for (const auto& a : node.attribute())
    if (a.name() == name) return &a;
  return nullptr;
}

bool has_attr(const onnx::NodeProto& node, const std::string& name) {
  return find_attr(node, name) != nullptr;
}

int64_t attr_int(const onnx::NodeProto& node, const std::string& name, int64_t fallback) {
  const auto* a = find_attr(node, name);
  if (!a) return fallback;
  MERAK_CHECK(a->type() == onnx::AttributeProto::INT, "attribute '", name, "' is not an int");
  return a->i();
}

float attr_float(const onnx::NodeProto& node, const std::string& name, float fallback) {
  const auto* a = find_attr(node, name);
  if (!a) return fallback;
  MERAK_CHECK(a->type() == onnx::AttributeProto::FLOAT, "attribute '", name, "' is not a float");
  return a->f();
}

std::vector<int64_t> attr_ints(const onnx::NodeProto& node, const std::string& name,
                               const std::vector<int64_t>& fallback) {
  const auto* a = find_attr(node, name);
  if (!a) return fallback;
  MERAK_CHECK(a->type() == onnx::AttributeProto::INTS, "attribute '", name,
              "' is not a list of ints");
  return std::vector<int64_t>(a->ints().begin(), a->ints().end());
}

double element_as_double(const Tensor& t, int64_t i) {
  const void* p = t.raw_data();
  switch (t.dtype()) {
    case DType::F32: return static_cast<const float*>(p)[i];
    case DType::F64: return static_cast<const double*>(p)[i];
    case DType::BF16: return bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
    case DType::F16: return f16_to_f32(static_cast<const uint16_t*>(p)[i]);
    case DType::I32: return static_cast<const int32_t*>(p)[i];
    case DType::I64: return double(static_cast<const int64_t*>(p)[i]);
    case DType::Bool: return static_cast<const bool*>(p)[i] ? 1.0 : 0.0;
  }
  return 0;
}

int64_t element_as_int(const Tensor& t, int64_t i) {
  const void* p = t.raw_data();
  switch (t.dtype()) {
    case DType::I32: return static_cast<const int32_t*>(p)[i];
    case DType::I64: return static_cast<const int64_t*>(p)[i];
    case DType::Bool: return static_cast<const bool*>(p)[i] ? 1 : 0;
    default: return saturating_int(element_as_double(t, i));
  }
}

int64_t saturating_int(double v) {
  if (v != v) return 0;
  if (v >= 9.2233720368547758e18) return std::numeric_limits<int64_t>::max();
  if (v <= -9.2233720368547758e18) return std::numeric_limits<int64_t>::min();
  return int64_t(v);
}

std::vector<int64_t> int_values(const Tensor& t, const std::string& what) {
  MERAK_CHECK(t.dtype() == DType::I64 || t.dtype() == DType::I32, what,
              " must be int64 or int32, got ", dtype_name(t.dtype()));
  MERAK_CHECK(t.dim() <= 1, what, " must be a scalar or a 1-D list, got ", shape_str(t.shape()));
  std::vector<int64_t> out(size_t(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) out[size_t(i)] = element_as_int(t, i);
  return out;
}

}  // namespace merak::graph::onnx_detail
