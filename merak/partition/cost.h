// The cost model: seconds for each node's forward and backward, for collectives and for
// pipeline transfers, from the op registry's FLOPs, bytes and matrix products and a hardware
// profile.
//
//   node time       = max(compute, bytes / (memory_bandwidth * memory_efficiency))
//                     + kernels x kernel_overhead
//   compute         = sum over its matrix products of flops / (peak * gemm curve at the shape)
//                     + the other flops / (peak * compute_efficiency)
//   backward        = for each forward product [m, k] x [k, n]: dA [m, n] x [n, k] and
//                     dB [k, m] x [m, n]; the rest of the registry's backward FLOPs as other
//                     kernels; 2 x forward bytes (it reads the saved values and the output
//                     gradients and writes the input gradients)
//   kernels         = forward: one per product (at least one); backward: one per gradient
//                     product (at least one); view ops run none
//   layout copies   = a view output that cannot alias its input, and a strided input of a
//                     kernel that reads dense ones: a copy (read + write) in forward and its
//                     mirror in backward, a kernel each
//   all-reduce      = 2 (n-1)/n bytes / bandwidth + 2 (n-1) latency        (ring)
//   all-gather      = (n-1)/n bytes / bandwidth + (n-1) latency            (bytes: the result)
//   point-to-point  = bytes / bandwidth + latency
//
// Graphs are traced in f32; under a 16-bit precision every floating value moves half the bytes.
#pragma once

#include <cstdint>
#include <vector>

#include "merak/partition/analysis.h"
#include "merak/partition/hardware.h"

namespace merak::partition {

// Where a group of ranks sits: ranks r and r' share a node when r / devices_per_node agree.
// dp * pp * tp ranks; with virtual_stages > 1 (interleaved) the pipeline runs pp *
// virtual_stages model stages, stage g on pipeline rank g % pp.
struct Placement {
  int64_t dp = 1, pp = 1, tp = 1, virtual_stages = 1;
  int64_t rank(int64_t d, int64_t p, int64_t t) const { return p * dp * tp + d * tp + t; }
};

struct NodeTime {
  double fwd = 0;       // seconds, compute and the node's own collectives
  double bwd = 0;
  double fwd_comm = 0;  // the collective part of fwd / bwd
  double bwd_comm = 0;
  // Adding the gradients of the parameters it reads into their buffers, a kernel each: what
  // its backward costs on top of bwd on every micro-batch of a step but the first, which
  // keeps its gradients as they come (StageModel spreads it over the micro-batches).
  double accumulate = 0;
};

class CostModel {
 public:
  // Profiles whose node is shared (CPUs) are cut to one rank's share of the placement's node.
  CostModel(const Hardware& hw, Precision precision, const Placement& placement);

  const Hardware& hardware() const { return hw_; }
  Precision precision() const { return precision_; }
  const Placement& placement() const { return placement_; }

  // Bytes a value of `meta` occupies under the precision (floating values rescaled from f32).
  double value_bytes(const ops::TensorMeta& meta) const;
  // Seconds of one optimizer step on a rank that holds the gradients of `held` parameter
  // elements and updates `updated` of them (all, or its 1/dp share where replicas split the
  // update): memory-bound everywhere. The updated gradients are read for the global norm; AdamW
  // reads the weights, gradients and both moments and writes the weights and moments (the f32
  // masters under 16-bit training, whose 16-bit weights are written too); every held gradient
  // is zeroed after.
  double optimizer_seconds(double held, double updated) const;
  // Seconds of `g` alone at the curve's efficiency for its shape (compute only).
  double gemm_seconds(const ops::Gemm& g) const;
  double all_reduce_seconds(double bytes, int64_t members, const Link& link) const;
  double all_gather_seconds(double bytes, int64_t members, const Link& link) const;
  double p2p_seconds(double bytes, int64_t messages, const Link& link) const;

  // The link joining a tensor-parallel group, a data-parallel group, and model stages s and
  // s + 1 (the slowest over the groups of that kind).
  Link tp_link() const { return tp_link_; }
  Link dp_link() const { return dp_within_node_ ? hw_.intra_node : hw_.inter_node; }
  // Whether every data-parallel group lies within one node.
  bool dp_within_node() const { return dp_within_node_; }
  Link pp_link(int64_t stage) const;

  NodeTime node_time(const GraphFacts& g, int node) const;

 private:
  // One pass of a kernel group: `gemms`, `other_flops` and `bytes_f32` moved, `kernels` calls.
  double kernels_seconds(const std::vector<ops::Gemm>& gemms, double other_flops,
                         double bytes_f32, int64_t kernels) const;
  bool same_node(const std::vector<int64_t>& ranks) const;
  Link find_tp_link() const;
  bool find_dp_within_node() const;
  Link find_pp_link(int64_t stage) const;

  Hardware hw_;
  Precision precision_;
  Placement placement_;
  double float_scale_;  // bytes per floating element under the precision / 4
  Link tp_link_;
  bool dp_within_node_ = true;
  std::vector<Link> pp_links_;  // between model stage s and s + 1
};

}  // namespace merak::partition
