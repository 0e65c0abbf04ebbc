#include "merak/graph/tracer.h"

#include <map>
#include <memory>
#include <set>
#include <unordered_map>

#include "merak/autograd/grad_mode.h"
#include "merak/graph/convert.h"
#include "merak/ops/dispatch.h"

namespace merak::graph {
namespace {

InitSpec init_spec(const nn::Init& init) {
  InitSpec spec;
  switch (init.kind) {
    case nn::Init::Kind::Normal:
      spec.set_kind(InitSpec::NORMAL);
      break;
    case nn::Init::Kind::Zeros:
      spec.set_kind(InitSpec::ZEROS);
      break;
    case nn::Init::Kind::Ones:
      spec.set_kind(InitSpec::ONES);
      break;
  }
  spec.set_std(init.std);
  return spec;
}

std::string join(const std::string& scope, const std::string& name) {
  return scope.empty() ? name : scope + "/" + name;
}

// Records every op call into `graph` while it exists. Tensors are told apart by their TensorImpl;
// the recorder keeps every tensor it has named alive, so an address is never reused for another
// tensor during the trace (on Meta that costs no data memory).
class Recorder final : public ops::OpObserver {
 public:
  explicit Recorder(Graph& graph) : graph_(graph) { ops::add_observer(this); }
  ~Recorder() override { ops::remove_observer(this); }
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;

  void name(const Tensor& t, const std::string& name) {
    names_[t.impl_ptr().get()] = name;
    alive_.push_back(t.impl_ptr());
  }

  // The name of a tensor the trace has seen, or null.
  const std::string* find(const Tensor& t) const {
    auto it = names_.find(t.impl_ptr().get());
    return it == names_.end() ? nullptr : &it->second;
  }

  bool produced(const std::string& value) const { return produced_.count(value) > 0; }

  void on_op(const ops::OpDef& op, const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs,
             const ops::Attrs& attrs) override {
    const std::string& scope = ops::current_scope();
    // Inputs first: an unknown Meta input throws before the node is half-written.
    std::vector<std::string> in_names;
    for (const Tensor& t : inputs) in_names.push_back(input_name(t, op, scope));

    Node& node = *graph_.add_nodes();
    const std::string key = join(scope, op.name);
    node.set_name(join(scope, op.name + "_" + std::to_string(counts_[key]++)));
    node.set_op(op.name);
    node.set_module_path(scope);
    for (const std::string& n : in_names) node.add_inputs(n);
    for (size_t k = 0; k < outputs.size(); ++k) {
      const std::string out = node.name() + ":" + std::to_string(k);
      node.add_outputs(out);
      name(outputs[k], out);
      produced_.insert(out);
      ValueInfo& info = *graph_.add_values();
      info.set_name(out);
      *info.mutable_type() = tensor_type(outputs[k].shape(), outputs[k].dtype());
    }
    set_attrs(node, attrs);
  }

 private:
  // A known tensor's name; a CPU tensor made outside the registry becomes a constant initializer
  // with its data; a Meta one has no values to record and no op that made it: an error.
  std::string input_name(const Tensor& t, const ops::OpDef& op, const std::string& scope) {
    if (!t.defined()) return "";
    if (const std::string* known = find(t)) return *known;
    const std::string where = scope.empty() ? "the root module" : "module '" + scope + "'";
    MERAK_CHECK(!t.is_meta(), "trace: op '", op.name, "' in ", where, " reads a Meta tensor ",
                t.str(),
                " that is not a parameter, a trace input or an op output (made outside "
                "the op registry, so the graph cannot say where its values come from)");
    MERAK_CHECK(t.device().is_cpu(), "trace: op '", op.name, "' in ", where,
                " reads a constant on ", t.device().str(), "; only CPU constants are recorded");
    const std::string cname = join(scope, "const_" + std::to_string(constants_++));
    Initializer& init = *graph_.add_initializers();
    init.set_name(cname);
    *init.mutable_type() = tensor_type(t.shape(), t.dtype());
    init.set_data(tensor_bytes(t));
    init.set_trainable(false);
    name(t, cname);
    return cname;
  }

