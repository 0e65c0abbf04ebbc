// Plans: one program per rank in (pp, dp, tp) order, stage graphs that stand alone, boundary
// tensors that pair up between neighbours, tied weights marked on both ends, groups, and the
// same bytes for the same inputs.
#include "merak/partition/plan_builder.h"

#include <set>

#include "merak/partition/partitioner.h"
#include "tests/partition/helpers.h"

using namespace merak;
using namespace merak::partition;

namespace {

Request request(int64_t dp, int64_t pp, int64_t tp, const std::string& hw = "a100-80g") {
  Request r;
  r.dp = dp;
  r.pp = pp;
  r.tp = tp;
  r.hardware = test::profile(hw);
  r.memory.precision = r.hardware.precision;
  r.memory.micro_batches = 4;
  return r;
}

}  // namespace

TEST_CASE("a plan has one program per rank with stage graphs that stand alone", "[partition]") {
  const graph::Model m = test::trace(test::tiny_gpt(4), 2, 16);
  const Result r = run_partition(m, request(2, 3, 1, "cpu-local"));
  const Plan& plan = r.plan;
  REQUIRE(plan.ranks_size() == 6);
  CHECK(plan.cuts_size() == 4);
  CHECK(plan.cuts(0) == 0);
  CHECK(plan.cuts(3) == m.graph().nodes_size());
  std::set<std::string> covered;
  for (int k = 0; k < plan.ranks_size(); ++k) {
    const RankProgram& rp = plan.ranks(k);
    // tp fastest, then dp, then pp.
    CHECK(rp.rank() == k);
    CHECK(rp.pp() == k / 2);
    CHECK(rp.dp() == k % 2);
    CHECK(rp.tp() == 0);
    // Every value a stage graph reads is defined in it: analysis would throw otherwise.
    const GraphFacts f = analyze(rp.graph());
    CHECK(f.nodes.size() == size_t(plan.cuts(int(rp.pp()) + 1) - plan.cuts(int(rp.pp()))));
    for (const graph::Node& n : rp.graph().nodes()) covered.insert(n.name());
    CHECK(rp.predicted().stage_seconds() > 0);
    CHECK(rp.predicted().memory_bytes() > 0);
  }
  CHECK(covered.size() == size_t(m.graph().nodes_size()));
  // The loss leaves the last stage only; tokens are read by the first, targets by the last.
  CHECK(plan.ranks(4).graph().outputs(plan.ranks(4).graph().outputs_size() - 1).name() == "loss");
  CHECK(std::vector<std::string>(plan.ranks(0).data_inputs().begin(),
                                 plan.ranks(0).data_inputs().end()) ==
        std::vector<std::string>{"tokens"});
  const auto& last_inputs = plan.ranks(5).data_inputs();
  CHECK(std::find(last_inputs.begin(), last_inputs.end(), "targets") != last_inputs.end());
}

TEST_CASE("boundary tensors pair up between neighbouring stages", "[partition]") {
  const graph::Model m = test::trace(test::tiny_gpt(4), 2, 16);
  const Plan plan = run_partition(m, request(1, 4, 1, "cpu-local")).plan;
  for (int s = 0; s + 1 < 4; ++s) {
    const RankProgram &a = plan.ranks(s), &b = plan.ranks(s + 1);
    std::vector<std::string> sent, received;
    for (const Boundary& x : a.boundaries())
      if (x.direction() == Boundary::SEND) {
        sent.push_back(x.value() + "/" + x.type().SerializeAsString());
        CHECK(x.peer() == b.rank());
      }
    for (const Boundary& x : b.boundaries())
      if (x.direction() == Boundary::RECV) {
        received.push_back(x.value() + "/" + x.type().SerializeAsString());
        CHECK(x.peer() == a.rank());
      }
    INFO("cut " << s + 1);
    CHECK_FALSE(sent.empty());
    CHECK(sent == received);
  }
  // The residual stream carries a gradient back; the position ids do not.
  for (const Boundary& x : plan.ranks(1).boundaries())
    if (x.value() == "arange_0:0") CHECK_FALSE(x.has_grad());
}

