// Each pattern is matched backwards from its last node, visiting nodes from the end of the graph
// so the longest form of a pattern is seen before its sub-patterns. A match replaces that last
// node in place; the pattern's other nodes lose their readers and go in prune().
#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>
#include <set>

#include "merak/graph/convert.h"
#include "merak/graph/onnx_fuse_internal.h"
#include "merak/graph/onnx_proto_internal.h"
#include "merak/ops/dispatch.h"

namespace merak::graph::onnx_detail {
namespace {

struct Fused {
  std::string op;
  std::vector<std::string> inputs;
  ops::Attrs attrs;
};

bool near(double v, double target) { return std::fabs(v - target) <= 1e-6 * std::fabs(target); }

class Matcher {
 public:
  Matcher(const Graph& g, const std::map<std::string, ops::TensorMeta>& metas,
          const std::map<std::string, Tensor>& constants)
      : g_(g), metas_(metas), constants_(constants) {
    for (int i = 0; i < g.nodes_size(); ++i) {
      for (const std::string& out : g.nodes(i).outputs()) producer_[out] = i;
      for (const std::string& in : g.nodes(i).inputs()) ++readers_[in];
    }
    for (const ValueInfo& out : g.outputs()) ++readers_[out.name()];
  }

  // The node producing `v` when it is a `type` op.
  const Node* op(const std::string& v, const char* type) const {
    auto it = producer_.find(v);
    if (it == producer_.end()) return nullptr;
    const Node& n = g_.nodes(it->second);
    return n.op() == type ? &n : nullptr;
  }
  std::optional<double> scalar(const std::string& v) const {
    auto it = constants_.find(v);
    if (it == constants_.end() || it->second.numel() != 1) return std::nullopt;
    return element_as_double(it->second, 0);
  }
  const Tensor* constant(const std::string& v) const {
    auto it = constants_.find(v);
    return it == constants_.end() ? nullptr : &it->second;
  }
  const Shape& shape(const std::string& v) const { return metas_.at(v).shape; }
  bool has_type(const std::string& v) const { return metas_.count(v) > 0; }
  const ops::TensorMeta& type(const std::string& v) const { return metas_.at(v); }
  // How many node inputs and graph outputs name `v`.
  int readers(const std::string& v) const {
    auto it = readers_.find(v);
    return it == readers_.end() ? 0 : it->second;
  }

