#include "merak/graph/onnx_folded_weights_internal.h"

#include <cstring>
#include <set>
#include <vector>

#include "merak/graph/initializer_values.h"
#include "merak/graph/onnx_proto_internal.h"

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

bool matrix_weight(const onnx::TensorProto& t) {
  if (t.dims_size() != 2) return false;
  try {
    return becomes_parameter(t);
  } catch (const Error&) {  // a type Merak lacks: the import names it
    return false;
  }
}

// Whether every element of `bytes` (elements of `size` bytes) is the first: such a matrix (a
// zero-initialised layer, say) is the transpose of any other of that value, so equal values
// say nothing about which weight it copies.
bool all_equal(const std::string& bytes, size_t size) {
  for (size_t i = size; i + size <= bytes.size(); i += size)
    if (std::memcmp(bytes.data(), bytes.data() + i, size) != 0) return false;
  return true;
}

// Exporter-named copies that hold another weight's transpose: copy name -> that weight's name.
std::map<std::string, std::string> tied_copies(
    const onnx::GraphProto& g, const std::map<std::string, ExternalData>& external) {
  std::vector<const onnx::TensorProto*> copies, originals;
  for (const onnx::TensorProto& t : g.initializer())
    if (matrix_weight(t)) (exporter_name(t.name()) ? copies : originals).push_back(&t);
  std::map<std::string, std::string> tied;
  for (const onnx::TensorProto* copy : copies) {
    const size_t size = dtype_size(dtype_from_onnx(copy->data_type(), copy->name()));
    std::string values;  // the copy's, read once a candidate has its shape
    for (const onnx::TensorProto* original : originals) {
      if (original->data_type() != copy->data_type() || original->dims(0) != copy->dims(1) ||
          original->dims(1) != copy->dims(0))
        continue;
      if (values.empty()) {
        values = matrix_bytes(*copy, external);
        if (all_equal(values, size)) break;
      }
      if (is_transpose(values, matrix_bytes(*original, external), copy->dims(0), copy->dims(1),
                       size)) {
        tied[copy->name()] = original->name();
        break;
      }
    }
  }
  return tied;
}

// PyTorch's export names a node after the module scope it runs in: "/blocks.0/attn/qkv/MatMul"
// is op "MatMul" in module "blocks.0.attn.qkv" (a second one there is "MatMul_1"). Empty
// module and op for a name of another form.
struct ScopedName {
  std::string module, op;
};
ScopedName scoped_name(const std::string& node_name) {
  const size_t last = node_name.rfind('/');
  if (node_name.empty() || node_name[0] != '/' || last == 0 || last == std::string::npos ||
      last + 1 == node_name.size())
    return {};
  std::string module = node_name.substr(1, last - 1);
  for (char& c : module)
    if (c == '/') c = '.';
  return {module, node_name.substr(last + 1)};
}

// Exporter-named matrix weights (not tied copies) that are a linear layer's folded W^T: copy
// name -> the module's weight name.
std::map<std::string, std::string> linear_weight_names(
    const onnx::GraphProto& g, const std::map<std::string, std::string>& tied) {
  // The graph's inputs and outputs (an initializer listed there, as older IR versions list
  // them, keeps its name), and every name in the graph: a weight's new name must be free.
  std::set<std::string> ends, taken;
  for (const auto& v : g.input()) ends.insert(v.name());
  for (const auto& v : g.output()) ends.insert(v.name());
  taken = ends;
  for (const auto& t : g.initializer()) taken.insert(t.name());
  std::map<std::string, std::vector<std::pair<const onnx::NodeProto*, int>>> readers;
  std::map<std::string, int> products;  // MatMul and Gemm nodes, by the module they run in
  for (const auto& n : g.node()) {
    for (const auto& out : n.output()) taken.insert(out);
    for (int i = 0; i < n.input_size(); ++i) readers[n.input(i)].push_back({&n, i});
    if (n.op_type() == "MatMul" || n.op_type() == "Gemm") ++products[scoped_name(n.name()).module];
  }
  std::map<std::string, std::string> names;
  for (const onnx::TensorProto& t : g.initializer()) {
    if (!exporter_name(t.name()) || tied.count(t.name()) || ends.count(t.name()) ||
        !matrix_weight(t))
      continue;
    const auto it = readers.find(t.name());
    if (it == readers.end() || it->second.size() != 1) continue;
    const auto [node, slot] = it->second.front();
    if (node->op_type() != "MatMul" || slot != 1) continue;
    // A linear layer's module runs one product: a module with more (attention's in-projection
    // beside its q k^T, two functional products) holds no weight by that name.
    const ScopedName where = scoped_name(node->name());
    if (where.module.empty() || where.op != "MatMul" || products[where.module] != 1 ||
        taken.count(where.module + ".weight"))
      continue;
    names[t.name()] = where.module + ".weight";  // one product a module: one copy a name
  }
  return names;
}

// `t` [r, c] becomes `name` [c, r] holding its transpose: in place, or, for values in external
// data, marked to be transposed as they are read.
void store_transposed(onnx::TensorProto& t, const std::string& name,
                      std::map<std::string, ExternalData>& external) {
  checked_numel(onnx_dims(t), kMaxValueElements, "initializer '" + t.name() + "'");
  const int64_t r = t.dims(0), c = t.dims(1);
  auto it = external.find(t.name());
  if (it != external.end()) {
    ExternalData where = it->second;
    where.set_transposed(true);
    external.erase(it);
    external[name] = where;
  } else {
    const DType dtype = dtype_from_onnx(t.data_type(), t.name());
    const size_t size = dtype_size(dtype);
    const std::string bytes = onnx_tensor_bytes(t, dtype, r * c);
    std::string out(bytes.size(), '\0');
    for (int64_t i = 0; i < r; ++i)
      for (int64_t j = 0; j < c; ++j)
        std::memcpy(out.data() + size_t(j * r + i) * size,
                    bytes.data() + size_t(i * c + j) * size, size);
    t.clear_float_data();
    t.clear_int32_data();
    t.clear_double_data();
    t.set_raw_data(std::move(out));
  }
  t.set_dims(0, c);
  t.set_dims(1, r);
  t.set_name(name);
}

}  // namespace

std::map<std::string, std::string> undo_folded_transposes(
    onnx::GraphProto& g, std::map<std::string, ExternalData>& external) {
  std::map<std::string, std::string> copies = tied_copies(g, external);
  const std::map<std::string, std::string> renamed = linear_weight_names(g, copies);
  for (onnx::TensorProto& t : *g.mutable_initializer()) {
    const auto it = renamed.find(t.name());
    if (it == renamed.end()) continue;
    copies[t.name()] = it->second;
    store_transposed(t, it->second, external);
  }
  return copies;
}

}  // namespace merak::graph::onnx_detail
