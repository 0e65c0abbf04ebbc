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
#include "merak/graph/initializer_values.h"
#include "merak/partition/analysis.h"
#include "merak/partition/tp_split.h"

namespace merak::partition {
namespace {

// A table this large, or tied to an LM head, is split over the vocabulary; smaller ones (segment
// types, classifier heads) stay whole.
constexpr int64_t kVocabRows = 1024;

using ops::Sbp;
using ops::SbpSignature;

std::string shape_text(const Shape& s) { return shape_str(s); }

// Port i of a signature's inputs or outputs; ports it does not list are whole.
Sbp port(const std::vector<Sbp>& ports, size_t i) { return i < ports.size() ? ports[i] : Sbp(); }

// A signature that passes a split from value to value: it splits no weight, needs no other op,
// and every output is split (a partial sum would need a reduction inside the region).
bool carries(const SbpSignature& s) {
  if (s.weight >= 0 || !s.local_op.empty()) return false;
  for (const Sbp& o : s.outputs)
    if (!o.is_split()) return false;
  for (const Sbp& i : s.inputs)
    if (i.is_partial_sum()) return false;
  return true;
}

// Each node's signatures for its inferred shapes and attributes (empty: its op has no rule).
std::vector<std::vector<SbpSignature>> signatures_of(const GraphFacts& f) {
  std::vector<std::vector<SbpSignature>> out(f.nodes.size());
  auto metas = [&](const std::vector<int>& ids) {
    std::vector<ops::TensorMeta> m;
    for (int id : ids)
      m.push_back(id >= 0 ? f.values[size_t(id)].meta : ops::TensorMeta{{}, DType::F32, false});
    return m;
  };
  for (size_t n = 0; n < f.nodes.size(); ++n) {
    const NodeFacts& nf = f.nodes[n];
    if (nf.op->sharding.signatures)
      out[n] = nf.op->sharding.signatures(metas(nf.inputs), metas(nf.outputs), nf.attrs);
  }
  return out;
}

// A product with a weight (linear, linear_gelu, matmul by a 2-D parameter), read from the
// signatures that split its weight: column-parallel when one splits output 0 (the activation
// whole), row-parallel when one makes output 0 a partial sum (the activation split).
struct Dense {
  const SbpSignature* column = nullptr;
  const SbpSignature* row = nullptr;
  int x_port = -1, w_port = -1, bias_port = -1;  // inputs (bias: -1 when the op has none)
  int x = -1, w = -1, bias = -1;                 // their values (-1: absent)
  int64_t out_dim = 0, in_dim = 0;               // weight dims split column- and row-parallel
};

// A group of nodes between column-parallel and row-parallel linears whose values are split.
struct Region {
  std::map<int, Split> states;  // value -> split
  std::set<int> column, row, interior;
  bool attention = false;
  std::string failure;  // why it is not a region ("" when it is)
};

// A vocabulary-parallel node run on each rank by its signature's local op.
struct LocalCall {
  const SbpSignature* signature = nullptr;
  int64_t rows = 0;  // extent of the split dim (vocabulary rows or classes) before the split
};

class Pass {
 public:
  Pass(const graph::Model& model, int64_t tp)
      : model_(model), tp_(tp), f_(analyze(model.graph())), signatures_(signatures_of(f_)) {}

  TpPass run();

 private:
  const graph::Graph& g() const { return model_.graph(); }
  const NodeFacts& node(int n) const { return f_.nodes[size_t(n)]; }
  const ValueFacts& value(int v) const { return f_.values[size_t(v)]; }
  const Shape& shape(int v) const { return value(v).meta.shape; }
  bool trainable_param(int v) const { return v >= 0 && value(v).kind == ValueFacts::Kind::Param; }
  // The dim of value v that a Split layout names (negative dims counted from v's end).
  int64_t dim_of(int v, const Sbp& s) const {
    return normalize_dim(s.dim, int64_t(shape(v).size()));
  }
  // Whether every port of node n holding v is split along `dim` (and there is one).
  bool splits_at(int n, const SbpSignature& s, int v, int64_t dim) const;
  std::optional<Dense> dense(int n) const;
  const SbpSignature* lookup(int n, int table) const;
  const SbpSignature* class_loss(int n, int logits, int64_t dim) const;