  Graph& graph_;
  std::unordered_map<const TensorImpl*, std::string> names_;
  std::vector<std::shared_ptr<TensorImpl>> alive_;
  std::set<std::string> produced_;
  std::map<std::string, int> counts_;  // per (scope, op): node names count up from 0
  int constants_ = 0;
};

void rename_values(Graph& g, const std::map<std::string, std::string>& renames) {
  auto fix = [&](std::string* s) {
    auto it = renames.find(*s);
    if (it != renames.end()) *s = it->second;
  };
  for (Node& n : *g.mutable_nodes()) {
    for (std::string& s : *n.mutable_inputs()) fix(&s);
    for (std::string& s : *n.mutable_outputs()) fix(&s);
  }
  for (ValueInfo& v : *g.mutable_values()) fix(v.mutable_name());
}

Tensor& batch_field(models::Batch& b, const std::string& name) {
  if (name == "tokens") return b.tokens;
  if (name == "targets") return b.targets;
  if (name == "segment_ids") return b.segment_ids;
  if (name == "attention_mask") return b.attention_mask;
  if (name == "mlm_targets") return b.mlm_targets;
  if (name == "nsp_labels") return b.nsp_labels;
  if (name == "mlm_weight") return b.mlm_weight;
  MERAK_FAIL("trace: models::Batch has no field '", name, "'");
}

}  // namespace

Model trace(nn::Module& module, uint64_t seed, const std::vector<TraceInput>& inputs,
            const TraceFn& fn, const std::vector<std::string>& output_names) {
  module.materialize(seed, Device::meta());
  Model model;
  model.set_producer("merak-tracer");
  Graph& g = *model.mutable_graph();
  std::set<std::string> taken;  // every value name so far: inputs, parameters, outputs
  auto claim = [&taken](const std::string& name, const char* what) {
    MERAK_CHECK(!name.empty(), "trace: empty ", what, " name");
    MERAK_CHECK(taken.insert(name).second, "trace: ", what, " name '", name,
                "' is already used in the graph");
  };

  std::vector<Tensor> args;
  std::vector<std::string> result_names;
  std::vector<Tensor> results;
  {
    Recorder recorder(g);
    for (const nn::ParameterInfo& p : module.parameters()) {
      claim(p.name, "parameter");
      Initializer& init = *g.add_initializers();
      init.set_name(p.name);
      *init.mutable_type() = tensor_type(p.value.shape(), p.value.dtype());
      *init.mutable_init() = init_spec(p.init);
      init.set_trainable(true);
      recorder.name(p.value, p.name);
    }
    for (const TraceInput& in : inputs) {
      claim(in.name, "input");
      Tensor t = Tensor::empty(in.shape, in.dtype, Device::meta());
      ValueInfo& info = *g.add_inputs();
      info.set_name(in.name);
      *info.mutable_type() = tensor_type(in.shape, in.dtype);
      recorder.name(t, in.name);
      args.push_back(t);
    }
    // Recording is independent of autograd: no tape is built (and checkpointed segments run
    // once, as plain calls).
    autograd::NoGradGuard no_grad;
    results = fn(args);
    MERAK_CHECK(results.size() == output_names.size(), "trace: the function returned ",
                results.size(), " tensors for ", output_names.size(), " output names");
    for (size_t i = 0; i < results.size(); ++i) {
      const std::string* name = results[i].defined() ? recorder.find(results[i]) : nullptr;
      MERAK_CHECK(name && recorder.produced(*name), "trace: output '", output_names[i],
                  "' is not computed by any op of the trace");
      result_names.push_back(*name);
    }
  }

  std::map<std::string, std::string> renames;
  for (size_t i = 0; i < results.size(); ++i) {
    claim(output_names[i], "output");
    MERAK_CHECK(renames.emplace(result_names[i], output_names[i]).second, "trace: outputs '",
                renames[result_names[i]], "' and '", output_names[i], "' are the same tensor");
    ValueInfo& info = *g.add_outputs();
    info.set_name(output_names[i]);
    *info.mutable_type() = tensor_type(results[i].shape(), results[i].dtype());
  }
  rename_values(g, renames);
  return model;
}

std::vector<TraceInput> batch_inputs(const std::string& family, int64_t batch, int64_t seq) {
  if (family == "gpt")
    return {{"tokens", {batch, seq}, DType::I64}, {"targets", {batch, seq}, DType::I64}};
  if (family == "bert")
    return {{"tokens", {batch, seq}, DType::I64},
            {"segment_ids", {batch, seq}, DType::I64},
            {"attention_mask", {batch, seq}, DType::Bool},
            {"mlm_targets", {batch, seq}, DType::I64},
            {"nsp_labels", {batch}, DType::I64},
            {"mlm_weight", {batch}, DType::F32}};
  MERAK_FAIL("trace: no batch layout known for model family '", family, "' (gpt, bert)");
}

// A network that does not fit its family is the user's to fix: a message, no source location.
template <typename... Args>
void require(bool ok, const Args&... what) {
  if (!ok) throw Error(detail::concat(what...));
}

Model append_family_loss(const Model& net, const models::Model& family, int64_t batch,
                         int64_t seq) {
  const std::string& name = family.options().family;
  const std::vector<std::string> wanted = family.output_names();
  const Graph& g = net.graph();
  std::string described;
  for (const std::string& w : wanted) described += (described.empty() ? "" : ", ") + w;
  require(g.outputs_size() == int(wanted.size()), "the network has ", g.outputs_size(),
          " output", g.outputs_size() == 1 ? "" : "s", "; ", name, "'s loss takes ",
          wanted.size(), ": ", described);
  // Every name the graph holds, so that the loss's own never collide with one.
  std::set<std::string> taken;
  for (const ValueInfo& v : g.inputs()) taken.insert(v.name());
  for (const Initializer& i : g.initializers()) taken.insert(i.name());
  for (const Node& n : g.nodes()) {
    taken.insert(n.name());
    for (const std::string& o : n.outputs()) taken.insert(o);
  }
  // The loss is traced on the outputs as inputs, and the family's batch fields (the labels; a
  // field the network reads too is the same graph input).
  std::vector<TraceInput> inputs;
  for (const ValueInfo& v : g.outputs()) {
    std::vector<int64_t> dims;
    for (const Dim& d : v.type().dims()) {
      require(d.size() > 0, "output '", v.name(), "' has a dim of unknown size");
      dims.push_back(d.size());
    }
    inputs.push_back({v.name(), Shape(dims.begin(), dims.end()), from_proto(v.type().dtype())});
  }
  const size_t outputs = inputs.size();
  std::set<std::string> read;
  for (const ValueInfo& v : g.inputs()) read.insert(v.name());
  for (const TraceInput& field : batch_inputs(name, batch, seq)) {
    require(!(taken.count(field.name) && !read.count(field.name)), "the network names a ",
            "value '", field.name, "', the name of ", name, "'s batch field");
    inputs.push_back(field);
  }
  const TraceFn fn = [&](const std::vector<Tensor>& args) {
    models::Batch b;
    for (size_t i = outputs; i < inputs.size(); ++i) batch_field(b, inputs[i].name) = args[i];
    const std::vector<Tensor> heads(args.begin(), args.begin() + long(outputs));
    ops::ScopeGuard scope("loss");
    return std::vector<Tensor>{family.loss_from_outputs(heads, b)};
  };
  nn::Module none;  // the loss has no parameters
  Model loss;
  try {
    loss = trace(none, 0, inputs, fn, {"loss"});
  } catch (const Error& e) {
    throw Error(std::string("the network's outputs are not what ") + name + "'s loss takes (" +
                described + "): " + e.what());
  }

  Model out = net;
  Graph& og = *out.mutable_graph();
  og.clear_outputs();
  for (size_t i = 0; i < outputs; ++i) *og.add_values() = g.outputs(int(i));  // now inner values
  std::set<std::string> used;
  for (const Node& n : loss.graph().nodes())
    for (const std::string& v : n.inputs()) used.insert(v);
  for (size_t i = outputs; i < inputs.size(); ++i)
    if (used.count(inputs[i].name) && !read.count(inputs[i].name))
      *og.add_inputs() = loss.graph().inputs(int(i));
  auto fresh = [&](const std::string& v) {
    require(taken.insert(v).second, "the network already names a value '", v,
            "', which its loss would add");
  };
  for (const Initializer& i : loss.graph().initializers()) {
    fresh(i.name());
    *og.add_initializers() = i;
  }
  for (const Node& n : loss.graph().nodes()) {
    fresh(n.name());
    for (const std::string& o : n.outputs()) fresh(o);
    *og.add_nodes() = n;
  }
  for (const ValueInfo& v : loss.graph().values()) *og.add_values() = v;
  *og.add_outputs() = loss.graph().outputs(0);
  auto& meta = *out.mutable_metadata();
  meta["family"] = name;
  meta["batch"] = std::to_string(batch);
  meta["seq"] = std::to_string(seq);
  meta["tokens"] = std::to_string(batch * seq);
  return out;
}

Model trace_model(models::Model& model, int64_t batch, int64_t seq, uint64_t seed) {
  MERAK_CHECK(batch > 0 && seq > 0, "trace: batch ", batch, " and seq ", seq, " must be positive");
  const models::ModelOptions& o = model.options();
  const std::vector<TraceInput> inputs = batch_inputs(o.family, batch, seq);
  const TraceFn fn = [&](const std::vector<Tensor>& args) {
    models::Batch b;
    for (size_t i = 0; i < inputs.size(); ++i) batch_field(b, inputs[i].name) = args[i];
    return std::vector<Tensor>{model.loss(b)};
  };
  Model traced = trace(model, seed, inputs, fn, {"loss"});
  traced.mutable_graph()->set_name(o.family);
  auto& meta = *traced.mutable_metadata();
  meta["family"] = o.family;
  meta["layers"] = std::to_string(o.layers);
  meta["hidden"] = std::to_string(o.hidden);
  meta["heads"] = std::to_string(o.heads);
  meta["ffn_hidden"] = std::to_string(o.ffn());
  meta["max_seq"] = std::to_string(o.max_seq);
  meta["vocab"] = std::to_string(o.vocab);
  meta["dropout"] = std::to_string(o.dropout);
  meta["batch"] = std::to_string(batch);
  meta["seq"] = std::to_string(seq);
  meta["tokens"] = std::to_string(batch * seq);
  meta["seed"] = std::to_string(seed);
  return traced;
}

}  // namespace merak::graph
