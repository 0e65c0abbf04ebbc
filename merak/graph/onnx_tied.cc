#include <cstring>

#include "merak/graph/initializer_values.h"
#include "merak/graph/onnx_proto_internal.h"
#include "merak/graph/onnx_tied_internal.h"

namespace merak::graph::onnx_detail {
namespace {

bool exporter_name(const std::string& name) { return name.rfind("onnx::", 0) == 0; }

// The raw bytes of a 2-D weight, from the file or from its external data.
std::string matrix_bytes(const onnx::TensorProto& t,
                         const std::map<std::string, ExternalData>& external) {
  const std::string what = "initializer '" + t.name() + "'";
  const DType dtype = dtype_from_onnx(t.data_type(), what);
  const int64_t n = checked_numel(onnx_dims(t), kMaxValueElements, what);  // dims not yet checked
  auto it = external.find(t.name());
  if (it == external.end()) return onnx_tensor_bytes(t, dtype, n);
  std::string out(size_t(n) * dtype_size(dtype), '\0');
  if (!out.empty()) read_external(it->second, out.data(), int64_t(out.size()), t.name());
  return out;
}

// Whether `a` [r, c] is `b` [c, r] transposed, element for element (`size` bytes each).
bool is_transpose(const std::string& a, const std::string& b, int64_t r, int64_t c, size_t size) {
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j)
      if (std::memcmp(a.data() + size_t(i * c + j) * size, b.data() + size_t(j * r + i) * size,
                      size) != 0)
        return false;
  return true;
}

}  // namespace

std::map<std::string, std::string> folded_transposes(
    const onnx::GraphProto& g, const std::map<std::string, ExternalData>& external) {
  std::vector<const onnx::TensorProto*> copies, originals;
  for (const onnx::TensorProto& t : g.initializer()) {
    if (t.dims_size() != 2) continue;
    bool weight = false;
    try {
      weight = becomes_parameter(t);
    } catch (const Error&) {  // a type Merak lacks: the import names it
    }
    if (!weight) continue;
    (exporter_name(t.name()) ? copies : originals).push_back(&t);
  }
  std::map<std::string, std::string> tied;
  for (const onnx::TensorProto* copy : copies) {
    for (const onnx::TensorProto* original : originals) {
      if (original->data_type() != copy->data_type() || original->dims(0) != copy->dims(1) ||
          original->dims(1) != copy->dims(0))
        continue;
      const size_t size = dtype_size(dtype_from_onnx(copy->data_type(), copy->name()));
      if (is_transpose(matrix_bytes(*copy, external), matrix_bytes(*original, external),
                       copy->dims(0), copy->dims(1), size)) {
        tied[copy->name()] = original->name();
        break;
      }
    }
  }
  return tied;
}

}  // namespace merak::graph::onnx_detail
