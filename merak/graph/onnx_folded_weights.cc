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

// Exporter-named copies that hold another weight's transpose: copy name -> that weight's name.
std::map<std::string, std::string> tied_copies(
    const onnx::GraphProto& g, const std::map<std::string, ExternalData>& external) {
  std::vector<const onnx::TensorProto*> copies, originals;
  for (const onnx::TensorProto& t : g.initializer())
    if (matrix_weight(t)) (exporter_name(t.name()) ? copies : originals).push_back(&t);
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

// The module PyTorch's export names a node after: "/blocks.0/attn/qkv/MatMul" ->
// "blocks.0.attn.qkv"; empty for a name of another form.
std::string matmul_module(const std::string& node_name) {
  const std::string op = "/MatMul";
  if (node_name.size() <= op.size() + 1 || node_name[0] != '/' ||
      node_name.compare(node_name.size() - op.size(), op.size(), op) != 0)
    return "";
  std::string module = node_name.substr(1, node_name.size() - op.size() - 1);
  for (char& c : module)
    if (c == '/') c = '.';
  return module;
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
  for (const auto& n : g.node()) {
    for (const auto& out : n.output()) taken.insert(out);
    for (int i = 0; i < n.input_size(); ++i) readers[n.input(i)].push_back({&n, i});
  }
  std::map<std::string, std::string> names;
  std::map<std::string, int> claims;
  for (const onnx::TensorProto& t : g.initializer()) {
    if (!exporter_name(t.name()) || tied.count(t.name()) || ends.count(t.name()) ||
        !matrix_weight(t))
      continue;
    const auto it = readers.find(t.name());
    if (it == readers.end() || it->second.size() != 1) continue;
    const auto [node, slot] = it->second.front();
    if (node->op_type() != "MatMul" || slot != 1) continue;
    const std::string module = matmul_module(node->name());
    if (module.empty() || taken.count(module + ".weight")) continue;
    names[t.name()] = module + ".weight";
    ++claims[module + ".weight"];
  }
  for (auto it = names.begin(); it != names.end();)
    it = claims[it->second] > 1 ? names.erase(it) : std::next(it);
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
