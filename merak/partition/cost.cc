#include "merak/partition/cost.h"

#include <algorithm>

namespace merak::partition {
namespace {

double precision_bytes(Precision p) {
  return p == Precision::BF16 || p == Precision::F16 ? 2.0 : 4.0;
}

}  // namespace

CostModel::CostModel(const Hardware& hw, Precision precision, const Placement& placement)
    : hw_(hw.for_world(placement.dp * placement.pp * placement.tp)),
      precision_(precision),
      placement_(placement) {
  MERAK_CHECK(hw.peak(precision) > 0, "hardware '", hw.name, "' gives no ",
              precision_name(precision), " peak");
  float_scale_ = precision_bytes(precision) / 4.0;
  tp_link_ = find_tp_link();
  dp_within_node_ = find_dp_within_node();
  for (int64_t s = 0; s + 1 < placement.pp * placement.virtual_stages; ++s)
    pp_links_.push_back(find_pp_link(s));
}

double CostModel::value_bytes(const ops::TensorMeta& meta) const {
  const double b = double(meta.nbytes());
  return is_floating(meta.dtype) && meta.dtype == DType::F32 ? b * float_scale_ : b;
}

double CostModel::optimizer_seconds(double held, double updated) const {
  const double weight_copy = precision_bytes(precision_) < 4 ? 2 : 0;  // the 16-bit weights
  const double bytes = updated * (4 /* norm */ + 16 + 12 /* AdamW */ + weight_copy) +
                       held * 4 /* zeroing */;
  return bytes / (hw_.memory_bandwidth * hw_.memory_efficiency);
}

double CostModel::gemm_seconds(const ops::Gemm& g) const {
  return hw_.gemm.seconds(hw_.peak(precision_), g.batch, g.m, g.n, g.k);
}

double CostModel::kernels_seconds(const std::vector<ops::Gemm>& gemms, double other_flops,
                                  double bytes_f32, int64_t kernels) const {
  double compute = std::max(0.0, other_flops) / (hw_.peak(precision_) * hw_.compute_efficiency);
  for (const ops::Gemm& g : gemms) compute += gemm_seconds(g);
  const double memory =
      bytes_f32 * float_scale_ / (hw_.memory_bandwidth * hw_.memory_efficiency);
  return std::max(compute, memory) + double(kernels) * hw_.kernel_overhead;
}

double CostModel::all_reduce_seconds(double bytes, int64_t n, const Link& link) const {
  if (n <= 1) return 0;
  const double k = double(n - 1);
  return 2 * k / double(n) * bytes / link.bandwidth + 2 * k * link.latency;
}

double CostModel::all_gather_seconds(double bytes, int64_t n, const Link& link) const {
  if (n <= 1) return 0;
  const double k = double(n - 1);
  return k / double(n) * bytes / link.bandwidth + k * link.latency;
}

double CostModel::p2p_seconds(double bytes, int64_t messages, const Link& link) const {
  return bytes / link.bandwidth + double(messages) * link.latency;
}

bool CostModel::same_node(const std::vector<int64_t>& ranks) const {
  for (int64_t r : ranks)
    if (r / hw_.devices_per_node != ranks[0] / hw_.devices_per_node) return false;
  return true;
}

Link CostModel::find_tp_link() const {
  const Placement& p = placement_;
  for (int64_t s = 0; s < p.pp; ++s)
    for (int64_t d = 0; d < p.dp; ++d) {
      std::vector<int64_t> ranks;
      for (int64_t t = 0; t < p.tp; ++t) ranks.push_back(p.rank(d, s, t));
      if (!same_node(ranks)) return hw_.inter_node;
    }
  return hw_.intra_node;
}

bool CostModel::find_dp_within_node() const {
  const Placement& p = placement_;
  for (int64_t s = 0; s < p.pp; ++s)
    for (int64_t t = 0; t < p.tp; ++t) {
      std::vector<int64_t> ranks;
      for (int64_t d = 0; d < p.dp; ++d) ranks.push_back(p.rank(d, s, t));
      if (!same_node(ranks)) return false;
    }
  return true;
}

Link CostModel::pp_link(int64_t stage) const {
  return stage >= 0 && stage < int64_t(pp_links_.size()) ? pp_links_[size_t(stage)]
                                                         : hw_.intra_node;
}

Link CostModel::find_pp_link(int64_t stage) const {
  const Placement& p = placement_;
  if (stage + 1 >= p.pp * p.virtual_stages) return hw_.intra_node;
  // Model stage g runs on pipeline rank g % pp (interleaved chunks wrap around to rank 0).
  const int64_t from = stage % p.pp, to = (stage + 1) % p.pp;
  for (int64_t d = 0; d < p.dp; ++d)
    for (int64_t t = 0; t < p.tp; ++t)
      if (!same_node({p.rank(d, from, t), p.rank(d, to, t)})) return hw_.inter_node;
  return hw_.intra_node;
}

NodeTime CostModel::node_time(const GraphFacts& g, int node) const {
  const NodeFacts& n = g.nodes[size_t(node)];
  NodeTime t;
  if (n.recorded)
    for (int v : n.inputs) {
      if (v < 0) continue;
      const ValueFacts& value = g.values[size_t(v)];
      if (value.kind != ValueFacts::Kind::Param || !value.requires_grad) continue;
      // Read the sum and the new gradient, write the sum.
      t.accumulate += kernels_seconds({}, 0, 3 * double(value.meta.nbytes()), 1);
    }
  // Copies no registry cost holds: a view op whose output cannot alias its input (a reshape
  // of a transposed value) copies it, and a kernel that reads only dense inputs is handed a
  // dense copy of each strided one. Backward makes the mirror copy at the same place: the
  // gradient comes back in the transposed layout and is made dense there.
  double copied = 0;
  int64_t copies = 0;
  auto copy = [&](int v) {
    copied += double(g.values[size_t(v)].meta.nbytes());
    ++copies;
  };
  if (n.op->view) {
    for (int v : n.outputs)
      if (g.values[size_t(v)].root == v) copy(v);
  } else if (!n.op->strided_inputs) {
    for (int v : n.inputs)
      if (v >= 0 && !g.values[size_t(v)].contiguous) copy(v);
  }
  const double copy_seconds =
      copies > 0 ? kernels_seconds({}, 0, 2 * copied, copies) : 0;  // read and write each
  if (n.op->view) {  // otherwise a view moves no data and runs no kernel
    t.fwd = copy_seconds;
    t.bwd = n.recorded ? copy_seconds : 0;
    return t;
  }
  const std::vector<ops::Gemm>& fwd = n.cost.gemms;
  double fwd_gemm_flops = 0;
  std::vector<ops::Gemm> bwd;
  for (const ops::Gemm& g : fwd) {
    fwd_gemm_flops += g.flops();
    bwd.push_back({g.batch, g.m, g.k, g.n});  // dA = dC B^T
    bwd.push_back({g.batch, g.k, g.n, g.m});  // dB = A^T dC
  }
  const int64_t fwd_kernels = std::max<int64_t>(1, int64_t(fwd.size()));
  t.fwd = copy_seconds +
          kernels_seconds(fwd, n.cost.fwd_flops - fwd_gemm_flops, n.cost.bytes, fwd_kernels);
  if (n.recorded)
    t.bwd = copy_seconds + kernels_seconds(bwd, n.cost.bwd_flops - 2 * fwd_gemm_flops,
                                           2 * n.cost.bytes,
                                           std::max<int64_t>(1, int64_t(bwd.size())));
  // Tensor-parallel collectives, as the op's registry entry states them.
  for (const ops::Collective& c : n.cost.collectives) {
    if (c.backward && !n.recorded) continue;
    const double bytes = c.elements * 4 * (c.f32_stats ? 1.0 : float_scale_);
    const double one = c.kind == ops::Collective::Kind::AllGather
                           ? all_gather_seconds(bytes, c.members, tp_link())
                           : all_reduce_seconds(bytes, c.members, tp_link());
    (c.backward ? t.bwd_comm : t.fwd_comm) += c.count * one;
  }
  t.fwd += t.fwd_comm;
  t.bwd += t.bwd_comm;
  return t;
}

}  // namespace merak::partition
