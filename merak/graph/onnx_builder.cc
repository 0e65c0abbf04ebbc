#include "merak/graph/convert.h"
#include "merak/graph/onnx_builder_internal.h"
#include "merak/graph/onnx_proto_internal.h"
#include "merak/ops/dispatch.h"

namespace merak::graph::onnx_detail {

Builder::Builder(Graph& graph, std::set<std::string> used, int64_t max_constant_bytes,
                 uint64_t seed, std::map<std::string, ExternalData> external,
                 std::set<std::string> copied)
    : graph_(graph), used_(std::move(used)), max_constant_bytes_(max_constant_bytes),
      seed_(seed), external_(std::move(external)), copied_(std::move(copied)) {}

Value& Builder::define(const std::string& name) {
  MERAK_CHECK(!name.empty(), "a value without a name");
  MERAK_CHECK(!known(name), "value '", name, "' is defined twice");
  return values_[name];
}

const std::string& Builder::resolve(const std::string& name) const {
  auto a = aliases_.find(name);
  return a == aliases_.end() ? name : a->second;
}

const Value& Builder::at(const std::string& name) const {
  auto it = values_.find(resolve(name));
  if (it == values_.end())
    MERAK_FAIL("value '", name, "' is not defined before its use (not an input, initializer or ",
               "earlier node's output)");
  return it->second;
}

bool Builder::is_constant(const std::string& name) const {
  return name.empty() || at(name).constant.defined();
}

void Builder::add_input(const std::string& name, const ops::TensorMeta& meta) {
  Value& v = define(name);
  v.meta = meta;
  v.name = name;
  metas_[name] = meta;
}

void Builder::add_parameter(const std::string& name, onnx::TensorProto* data,
                            const ops::TensorMeta& meta) {
  Value& v = define(name);
  v.meta = meta;
  v.name = name;
  v.parameter = true;
  parameter_data_[name] = data;
}

void Builder::copy_parameter(const std::string& name, const std::string& of) {
  const Value src = at(of);
  MERAK_CHECK(src.parameter, "'", of, "' is not a parameter");
  add_parameter(name, parameter_data_.at(src.name), src.meta);
}

void Builder::add_transposed_parameter(const std::string& name, const std::string& of,
                                       const ops::TensorMeta& meta) {
  MERAK_CHECK(at(of).parameter && meta.shape.size() == 2, "'", of, "' is not a matrix parameter");
  Value& v = define(name);
  v.meta = meta;
  v.name = name;
  v.transposed_of = of;
}

void Builder::set_constant(const std::string& name, const Tensor& value) {
  const Storage* buffer = value.impl().storage.get();
  if (buffer && constant_buffers_.insert(buffer).second) {
    constant_bytes_ += int64_t(buffer->bytes);
    MERAK_CHECK(constant_bytes_ <= max_constant_bytes_, "constant '", name, "' (",
                value.nbytes(), " bytes) takes the import's constants to ", constant_bytes_,
                " bytes, over the limit of ", max_constant_bytes_,
                " (ImportOptions::max_constant_bytes)");
  }
  Value& v = define(name);
  v.meta = ops::TensorMeta::of(value);
  v.constant = value;
}

void Builder::set_alias(const std::string& name, const std::string& of) {
  at(of);  // reports an undefined `of`
  MERAK_CHECK(!known(name), "value '", name, "' is defined twice");
  aliases_[name] = resolve(of);
}

void Builder::write_initializer(const std::string& graph_name, const Value& v, bool trainable) {
  Initializer* init = graph_.add_initializers();
  init->set_name(graph_name);
  *init->mutable_type() = tensor_type(v.meta.shape, v.meta.dtype);
  init->set_trainable(trainable);
  if (trainable) {
    // Values in external data stay there (an Identity's copy points at the same bytes). Others
    // move into the graph, a weight held once, not twice, unless an Identity may still copy
    // them: a TensorProto backs more than one parameter only through an Identity.
    onnx::TensorProto& t = *parameter_data_.at(graph_name);
    auto it = external_.find(t.name());
    if (it != external_.end())
      *init->mutable_external() = it->second;
    else if (!copied_.count(t.name()))
      *init->mutable_data() = take_onnx_tensor_bytes(t, v.meta.dtype, v.meta.numel());
    else
      init->set_data(onnx_tensor_bytes(t, v.meta.dtype, v.meta.numel()));
  } else {
    init->set_data(tensor_bytes(v.constant));
    emitted_constants_[graph_name] = v.constant;
  }
  metas_[graph_name] = v.meta;
  written_.insert(graph_name);
}

std::string Builder::use(const std::string& name) {
  at(name);  // reports an undefined name
  const std::string& key = resolve(name);
  Value& v = values_.at(key);
  if (v.constant.defined() && v.name.empty()) {
    // Constants keep their ONNX name unless a graph value already has it.
    v.name = metas_.count(key) ? temp() : key;
    write_initializer(v.name, v, false);
  } else if (v.parameter && !written_.count(v.name)) {
    write_initializer(v.name, v, true);
  } else if (!v.transposed_of.empty() && !node_outputs_.count(v.name)) {
    const std::string name_of_value = v.name;  // emit_node may grow values_
    const std::string weight = use(v.transposed_of);
    // Named after the weight, as an export's own Transpose of it would be: the node being
    // converted keeps its name (a folded export's graph then names its nodes as the unfolded
    // export's does).
    const std::string node = node_name_;
    const auto emitted = emitted_in_node_;
    node_name_ = weight + "/Transpose";
    emitted_in_node_ = 0;
    emit_node("permute", {weight}, ops::Attrs().set("order", std::vector<int64_t>{1, 0}),
              {name_of_value});
    node_name_ = node;
    emitted_in_node_ = emitted;
    return name_of_value;
  }
  return v.name;
}

std::string Builder::add_constant(const Tensor& value) {
  const std::string name = temp();
  set_constant(name, value);
  return use(name);
}

void Builder::begin_node(const onnx::NodeProto& node) {
  node_name_ =
      node.name().empty() ? (node.output_size() ? node.output(0) : node.op_type()) : node.name();
  module_path_ = module_path_of(node.name());
  emitted_in_node_ = 0;
}

std::string Builder::temp() {
  std::string name;
  do {
    name = node_name_ + ":" + std::to_string(temp_count_++);
  } while (known(name) || metas_.count(name) || used_.count(name));
  return name;
}

std::vector<ops::TensorMeta> Builder::emit(const std::string& op,
                                           const std::vector<std::string>& inputs,
                                           const ops::Attrs& attrs,
                                           const std::vector<std::string>& outputs) {
  for (const std::string& name : outputs)
    MERAK_CHECK(!known(name), "value '", name, "' is defined twice");
  const auto out = emit_node(op, inputs, attrs, outputs);
  for (size_t i = 0; i < outputs.size(); ++i) {
    Value& v = define(outputs[i]);
    v.meta = out[i];
    v.name = outputs[i];
  }
  return out;
}

void Builder::add_output(const std::string& name) {
  const Value& v = at(name);
  std::string source = name;
  if (!node_outputs_.count(name)) {
    // A constant not written yet goes in under a fresh name, leaving `name` to the node.
    source = v.constant.defined() && v.name.empty() ? add_constant(v.constant) : use(name);
    if (source == name)
      throw Unsupported("graph output '" + name + "' is an input, parameter or constant itself");
    emit_node("reshape", {source}, ops::Attrs().set("shape", v.meta.shape), {name});
  }
  ValueInfo* info = graph_.add_outputs();
  info->set_name(name);
  *info->mutable_type() = tensor_type(v.meta.shape, v.meta.dtype);
}

std::vector<ops::TensorMeta> Builder::emit_node(const std::string& op,
                                                const std::vector<std::string>& inputs,
                                                const ops::Attrs& attrs,
                                                const std::vector<std::string>& outputs) {
  const ops::OpDef& def = ops::Registry::get().at(op);
  std::vector<ops::TensorMeta> in;
  for (const std::string& name : inputs) {
    if (name.empty()) {
      in.push_back(ops::TensorMeta{{}, DType::F32, false});
      continue;
    }
    auto it = metas_.find(name);
    MERAK_CHECK(it != metas_.end(), "internal: graph value '", name, "' has no type");
    in.push_back(it->second);
  }
  const ops::Attrs complete = ops::complete_attrs(def, attrs);
  std::vector<ops::TensorMeta> out;
  try {
    out = ops::infer(def, in, complete);
  } catch (const Error& e) {
    MERAK_FAIL("registry op '", op, "' rejects it: ", e.what());
  }
  MERAK_CHECK(out.size() == outputs.size(), "internal: ", op, " gives ", out.size(),
              " outputs, the mapping expects ", outputs.size());

  Node* node = graph_.add_nodes();
  node->set_name(emitted_in_node_ == 0 ? node_name_
                                       : node_name_ + "/" + std::to_string(emitted_in_node_));
  ++emitted_in_node_;
  node->set_op(op);
  node->set_module_path(module_path_);
  for (const std::string& name : inputs) node->add_inputs(name);
  set_attrs(*node, complete);
  for (size_t i = 0; i < outputs.size(); ++i) {
    checked_numel(out[i].shape, kMaxValueElements, "value '" + outputs[i] + "'");
    MERAK_CHECK(!metas_.count(outputs[i]), "graph value '", outputs[i], "' is defined twice");
    node->add_outputs(outputs[i]);
    node_outputs_.insert(outputs[i]);
    metas_[outputs[i]] = out[i];
    ValueInfo* info = graph_.add_values();
    info->set_name(outputs[i]);
    *info->mutable_type() = tensor_type(out[i].shape, out[i].dtype);
  }
  return out;
}

std::string module_path_of(const std::string& node_name) {
  // PyTorch names nodes by scope: "/blocks.0/attn/qkv/MatMul"; the last part is the op.
  if (node_name.empty() || node_name[0] != '/') return "";
  const size_t last = node_name.rfind('/');
  std::string path = node_name.substr(1, last == 0 ? 0 : last - 1);
  for (char& c : path)
    if (c == '/') c = '.';
  return path;
}

}  // namespace merak::graph::onnx_detail
