#include "merak/partition/analysis.h"

#include <algorithm>

#include "merak/graph/convert.h"
#include "merak/ops/dispatch.h"

namespace merak::partition {
namespace {

using Strides = std::vector<int64_t>;

Strides dense_strides(const Shape& shape) {
  Strides s(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;) s[d - 1] = s[d] * std::max<int64_t>(shape[d], 1);
  return s;
}

bool is_dense(const Shape& shape, const Strides& strides) {
  const Strides want = dense_strides(shape);
  for (size_t d = 0; d < shape.size(); ++d)
    if (shape[d] != 1 && strides[d] != want[d]) return false;
  return true;
}

// The strides `to` would have as a view of a tensor laid out as (from, strides), or false when
// the layout cannot be folded into that shape without a copy. Dims of `from` are grouped into
// runs that are contiguous with each other; each run must map onto whole dims of `to`.
bool fold_view(const Shape& from, const Strides& strides, const Shape& to, Strides* out) {
  out->assign(to.size(), 1);
  int64_t numel = 1;
  for (int64_t n : from) numel *= n;
  if (numel == 0) {
    *out = dense_strides(to);
    return true;
  }
  int64_t t = int64_t(to.size()) - 1;
  int64_t run_stride = from.empty() ? 1 : strides.back();
  int64_t run_numel = 1, view_numel = 1;
  for (int64_t f = int64_t(from.size()) - 1; f >= 0; --f) {
    run_numel *= from[size_t(f)];
    const bool run_ends =
        f == 0 || (from[size_t(f - 1)] != 1 && strides[size_t(f - 1)] != run_numel * run_stride);
    if (!run_ends) continue;
    while (t >= 0 && (view_numel < run_numel || to[size_t(t)] == 1)) {
      (*out)[size_t(t)] = view_numel * run_stride;
      view_numel *= to[size_t(t)];
      --t;
    }
    if (view_numel != run_numel) return false;
    if (f > 0) {
      run_stride = strides[size_t(f - 1)];
      run_numel = 1;
      view_numel = 1;
    }
  }
  return t < 0;
}

// Where each value's bytes live: views share their input's storage (root), with strides that
// tell whether a later reshape can stay a view. Mirrors what the view ops do at run time.
struct Layout {
  int root;
  Strides strides;
};

}  // namespace

int GraphFacts::find(const std::string& name) const {
  auto it = index.find(name);
  return it == index.end() ? -1 : it->second;
}

GraphFacts analyze(const graph::Graph& g, const std::map<std::string, int64_t>& bindings) {
  GraphFacts f;
  std::vector<Strides> strides;
  auto define = [&](const std::string& name, const ops::TensorMeta& meta, ValueFacts::Kind kind,
                    int producer, const std::string& what) {
    MERAK_CHECK(!name.empty(), what, " has an empty name");
    const int id = int(f.values.size());
    MERAK_CHECK(f.index.emplace(name, id).second, "value '", name, "' is defined twice (again by ",
                what, ")");
    ValueFacts v;
    v.name = name;
    v.meta = meta;
    v.kind = kind;
    v.producer = producer;
    v.root = id;
    f.values.push_back(std::move(v));
    strides.push_back(dense_strides(meta.shape));
    return id;
  };

  for (const graph::Initializer& init : g.initializers()) {
    const std::string what = "initializer '" + init.name() + "'";
    const ops::TensorMeta meta{graph::bind_shape(init.type(), bindings, what),
                               graph::from_proto(init.type().dtype()), true};
    const int id = define(init.name(), meta,
                          init.trainable() ? ValueFacts::Kind::Param : ValueFacts::Kind::Constant,
                          -1, what);
    f.values[size_t(id)].requires_grad = init.trainable() && is_floating(meta.dtype);
  }
  for (const graph::ValueInfo& in : g.inputs()) {
    const std::string what = "graph input '" + in.name() + "'";
    define(in.name(),
           {graph::bind_shape(in.type(), bindings, what), graph::from_proto(in.type().dtype()),
            true},
           ValueFacts::Kind::Input, -1, what);
  }

  for (int n = 0; n < g.nodes_size(); ++n) {
    const graph::Node& node = g.nodes(n);
    const std::string where = "node '" + node.name() + "' (op '" + node.op() + "')";
    NodeFacts nf;
    nf.node = &node;
    nf.op = ops::Registry::get().find(node.op());
    MERAK_CHECK(nf.op, where, ": not a registry op");
    std::vector<ops::TensorMeta> metas;
    for (const std::string& name : node.inputs()) {
      if (name.empty()) {
        nf.inputs.push_back(-1);
        metas.push_back({{}, DType::F32, false});
        continue;
      }
      const int id = f.find(name);
      MERAK_CHECK(id >= 0, where, ": input '", name, "' is not defined before it");
      nf.inputs.push_back(id);
      metas.push_back(f.values[size_t(id)].meta);
      std::vector<int>& readers = f.values[size_t(id)].readers;
      if (readers.empty() || readers.back() != n) readers.push_back(n);
    }
    std::vector<ops::TensorMeta> outs;
    try {
      nf.attrs = ops::complete_attrs(*nf.op, graph::attrs_of(node));
      outs = ops::infer(*nf.op, metas, nf.attrs);
      nf.cost = ops::cost(*nf.op, metas, nf.attrs);
    } catch (const Error& e) {
      throw Error(where + ": " + e.what());
    }
    MERAK_CHECK(outs.size() == size_t(node.outputs_size()), where, ": the op gives ", outs.size(),
                " outputs, the node names ", node.outputs_size());

    bool any_grad = false;
    for (int id : nf.inputs)
      if (id >= 0 && f.values[size_t(id)].requires_grad) any_grad = true;
    nf.recorded = any_grad && bool(nf.op->backward);
    const size_t grad_outs = nf.op->grad_outputs < 0 ? outs.size() : size_t(nf.op->grad_outputs);
    for (size_t k = 0; k < outs.size(); ++k) {
      const int id = define(node.outputs(int(k)), outs[k], ValueFacts::Kind::Node, n, where);
      ValueFacts& v = f.values[size_t(id)];
      v.requires_grad = nf.recorded && k < grad_outs && is_floating(outs[k].dtype);
      nf.outputs.push_back(id);
    }

    // Storage: a view op's outputs alias its first input where the layout allows.
    if (nf.op->view && !nf.inputs.empty() && nf.inputs[0] >= 0) {
      const int src = nf.inputs[0];
      const Shape& in_shape = f.values[size_t(src)].meta.shape;
      const Strides& in_strides = strides[size_t(src)];
      const std::string& name = nf.op->name;
      for (size_t k = 0; k < nf.outputs.size(); ++k) {
        const int id = nf.outputs[k];
        ValueFacts& v = f.values[size_t(id)];
        Strides s;
        bool alias = true;
        if (name == "permute" || name == "transpose") {
          std::vector<int64_t> order;
          if (name == "permute") {
            order = nf.attrs.ints("order");
          } else {
            const int64_t r = int64_t(in_shape.size());
            for (int64_t d = 0; d < r; ++d) order.push_back(d);
            int64_t a = nf.attrs.i("dim0"), b = nf.attrs.i("dim1");
            if (a < 0) a += r;
            if (b < 0) b += r;
            std::swap(order[size_t(a)], order[size_t(b)]);
          }
          for (int64_t d : order) s.push_back(in_strides[size_t(d < 0 ? d + int64_t(order.size()) : d)]);
        } else if (name == "expand") {
          const Shape& out = v.meta.shape;
          s.assign(out.size(), 0);
          const size_t lead = out.size() - in_shape.size();
          for (size_t d = 0; d < in_shape.size(); ++d)
            s[lead + d] = in_shape[d] == out[lead + d] ? in_strides[d] : 0;
        } else if (name == "slice" || name == "split") {
          s = in_strides;
        } else if (name == "contiguous") {  // copies unless already dense
          s = in_strides;
          alias = is_dense(in_shape, in_strides);
        } else {  // reshape: a view only when the strides fold
          alias = fold_view(in_shape, in_strides, v.meta.shape, &s);
        }
        if (alias && s.size() == v.meta.shape.size()) {
          v.root = f.values[size_t(src)].root;
          strides[size_t(id)] = s;
          v.contiguous = is_dense(v.meta.shape, s);
        }
      }
    }
    if (nf.recorded) {
      auto keep = [&](int id) {
        const int root = f.values[size_t(id)].root;
        if (std::find(nf.saved.begin(), nf.saved.end(), root) == nf.saved.end())
          nf.saved.push_back(root);
      };
      for (size_t i = 0; i < nf.inputs.size(); ++i)
        if (nf.inputs[i] >= 0 && nf.op->saves_input(i)) keep(nf.inputs[i]);
      for (size_t k = 0; k < nf.outputs.size(); ++k)
        if (nf.op->saves_output(k)) keep(nf.outputs[k]);
    }
    f.nodes.push_back(std::move(nf));
  }
  for (const graph::ValueInfo& out : g.outputs()) {
    const int id = f.find(out.name());
    MERAK_CHECK(id >= 0, "graph output '", out.name(), "' is never computed");
    f.outputs.push_back(id);
  }
  return f;
}

}  // namespace merak::partition