  void find_vocab();
  Region grow(int row_linear) const;
  // States of every port of node n implied by `known` on value v (nullopt entries: replicated
  // inputs). False when the op cannot carry the split.
  bool rule(int n, int v, const Split& known,
            std::vector<std::pair<int, std::optional<Split>>>* out, std::string* why) const;
  void check_divisible(const Region& r) const;
  void commit(const Region& r);
  TpRank build(int64_t rank) const;

  const graph::Model& model_;
  int64_t tp_;
  GraphFacts f_;
  std::vector<std::vector<SbpSignature>> signatures_;  // per node, from the op registry
  // Decisions.
  std::map<int, Split> states_;                 // split values of committed regions
  std::map<int, std::string> column_, row_;     // linear node -> its region's kind
  std::set<int> interior_;
  std::set<int> claimed_;                       // nodes in some region
  std::map<int, int64_t> vocab_params_;         // vocabulary-parallel tables -> their vocab dim
  std::set<int> vocab_heads_;
  std::map<int, LocalCall> local_calls_;        // vocabulary-parallel lookups and losses
  std::map<int, int> region_of_;                // node -> region index (for tp_copy sharing)
  int regions_ = 0, attention_regions_ = 0;
  std::vector<std::string> notes_;
};

bool Pass::splits_at(int n, const SbpSignature& s, int v, int64_t dim) const {
  const NodeFacts& nf = node(n);
  bool found = false;
  auto check = [&](const std::vector<int>& ids, const std::vector<Sbp>& ports) {
    for (size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] != v) continue;
      const Sbp p = port(ports, i);
      if (!p.is_split() || dim_of(v, p) != dim) return false;
      found = true;
    }
    return true;
  };
  return check(nf.inputs, s.inputs) && check(nf.outputs, s.outputs) && found;
}

std::optional<Dense> Pass::dense(int n) const {
  const NodeFacts& nf = node(n);
  Dense d;
  for (const SbpSignature& s : signatures_[size_t(n)]) {
    if (s.weight < 0 || !s.local_op.empty() || size_t(s.weight) >= nf.inputs.size() ||
        !trainable_param(nf.inputs[size_t(s.weight)]) || s.outputs.empty())
      continue;
    if (s.outputs[0].is_split() && !d.column) d.column = &s;
    if (s.outputs[0].is_partial_sum() && !d.row) d.row = &s;
  }
  if (!d.column && !d.row) return std::nullopt;
  d.w_port = (d.column ? d.column : d.row)->weight;
  d.w = nf.inputs[size_t(d.w_port)];
  if (d.column) d.out_dim = dim_of(d.w, port(d.column->inputs, size_t(d.w_port)));
  if (d.row) d.in_dim = dim_of(d.w, port(d.row->inputs, size_t(d.w_port)));
  // The activation is whole in the column layout and split in the row one; the bias is split
  // with the outputs in the column layout and a partial sum in the row one.
  for (size_t i = 0; i < nf.inputs.size(); ++i) {
    if (int(i) == d.w_port) continue;
    const Sbp c = d.column ? port(d.column->inputs, i) : Sbp();
    const Sbp r = d.row ? port(d.row->inputs, i) : Sbp();
    const bool activation = d.column ? c.kind == Sbp::Kind::Broadcast : r.is_split();
    if (activation && d.x_port < 0) {
      d.x_port = int(i);
    } else if (c.is_split() || r.is_partial_sum()) {
      d.bias_port = int(i);
    }
  }
  if (d.x_port < 0) return std::nullopt;
  d.x = nf.inputs[size_t(d.x_port)];
  d.bias = d.bias_port >= 0 ? nf.inputs[size_t(d.bias_port)] : -1;
  return d;
}

