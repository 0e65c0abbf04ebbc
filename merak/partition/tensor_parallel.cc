#include "merak/partition/tensor_parallel.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "merak/graph/convert.h"
#include "merak/partition/analysis.h"
#include "merak/partition/tp_split.h"

namespace merak::partition {
namespace {

// A table this large, or tied to an LM head, is split over the vocabulary; smaller ones (segment
// types, classifier heads) stay whole.
constexpr int64_t kVocabRows = 1024;

bool is_unary_elementwise(const std::string& op) {
  static const std::set<std::string> ops = {"gelu", "relu", "tanh", "exp", "log", "neg",
                                            "sqrt", "rsqrt", "erf", "pow", "add_scalar",
                                            "mul_scalar", "dropout", "cast", "contiguous"};
  return ops.count(op) > 0;
}

bool is_broadcasting(const std::string& op) {
  static const std::set<std::string> ops = {"add", "sub", "mul", "div", "masked_fill", "where"};
  return ops.count(op) > 0;
}

std::string shape_text(const Shape& s) { return shape_str(s); }

// A product with a weight: linear (weight [out, in], optional bias) or matmul(x, W) with W a
// 2-D parameter ([in, out], or [out, in] with trans_b), as ONNX exports with folded transposes;
// or linear_gelu, which applies GELU to the whole product and so can only be column-parallel
// (row-parallel partial products must be summed before any GELU).
struct Dense {
  int x = -1, w = -1, bias = -1;
  int64_t out_dim = 0, in_dim = 1;  // of the weight
  bool column_only = false;
};

// A group of nodes between column-parallel and row-parallel linears whose values are split.
struct Region {
  std::map<int, Split> states;  // value -> split
  std::set<int> column, row, interior;
  bool attention = false;
  std::string failure;  // why it is not a region ("" when it is)
};

class Pass {
 public:
  Pass(const graph::Model& model, int64_t tp) : model_(model), tp_(tp), f_(analyze(model.graph())) {}

  TpPass run();

 private:
  const graph::Graph& g() const { return model_.graph(); }
  const NodeFacts& node(int n) const { return f_.nodes[size_t(n)]; }
  const ValueFacts& value(int v) const { return f_.values[size_t(v)]; }
  const Shape& shape(int v) const { return value(v).meta.shape; }
  bool trainable_param(int v) const { return v >= 0 && value(v).kind == ValueFacts::Kind::Param; }
  std::optional<Dense> dense(int n) const;

  void find_vocab();
  Region grow(int row_linear) const;
  // States of every port of node n implied by `known` on value v (nullopt entries: replicated
  // inputs). False when the op cannot carry the split.
  bool rule(int n, int v, const Split& known, std::vector<std::pair<int, std::optional<Split>>>* out,
            std::string* why) const;
  void check_divisible(const Region& r) const;
  void commit(const Region& r);
  TpRank build(int64_t rank) const;

