#include "merak/partition/plan_builder.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include <set>

#include "merak/graph/convert.h"

namespace merak::partition {
namespace {

int64_t rank_of(const PlanSettings& s, int64_t d, int64_t p, int64_t t) {
  return p * s.dp * s.tp + d * s.tp + t;
}

Box to_proto(const BoxSpec& b) {
  Box out;
  for (int64_t o : b.offsets) out.add_offsets(o);
  for (int64_t n : b.sizes) out.add_sizes(n);
  return out;
}

graph::ValueInfo value_info(const ValueFacts& v) {
  graph::ValueInfo info;
  info.set_name(v.name);
  *info.mutable_type() = graph::tensor_type(v.meta.shape, v.meta.dtype);
  return info;
}

// What a tensor-parallel node communicates: kind, phase and payload bytes (per micro-batch).
bool tp_collective(const GraphFacts& f, const NodeFacts& n, Collective* c) {
  const std::string& op = n.op->name;
  if (op.compare(0, 3, "tp_") != 0 || !n.attrs.has("group")) return false;
  const double out = double(f.values[size_t(n.outputs[0])].meta.nbytes());
  c->set_node(n.node->name());
  if (op == "tp_all_reduce") {
    c->set_kind("all_reduce");
    c->set_phase("forward");
    c->set_bytes(int64_t(out));
  } else if (op == "tp_copy") {
    if (!n.recorded) return false;
    c->set_kind("all_reduce");
    c->set_phase("backward");
    c->set_bytes(int64_t(out));
  } else if (op == "tp_all_gather") {
    c->set_kind("all_gather");
    c->set_phase("forward");
    c->set_bytes(int64_t(out));
  } else if (op == "tp_cross_entropy") {
    c->set_kind("all_reduce");
    c->set_phase("forward");
    c->set_bytes(3 * f.values[size_t(n.outputs[1])].meta.numel() * 4);
  } else {
    return false;
  }
  return true;
}

Prediction prediction(const StageEstimate& e) {
  Prediction p;
  p.set_forward_seconds(e.fwd);
  p.set_backward_seconds(e.bwd);
  p.set_recompute_seconds(e.recompute);
  p.set_p2p_seconds(e.p2p);
  p.set_stage_seconds(e.time());
  p.set_fwd_flops(e.fwd_flops);
  p.set_bwd_flops(e.bwd_flops);
  p.set_parameters(int64_t(e.params));
  p.set_weight_bytes(int64_t(e.memory.weights));
  p.set_grad_bytes(int64_t(e.memory.grads));
  p.set_optimizer_bytes(int64_t(e.memory.optimizer));
  p.set_shared_bytes(int64_t(e.memory.shared));
  p.set_activation_bytes(int64_t(e.memory.activations + e.memory.working + e.memory.deferred));
  p.set_in_flight(e.memory.in_flight);
  p.set_memory_bytes(int64_t(e.memory.total()));
  return p;
}

}  // namespace

std::string tp_group_name(int64_t pp, int64_t dp) {
  return "tp.pp" + std::to_string(pp) + ".dp" + std::to_string(dp);
}
std::string dp_group_name(int64_t pp, int64_t tp) {
  return "dp.pp" + std::to_string(pp) + ".tp" + std::to_string(tp);
}
std::string pp_group_name(int64_t dp, int64_t tp) {
  return "pp.dp" + std::to_string(dp) + ".tp" + std::to_string(tp);
}
std::string tied_group_name(int64_t dp, int64_t tp) {
  return "tied.dp" + std::to_string(dp) + ".tp" + std::to_string(tp);
}

Plan build_plan(const std::vector<TpRank>& tp_ranks, const StageModel& model,
                const Partition& ours, const PlanSettings& st) {
  MERAK_CHECK(int64_t(tp_ranks.size()) == st.tp, "build_plan: ", tp_ranks.size(),
              " tensor-parallel graphs for tp ", st.tp);
  MERAK_CHECK(int64_t(ours.cuts.size()) == st.pp + 1, "build_plan: ", ours.cuts.size(),
              " cuts for pp ", st.pp);
  const graph::Model& base = tp_ranks[0].model;
  const int64_t n = int64_t(base.graph().nodes_size());
  std::vector<GraphFacts> facts;
  for (const TpRank& r : tp_ranks) {
    MERAK_CHECK(r.model.graph().nodes_size() == n, "build_plan: tensor-parallel graphs differ in ",
                "node count");
    facts.push_back(analyze(r.model.graph()));
  }
  const std::vector<int64_t>& cuts = ours.cuts;
  auto stage_of = [&](int node) {
    return int64_t(std::upper_bound(cuts.begin(), cuts.end(), int64_t(node)) - cuts.begin()) - 1;
  };

  Plan plan;
  plan.set_model(base.graph().name());
  plan.set_producer(base.producer());
  plan.mutable_layout()->set_dp(st.dp);
  plan.mutable_layout()->set_pp(st.pp);
  plan.mutable_layout()->set_tp(st.tp);
  plan.set_hardware(st.hardware);
  plan.set_precision(precision_name(st.memory.precision));
  plan.set_schedule(schedule_name(st.memory.schedule));
  plan.set_micro_batches(st.memory.micro_batches);
  plan.set_zero1(st.memory.zero1);
  plan.set_recompute(st.memory.recompute != Recompute::None);
  plan.set_device_memory_bytes(model.cost().hardware().memory_bytes);
  for (int64_t c : cuts) plan.add_cuts(c);
  const double slowest = ours.max_time();
  plan.set_imbalance(ours.imbalance());
  plan.set_predicted_step_seconds(double(st.memory.micro_batches + st.pp - 1) * slowest);

  // Parameters read on more than one stage (tied weights), from tp rank 0's graph. The runtime
  // sums a trainable one's gradients over the tied group, the first and the last stage
  // (interleaved: model stages, the first and last chunk); partition_pipeline keeps to that, and
  // a split that does not is refused here, before any rank runs it.
  const GraphFacts& f0 = facts[0];
  std::map<std::string, std::vector<int64_t>> stages_using;
  for (const graph::Initializer& init : base.graph().initializers()) {
    const int id = f0.find(init.name());
    std::set<int64_t> on;
    for (int reader : f0.values[size_t(id)].readers) on.insert(stage_of(reader));
    stages_using[init.name()] = std::vector<int64_t>(on.begin(), on.end());
    if (on.size() < 2) continue;
    plan.add_tied_params(init.name());
    if (!init.trainable() || (*on.begin() == 0 && *on.rbegin() == st.pp - 1 && on.size() == 2))
      continue;
    std::string list;
    for (int64_t q : on) list += (list.empty() ? "" : ", ") + std::to_string(q);
    throw Error("parameter '" + init.name() + "' is read on pipeline stages " + list + " of " +
                std::to_string(st.pp) + " (counting from 0): a parameter read on several stages " +
                "must be read on the first and the last only, whose copies' gradients are summed");
  }

  // Groups.
  auto add_group = [&](const std::string& name, const std::string& kind,
                       const std::vector<int64_t>& ranks) {
    Group& g = *plan.add_groups();
    g.set_name(name);
    g.set_kind(kind);
    for (int64_t r : ranks) g.add_ranks(r);
  };
  for (int64_t p = 0; p < st.pp; ++p)
    for (int64_t d = 0; d < st.dp; ++d) {
      std::vector<int64_t> ranks;
      for (int64_t t = 0; t < st.tp; ++t) ranks.push_back(rank_of(st, d, p, t));
      add_group(tp_group_name(p, d), "tp", ranks);
    }
  for (int64_t p = 0; p < st.pp; ++p)
    for (int64_t t = 0; t < st.tp; ++t) {
      std::vector<int64_t> ranks;
      for (int64_t d = 0; d < st.dp; ++d) ranks.push_back(rank_of(st, d, p, t));
      add_group(dp_group_name(p, t), "dp", ranks);
    }
  for (int64_t d = 0; d < st.dp; ++d)
    for (int64_t t = 0; t < st.tp; ++t) {
      std::vector<int64_t> ranks;
      for (int64_t p = 0; p < st.pp; ++p) ranks.push_back(rank_of(st, d, p, t));
      add_group(pp_group_name(d, t), "pp", ranks);
      if (st.pp > 1 && plan.tied_params_size() > 0)
        add_group(tied_group_name(d, t), "tied",
                  {rank_of(st, d, 0, t), rank_of(st, d, st.pp - 1, t)});
    }

  // Stage graphs per (pp, tp); dp replicas share them.
  const int64_t replicas = st.first_replica_only ? 1 : st.dp;
  for (int64_t p = 0; p < st.pp; ++p) {
    const int64_t a = cuts[size_t(p)], b = cuts[size_t(p + 1)];
    const std::vector<int> recv = model.boundary(a), send = model.boundary(b);
    for (int64_t d = 0; d < replicas; ++d)
      for (int64_t t = 0; t < st.tp; ++t) {
        const TpRank& tr = tp_ranks[size_t(t)];
        const graph::Graph& full = tr.model.graph();
        const GraphFacts& f = facts[size_t(t)];
        RankProgram& prog = *plan.add_ranks();
        const int64_t rank = rank_of(st, d, p, t);
        prog.set_rank(rank);
        prog.set_dp(d);
        prog.set_pp(p);
        prog.set_tp(t);
        prog.set_first_node(full.nodes(int(a)).name());
        prog.set_last_node(full.nodes(int(b - 1)).name());
        graph::Graph& g = *prog.mutable_graph();
        g.set_name(full.name() + ".stage" + std::to_string(p));

        std::set<int> read;  // values the stage's nodes read
        for (int64_t k = a; k < b; ++k)
          for (int id : f.nodes[size_t(k)].inputs)
            if (id >= 0) read.insert(id);
        for (const graph::ValueInfo& in : full.inputs())
          if (read.count(f.find(in.name()))) {
            *g.add_inputs() = in;
            prog.add_data_inputs(in.name());
          }
        for (int id : recv) {
          *g.add_inputs() = value_info(f.values[size_t(id)]);
          Boundary& bd = *prog.add_boundaries();
          bd.set_value(f.values[size_t(id)].name);
          *bd.mutable_type() = g.inputs(g.inputs_size() - 1).type();
          bd.set_peer(rank_of(st, d, p - 1, t));
          bd.set_direction(Boundary::RECV);
          bd.set_has_grad(f.values[size_t(id)].requires_grad);
        }
        const std::string group = tp_group_name(p, d);
        for (int64_t k = a; k < b; ++k) {
          graph::Node& node = *g.add_nodes();
          node = full.nodes(int(k));
          auto attrs = node.mutable_attrs();
          auto it = attrs->find("group");
          if (it != attrs->end() && it->second.s() == kTpGroupPlaceholder)
            it->second.set_s(group);
          for (int id : f.nodes[size_t(k)].outputs) *g.add_values() = value_info(f.values[size_t(id)]);
          Collective c;
          if (tp_collective(f, f.nodes[size_t(k)], &c)) {
            c.set_group(group);
            *prog.add_collectives() = c;
          }
        }
        for (int id : send) {
          *g.add_outputs() = value_info(f.values[size_t(id)]);
          Boundary& bd = *prog.add_boundaries();
          bd.set_value(f.values[size_t(id)].name);
          *bd.mutable_type() = g.outputs(g.outputs_size() - 1).type();
          bd.set_peer(rank_of(st, d, p + 1, t));
          bd.set_direction(Boundary::SEND);
          bd.set_has_grad(f.values[size_t(id)].requires_grad);
        }
        for (int id : f.outputs) {
          const ValueFacts& v = f.values[size_t(id)];
          if (v.producer >= a && v.producer < b) *g.add_outputs() = value_info(v);
        }

        // Parameters: the local shards, with their place in the full tensor.
        int64_t grad_bytes = 0;
        std::vector<std::string> tied_here;
        for (const graph::Initializer& init : full.initializers()) {
          const int id = f.find(init.name());
          bool used = false;
          for (int reader : f.values[size_t(id)].readers) used = used || (reader >= a && reader < b);
          if (!used) continue;
          *g.add_initializers() = init;
          const ShardSpec& spec = tr.shards.at(init.name());
          ParamShard& ps = *prog.add_params();
          ps.set_name(init.name());
          for (int64_t s : spec.full_shape) ps.add_full_shape(s);
          ps.set_concat_dim(spec.concat_dim);
          for (const BoxSpec& box : spec.boxes) *ps.add_boxes() = to_proto(box);
          ps.set_dtype(init.type().dtype());
          *ps.mutable_init() = init.init();
          ps.set_trainable(init.trainable());
          ps.set_split(spec.split);
          const std::vector<int64_t>& on = stages_using.at(init.name());
          if (on.size() > 1) {
            for (int64_t q : on)
              if (q != p) ps.add_tied_ranks(rank_of(st, d, q, t));
            tied_here.push_back(init.name());
          }
          if (init.trainable()) grad_bytes += f.values[size_t(id)].meta.numel() * 4;
        }
        if (st.dp > 1 && grad_bytes > 0) {
          const std::string dp_group = dp_group_name(p, t);
          if (st.memory.zero1) {
            Collective& rs = *prog.add_collectives();
            rs.set_kind("reduce_scatter");
            rs.set_phase("step");
            rs.set_group(dp_group);
            rs.set_bytes(grad_bytes);
            Collective& ag = *prog.add_collectives();
            ag.set_kind("all_gather");
            ag.set_phase("step");
            ag.set_group(dp_group);
            ag.set_bytes(grad_bytes);
          } else {
            Collective& ar = *prog.add_collectives();
            ar.set_kind("all_reduce");
            ar.set_phase("step");
            ar.set_group(dp_group);
            ar.set_bytes(grad_bytes);
          }
        }
        for (const std::string& name : tied_here) {
          Collective& c = *prog.add_collectives();
          c.set_node(name);
          c.set_kind("all_reduce");
          c.set_phase("step");
          c.set_group(tied_group_name(d, t));
          c.set_bytes(f.values[size_t(f.find(name))].meta.numel() * 4);
        }

        // Groups this rank is in.
        prog.add_groups(tp_group_name(p, d));
        prog.add_groups(dp_group_name(p, t));
        prog.add_groups(pp_group_name(d, t));
        if (!tied_here.empty() && st.pp > 1) prog.add_groups(tied_group_name(d, t));
        *prog.mutable_predicted() = prediction(ours.stages[size_t(p)]);
        prog.set_recompute(ours.stages[size_t(p)].memory.recompute);
      }
  }
  // Ranks in rank order (built in pp, dp, tp order, which is rank order; with one replica, the
  // ranks of dp 0 in order).
  return plan;
}

std::string plan_bytes(const Plan& plan) {
  std::string out;
  {
    google::protobuf::io::StringOutputStream stream(&out);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    // Protobuf writes no message of 2 GB or more (an empty string then, which would parse as
    // an empty plan).
    MERAK_CHECK(plan.SerializeToCodedStream(&coded), "the plan (",
                double(plan.ByteSizeLong()) / double(1 << 30),
                " GiB) cannot be written: protobuf's limit is 2 GiB");
  }
  return out;
}

}  // namespace merak::partition