// A lookup in `table` (embedding): a layout that splits the table, run by a local op, whose
// other inputs are graph inputs (token ids, known to every rank).
const SbpSignature* Pass::lookup(int n, int table) const {
  const NodeFacts& nf = node(n);
  for (const SbpSignature& s : signatures_[size_t(n)]) {
    if (s.weight < 0 || s.local_op.empty() || size_t(s.weight) >= nf.inputs.size() ||
        nf.inputs[size_t(s.weight)] != table)
      continue;
    bool ids = true;
    for (size_t i = 0; i < nf.inputs.size(); ++i)
      if (int(i) != s.weight)
        ids = ids && nf.inputs[i] >= 0 && value(nf.inputs[i]).kind == ValueFacts::Kind::Input;
    if (ids) return &s;
  }
  return nullptr;
}

// A loss over `logits` split along `dim` (cross_entropy over classes), run by a local op.
const SbpSignature* Pass::class_loss(int n, int logits, int64_t dim) const {
  for (const SbpSignature& s : signatures_[size_t(n)])
    if (s.weight < 0 && !s.local_op.empty() && splits_at(n, s, logits, dim) &&
        std::find(node(n).outputs.begin(), node(n).outputs.end(), logits) ==
            node(n).outputs.end())
      return &s;
  return nullptr;
}

bool Pass::rule(int n, int v, const Split& known,
                std::vector<std::pair<int, std::optional<Split>>>* out, std::string* why) const {
  const NodeFacts& nf = node(n);
  auto fail = [&](const std::string& reason) {
    *why = "'" + nf.node->name() + "' (" + nf.op->name + "): " + reason;
    return false;
  };
  if (nf.op->sharding.follows_elements) {
    const int x = nf.inputs[0], y = nf.outputs[0];
    const bool from_input = v == x;
    const auto other = reshape_split(shape(v), known, shape(from_input ? y : x));
    if (!other)
      return fail("the split of " + shape_text(shape(v)) + " does not fall on one dim of " +
                  shape_text(shape(from_input ? y : x)));
    out->push_back({x, from_input ? known : *other});
    out->push_back({y, from_input ? *other : known});
    return true;
  }
  // The split keeps its units (heads, features) on whichever dim the signature names per port.
  auto carried = [&](int id, const Sbp& p) -> std::optional<Split> {
    if (!p.is_split()) return std::nullopt;
    Split s = known;
    s.axis = dim_of(id, p);
    return s;
  };
  for (const SbpSignature& s : signatures_[size_t(n)]) {
    if (!carries(s) || !splits_at(n, s, v, known.axis)) continue;
    for (size_t i = 0; i < nf.inputs.size(); ++i) {
      const int id = nf.inputs[i];
      if (id >= 0) out->push_back({id, carried(id, port(s.inputs, i))});
    }
    for (size_t i = 0; i < nf.outputs.size(); ++i)
      out->push_back({nf.outputs[i], carried(nf.outputs[i], port(s.outputs, i))});
    return true;
  }
  return fail("no signature carries a split along dim " + std::to_string(known.axis));
}