 private:
  const Graph& g_;
  const std::map<std::string, ops::TensorMeta>& metas_;
  const std::map<std::string, Tensor>& constants_;
  std::map<std::string, int> producer_;
  std::map<std::string, int> readers_;
};

// The two operands of a commutative binary node, in both orders.
std::vector<std::pair<std::string, std::string>> orders(const Node& n) {
  return {{n.inputs(0), n.inputs(1)}, {n.inputs(1), n.inputs(0)}};
}

double scalar_attr(const Node& n) { return attrs_of(n).f("value"); }

// --- linear: matmul(x, W^T) [+ b] ---

// x and W when `n` is matmul(x, permute(W, [1, 0])) or matmul(x, W, trans_b).
std::optional<std::pair<std::string, std::string>> linear_core(const Matcher& m, const Node& n) {
  if (n.op() != "matmul") return std::nullopt;
  const ops::Attrs a = attrs_of(n);
  if (a.b("trans_a")) return std::nullopt;
  if (a.b("trans_b")) {
    if (m.shape(n.inputs(1)).size() != 2) return std::nullopt;
    return std::make_pair(n.inputs(0), n.inputs(1));
  }
  const Node* t = m.op(n.inputs(1), "permute");
  if (!t || attrs_of(*t).ints("order") != std::vector<int64_t>{1, 0}) return std::nullopt;
  return std::make_pair(n.inputs(0), t->inputs(0));
}

std::optional<Fused> match_linear(const Matcher& m, const Node& n) {
  if (auto core = linear_core(m, n)) return Fused{"linear", {core->first, core->second}, {}};
  if (n.op() != "add") return std::nullopt;
  for (const auto& [product, bias] : orders(n)) {
    const Node* mm = m.op(product, "matmul");
    if (!mm) continue;
    auto core = linear_core(m, *mm);
    if (!core) continue;
    const Shape& w = m.shape(core->second);
    if (m.shape(bias) == Shape{w[0]}) return Fused{"linear", {core->first, core->second, bias}, {}};
  }
  return std::nullopt;
}

// --- layer norm ---

bool is_last_dim_mean(const Matcher& m, const Node* n) {
  if (!n) return false;
  const ops::Attrs a = attrs_of(*n);
  const int64_t rank = int64_t(m.shape(n->inputs(0)).size());
  return a.b("keepdim") && a.ints("dims") == std::vector<int64_t>{rank - 1};
}

// x and eps when `v` is (x - mean(x)) / sqrt(mean((x - mean(x))^2) + eps), over the last dim.
std::optional<std::pair<std::string, double>> match_normalized(const Matcher& m,
                                                               const std::string& v) {
  const Node* div = m.op(v, "div");
  if (!div) return std::nullopt;
  const std::string& centered = div->inputs(0);
  const Node* sqrt = m.op(div->inputs(1), "sqrt");
  if (!sqrt) return std::nullopt;
  std::string var;
  double eps;
  if (const Node* add = m.op(sqrt->inputs(0), "add_scalar")) {
    var = add->inputs(0);
    eps = scalar_attr(*add);
  } else {
    return std::nullopt;
  }
  const Node* mean2 = m.op(var, "mean");
  if (!is_last_dim_mean(m, mean2)) return std::nullopt;
  const std::string& squared = mean2->inputs(0);
  if (const Node* pow = m.op(squared, "pow")) {
    if (pow->inputs(0) != centered || attrs_of(*pow).f("exponent") != 2) return std::nullopt;
  } else if (const Node* mul = m.op(squared, "mul")) {
    if (mul->inputs(0) != centered || mul->inputs(1) != centered) return std::nullopt;
  } else {
    return std::nullopt;
  }
  const Node* sub = m.op(centered, "sub");
  if (!sub) return std::nullopt;
  const Node* mean1 = m.op(sub->inputs(1), "mean");
  if (!is_last_dim_mean(m, mean1) || mean1->inputs(0) != sub->inputs(0)) return std::nullopt;
  return std::make_pair(sub->inputs(0), eps);
}

std::optional<Fused> match_layer_norm(const Matcher& m, const Node& n) {
  auto fused = [](const std::pair<std::string, double>& xe, const std::string& w,
                  const std::string& b) {
    return Fused{"layer_norm", {xe.first, w, b}, ops::Attrs().set("eps", xe.second)};
  };
  // A [D] vector to scale or shift x's last dim by.
  auto vector_for = [&](const std::string& v, const std::string& x) {
    return m.shape(v) == Shape{m.shape(x).back()} && m.type(v).dtype == m.type(x).dtype;
  };
  // normalized * w
  auto scaled = [&](const Node& mul) -> std::optional<Fused> {
    for (const auto& [norm, w] : orders(mul)) {
      auto xe = match_normalized(m, norm);
      if (xe && vector_for(w, xe->first)) return fused(*xe, w, "");
    }
    return std::nullopt;
  };
  if (n.op() == "add") {
    for (const auto& [y, b] : orders(n)) {
      const Node* mul = m.op(y, "mul");
      if (!mul) continue;
      auto f = scaled(*mul);
      if (f && vector_for(b, f->inputs[0])) {
        f->inputs[2] = b;
        return f;
      }
    }
    return std::nullopt;
  }
  if (n.op() == "mul") return scaled(n);
  if (auto xe = match_normalized(m, n.outputs(0))) return fused(*xe, "", "");
  return std::nullopt;
}

// --- GELU ---

// True when `a` is 1 + erf(x / sqrt 2) (exact GELU) or 1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))
// (tanh approximation) for this x; sets `approximate` accordingly.
bool match_gelu_gate(const Matcher& m, const std::string& a, const std::string& x,
                     std::string& approximate) {
  const Node* one = m.op(a, "add_scalar");
  if (!one || scalar_attr(*one) != 1) return false;
  if (const Node* erf = m.op(one->inputs(0), "erf")) {
    const std::string& q = erf->inputs(0);
    if (const Node* div = m.op(q, "div")) {
      const auto c = m.scalar(div->inputs(1));
      approximate = "none";
      return div->inputs(0) == x && c && near(*c, std::sqrt(2.0));
    }
    const Node* mul = m.op(q, "mul_scalar");
    approximate = "none";
    return mul && mul->inputs(0) == x && near(scalar_attr(*mul), std::sqrt(0.5));
  }
  const Node* tanh = m.op(one->inputs(0), "tanh");
  if (!tanh) return false;
  const Node* outer = m.op(tanh->inputs(0), "mul_scalar");
  if (!outer || !near(scalar_attr(*outer), std::sqrt(2.0 / M_PI))) return false;
  const Node* sum = m.op(outer->inputs(0), "add");
  if (!sum) return false;
  for (const auto& [lhs, cubic] : orders(*sum)) {
    if (lhs != x) continue;
    const Node* k = m.op(cubic, "mul_scalar");
    if (!k || !near(scalar_attr(*k), 0.044715)) continue;
    const std::string& cube = k->inputs(0);
    bool is_cube = false;
    if (const Node* p = m.op(cube, "pow")) {
      is_cube = p->inputs(0) == x && attrs_of(*p).f("exponent") == 3;
    } else if (const Node* mul = m.op(cube, "mul")) {
      for (const auto& [u, sq] : orders(*mul)) {
        const Node* s = m.op(sq, "mul");
        if (u == x && s && s->inputs(0) == x && s->inputs(1) == x) is_cube = true;
      }
    }
    if (is_cube) {
      approximate = "tanh";
      return true;
    }
  }
  return false;
}

std::optional<Fused> match_gelu(const Matcher& m, const Node& n) {
  std::string approximate;
  auto fused = [&](const std::string& x) {
    return Fused{"gelu", {x}, ops::Attrs().set("approximate", approximate)};
  };
  // 0.5 * (x * gate)
  if (n.op() == "mul_scalar" && scalar_attr(n) == 0.5) {
    if (const Node* mul = m.op(n.inputs(0), "mul"))
      for (const auto& [x, gate] : orders(*mul))
        if (match_gelu_gate(m, gate, x, approximate)) return fused(x);
  }
  // (0.5 * x) * gate
  if (n.op() == "mul") {
    for (const auto& [half, gate] : orders(n)) {
      const Node* h = m.op(half, "mul_scalar");
      if (h && scalar_attr(*h) == 0.5 && match_gelu_gate(m, gate, h->inputs(0), approximate))
        return fused(h->inputs(0));
    }
  }
  return std::nullopt;
}

// --- linear_gelu: gelu(linear(x, W, b)) when the GELU is the product's only reader ---
std::optional<Fused> match_linear_gelu(const Matcher& m, const Node& n) {
  if (n.op() != "gelu") return std::nullopt;
  const Node* lin = m.op(n.inputs(0), "linear");
  if (!lin || m.readers(n.inputs(0)) != 1) return std::nullopt;
  return Fused{"linear_gelu", {lin->inputs().begin(), lin->inputs().end()},
               ops::Attrs().set("approximate", attrs_of(n).s("approximate"))};
}

// Keeps the elements of `field` that `keep` accepts, in order.
template <typename T, typename Keep>
void keep_if(google::protobuf::RepeatedPtrField<T>& field, Keep keep) {
  google::protobuf::RepeatedPtrField<T> kept;
  for (T& item : field)
    if (keep(item)) *kept.Add() = std::move(item);
  field.Swap(&kept);
}

// --- attention: softmax(scale q k^T, masked) v ---

// q and k when `s` is matmul(q, k^T), k transposed by permute [0, 1, 3, 2] or trans_b.
std::optional<std::pair<std::string, std::string>> match_scores(const Matcher& m,
                                                                const std::string& s) {
  const Node* mm = m.op(s, "matmul");
  if (!mm) return std::nullopt;
  const ops::Attrs a = attrs_of(*mm);
  if (a.b("trans_a")) return std::nullopt;
  if (a.b("trans_b")) return std::make_pair(mm->inputs(0), mm->inputs(1));
  const Node* t = m.op(mm->inputs(1), "permute");
  if (!t || attrs_of(*t).ints("order") != std::vector<int64_t>{0, 1, 3, 2}) return std::nullopt;
  return std::make_pair(mm->inputs(0), t->inputs(0));
}

// A constant bool mask, [T, T] after leading 1s, true exactly above the diagonal.
bool is_causal_mask(const Tensor* mask, int64_t t) {
  if (!mask || mask->dtype() != DType::Bool || mask->dim() < 2 || mask->size(-2) != t ||
      mask->size(-1) != t)
    return false;
  // A leading dim other than 1 (e.g. [T, 1, T]) would vary the mask over batch or heads.
  for (int64_t d = 0; d + 2 < mask->dim(); ++d)
    if (mask->size(d) != 1) return false;
  for (int64_t i = 0; i < t; ++i)
    for (int64_t j = 0; j < t; ++j)
      if ((element_as_int(*mask, i * t + j) != 0) != (j > i)) return false;
  return true;
}

// The key padding mask `mask` (bool [B, Tk], true: attend) when `masked` is ~mask reshaped to
// [B, 1, 1, Tk], as masked_fill(scores, ~mask[:, None, None, :], -inf) writes it (ONNX's Not
// imports as eq(x, false)). A reshape from [B, Tk] to [B, 1, 1, Tk] moves no element, however
// the chain of reshapes gets there.
std::optional<std::string> match_key_padding(const Matcher& m, const std::string& masked,
                                             int64_t b, int64_t tk) {
  const Node* negate = m.op(masked, "eq");
  if (!negate || m.shape(masked) != Shape{b, 1, 1, tk}) return std::nullopt;
  const Tensor* f = m.constant(negate->inputs(1));
  if (!f || f->dtype() != DType::Bool || f->numel() != 1 || element_as_int(*f, 0) != 0)
    return std::nullopt;
  std::string mask = negate->inputs(0);
  while (const Node* r = m.op(mask, "reshape")) mask = r->inputs(0);
  if (m.type(mask).dtype != DType::Bool || m.shape(mask) != Shape{b, tk}) return std::nullopt;
  return mask;
}

std::optional<Fused> match_attention(const Matcher& m, const Node& n) {
  if (n.op() != "matmul") return std::nullopt;
  const ops::Attrs a = attrs_of(n);
  if (a.b("trans_a") || a.b("trans_b")) return std::nullopt;
  // Dropout of the probabilities (a training-mode export) becomes sdpa's own: its masks are
  // drawn otherwise, still keyed by the dropout's key, the same in every layout.
  std::string probs = n.inputs(0);
  ops::Attrs dropout;
  const Node* d = m.op(probs, "dropout");
  // Another reader of the dropped probabilities would keep the elementwise dropout, and its
  // mask would differ from sdpa's: then the attention stays unfused.
  if (d && m.readers(probs) != 1) return std::nullopt;
  if (d) {
    const ops::Attrs da = attrs_of(*d);
    dropout.set("dropout", da.f("p")).set("key", da.i("key"));
    probs = d->inputs(0);
  }
  const Node* sm = m.op(probs, "softmax");
  if (!sm || attrs_of(*sm).i("dim") != 3 || m.shape(sm->inputs(0)).size() != 4) return std::nullopt;
  const Shape& scores = m.shape(sm->inputs(0));
  const int64_t tq = scores[2], tk = scores[3];
  std::string x = sm->inputs(0);
  // Two masks fuse, in either order: a causal one, -inf (or a float's lowest, which exp turns
  // into 0 alike) above the diagonal, and a key padding one of -inf. Where a row has no key
  // left, sdpa gives 0: the graph gives the mean of v under `lowest`, which a causal mask alone
  // never leaves, and NaN under -inf. Other masks stay unfused.
  bool causal = false;
  double causal_fill = 0;
  std::string key_padding;
  while (const Node* fill = m.op(x, "masked_fill")) {
    const double fill_value = scalar_attr(*fill);
    if (!causal && fill_value <= -1e30 && tq == tk &&
        is_causal_mask(m.constant(fill->inputs(1)), tq)) {
      causal = true;
      causal_fill = fill_value;
    } else if (key_padding.empty() && std::isinf(fill_value) && fill_value < 0) {
      const auto mask = match_key_padding(m, fill->inputs(1), scores[0], tk);
      if (!mask) return std::nullopt;
      key_padding = *mask;
    } else {
      return std::nullopt;
    }
    x = fill->inputs(0);
  }
  // With both, a causal `lowest` would let a row whose past keys are all padded attend to
  // its future ones.
  if (causal && !key_padding.empty() && !std::isinf(causal_fill)) return std::nullopt;
  double scale = 1;
  if (const Node* div = m.op(x, "div")) {
    const auto c = m.scalar(div->inputs(1));
    if (!c || *c == 0) return std::nullopt;
    scale = 1 / *c;
    x = div->inputs(0);
  } else if (const Node* mul = m.op(x, "mul_scalar")) {
    scale = scalar_attr(*mul);
    x = mul->inputs(0);
  }
  const auto qk = match_scores(m, x);
  if (!qk || !(scale > 0)) return std::nullopt;
  return Fused{"sdpa",
               {qk->first, qk->second, n.inputs(1), key_padding},
               dropout.set("causal", causal).set("scale", scale)};
}

using Pattern = std::function<std::optional<Fused>(const Matcher&, const Node&)>;

// Replaces every match of `pattern`, last nodes first. A fused node must infer exactly the types
// the pattern's last node had, or the match is left alone.
void apply(Graph& g, const std::map<std::string, ops::TensorMeta>& metas,
           const std::map<std::string, Tensor>& constants, const Pattern& pattern) {
  const Matcher m(g, metas, constants);
  // Every name in the graph, so that a fused node's extra outputs take none of them.
  std::set<std::string> taken;
  for (const auto& [name, meta] : metas) taken.insert(name);
  for (const ValueInfo& v : g.values()) taken.insert(v.name());
  for (const ValueInfo& v : g.inputs()) taken.insert(v.name());
  for (const Initializer& v : g.initializers()) taken.insert(v.name());
  for (const Node& n : g.nodes())
    for (const std::string& out : n.outputs()) taken.insert(out);
  for (int i = g.nodes_size() - 1; i >= 0; --i) {
    const Node& n = g.nodes(i);
    std::optional<Fused> f;
    try {
      f = pattern(m, n);
    } catch (const std::exception&) {
      continue;  // a node with unexpected attributes is not the pattern
    }
    if (!f) continue;
    const ops::OpDef& def = ops::Registry::get().at(f->op);
    Node fused;
    std::vector<ops::TensorMeta> out;
    try {
      std::vector<ops::TensorMeta> in;
      for (const std::string& v : f->inputs)
        in.push_back(v.empty() ? ops::TensorMeta{{}, DType::F32, false} : metas.at(v));
      const ops::Attrs attrs = ops::complete_attrs(def, f->attrs);
      out = ops::infer(def, in, attrs);
      // The fused op may have more outputs (layer_norm's mean and rstd), never fewer.
      if (out.size() < size_t(n.outputs_size())) continue;
      for (int k = 0; k < n.outputs_size(); ++k) {
        const auto& want = metas.at(n.outputs(k));
        if (out[size_t(k)].shape != want.shape || out[size_t(k)].dtype != want.dtype)
          throw Error("type differs");
      }
      set_attrs(fused, attrs);
    } catch (const std::exception&) {
      continue;
    }
    fused.set_name(n.name());
    fused.set_op(f->op);
    fused.set_module_path(n.module_path());
    for (const std::string& v : f->inputs) fused.add_inputs(v);
    *fused.mutable_outputs() = n.outputs();
    for (size_t k = size_t(n.outputs_size()); k < out.size(); ++k) {
      const std::string base =
          n.outputs(0) + ":" + def.outputs[std::min(k, def.outputs.size() - 1)];
      std::string extra = base;
      for (int suffix = 1; !taken.insert(extra).second; ++suffix)
        extra = base + ":" + std::to_string(suffix);
      fused.add_outputs(extra);
      ValueInfo* info = g.add_values();
      info->set_name(extra);
      *info->mutable_type() = tensor_type(out[k].shape, out[k].dtype);
    }
    *g.mutable_nodes(i) = fused;
  }
}

}  // namespace

void fuse_patterns(Graph& graph, const std::map<std::string, ops::TensorMeta>& metas,
                   const std::map<std::string, Tensor>& constants) {
  for (const Pattern& p :
       std::vector<Pattern>{match_linear, match_layer_norm, match_gelu, match_attention,
                            match_linear_gelu}) {
    apply(graph, metas, constants, p);
    prune(graph);
  }
}

void prune(Graph& graph) {
  std::set<std::string> needed;
  for (const ValueInfo& v : graph.outputs()) needed.insert(v.name());
  std::vector<bool> live(size_t(graph.nodes_size()), false);
  for (int i = graph.nodes_size() - 1; i >= 0; --i) {
    const Node& n = graph.nodes(i);
    for (const std::string& out : n.outputs())
      live[size_t(i)] = live[size_t(i)] || needed.count(out);
    if (live[size_t(i)])
      for (const std::string& in : n.inputs()) needed.insert(in);
  }
  std::set<std::string> produced;
  for (int i = 0; i < graph.nodes_size(); ++i)
    if (live[size_t(i)])
      for (const std::string& out : graph.nodes(i).outputs()) produced.insert(out);
  // Moves, not copies: initializers carry the model's weights.
  int next = 0;
  keep_if(*graph.mutable_nodes(), [&](const Node&) { return live[size_t(next++)]; });
  keep_if(*graph.mutable_initializers(),
          [&](const Initializer& init) { return needed.count(init.name()) > 0; });
  keep_if(*graph.mutable_values(),
          [&](const ValueInfo& v) { return produced.count(v.name()) > 0; });
}

}  // namespace merak::graph::onnx_detail
