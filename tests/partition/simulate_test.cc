// Plans executed stage by stage in one process (graph executor, boundary tensors handed over by
// hand) give the unsplit graph's loss and gradients, whatever the cuts; and the memory model's
// prediction for one process matches the allocator's measured peak.
#include "merak/partition/simulate.h"

#include "merak/autograd/engine.h"
#include "merak/optim/adamw.h"
#include "merak/partition/partitioner.h"
#include "merak/partition/plan_builder.h"
#include "tests/partition/helpers.h"

using namespace merak;
using namespace merak::partition;

namespace {

int64_t node_index(const graph::Model& m, const std::string& name) {
  for (int k = 0; k < m.graph().nodes_size(); ++k)
    if (m.graph().nodes(k).name() == name) return k;
  FAIL("no node " << name);
  return -1;
}

}  // namespace

TEST_CASE("a pipeline plan run stage by stage equals the unsplit graph", "[partition]") {
  const uint64_t seed = 11;
  const graph::Model m = test::trace(test::tiny_gpt(3), 2, 16, seed);
  const auto batch = test::gpt_batch(2, 16, 96);
  const StepResult want = test::unsplit_step(m, batch, seed);

  SECTION("cuts between blocks") {
    const Blocks b = find_blocks(m.graph());
    const Plan plan =
        test::plan_with_cuts(m, {0, b.starts[1], b.starts[2], m.graph().nodes_size()});
    test::check_same_step(run_step(plan, batch, seed), want);
  }
  SECTION("cuts inside blocks, one stage relaying the residual stream") {
    // Stage 1 holds block 1's attention up to sdpa: the residual input of the block passes
    // through it untouched to the add on stage 2.
    const Plan plan = test::plan_with_cuts(
        m, {0, node_index(m, "blocks.1.ln_1/layer_norm_0"), node_index(m, "blocks.1.attn/permute_3"),
            node_index(m, "blocks.2.mlp.proj/linear_0"), m.graph().nodes_size()});
    bool relayed = false;
    for (const Boundary& x : plan.ranks(1).boundaries())
      relayed = relayed || (x.value() == "blocks.0/add_1:0" && x.direction() == Boundary::SEND);
    CHECK(relayed);
    test::check_same_step(run_step(plan, batch, seed), want);
  }
  SECTION("the partitioner's own split") {
    Request req;
    req.pp = 3;
    req.hardware = test::profile("cpu-local");
    req.memory.micro_batches = 2;
    const Plan plan = run_partition(m, req).plan;
    test::check_same_step(run_step(plan, batch, seed), want);
  }
}

TEST_CASE("predicted peak memory of one CPU training step is within 15% of the measured peak",
          "[partition]") {
  // gpt-tiny at batch 8 x 64: 0.83 M parameters, activations about twice the static state.
  models::ModelOptions o = test::tiny_gpt(4, 256);
  o.hidden = 128;
  o.max_seq = 64;
  const uint64_t seed = 3;
  const graph::Model m = test::trace(o, 8, 64, seed);
  Request req;
  req.hardware = test::profile("cpu-local");
  req.memory.precision = Precision::F32;
  req.memory.micro_batches = 1;
  const double predicted = double(run_partition(m, req).plan.ranks(0).predicted().memory_bytes());

  const auto batch = test::gpt_batch(8, 64, 256);
  graph::Executor ex(m, seed);
  optim::AdamW opt(optim::make_params(ex.parameters()), {});
  auto step = [&] {
    const std::vector<Tensor> out = ex.run(batch);
    autograd::backward(out[0]);
    opt.step(1e-3);
    opt.zero_grad();
  };
  step();  // the optimizer's moments exist from here on
  reset_cpu_peak();
  step();
  const double measured = double(cpu_memory_stats().peak_bytes);
  INFO("predicted " << predicted / 1e6 << " MB, measured " << measured / 1e6 << " MB");
  CHECK(std::fabs(predicted - measured) <= 0.15 * measured);
}
