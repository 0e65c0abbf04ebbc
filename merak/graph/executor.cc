#include "merak/graph/executor.h"

#include <set>

#include "merak/core/pending.h"
#include "merak/core/philox.h"
#include "merak/graph/convert.h"
#include "merak/graph/initializer_values.h"
#include "merak/nn/module.h"
#include "merak/autograd/grad_mode.h"
#include "merak/ops/dispatch.h"
#include "merak/ops/functional.h"

namespace merak::graph {

// The graph checked once and resolved to registry ops and integer value slots, so a run does no
// name lookups and knows when each intermediate value dies.
struct Executor::Plan {
  struct Step {
    std::string label;  // "node 'n' (op 'o', module 'm')" for errors
    const ops::OpDef* op;
    ops::Attrs attrs;
    std::vector<int> inputs;  // -1 for an absent optional input
    std::vector<int> outputs;
    std::vector<int> release;  // slots whose last reader is this step
  };
  struct Input {
    std::string name;
    TensorType type;
    int slot;
  };
  int slots = 0;
  std::vector<std::pair<int, std::string>> initializers;  // slot, name
  std::vector<Input> inputs;
  std::string input_names;  // "tokens, targets", for errors
  std::vector<Step> steps;
  std::vector<int> outputs;
};

namespace {

nn::Init init_of(const InitSpec& spec) {
  switch (spec.kind()) {
    case InitSpec::ZEROS:
      return nn::Init::zeros();
    case InitSpec::ONES:
      return nn::Init::ones();
    default:
      return nn::Init::normal(spec.std());
  }
}

std::string node_label(const Node& n) {
  std::string s = "node '" + n.name() + "' (op '" + n.op() + "'";
  if (!n.module_path().empty()) s += ", module '" + n.module_path() + "'";
  return s + ")";
}

std::string type_str(const TensorType& type) {
  std::string s = dtype_name(from_proto(type.dtype()));
  s += "[";
  for (int i = 0; i < type.dims_size(); ++i) {
    if (i) s += ", ";
    const Dim& d = type.dims(i);
    s += d.value_case() == Dim::kSymbol ? d.symbol() : std::to_string(d.size());
  }
  return s + "]";
}

// Checks a bound input against its declared type; symbolic dims bind on first sight and must
// agree across inputs.
void check_input(const std::string& name, const TensorType& type, const Tensor& t,
                 std::map<std::string, int64_t>& symbols) {
  const std::string want = type_str(type);
  const std::string got = t.str();
  MERAK_CHECK(t.dtype() == from_proto(type.dtype()) && t.dim() == type.dims_size(), "graph input '",
              name, "': expected ", want, ", got ", got);
  for (int i = 0; i < type.dims_size(); ++i) {
    const Dim& d = type.dims(i);
    const int64_t size = t.size(i);
    if (d.value_case() == Dim::kSymbol) {
      auto [it, fresh] = symbols.emplace(d.symbol(), size);
      MERAK_CHECK(fresh || it->second == size, "graph input '", name, "': dim ", i, " ('",
                  d.symbol(), "') is ", size, " but another input bound it to ", it->second);
    } else {
      MERAK_CHECK(d.size() == size, "graph input '", name, "': expected ", want, ", got ", got);
    }
  }
}

// Every field but the initializer bytes: the executor keeps those only in its tensors, so an
// imported model's weights are not held twice.
Model without_data(const Model& m) {
  Model out;
  out.set_opset_version(m.opset_version());
  out.set_producer(m.producer());
  *out.mutable_metadata() = m.metadata();
  const Graph& src = m.graph();
  Graph& g = *out.mutable_graph();
  g.set_name(src.name());
  *g.mutable_nodes() = src.nodes();
  *g.mutable_inputs() = src.inputs();
  *g.mutable_outputs() = src.outputs();
  *g.mutable_values() = src.values();
  for (const Initializer& i : src.initializers()) {
    Initializer& c = *g.add_initializers();
    c.set_name(i.name());
    *c.mutable_type() = i.type();
    *c.mutable_init() = i.init();
    c.set_trainable(i.trainable());
  }
  return out;
}

}  // namespace

Executor::Executor(const Model& model, uint64_t seed, Device device)
    : model_(without_data(model)), device_(device) {
  const Graph& g = model_.graph();
  const std::string gname = "graph '" + g.name() + "'";
  auto plan = std::make_shared<Plan>();
  std::map<std::string, int> slot_of;
  auto define = [&](const std::string& name, const std::string& what) {
    MERAK_CHECK(!name.empty(), gname, ": ", what, " has an empty name");
    MERAK_CHECK(slot_of.emplace(name, plan->slots).second, gname, ": value '", name,
                "' is defined twice (again by ", what, ")");
    return plan->slots++;
  };

  for (const Initializer& init : model.graph().initializers()) {
    const std::string what = "initializer '" + init.name() + "'";
    const int slot = define(init.name(), what);
    const Shape shape = fixed_shape(init.type(), what);
    const DType dtype = from_proto(init.type().dtype());
    Tensor t;
    if (has_values(init)) {
      t = initializer_values(init);
      if (device != Device::cpu()) t = t.to(device);
    } else {
      t = Tensor::empty(shape, dtype, device);
      try {
        nn::initialize(t, init.name(), init_of(init.init()), seed);
      } catch (const Error& e) {
        throw Error(what + ": cannot draw its initial values: " + e.what());
      }
    }
    if (init.trainable()) t.set_requires_grad(true).set_name(init.name());
    initializers_[init.name()] = t;
    plan->initializers.emplace_back(slot, init.name());
  }
  for (const ValueInfo& in : g.inputs()) {
    plan->inputs.push_back({in.name(), in.type(), define(in.name(), "graph input")});
    plan->input_names += (plan->input_names.empty() ? "" : ", ") + in.name();
  }
  if (plan->input_names.empty()) plan->input_names = "none";

  std::map<int, size_t> last_reader;  // slot -> the step that reads it last (or makes it)
  for (const Node& node : g.nodes()) {
    const std::string where = gname + " " + node_label(node);
    const ops::OpDef* op = ops::Registry::get().find(node.op());
    MERAK_CHECK(op, where, ": '", node.op(), "' is not a registry op");
    Plan::Step step{node_label(node), op, {}, {}, {}, {}};
    try {
      step.attrs = ops::complete_attrs(*op, attrs_of(node));
    } catch (const Error& e) {
      throw Error(where + ": " + e.what());
    }
    for (const std::string& in : node.inputs()) {
      if (in.empty()) {
        step.inputs.push_back(-1);
        continue;
      }
      auto it = slot_of.find(in);
      MERAK_CHECK(it != slot_of.end(), where, ": input '", in,
                  "' is not an initializer, a graph input or an earlier node's output");
      step.inputs.push_back(it->second);
      last_reader[it->second] = plan->steps.size();
    }
    for (const std::string& out : node.outputs()) {
      step.outputs.push_back(define(out, where));
      last_reader[step.outputs.back()] = plan->steps.size();  // unread outputs die at once
    }
    plan->steps.push_back(std::move(step));
  }

  std::set<int> kept;  // slots that outlive the run's steps
  for (const ValueInfo& out : g.outputs()) {
    auto it = slot_of.find(out.name());
    MERAK_CHECK(it != slot_of.end(), gname, ": output '", out.name(), "' is never computed");
    plan->outputs.push_back(it->second);
    kept.insert(it->second);
  }
  for (const auto& [slot, step] : last_reader)
    if (!kept.count(slot)) plan->steps[step].release.push_back(slot);
  plan_ = std::move(plan);
}

std::vector<Tensor> Executor::bind(const std::map<std::string, Tensor>& inputs) const {
  const Plan& plan = *plan_;
  std::vector<Tensor> values(size_t(plan.slots));
  for (const auto& [slot, name] : plan.initializers) values[size_t(slot)] = initializers_.at(name);

  std::map<std::string, int64_t> symbols;
  std::set<std::string> expected;
  for (const Plan::Input& in : plan.inputs) {
    expected.insert(in.name);
    auto it = inputs.find(in.name);
    MERAK_CHECK(it != inputs.end() && it->second.defined(), "graph input '", in.name,
                "' is missing (the graph takes: ", plan.input_names, ")");
    check_input(in.name, in.type, it->second, symbols);
    MERAK_CHECK(it->second.device() == device_, "graph input '", in.name, "' is on ",
                it->second.device().str(), ", the executor runs on ", device_.str());
    values[size_t(in.slot)] = it->second;
  }
  for (const auto& [name, t] : inputs)
    MERAK_CHECK(expected.count(name), "'", name,
                "' is not an input of the graph (it takes: ", plan.input_names, ")");

  return values;
}

void Executor::run_step(size_t index, std::vector<Tensor>& values) const {
  const Plan::Step& step = plan_->steps[index];
  std::vector<Tensor> args;
  for (int slot : step.inputs) {
    args.push_back(slot < 0 ? Tensor() : values[size_t(slot)]);
    wait_pending(args.back());
  }
  std::vector<Tensor> outs;
  try {
    const ops::OpDef::RandomDraws& random = step.op->random;
    if (!random.rate.empty() && !training_ && random.identity_at_zero) {
      outs = {args.at(0)};  // evaluation drops nothing: no copy either
    } else if (!random.rate.empty()) {
      // Where masks are drawn belongs to the micro-batch being run (set by the caller through
      // set_rng_place, as for the eager model), not to the moment the graph was traced;
      // evaluation drops nothing.
      const RngPlace place = rng_place();
      ops::Attrs attrs = step.attrs;
      attrs.set("stream", int64_t(place.stream))
          .set("first_row", place.first_row)
          .set("rows", place.rows);
      if (!training_) attrs.set(random.rate, 0.0);
      outs = ops::call(*step.op, args, attrs);
    } else {
      outs = ops::call(*step.op, args, step.attrs);
    }
  } catch (const Error& e) {
    throw Error(step.label + ": " + e.what());
  }
  MERAK_CHECK(outs.size() == step.outputs.size(), step.label, ": the op gave ", outs.size(),
              " outputs, the node names ", step.outputs.size());
  for (size_t k = 0; k < outs.size(); ++k) values[size_t(step.outputs[k])] = std::move(outs[k]);
  for (int slot : step.release) values[size_t(slot)] = Tensor();
}

std::vector<Tensor> Executor::results(const std::vector<Tensor>& values) const {
  std::vector<Tensor> out;
  for (int slot : plan_->outputs) out.push_back(values[size_t(slot)]);
  return out;
}

std::vector<Tensor> Executor::run(const std::map<std::string, Tensor>& inputs) {
  std::vector<Tensor> values = bind(inputs);
  for (size_t i = 0; i < plan_->steps.size(); ++i) run_step(i, values);
  return results(values);
}

std::vector<std::vector<Tensor>> Executor::run_parts(
    const std::vector<std::map<std::string, Tensor>>& parts,
    const std::function<void(size_t)>& resume) {
  std::vector<std::vector<Tensor>> values;
  for (const auto& inputs : parts) values.push_back(bind(inputs));
  const size_t n = plan_->steps.size();
  std::vector<size_t> next(parts.size(), 0);
  for (bool more = true; more;) {
    more = false;
    for (size_t k = 0; k < parts.size(); ++k) {
      if (next[k] >= n) continue;
      if (resume) resume(k);
      while (next[k] < n) {
        const bool all_reduce = plan_->steps[next[k]].op->name == "tp_all_reduce";
        run_step(next[k]++, values[k]);
        poll_pending();  // MPI progresses the others' collectives only inside its calls
        if (all_reduce) break;
      }
      more = more || next[k] < n;
    }
  }
  wait_all_pending();
  std::vector<std::vector<Tensor>> out;
  for (const auto& v : values) out.push_back(results(v));
  return out;
}

std::vector<std::pair<std::string, Tensor>> Executor::parameters() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const Initializer& init : model_.graph().initializers())
    if (init.trainable()) out.emplace_back(init.name(), initializers_.at(init.name()));
  return out;
}

std::vector<std::pair<std::string, Tensor>> Executor::cast_parameters(DType dtype) {
  autograd::NoGradGuard no_grad;  // the copies are leaves, not results of a cast
  std::vector<std::pair<std::string, Tensor>> masters = parameters();
  for (const auto& [name, master] : masters) {
    if (!is_floating(master.dtype()) || master.dtype() == dtype) continue;
    Tensor copy = ops::cast(master, dtype);
    copy.set_requires_grad(true).set_name(name);
    initializers_[name] = copy;
  }
  return masters;
}

const Tensor& Executor::value(const std::string& initializer) const {
  auto it = initializers_.find(initializer);
  MERAK_CHECK(it != initializers_.end(), "graph '", model_.graph().name(), "' has no initializer '",
              initializer, "'");
  return it->second;
}

}  // namespace merak::graph