  const graph::Model& model_;
  int64_t tp_;
  GraphFacts f_;
  // Decisions.
  std::map<int, Split> states_;                 // split values of committed regions
  std::map<int, std::string> column_, row_;     // linear node -> its region's kind
  std::set<int> interior_;
  std::set<int> claimed_;                       // nodes in some region
  std::map<int, int64_t> vocab_params_;         // vocabulary-parallel tables -> their vocab dim
  std::set<int> vocab_embeddings_, vocab_heads_, vocab_losses_;
  std::map<int, int> region_of_;                // node -> region index (for tp_copy sharing)
  int regions_ = 0, attention_regions_ = 0;
  std::vector<std::string> notes_;
};

std::optional<Dense> Pass::dense(int n) const {
  const NodeFacts& nf = node(n);
  Dense d;
  if (nf.op->name == "linear" || nf.op->name == "linear_gelu") {
    d.x = nf.inputs[0];
    d.w = nf.inputs[1];
    d.bias = nf.inputs.size() > 2 ? nf.inputs[2] : -1;
    d.column_only = nf.op->name == "linear_gelu";
  } else if (nf.op->name == "matmul" && !nf.attrs.b("trans_a") && nf.inputs[1] >= 0 &&
             shape(nf.inputs[1]).size() == 2) {
    d.x = nf.inputs[0];
    d.w = nf.inputs[1];
    const bool t = nf.attrs.b("trans_b");
    d.out_dim = t ? 0 : 1;
    d.in_dim = t ? 1 : 0;
  } else {
    return std::nullopt;
  }
  if (!trainable_param(d.w)) return std::nullopt;
  return d;
}

bool Pass::rule(int n, int v, const Split& known,
                std::vector<std::pair<int, std::optional<Split>>>* out, std::string* why) const {
  const NodeFacts& nf = node(n);
  const std::string& op = nf.op->name;
  auto fail = [&](const std::string& reason) {
    *why = "'" + nf.node->name() + "' (" + op + "): " + reason;
    return false;
  };
  const int64_t rank_of_v = int64_t(shape(v).size());
  if (is_unary_elementwise(op)) {
    for (int id : nf.inputs)
      if (id >= 0) out->push_back({id, known});
    for (int id : nf.outputs) out->push_back({id, known});
    return true;
  }
  if (is_broadcasting(op)) {
    // The output's split, then each input's: split where it spans the dim, whole where it is
    // broadcast along it.
    const int y = nf.outputs[0];
    const int64_t ry = int64_t(shape(y).size());
    Split sy = known;
    sy.axis = known.axis + (ry - rank_of_v);
    if (shape(v)[size_t(known.axis)] != shape(y)[size_t(sy.axis)])
      return fail("a broadcast operand cannot carry the split");
    out->push_back({y, sy});
    for (int id : nf.inputs) {
      if (id < 0) continue;
      const int64_t ri = int64_t(shape(id).size());
      const int64_t a = sy.axis - (ry - ri);
      if (a < 0 || shape(id)[size_t(a)] == 1) {
        out->push_back({id, std::nullopt});
      } else if (shape(id)[size_t(a)] == shape(y)[size_t(sy.axis)]) {
        Split si = sy;
        si.axis = a;
        out->push_back({id, si});
      } else {
        return fail("operand sizes disagree along the split dim");
      }
    }
    return true;
  }
  if (op == "reshape") {
    const int x = nf.inputs[0], y = nf.outputs[0];
    const bool from_input = v == x;
    const auto other = reshape_split(shape(v), known, shape(from_input ? y : x));
    if (!other) return fail("the split of " + shape_text(shape(v)) + " does not fall on one dim of " +
                            shape_text(shape(from_input ? y : x)));
    out->push_back({x, from_input ? known : *other});
    out->push_back({y, from_input ? *other : known});
    return true;
  }
  if (op == "permute" || op == "transpose") {
    const int x = nf.inputs[0], y = nf.outputs[0];
    const int64_t r = int64_t(shape(x).size());
    std::vector<int64_t> order;
    if (op == "permute") {
      order = nf.attrs.ints("order");
      for (int64_t& d : order) d = d < 0 ? d + r : d;
    } else {
      for (int64_t d = 0; d < r; ++d) order.push_back(d);
      int64_t a = nf.attrs.i("dim0"), b = nf.attrs.i("dim1");
      std::swap(order[size_t(a < 0 ? a + r : a)], order[size_t(b < 0 ? b + r : b)]);
    }
    Split sx = known, sy = known;
    if (v == x) {
      sy.axis = int64_t(std::find(order.begin(), order.end(), known.axis) - order.begin());
    } else {
      sx.axis = order[size_t(known.axis)];
    }
    out->push_back({x, sx});
    out->push_back({y, sy});
    return true;
  }
  if (op == "split") {
    const int64_t dim = normalize_dim(nf.attrs.i("dim"), rank_of_v);
    if (dim == known.axis) return fail("it splits along the split dim");
    out->push_back({nf.inputs[0], known});
    for (int id : nf.outputs) out->push_back({id, known});
    return true;
  }
  if (op == "softmax" || op == "log_softmax") {
    if (normalize_dim(nf.attrs.i("dim"), rank_of_v) == known.axis)
      return fail("it normalises along the split dim");
    out->push_back({nf.inputs[0], known});
    out->push_back({nf.outputs[0], known});
    return true;
  }
  if (op == "sdpa") {
    // Heads are independent: q, k, v, out and lse split along dim 1 alike; the mask is whole.
    if (known.axis != 1) return fail("attention can only be split over heads (dim 1)");
    for (size_t i = 0; i < nf.inputs.size(); ++i) {
      const int id = nf.inputs[i];
      if (id < 0) continue;
      if (i == 3) {
        out->push_back({id, std::nullopt});
      } else if (shape(id)[1] != shape(v)[1]) {
        return fail("q, k and v have different head counts");
      } else {
        out->push_back({id, known});
      }
    }
    for (int id : nf.outputs) out->push_back({id, known});
    return true;
  }
  if (op == "matmul") {
    // Batch dims (not the last two) split alike on both operands, whole where broadcast.
    const int y = nf.outputs[0];
    const int64_t ry = int64_t(shape(y).size());
    Split sy = known;
    sy.axis = known.axis + (ry - rank_of_v);
    if (sy.axis >= ry - 2 || known.axis >= rank_of_v - 2)
      return fail("only batch dims of a matmul can carry the split");
    out->push_back({y, sy});
    for (int id : nf.inputs) {
      const int64_t ri = int64_t(shape(id).size());
      const int64_t a = sy.axis - (ry - ri);
      if (a < 0 || shape(id)[size_t(a)] == 1) {
        out->push_back({id, std::nullopt});
      } else {
        Split si = sy;
        si.axis = a;
        out->push_back({id, si});
      }
    }
    return true;
  }
  return fail("no rule carries a split through this op");
}

Region Pass::grow(int row_linear) const {
  Region r;
  const int x0 = dense(row_linear)->x;
  Split start;
  start.axis = int64_t(shape(x0).size()) - 1;
  start.parts = shape(x0).back();
  r.states[x0] = start;
  r.row.insert(row_linear);
  std::deque<int> queue = {x0};
  std::set<int> visited = {row_linear};
  auto assign = [&](int id, const Split& s) {
    auto it = r.states.find(id);
    if (it == r.states.end()) {
      if (value(id).kind != ValueFacts::Kind::Node && value(id).kind != ValueFacts::Kind::Param) {
        r.failure = "reaches '" + value(id).name + "', which is not computed inside the region";
        return false;
      }
      r.states[id] = s;
      queue.push_back(id);
      return true;
    }
    if (it->second.coarsens(s)) return true;
    if (s.coarsens(it->second)) {
      it->second = s;
      return true;
    }
    r.failure = "'" + value(id).name + "' would be split two different ways";
    return false;
  };
  auto visit = [&](int n, int v) {
    if (visited.count(n)) return true;
    if (claimed_.count(n)) {
      r.failure = "'" + node(n).node->name() + "' already belongs to another region";
      return false;
    }
    visited.insert(n);
    const NodeFacts& nf = node(n);
    const Split& s = r.states.at(v);
    if (const auto d = dense(n)) {
      const bool last = s.axis == int64_t(shape(v).size()) - 1;
      if (last && v == nf.outputs[0]) {
        r.column.insert(n);
        return true;
      }
      if (last && v == d->x && !d->column_only) {
        r.row.insert(n);
        return true;
      }
      if (last && v == d->x) {
        r.failure = "'" + nf.node->name() + "' (" + nf.op->name +
                    ") applies GELU to its whole product, so it cannot be row-parallel";
        return false;
      }
      r.failure = "'" + nf.node->name() + "' meets the split on a dim it cannot split";
      return false;
    }
    std::vector<std::pair<int, std::optional<Split>>> ports;
    std::string why;
    if (!rule(n, v, s, &ports, &why)) {
      r.failure = why;
      return false;
    }
    r.interior.insert(n);
    if (nf.op->name == "sdpa" || nf.op->name == "matmul") r.attention = true;
    for (const auto& [id, st] : ports)
      if (st && !assign(id, *st)) return false;
    return true;
  };
  while (!queue.empty()) {
    const int v = queue.front();
    queue.pop_front();
    // A parameter met by a broadcasting op (a bias added after a product) is split with the
    // values; every use of it must then be inside the region too.
    const int p = value(v).producer;
    if (value(v).kind == ValueFacts::Kind::Node) {
      if (!visit(p, v)) return r;
    }
    for (int q : value(v).readers)
      if (!visit(q, v)) return r;
    if (std::find(f_.outputs.begin(), f_.outputs.end(), v) != f_.outputs.end()) {
      r.failure = "'" + value(v).name + "' is a graph output";
      return r;
    }
  }
  if (r.column.empty()) r.failure = "no column-parallel linear feeds it";
  return r;
}

void Pass::check_divisible(const Region& r) const {
  // The coarsest units of the region decide: heads for attention, features for an MLP. Name
  // them as attention heads where a value with that many units enters or leaves attention.
  int64_t fewest = 0;
  for (const auto& [v, split] : r.states)
    if (fewest == 0 || split.parts < fewest) fewest = split.parts;
  if (fewest % tp_ == 0) return;
  auto attention = [&](int v) {
    std::vector<int> nodes = value(v).readers;
    if (value(v).producer >= 0) nodes.push_back(value(v).producer);
    for (int n : nodes)
      if (node(n).op->name == "sdpa" || node(n).op->name == "matmul") return true;
    return false;
  };
  int site = -1;
  for (const auto& [v, split] : r.states)
    if (split.parts == fewest && (site < 0 || (attention(v) && !attention(site)))) site = v;
  const ValueFacts& v = value(site);
  std::ostringstream os;
  os << "tensor parallelism over tp " << tp_ << ": '" << v.name << "' " << shape_text(v.meta.shape)
     << " would be split along dim " << r.states.at(site).axis << " into " << fewest
     << (attention(site) ? " attention heads" : " features") << ", not divisible by " << tp_;
  MERAK_FAIL(os.str());
}

void Pass::find_vocab() {
  // Tables indexed by a graph input (token ids), and LM heads: products whose logits feed only
  // cross_entropy or leave the graph. A table is vocabulary-parallel when all its uses are.
  std::map<int, std::vector<int>> uses;  // param -> nodes using it
  for (size_t n = 0; n < f_.nodes.size(); ++n)
    for (int id : f_.nodes[n].inputs)
      if (trainable_param(id)) uses[id].push_back(int(n));
  auto head_ok = [&](int n) {
    if (!dense(n) || dense(n)->column_only) return false;
    const int y = node(n).outputs[0];
    const bool is_output = std::find(f_.outputs.begin(), f_.outputs.end(), y) != f_.outputs.end();
    for (int q : value(y).readers)
      if (node(q).op->name != "cross_entropy" || node(q).inputs[0] != y) return false;
    // Logits either leave the graph (gathered) or feed the loss (kept split), not both.
    return is_output != !value(y).readers.empty();
  };
  auto embedding_ok = [&](int n) {
    const NodeFacts& nf = node(n);
    return nf.op->name == "embedding" && nf.inputs[1] >= 0 &&
           value(nf.inputs[1]).kind == ValueFacts::Kind::Input;
  };
  for (const auto& [param, nodes] : uses) {
    bool all = true, head = false, embedding = false, loss = false;
    int64_t dim = -1;  // the vocabulary dim of the table
    auto agree = [&](int64_t d) {
      if (dim >= 0 && dim != d) all = false;
      dim = d;
    };
    for (int n : nodes) {
      const NodeFacts& nf = node(n);
      if (nf.inputs[0] == param && embedding_ok(n)) {
        embedding = true;
        agree(0);
      } else if (dense(n) && dense(n)->w == param && head_ok(n)) {
        head = true;
        agree(dense(n)->out_dim);
        loss = loss || !value(nf.outputs[0]).readers.empty();
      } else {
        all = false;
      }
    }
    if (!all || !(head || embedding)) continue;
    const int64_t rows = shape(param)[size_t(dim)];
    if (rows < kVocabRows && !(head && embedding)) continue;
    MERAK_CHECK(rows >= tp_, "tensor parallelism over tp ", tp_, ": '", value(param).name,
                "' has ", rows, " vocabulary rows, fewer than tp");
    vocab_params_[param] = dim;
    for (int n : nodes) {
      claimed_.insert(n);
      if (node(n).op->name == "embedding") {
        vocab_embeddings_.insert(n);
      } else {
        vocab_heads_.insert(n);
        const Dense d = *dense(n);
        if (d.bias >= 0) vocab_params_[d.bias] = 0;
        for (int q : value(node(n).outputs[0]).readers) vocab_losses_.insert(q);
      }
    }
    const int64_t c0 = vocab_range(rows, tp_, 0).second;
    const int64_t cl = vocab_range(rows, tp_, tp_ - 1).second;
    std::ostringstream os;
    os << "vocabulary-parallel '" << value(param).name << "' (";
    if (embedding) os << "embedding" << (head ? " + " : "");
    if (head) os << (loss ? "LM head and loss" : "LM head, logits gathered");
    os << "): " << rows << " rows, " << c0 << " on rank 0";
    if (cl != c0) os << ", " << cl << " on the last";
    notes_.push_back(os.str());
  }
}

void Pass::commit(const Region& r) {
  const int index = regions_++;
  if (r.attention) ++attention_regions_;
  for (const auto& [v, s] : r.states) states_[v] = s;
  const std::string kind = r.attention ? "attention" : "mlp";
  for (int n : r.column) {
    column_[n] = kind;
    claimed_.insert(n);
    region_of_[n] = index;
  }
  for (int n : r.row) {
    row_[n] = kind;
    claimed_.insert(n);
    region_of_[n] = index;
  }
  for (int n : r.interior) {
    interior_.insert(n);
    claimed_.insert(n);
    region_of_[n] = index;
  }
}

// Copies of whole-tensor bytes: the boxes of `full` (shape full_shape) concatenated along dim.
std::string slice_bytes(const std::string& full, const Shape& full_shape, size_t elem,
                        const ShardSpec& spec) {
  std::vector<int64_t> stride(full_shape.size(), 1);
  for (size_t d = full_shape.size(); d-- > 1;) stride[d - 1] = stride[d] * full_shape[d];
  // Each box is copied in row-major order; boxes then concatenate along concat_dim, which for
  // concat_dim 0 is simply one after the other, and otherwise interleaves rows.
  std::vector<std::vector<char>> parts;
  for (const BoxSpec& b : spec.boxes) {
    int64_t n = 1;
    for (int64_t s : b.sizes) n *= s;
    std::vector<char> out(size_t(n) * elem);
    std::vector<int64_t> idx(b.sizes.size(), 0);
    for (int64_t i = 0; i < n; ++i) {
      int64_t off = 0;
      for (size_t d = 0; d < idx.size(); ++d) off += (b.offsets[d] + idx[d]) * stride[d];
      std::memcpy(out.data() + size_t(i) * elem, full.data() + size_t(off) * elem, elem);
      for (size_t d = idx.size(); d-- > 0;) {
        if (++idx[d] < b.sizes[d]) break;
        idx[d] = 0;
      }
    }
    parts.push_back(std::move(out));
  }
  // Concatenate: rows of the dims before concat_dim interleave the parts.
  const size_t dim = size_t(spec.concat_dim);
  int64_t rows = 1;
  for (size_t d = 0; d < dim; ++d) rows *= spec.boxes[0].sizes[d];
  std::string out;
  for (int64_t r = 0; r < rows; ++r)
    for (size_t p = 0; p < parts.size(); ++p) {
      const size_t row_bytes = parts[p].size() / size_t(rows);
      out.append(parts[p].data() + size_t(r) * row_bytes, row_bytes);
    }
  return out;
}

ShardSpec box_spec(const Shape& full, const std::string& split, int64_t dim,
                   const std::vector<std::pair<int64_t, int64_t>>& ranges) {
  ShardSpec s;
  s.split = split;
  s.full_shape = full;
  s.concat_dim = dim;
  for (const auto& [start, length] : ranges) {
    BoxSpec b;
    b.offsets.assign(full.size(), 0);
    b.sizes = full;
    b.offsets[size_t(dim)] = start;
    b.sizes[size_t(dim)] = length;
    s.boxes.push_back(b);
  }
  return s;
}

TpRank Pass::build(int64_t rank) const {
  const graph::Graph& src = g();
  TpRank out;
  out.model.set_opset_version(model_.opset_version());
  out.model.set_producer(model_.producer());
  *out.model.mutable_metadata() = model_.metadata();
  graph::Graph& dst = *out.model.mutable_graph();
  dst.set_name(src.name());
  *dst.mutable_inputs() = src.inputs();

  // Parameter shards.
  std::map<int, ShardSpec> specs;
  for (const auto& [p, dim] : vocab_params_) {
    const auto [start, count] = vocab_range(shape(p)[size_t(dim)], tp_, rank);
    specs[p] = box_spec(shape(p), "vocab", dim, {{start, count}});
  }
  for (const auto& [v, s] : states_)  // biases split inside regions
    if (value(v).kind == ValueFacts::Kind::Param)
      specs[v] = box_spec(shape(v), "column", s.axis, split_ranges(s, tp_, rank));
  for (const auto& [n, kind] : column_) {
    const Dense d = *dense(n);
    const Split& s = states_.at(node(n).outputs[0]);
    const auto ranges = split_ranges(s, tp_, rank);
    specs[d.w] = box_spec(shape(d.w), "column", d.out_dim, ranges);
    if (d.bias >= 0) specs[d.bias] = box_spec(shape(d.bias), "column", 0, ranges);
  }
  for (const auto& [n, kind] : row_) {
    const Dense d = *dense(n);
    const Split& s = states_.at(d.x);
    specs[d.w] = box_spec(shape(d.w), "row", d.in_dim, split_ranges(s, tp_, rank));
  }
  for (const graph::Initializer& init : src.initializers()) {
    const int id = f_.find(init.name());
    auto it = specs.find(id);
    ShardSpec spec;
    if (it != specs.end()) {
      spec = it->second;
    } else {
      spec.full_shape = shape(id);
      spec.boxes.push_back(BoxSpec{Shape(shape(id).size(), 0), shape(id)});
    }
    graph::Initializer& local = *dst.add_initializers();
    local = init;
    Shape local_shape = spec.full_shape;
    if (!spec.boxes.empty() && !local_shape.empty()) {
      local_shape[size_t(spec.concat_dim)] = 0;
      for (const BoxSpec& b : spec.boxes) local_shape[size_t(spec.concat_dim)] += b.sizes[size_t(spec.concat_dim)];
    }
    *local.mutable_type() = graph::tensor_type(local_shape, value(id).meta.dtype);
    if (!init.data().empty() && spec.split != "replicated")
      local.set_data(slice_bytes(init.data(), spec.full_shape, dtype_size(value(id).meta.dtype), spec));
    out.shards[init.name()] = spec;
  }

  // Nodes, rewritten.
  auto group_attrs = [&](graph::Node& n) {
    ops::Attrs a = graph::attrs_of(n);
    a.set("group", kTpGroupPlaceholder).set("size", tp_);
    graph::set_attrs(n, a);
  };
  auto add_node = [&](const std::string& name, const std::string& op,
                      const std::vector<std::string>& inputs, const std::vector<std::string>& outputs,
                      const std::string& module) -> graph::Node& {
    graph::Node& n = *dst.add_nodes();
    n.set_name(name);
    n.set_op(op);
    for (const std::string& i : inputs) n.add_inputs(i);
    for (const std::string& o : outputs) n.add_outputs(o);
    n.set_module_path(module);
    return n;
  };
  std::map<std::pair<int, int>, std::string> copies;  // (region, value) -> its tp_copy output
  for (int n = 0; n < src.nodes_size(); ++n) {
    const graph::Node& orig = src.nodes(n);
    const NodeFacts& nf = node(n);
    const std::string& mod = orig.module_path();
    if (vocab_embeddings_.count(n)) {
      const int64_t start = vocab_range(shape(nf.inputs[0])[0], tp_, rank).first;
      graph::Node& e = add_node(orig.name(), "tp_embedding", {orig.inputs(0), orig.inputs(1)},
                                {orig.outputs(0) + "/tp_partial"}, mod);
      graph::set_attrs(e, ops::Attrs().set("start", start));
      graph::Node& r = add_node(orig.name() + "/tp_all_reduce", "tp_all_reduce",
                                {orig.outputs(0) + "/tp_partial"}, {orig.outputs(0)}, mod);
      group_attrs(r);
    } else if (vocab_heads_.count(n)) {
      const int64_t rows = shape(nf.inputs[1])[size_t(dense(n)->out_dim)];
      const std::string copy = orig.inputs(0) + "/tp_copy." + orig.name();
      group_attrs(add_node(orig.name() + "/tp_copy", "tp_copy", {orig.inputs(0)}, {copy}, mod));
      const int y = nf.outputs[0];
      const bool is_output = std::find(f_.outputs.begin(), f_.outputs.end(), y) != f_.outputs.end();
      graph::Node& lin = *dst.add_nodes();
      lin = orig;
      lin.set_inputs(0, copy);
      if (is_output) {
        lin.set_outputs(0, orig.outputs(0) + "/tp_local");
        std::vector<int64_t> sizes;
        for (int64_t r = 0; r < tp_; ++r) sizes.push_back(vocab_range(rows, tp_, r).second);
        graph::Node& gather = add_node(orig.name() + "/tp_all_gather", "tp_all_gather",
                                       {orig.outputs(0) + "/tp_local"}, {orig.outputs(0)}, mod);
        graph::set_attrs(gather, ops::Attrs()
                                     .set("group", kTpGroupPlaceholder)
                                     .set("size", tp_)
                                     .set("index", rank)
                                     .set("sizes", sizes)
                                     .set("dim", int64_t(-1)));
      }
    } else if (vocab_losses_.count(n)) {
      const int logits = nf.inputs[0];
      const int64_t rows = shape(logits).back();  // the whole vocabulary: logits before the split
      graph::Node& ce = *dst.add_nodes();
      ce = orig;
      ce.set_op("tp_cross_entropy");
      ops::Attrs a = graph::attrs_of(orig);
      a.set("start", vocab_range(rows, tp_, rank).first).set("group", kTpGroupPlaceholder).set("size", tp_);
      graph::set_attrs(ce, a);
    } else if (column_.count(n)) {
      const int region = region_of_.at(n);
      const auto key = std::make_pair(region, nf.inputs[0]);
      if (!copies.count(key)) {
        const std::string copy = orig.inputs(0) + "/tp_copy." + orig.name();
        group_attrs(add_node(orig.name() + "/tp_copy", "tp_copy", {orig.inputs(0)}, {copy}, mod));
        copies[key] = copy;
      }
      graph::Node& lin = *dst.add_nodes();
      lin = orig;
      lin.set_inputs(0, copies[key]);
    } else if (row_.count(n)) {
      const bool bias = dense(n)->bias >= 0;
      const std::string y = orig.outputs(0);
      graph::Node& product = *dst.add_nodes();
      product = orig;
      if (bias) product.mutable_inputs()->RemoveLast();
      product.set_outputs(0, y + "/tp_partial");
      group_attrs(add_node(orig.name() + "/tp_all_reduce", "tp_all_reduce", {y + "/tp_partial"},
                           {bias ? y + "/tp_reduced" : y}, mod));
      if (bias) add_node(orig.name() + "/tp_bias", "add", {y + "/tp_reduced", orig.inputs(2)}, {y}, mod);
    } else if (interior_.count(n) && orig.op() == "reshape") {
      graph::Node& r = *dst.add_nodes();
      r = orig;
      const int y = nf.outputs[0];
      const Split& s = states_.at(y);
      std::vector<int64_t> target = nf.attrs.ints("shape");
      if (target[size_t(s.axis)] != -1) target[size_t(s.axis)] = s.local(tp_);
      ops::Attrs a = graph::attrs_of(orig);
      a.set("shape", target);
      graph::set_attrs(r, a);
    } else {
      *dst.add_nodes() = orig;
    }
  }

  // Types of the rewritten graph, checked by inference.
  const GraphFacts local = analyze(dst);
  for (const graph::ValueInfo& o : src.outputs()) {
    graph::ValueInfo& info = *dst.add_outputs();
    info.set_name(o.name());
    const ValueFacts& v = local.values[size_t(local.find(o.name()))];
    *info.mutable_type() = graph::tensor_type(v.meta.shape, v.meta.dtype);
  }
  for (const ValueFacts& v : local.values)
    if (v.kind == ValueFacts::Kind::Node) {
      graph::ValueInfo& info = *dst.add_values();
      info.set_name(v.name);
      *info.mutable_type() = graph::tensor_type(v.meta.shape, v.meta.dtype);
    }
  return out;
}

TpPass Pass::run() {
  find_vocab();
  for (size_t n = 0; n < f_.nodes.size(); ++n) {
    // Each candidate is a region's row-parallel end, which linear_gelu cannot be.
    const std::optional<Dense> d = dense(int(n));
    if (!d || d->column_only || claimed_.count(int(n))) continue;
    const Region r = grow(int(n));
    if (!r.failure.empty()) continue;  // not the end of a region: left whole, or a column end
    check_divisible(r);
    commit(r);
  }
  // Linears neither split nor a region's row end, for the notes.
  std::ostringstream os;
  os << regions_ << " regions split (" << attention_regions_ << " attention over heads, "
     << regions_ - attention_regions_ << " MLP): " << column_.size() << " column-parallel and "
     << row_.size() << " row-parallel linears";
  notes_.insert(notes_.begin(), os.str());
  for (size_t n = 0; n < f_.nodes.size(); ++n) {
    const NodeFacts& nf = f_.nodes[n];
    if (dense(int(n)) && !claimed_.count(int(n)))
      notes_.push_back("'" + nf.node->name() + "' replicated on every tp rank");
  }
  TpPass out;
  for (int64_t r = 0; r < tp_; ++r) out.ranks.push_back(build(r));
  out.notes = notes_;
  return out;
}

}  // namespace

TpPass shard_tensor_parallel(const graph::Model& model, int64_t tp) {
  MERAK_CHECK(tp >= 1, "tp must be >= 1, got ", tp);
  if (tp == 1) {
    TpPass p;
    p.ranks.push_back(whole_model(model));
    return p;
  }
  return Pass(model, tp).run();
}

}  // namespace merak::partition
