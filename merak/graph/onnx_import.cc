// The import pipeline: parse -> onnx::checker -> bind dynamic axes -> onnx shape inference ->
// per node: fold (constants, shapes) or map to registry ops -> fuse patterns -> prune. Every
// failure becomes an ImportError naming the file (and the node, once nodes are being read).
#include "merak/graph/onnx_import.h"

#include <onnx/checker.h>
#include <onnx/defs/schema.h>
#include <onnx/shape_inference/implementation.h>
#include <fcntl.h>
#include <google/protobuf/io/zero_copy_stream_impl.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "merak/graph/convert.h"
#include "merak/graph/onnx_builder_internal.h"
#include "merak/graph/onnx_external_internal.h"
#include "merak/graph/onnx_fold_internal.h"
#include "merak/graph/onnx_folded_weights_internal.h"
#include "merak/graph/onnx_fuse_internal.h"
#include "merak/graph/onnx_ops_internal.h"
#include "merak/graph/onnx_proto_internal.h"

namespace merak::graph {
namespace {

using namespace onnx_detail;

// One line, as every error the tools print: the ONNX checker's own messages span several.
[[noreturn]] void fail(const std::string& file, const std::string& msg) {
  std::string line;
  for (const char c : msg) {
    if (c != '\n' && c != ' ') line += c;
    else if (!line.empty() && line.back() != ' ') line += ' ';  // a line break, a run of spaces
  }
  while (!line.empty() && line.back() == ' ') line.pop_back();
  throw ImportError(file + ": " + line);
}

int64_t default_opset(const onnx::ModelProto& model) {
  for (const auto& o : model.opset_import())
    if (o.domain().empty() || o.domain() == "ai.onnx") return o.version();
  return 0;
}

std::set<std::string> initializer_names(const onnx::GraphProto& g) {
  std::set<std::string> names;
  for (const auto& t : g.initializer()) names.insert(t.name());
  return names;
}

// Gives every dynamic axis of the data inputs a size, from options.input_shapes (by input) or
// options.dim_params (by symbol), so shape inference and folding see concrete shapes.
void bind_inputs(onnx::GraphProto& g, const ImportOptions& options, const std::string& file) {
  const std::set<std::string> inits = initializer_names(g);
  std::set<std::string> bound, symbols;
  for (auto& in : *g.mutable_input()) {
    if (inits.count(in.name())) continue;  // an initializer listed as input (older exports)
    const std::string what = "input '" + in.name() + "'";
    if (!in.type().has_tensor_type()) fail(file, what + " is not a tensor");
    auto* shape = in.mutable_type()->mutable_tensor_type()->mutable_shape();
    for (const auto& dim : shape->dim())
      if (dim.has_dim_param()) symbols.insert(dim.dim_param());
    auto given = options.input_shapes.find(in.name());
    std::optional<Shape> asked;
    if (given == options.input_shapes.end() && options.shape_for)
      asked = options.shape_for(in.name());
    if (given != options.input_shapes.end() || asked) {
      if (given != options.input_shapes.end()) bound.insert(in.name());
      const Shape& s = asked ? *asked : given->second;
      if (in.type().tensor_type().has_shape() && shape->dim_size() != int(s.size()))
        fail(file, what + " has rank " + std::to_string(shape->dim_size()) + ", the given shape " +
                       shape_str(s) + " has rank " + std::to_string(s.size()));
      for (size_t i = 0; i < s.size(); ++i) {
        if (int(i) < shape->dim_size() && shape->dim(int(i)).has_dim_value() &&
            shape->dim(int(i)).dim_value() != s[i])
          fail(file, what + " has a fixed dim " + std::to_string(i) + " of " +
                         std::to_string(shape->dim(int(i)).dim_value()) + ", the given shape " +
                         shape_str(s) + " differs");
      }
      shape->clear_dim();
      for (int64_t d : s) shape->add_dim()->set_dim_value(d);
      continue;
    }
    if (!in.type().tensor_type().has_shape())
      fail(file, what + " has no shape in the file: give one (the tools' --input " +
                     in.name() + "=AxB, ImportOptions::input_shapes)");
    for (int i = 0; i < shape->dim_size(); ++i) {
      auto* dim = shape->mutable_dim(i);
      if (dim->has_dim_value()) continue;
      auto sym = options.dim_params.find(dim->dim_param());
      if (dim->has_dim_param() && sym != options.dim_params.end()) {
        dim->set_dim_value(sym->second);
        continue;
      }
      fail(file, what + " dim " + std::to_string(i) + " ('" + dim->dim_param() +
                     "') is dynamic: give its size (the tools' --dim " +
                     (dim->dim_param().empty() ? std::string("SYMBOL") : dim->dim_param()) +
                     "=N or --input " + in.name() + "=AxB; ImportOptions::dim_params or "
                     "input_shapes)");
    }
  }
  for (const auto& [name, shape] : options.input_shapes)
    if (!bound.count(name)) fail(file, "there is no data input named '" + name + "'");
  // A misspelt symbol would otherwise pass unnoticed whenever nothing else needs it.
  for (const auto& [symbol, size] : options.dim_params)
    if (!symbols.count(symbol))
      fail(file, "no data input has a dynamic dim named '" + symbol + "'");
}

// ONNX's view of a value's type, when its shape is fully known.
struct OnnxType {
  int32_t elem_type;
  Shape shape;
};

std::map<std::string, OnnxType> static_types(const onnx::GraphProto& g) {
  std::map<std::string, OnnxType> out;
  auto add = [&out](const onnx::ValueInfoProto& v) {
    if (!v.type().has_tensor_type() || !v.type().tensor_type().has_shape()) return;
    OnnxType t{v.type().tensor_type().elem_type(), {}};
    for (const auto& d : v.type().tensor_type().shape().dim()) {
      if (!d.has_dim_value()) return;
      t.shape.push_back(d.dim_value());
    }
    out[v.name()] = t;
  };
  for (const auto& v : g.value_info()) add(v);
  for (const auto& v : g.output()) add(v);
  return out;
}

// A node in messages: by name, or (names are optional in ONNX) by index and first output.
std::string node_label(const onnx::NodeProto& node, int index) {
  if (!node.name().empty()) return "node '" + node.name() + "'";
  std::string s = "node #" + std::to_string(index);
  if (node.output_size() > 0) s += " (output '" + node.output(0) + "')";
  return s;
}

// Refuses a graph in which some node reads a value without a type (after shape inference every
// value a node reads has one, unless the inference of its producer failed).
void require_typed_inputs(const onnx::GraphProto& g, const std::string& file) {
  std::set<std::string> typed = initializer_names(g);
  auto add = [&typed](const onnx::ValueInfoProto& v) {
    if (v.type().has_tensor_type() && v.type().tensor_type().elem_type() != 0)
      typed.insert(v.name());
  };
  for (const auto& v : g.input()) add(v);
  for (const auto& v : g.value_info()) add(v);
  for (const auto& v : g.output()) add(v);
  for (int i = 0; i < g.node_size(); ++i) {
    const onnx::NodeProto& node = g.node(i);
    for (const std::string& in : node.input()) {
      if (in.empty() || typed.count(in)) continue;
      fail(file, node_label(node, i) + " (op " + node.op_type() + "): input '" + in +
                     "' has no type after ONNX shape inference (is it produced by any node?)");
    }
  }
}

// ONNX shape inference, with data propagation (which turns Shape -> Gather -> Concat chains into
// the static shapes Reshape needs). Debian's libonnx (1.12) dereferences null in the data
// propagation of a node whose input has no type, which strict inference reports as an error but
// goes on past: so a pass without data propagation runs first, and every input must be typed.
void infer_shapes(onnx::ModelProto& model, const std::string& file) {
  for (bool data_propagation : {false, true}) {
    try {
      onnx::shape_inference::InferShapes(model, onnx::OpSchemaRegistry::Instance(),
                                         onnx::ShapeInferenceOptions(true, 1, data_propagation));
    } catch (const std::exception& e) {
      fail(file, std::string("ONNX shape inference failed: ") + e.what());
    }
    if (!data_propagation) require_typed_inputs(model.graph(), file);
  }
}

std::set<std::string> used_values(const onnx::GraphProto& g) {
  std::set<std::string> used;
  for (const auto& n : g.node())
    for (const auto& in : n.input()) used.insert(in);
  for (const auto& o : g.output()) used.insert(o.name());
  return used;
}

// `transposed`: weights that are another's transpose (undo_folded_transposes), added as
// permutes of it.
void add_inputs_and_initializers(Builder& b, onnx::GraphProto& g, Graph& out,
                                 const std::map<std::string, std::string>& transposed) {
  const std::set<std::string> inits = initializer_names(g);
  MERAK_CHECK(g.sparse_initializer_size() == 0, "sparse initializers are not supported");
  for (const auto& in : g.input()) {
    if (inits.count(in.name())) continue;
    const std::string what = "input '" + in.name() + "'";
    ops::TensorMeta meta;
    meta.dtype = dtype_from_onnx(in.type().tensor_type().elem_type(), what);
    for (const auto& d : in.type().tensor_type().shape().dim()) meta.shape.push_back(d.dim_value());
    checked_numel(meta.shape, kMaxValueElements, what);
    b.add_input(in.name(), meta);
    ValueInfo* info = out.add_inputs();
    info->set_name(in.name());
    *info->mutable_type() = tensor_type(meta.shape, meta.dtype);
  }
  for (auto& t : *g.mutable_initializer()) {
    const std::string what = "initializer '" + t.name() + "'";
    ops::TensorMeta meta;
    meta.dtype = dtype_from_onnx(t.data_type(), what);
    meta.shape = onnx_dims(t);
    checked_numel(meta.shape, kMaxValueElements, what);
    if (transposed.count(t.name())) continue;  // after the weight it transposes
    if (becomes_parameter(t)) {
      b.add_parameter(t.name(), &t, meta);
    } else {
      b.set_constant(t.name(), tensor_from_onnx(t, kMaxConstantBytes));
    }
  }
  for (const auto& [copy, original] : transposed) {
    const ops::TensorMeta& of = b.at(original).meta;
    b.add_transposed_parameter(copy, original, {{of.shape[1], of.shape[0]}, of.dtype});
  }
}

// Folds the node when its inputs are known, else maps it to registry ops.
void convert(Builder& b, const onnx::NodeProto& node, int64_t opset) {
  if (!node.domain().empty() && node.domain() != "ai.onnx")
    throw Unsupported("op from domain '" + node.domain() + "'");
  const std::string& op = node.op_type();
  // Input/output counts and attribute types against the op's schema. The checker did this too,
  // unless the model holds an experimental op, for which it skips the whole model.
  const onnx::OpSchema* schema = onnx::OpSchemaRegistry::Schema(op, int(opset), "");
  if (!schema) throw Unsupported("not an ONNX op at opset " + std::to_string(opset));
  schema->Verify(node);
  if ((op == "Shape" || op == "Size") && node.input_size() == 1 && !b.is_constant(node.input(0))) {
    const Shape& s = b.at(node.input(0)).meta.shape;
    b.set_constant(node.output(0), op == "Shape" ? shape_value(node, s) : size_value(s));
    return;
  }
  bool all_constant = true;
  std::vector<Tensor> inputs;
  for (const std::string& in : node.input()) {
    all_constant = all_constant && b.is_constant(in);
    inputs.push_back(in.empty() ? Tensor() : b.at(in).constant);
  }
  std::vector<Tensor> outputs;
  if (all_constant && fold_node(node, inputs, outputs)) {
    MERAK_CHECK(outputs.size() <= size_t(node.output_size()), "folding gave ", outputs.size(),
                " outputs for ", node.output_size());
    for (size_t i = 0; i < outputs.size(); ++i)
      if (!node.output(int(i)).empty()) b.set_constant(node.output(int(i)), outputs[i]);
    return;
  }
  convert_node(b, node, opset);
}

// The node's outputs as ONNX's shape inference saw them must match what the import computed:
// a mismatch means the graph (or the mapping) is inconsistent.
void cross_check(Builder& b, const onnx::NodeProto& node,
                 const std::map<std::string, OnnxType>& types) {
  for (const std::string& out : node.output()) {
    if (out.empty()) continue;
    if (!b.known(out)) {
      if (b.is_used(out)) throw Unsupported("output '" + out + "' is not produced by the mapping");
      continue;
    }
    auto it = types.find(out);
    if (it == types.end()) continue;
    const ops::TensorMeta& m = b.at(out).meta;
    MERAK_CHECK(it->second.shape == m.shape, "output '", out, "': ONNX shape inference gives ",
                shape_str(it->second.shape), ", the import computes ", shape_str(m.shape));
  }
}

// `model_dir`: where the file's external data lies (empty for bytes that come from no file).
Model import_model(onnx::ModelProto& model, const std::string& file, const ImportOptions& options,
                   const std::string& model_dir) {
  std::map<std::string, ExternalData> external;  // the weights', by initializer name
  try {
    external = resolve_external_initializers(*model.mutable_graph(), model_dir,
                                             options.max_constant_bytes);
  } catch (const std::exception& e) {
    fail(file, e.what());
  }
  try {
    // With external data the checker must know the model's directory, which only its
    // file-path form sets (the file is then small: the weights are elsewhere).
    if (!external.empty())
      onnx::checker::check_model(file);
    else
      onnx::checker::check_model(model);
  } catch (const std::exception& e) {
    fail(file, std::string("invalid ONNX model: ") + e.what());
  }
  const int64_t opset = default_opset(model);
  // An op's meaning can change from one opset to the next (ReduceMean's axes became an input at
  // 18): one newer than this build's ONNX would be read by the older schemas.
  const int64_t newest =
      onnx::OpSchemaRegistry::DomainToVersionRange::Instance().Map().at(onnx::ONNX_DOMAIN).second;
  if (opset > newest)
    fail(file, "opset " + std::to_string(opset) + " is newer than the ONNX this build reads (" +
                   "up to opset " + std::to_string(newest) + "): export at opset " +
                   std::to_string(newest) + " or lower");
  onnx::GraphProto& g = *model.mutable_graph();
  // What a graph computes is its outputs: without any, the import would keep no node.
  if (g.output_size() == 0) fail(file, "the graph has no outputs (nothing it computes is kept)");
  bind_inputs(g, options, file);
  infer_shapes(model, file);
  const auto types = static_types(g);

  Model out;
  out.set_opset_version(opset);
  out.set_producer(model.producer_name() + " " + model.producer_version() + " via onnx import");
  (*out.mutable_metadata())["onnx_file"] = file;
  for (const auto& p : model.metadata_props())
    (*out.mutable_metadata())["onnx." + p.key()] = p.value();
  Graph& graph = *out.mutable_graph();
  graph.set_name(g.name());
  std::map<std::string, std::string> transposed;
  try {
    transposed = undo_folded_transposes(g, external);
  } catch (const std::exception& e) {
    fail(file, e.what());
  }
  std::set<std::string> copied;  // what Identity nodes read (see Builder)
  for (const onnx::NodeProto& n : g.node())
    if (n.op_type() == "Identity" && n.input_size() > 0) copied.insert(n.input(0));
  Builder b(graph, used_values(g), options.max_constant_bytes, options.seed, std::move(external),
            std::move(copied));
  try {
    add_inputs_and_initializers(b, g, graph, transposed);
  } catch (const std::exception& e) {
    fail(file, e.what());
  }
  for (int i = 0; i < g.node_size(); ++i) {
    const onnx::NodeProto& node = g.node(i);
    const std::string where =
        node_label(node, i) + " (op " + node.op_type() + ", opset " + std::to_string(opset) + ")";
    try {
      b.begin_node(node);
      convert(b, node, opset);
      cross_check(b, node, types);
    } catch (const Unsupported& e) {
      fail(file, where + ": unsupported: " + e.what());
    } catch (const std::exception& e) {
      fail(file, where + ": " + e.what());
    }
  }
  try {
    for (const auto& o : g.output()) b.add_output(o.name());
    fuse_patterns(graph, b.metas(), b.constants());
    prune(graph);
  } catch (const std::exception& e) {
    fail(file, std::string("graph outputs: ") + e.what());
  }
  return out;
}

// Imports a parsed model; an error other than an ImportError becomes one naming `name`.
Model import_parsed(onnx::ModelProto& model, const std::string& name,
                    const ImportOptions& options, const std::string& model_dir) {
  try {
    return import_model(model, name, options, model_dir);
  } catch (const ImportError&) {
    throw;
  } catch (const std::exception& e) {
    fail(name, e.what());
  }
}

const char* kNotOnnx =
    "not an ONNX model (the protobuf does not parse: truncated or another format)";

}  // namespace

Model import_onnx_bytes(const std::string& bytes, const std::string& name,
                        const ImportOptions& options) {
  onnx::ModelProto model;
  if (!model.ParseFromString(bytes)) fail(name, kNotOnnx);
  return import_parsed(model, name, options, "");
}

Model import_onnx(const std::string& path, const ImportOptions& options) {
  // Parsed straight from the file: the weights are held once by the parse, then moved into the
  // graph (Builder), not also as the file's bytes.
  onnx::ModelProto model;
  {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail(path, std::string("cannot read (") + std::strerror(errno) + ")");
    google::protobuf::io::FileInputStream in(fd);
    in.SetCloseOnDelete(true);
    const bool parsed = model.ParseFromZeroCopyStream(&in);
    if (in.GetErrno() != 0)  // a directory, an I/O error
      fail(path, std::string("cannot read (") + std::strerror(in.GetErrno()) + ")");
    if (!parsed) fail(path, kNotOnnx);
  }
  // External data lies beside the file: its directory, made absolute so that a graph written
  // out (merak_graph import -o) still finds it from elsewhere.
  const size_t slash = path.find_last_of('/');
  std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  if (char* real = ::realpath(dir.c_str(), nullptr)) {
    dir = real;
    std::free(real);
  }
  return import_parsed(model, path, options, dir);
}

}  // namespace merak::graph