TEST_CASE("the token embedding is tied between the first and last stage", "[partition]") {
  const graph::Model m = test::trace(test::tiny_gpt(4), 2, 16);
  const Plan plan = run_partition(m, request(2, 2, 1, "cpu-local")).plan;
  REQUIRE(plan.tied_params_size() == 1);
  CHECK(plan.tied_params(0) == "wte.weight");
  // dp replica d of the first stage (rank d) pairs with replica d of the last (rank 2 + d).
  for (int d = 0; d < 2; ++d)
    for (int end : {0, 1}) {
      const RankProgram& rp = plan.ranks(end * 2 + d);
      const ParamShard* wte = nullptr;
      for (const ParamShard& p : rp.params())
        if (p.name() == "wte.weight") wte = &p;
      REQUIRE(wte);
      CHECK(std::vector<int64_t>(wte->tied_ranks().begin(), wte->tied_ranks().end()) ==
            std::vector<int64_t>{(1 - end) * 2 + d});
      CHECK(std::find(rp.groups().begin(), rp.groups().end(), tied_group_name(d, 0)) !=
            rp.groups().end());
    }
  // Groups: the dp group of stage 1 holds ranks 2 and 3; each pipeline joins ranks d and 2 + d.
  std::map<std::string, std::vector<int64_t>> groups;
  for (const Group& g : plan.groups()) groups[g.name()] = {g.ranks().begin(), g.ranks().end()};
  CHECK(groups.at(dp_group_name(1, 0)) == std::vector<int64_t>{2, 3});
  CHECK(groups.at(pp_group_name(1, 0)) == std::vector<int64_t>{1, 3});
  CHECK(groups.at(tied_group_name(0, 0)) == std::vector<int64_t>{0, 2});
  // With dp > 1 each rank reduces its gradients once a step over its dp group.
  bool dp_reduce = false;
  for (const Collective& c : plan.ranks(3).collectives())
    dp_reduce = dp_reduce || (c.phase() == "step" && c.group() == dp_group_name(1, 0));
  CHECK(dp_reduce);
}

TEST_CASE("the same inputs give byte-identical plans", "[partition]") {
  const graph::Model m = test::trace(test::tiny_gpt(4), 2, 16);
  const std::string a = plan_bytes(run_partition(m, request(2, 2, 1)).plan);
  const std::string b = plan_bytes(run_partition(test::trace(test::tiny_gpt(4), 2, 16),
                                                 request(2, 2, 1)).plan);
  CHECK(a == b);
  CHECK(a.size() > 1000);
  // A different layout is a different plan.
  CHECK(plan_bytes(run_partition(m, request(1, 2, 1)).plan) != a);
  Plan back;
  REQUIRE(back.ParseFromString(a));
  CHECK(back.ranks_size() == 4);
}

TEST_CASE("a plan of the first replica only holds dp 0's programs of the full plan, the same bytes",
          "[partition]") {
  const graph::Model m = test::trace(test::tiny_gpt(4), 2, 16);
  Request req = request(3, 2, 2);
  const Plan full = run_partition(m, req).plan;
  req.first_replica_only = true;
  const Plan one = run_partition(m, req).plan;
  // Each program through the deterministic serialisation, alone in a plan.
  auto bytes = [](const RankProgram& rp) {
    Plan p;
    *p.add_ranks() = rp;
    return plan_bytes(p);
  };
  std::vector<std::string> want;
  for (const RankProgram& rp : full.ranks())
    if (rp.dp() == 0) want.push_back(bytes(rp));
  REQUIRE(want.size() == 4);  // pp 2 x tp 2
  REQUIRE(one.ranks_size() == 4);
  for (int k = 0; k < one.ranks_size(); ++k) CHECK(bytes(one.ranks(k)) == want[size_t(k)]);
  // Everything but the programs (layout, groups of every replica, cuts, predictions) as in full.
  Plan a = full, b = one;
  a.clear_ranks();
  b.clear_ranks();
  CHECK(plan_bytes(a) == plan_bytes(b));
}