Region Pass::grow(int row_linear) const {
  Region r;
  const Dense d0 = *dense(row_linear);
  const int x0 = d0.x;
  Split start;
  start.axis = dim_of(x0, port(d0.row->inputs, size_t(d0.x_port)));
  start.parts = shape(x0)[size_t(start.axis)];
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
      // A product ends the region: it starts the split (column) or ends it (row).
      if (d->column && v == nf.outputs[0] && s.axis == dim_of(v, d->column->outputs[0])) {
        r.column.insert(n);
        return true;
      }
      if (d->row && v == d->x && s.axis == dim_of(v, port(d->row->inputs, size_t(d->x_port)))) {
        r.row.insert(n);
        return true;
      }
      r.failure = "'" + nf.node->name() + "' (" + nf.op->name +
                  ") has no column- or row-parallel layout with the split where it meets it";
      return false;
    }
    std::vector<std::pair<int, std::optional<Split>>> ports;
    std::string why;
    if (!rule(n, v, s, &ports, &why)) {
      r.failure = why;
      return false;
    }
    r.interior.insert(n);
    if (nf.op->sharding.heads) r.attention = true;
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
      if (node(n).op->sharding.heads) return true;
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
  // Lookups in tables by graph inputs (token ids), and LM heads: products whose logits feed only
  // losses over split classes or leave the graph. A table is vocabulary-parallel when all its
  // uses are.
  std::map<int, std::vector<int>> uses;  // param -> nodes using it
  for (size_t n = 0; n < f_.nodes.size(); ++n)
    for (int id : f_.nodes[n].inputs)
      if (trainable_param(id)) uses[id].push_back(int(n));
  auto head_ok = [&](int n) {
    // Logits are a plain product: one that could also be row-parallel (no GELU fused in).
    const auto d = dense(n);
    if (!d || !d->column || !d->row) return false;
    const int y = node(n).outputs[0];
    const int64_t classes = dim_of(y, d->column->outputs[0]);
    const bool is_output = std::find(f_.outputs.begin(), f_.outputs.end(), y) != f_.outputs.end();
    for (int q : value(y).readers)
      if (!class_loss(q, y, classes)) return false;
    // Logits either leave the graph (gathered) or feed the loss (kept split), not both.
    return is_output != !value(y).readers.empty();
  };
  for (const auto& [param, nodes] : uses) {
    bool all = true, head = false, embedding = false, loss = false;
    int64_t dim = -1;  // the vocabulary dim of the table
    auto agree = [&](int64_t d) {
      if (dim >= 0 && dim != d) all = false;
      dim = d;
    };
    std::map<int, const SbpSignature*> lookups;
    for (int n : nodes) {
      const NodeFacts& nf = node(n);
      if (const SbpSignature* s = lookup(n, param)) {
        embedding = true;
        lookups[n] = s;
        agree(dim_of(param, s->inputs[size_t(s->weight)]));
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
      if (lookups.count(n)) {
        local_calls_[n] = LocalCall{lookups.at(n), rows};
      } else {
        vocab_heads_.insert(n);
        const Dense d = *dense(n);
        if (d.bias >= 0)
          vocab_params_[d.bias] = dim_of(d.bias, d.column->inputs[size_t(d.bias_port)]);
        const int y = node(n).outputs[0];
        const int64_t classes = dim_of(y, d.column->outputs[0]);
        for (int q : value(y).readers)
          local_calls_[q] = LocalCall{class_loss(q, y, classes), shape(y)[size_t(classes)]};
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
    if (d.bias >= 0) {
      const int64_t dim = dim_of(d.bias, d.column->inputs[size_t(d.bias_port)]);
      specs[d.bias] = box_spec(shape(d.bias), "column", dim, ranges);
    }
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
      const size_t cd = size_t(spec.concat_dim);
      for (const BoxSpec& b : spec.boxes) local_shape[cd] += b.sizes[cd];
    }
    *local.mutable_type() = graph::tensor_type(local_shape, value(id).meta.dtype);
    if (graph::has_values(init) && spec.split != "replicated") {
      std::string read;  // external values, read to be sliced
      if (init.has_external()) read = graph::tensor_bytes(graph::initializer_values(init));
      local.set_data(slice_bytes(init.has_external() ? read : init.data(), spec.full_shape,
                                 dtype_size(value(id).meta.dtype), spec));
      local.clear_external();
    }
    out.shards[init.name()] = spec;
  }

  // Nodes, rewritten.
  auto group_attrs = [&](graph::Node& n) {
    ops::Attrs a = graph::attrs_of(n);
    a.set("group", kTpGroupPlaceholder).set("size", tp_);
    graph::set_attrs(n, a);
  };
  auto add_node = [&](const std::string& name, const std::string& op,
                      const std::vector<std::string>& inputs,
                      const std::vector<std::string>& outputs,
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
    if (const auto call = local_calls_.find(n); call != local_calls_.end()) {
      // Each rank runs the signature's local op on its rows or classes, with the attributes
      // that op declares; outputs left as partial sums are all-reduced.
      const SbpSignature& sig = *call->second.signature;
      const ops::OpDef& local_op = ops::Registry::get().at(sig.local_op);
      auto declares = [&](const std::string& attr) {
        return std::any_of(local_op.attrs.begin(), local_op.attrs.end(),
                           [&](const ops::AttrSpec& a) { return a.name == attr; });
      };
      const ops::Attrs given = graph::attrs_of(orig);
      ops::Attrs a;
      for (const auto& [name, v] : given.values())
        if (declares(name)) a.set_value(name, v);
      a.set("start", vocab_range(call->second.rows, tp_, rank).first);
      if (declares("group")) a.set("group", kTpGroupPlaceholder).set("size", tp_);
      graph::Node& local = *dst.add_nodes();
      local = orig;
      local.set_op(sig.local_op);
      local.clear_attrs();
      graph::set_attrs(local, a);
      std::vector<std::string> partial;
      for (size_t o = 0; o < nf.outputs.size(); ++o)
        if (port(sig.outputs, o).is_partial_sum()) {
          partial.push_back(orig.outputs(int(o)));
          local.set_outputs(int(o), partial.back() + "/tp_partial");
        }
      for (const std::string& y : partial)
        group_attrs(add_node(orig.name() + "/tp_all_reduce", "tp_all_reduce", {y + "/tp_partial"},
                             {y}, mod));
    } else if (vocab_heads_.count(n)) {
      const Dense d = *dense(n);
      const int64_t rows = shape(d.w)[size_t(d.out_dim)];
      const std::string copy = orig.inputs(d.x_port) + "/tp_copy." + orig.name();
      group_attrs(add_node(orig.name() + "/tp_copy", "tp_copy", {orig.inputs(d.x_port)}, {copy},
                           mod));
      const int y = nf.outputs[0];
      const bool is_output = std::find(f_.outputs.begin(), f_.outputs.end(), y) != f_.outputs.end();
      graph::Node& lin = *dst.add_nodes();
      lin = orig;
      lin.set_inputs(d.x_port, copy);
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
                                     .set("dim", d.column->outputs[0].dim));
      }
    } else if (column_.count(n)) {
      const int region = region_of_.at(n);
      const int x_port = dense(n)->x_port;
      const auto key = std::make_pair(region, nf.inputs[size_t(x_port)]);
      if (!copies.count(key)) {
        const std::string copy = orig.inputs(x_port) + "/tp_copy." + orig.name();
        group_attrs(add_node(orig.name() + "/tp_copy", "tp_copy", {orig.inputs(x_port)}, {copy},
                             mod));
        copies[key] = copy;
      }
      graph::Node& lin = *dst.add_nodes();
      lin = orig;
      lin.set_inputs(x_port, copies[key]);
    } else if (row_.count(n)) {
      // The bias (a partial-sum input) leaves the product and is added once, after the sum.
      const Dense d = *dense(n);
      const bool bias = d.bias >= 0;
      const std::string y = orig.outputs(0);
      graph::Node& product = *dst.add_nodes();
      product = orig;
      if (bias) {
        product.set_inputs(d.bias_port, "");
        while (product.inputs_size() > 0 && product.inputs(product.inputs_size() - 1).empty())
          product.mutable_inputs()->RemoveLast();
      }
      product.set_outputs(0, y + "/tp_partial");
      group_attrs(add_node(orig.name() + "/tp_all_reduce", "tp_all_reduce", {y + "/tp_partial"},
                           {bias ? y + "/tp_reduced" : y}, mod));
      if (bias)
        add_node(orig.name() + "/tp_bias", "add", {y + "/tp_reduced", orig.inputs(d.bias_port)},
                 {y}, mod);
    } else if (interior_.count(n) && nf.op->sharding.localize) {
      // An attribute states a size along the split dim (reshape's target) or depends on where
      // the rank's piece lies (attention's dropout): make it this rank's.
      graph::Node& r = *dst.add_nodes();
      r = orig;
      const Split& s = states_.at(nf.outputs[0]);
      const auto ranges = split_ranges(s, tp_, rank);
      const ops::LocalDim piece{s.axis, s.outer * s.parts * s.inner, s.local(tp_),
                                ranges.front().first, int64_t(ranges.size())};
      graph::set_attrs(r, nf.op->sharding.localize(nf.attrs, piece));
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
    // Each candidate is a region's row-parallel end: a product with a row-parallel layout.
    const std::optional<Dense> d = dense(int(n));
    if (!d || !d->row || claimed_.count(int(n))) continue;
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
