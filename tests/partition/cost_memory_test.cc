// The cost model's formulas on real nodes of a traced GPT (compute-bound linears, memory-bound
// elementwise ops, 16-bit bytes), the collective and transfer formulas, the memory model's
// terms, and which values the analysis counts as activations.
#include "merak/partition/cost.h"

#include "merak/partition/analysis.h"
#include "merak/partition/memory.h"
#include "merak/partition/stage_model.h"
#include "tests/partition/helpers.h"

using namespace merak;
using namespace merak::partition;

namespace {

int find_node(const GraphFacts& f, const std::string& name) {
  for (size_t k = 0; k < f.nodes.size(); ++k)
    if (f.nodes[k].node->name() == name) return int(k);
  FAIL("no node " << name);
  return -1;
}

}  // namespace

TEST_CASE("node time: products by the GEMM curve, the rest by bytes, a launch each",
          "[partition]") {
  // GPT-2 small's MLP at batch 4 x 1024: the linears are compute-bound, the residual add is
  // memory-bound, reshapes are views.
  models::ModelOptions o = test::tiny_gpt(1, 512);
  o.hidden = 768;
  o.heads = 12;
  o.max_seq = 1024;
  const graph::Model m = test::trace(o, 4, 1024);
  const GraphFacts f = analyze(m.graph());
  const Hardware hw = test::profile("a100-80g");
  const CostModel bf16(hw, Precision::BF16, {});
  const CostModel f32(hw, Precision::F32, {});
  const double overhead = hw.kernel_overhead;
  REQUIRE(overhead > 0);

  const double tokens = 4 * 1024;
  // fc is linear_gelu: the product [4096, 768] x [768, 3072] at the curve's efficiency for
  // its shape, then the bias and GELU's 20 FLOPs an element (25 backward) as other kernels.
  const NodeTime fc = bf16.node_time(f, find_node(f, "blocks.0.mlp.fc/linear_gelu_0"));
  const double gemm = 2 * tokens * 768 * 3072;
  const double eff = hw.gemm.at(1, tokens, 3072, 768);
  CHECK(eff < hw.gemm.efficiency);  // 32 x 24 tiles on 108 SMs: the last wave is part-empty
  const double other = (tokens * 3072 + 20 * tokens * 3072) / (312e12 * hw.compute_efficiency);
  CHECK(fc.fwd == Approx(gemm / (312e12 * eff) + other + overhead));
  // Backward: dx [4096, 768] over depth 3072 and dW [768, 3072] over depth 4096, two kernels.
  const double dx = gemm / (312e12 * hw.gemm.at(1, tokens, 768, 3072));
  const double dw = gemm / (312e12 * hw.gemm.at(1, 768, 3072, tokens));
  const double bwd_other = (tokens * 3072 + 25 * tokens * 3072) / (312e12 * hw.compute_efficiency);
  CHECK(fc.bwd == Approx(dx + dw + bwd_other + 2 * overhead));
  CHECK(f32.node_time(f, find_node(f, "blocks.0.mlp.fc/linear_gelu_0")).fwd ==
        Approx(gemm / (19.5e12 * eff) + other * 312 / 19.5 + overhead));

  // a + b = y: three [4, 1024, 768] tensors moved, 2 bytes each under bf16, 4 under f32.
  const double add_bytes = 3 * tokens * 768;
  const NodeTime add = bf16.node_time(f, find_node(f, "blocks.0/add_1"));
  CHECK(add.fwd == Approx(add_bytes * 2 / (2039e9 * 0.8) + overhead));
  CHECK(add.bwd == Approx(2 * add_bytes * 2 / (2039e9 * 0.8) + overhead));
  CHECK(f32.node_time(f, find_node(f, "blocks.0/add_1")).fwd ==
        Approx(add_bytes * 4 / (2039e9 * 0.8) + overhead));
  CHECK(bf16.value_bytes(f.values[size_t(f.find("blocks.0/add_1:0"))].meta) == 2 * add_bytes / 3);

  // A view that aliases its input runs no kernel. One that cannot (attention's heads, permuted
  // back to [4, 1024, 12, 64] and reshaped to [4, 1024, 768]) copies them: read and write, a
  // kernel, and its mirror in backward.
  int aliasing = 0, copying = 0;
  for (size_t k = 0; k < f.nodes.size(); ++k) {
    const NodeFacts& n = f.nodes[k];
    if (!n.op->view) continue;
    const NodeTime t = bf16.node_time(f, int(k));
    const int out = n.outputs[0];
    if (f.values[size_t(out)].root != out) {
      ++aliasing;
      CHECK(t.fwd == 0);
      CHECK(t.bwd == 0);
    } else {
      ++copying;
      CHECK(n.op->name == "reshape");
      const double copy = 2 * tokens * 768 * 2 / (2039e9 * 0.8) + overhead;
      CHECK(t.fwd == Approx(copy));
      CHECK(t.bwd == Approx(copy));
    }
  }
  CHECK(aliasing > 0);
  CHECK(copying == 1);  // one layer
}

TEST_CASE("a kernel that reads dense inputs is handed a copy of each strided one",
          "[partition]") {
  // Attention's q, k and v are [b, t, heads, d] viewed as [b, heads, t, d]: sdpa's kernel reads
  // dense inputs, so each is copied first (and each gradient on the way back): three kernels
  // more than its own, forward and backward, each moving its value twice.
  const models::ModelOptions o = test::tiny_gpt(1);
  const graph::Model m = test::trace(o, 2, 16);
  const GraphFacts f = analyze(m.graph());
  int sdpa = -1;
  for (size_t k = 0; k < f.nodes.size(); ++k)
    if (f.nodes[k].op->name == "sdpa") sdpa = int(k);
  REQUIRE(sdpa >= 0);
  REQUIRE_FALSE(f.nodes[size_t(sdpa)].op->strided_inputs);
  double strided_bytes = 0;
  for (int v : f.nodes[size_t(sdpa)].inputs)
    if (v >= 0 && !f.values[size_t(v)].contiguous)
      strided_bytes += double(f.values[size_t(v)].meta.nbytes());
  REQUIRE(strided_bytes == 3 * 4.0 * 2 * 16 * 32);  // q, k, v of [2, 16, 32] in f32
  Hardware hw = test::profile("a100-80g");
  auto time = [&](double overhead, double bandwidth) {
    hw.kernel_overhead = overhead;
    hw.memory_bandwidth = bandwidth;
    return CostModel(hw, Precision::F32, {}).node_time(f, sdpa);
  };
  const double bw = hw.memory_bandwidth;
  const NodeTime base = time(0, bw), more = time(1e-3, bw), slower = time(0, bw / 2);
  CHECK((more.fwd - base.fwd) == Approx(4e-3));  // its own kernel and three copies
  CHECK((more.bwd - base.bwd) == Approx(4e-3));
  // Halving the bandwidth adds the copies' time once more, and the attention's own (this tiny
  // one is bound by memory: its bytes take longer than its arithmetic).
  const ops::OpCost& own = f.nodes[size_t(sdpa)].cost;
  const double rate = bw * hw.memory_efficiency;
  REQUIRE(own.bytes / rate > own.fwd_flops / (hw.peak_f32 * hw.compute_efficiency));
  const double copies = 2 * strided_bytes / rate;
  CHECK((slower.fwd - base.fwd) == Approx(copies + own.bytes / rate));
  CHECK((slower.bwd - base.bwd) == Approx(copies + 2 * own.bytes / rate));
}

TEST_CASE("parameter gradients accumulate on every micro-batch of a step but the first",
          "[partition]") {
  const models::ModelOptions o = test::tiny_gpt(2);
  const graph::Model m = test::trace(o, 2, 16);
  const GraphFacts f = analyze(m.graph());
  const Hardware hw = test::profile("a100-80g");
  const CostModel cost(hw, Precision::F32, {});
  // The MLP's output linear reads its weight [32, 128] and bias [32]: each gradient is added
  // into its buffer by a kernel that reads two and writes one of its size.
  const int fc2 = find_node(f, "blocks.0.mlp.proj/linear_0");
  const double bytes = 3 * 4.0 * (32 * 128 + 32);
  CHECK(cost.node_time(f, fc2).accumulate ==
        Approx(bytes / (hw.memory_bandwidth * hw.memory_efficiency) + 2 * hw.kernel_overhead));
  // A node that reads no parameter adds nothing.
  CHECK(cost.node_time(f, find_node(f, "blocks.0/add_1")).accumulate == 0);
  // With one micro-batch a step there is nothing to add to; with four, three of them add.
  double sum = 0;
  for (size_t k = 0; k < f.nodes.size(); ++k) sum += cost.node_time(f, int(k)).accumulate;
  REQUIRE(sum > 0);
  MemoryOptions one, four;
  four.micro_batches = 4;
  const StageModel a(f, cost, one), b(f, cost, four);
  const int64_t n = a.nodes();
  const StageEstimate ea = a.estimate(0, 1, 0, n, 0), eb = b.estimate(0, 1, 0, n, 0);
  CHECK(eb.fwd == Approx(ea.fwd));
  CHECK(eb.bwd == Approx(ea.bwd + 0.75 * sum));
}

TEST_CASE("collectives and transfers follow the ring and point-to-point formulas",
          "[partition]") {
  const Hardware hw = test::profile("a100-80g");
  Placement tp8;
  tp8.tp = 8;
  tp8.pp = 2;
  const CostModel c(hw, Precision::BF16, tp8);
  // tp = 8 fills a node: its group is on NVLink, the pipeline hop crosses the network.
  CHECK(c.tp_link().bandwidth == hw.intra_node.bandwidth);
  CHECK(c.pp_link(0).bandwidth == hw.inter_node.bandwidth);
  const double bytes = 64e6;
  CHECK(c.all_reduce_seconds(bytes, 8, c.tp_link()) ==
        Approx(2 * 7.0 / 8 * bytes / 300e9 + 14 * 3e-6));
  CHECK(c.all_gather_seconds(bytes, 8, c.tp_link()) == Approx(7.0 / 8 * bytes / 300e9 + 7 * 3e-6));
  CHECK(c.all_reduce_seconds(bytes, 1, c.tp_link()) == 0);
  CHECK(c.p2p_seconds(bytes, 2, c.pp_link(0)) == Approx(bytes / 25e9 + 2 * 8e-6));

  Placement pp_in_node;
  pp_in_node.tp = 2;
  pp_in_node.pp = 4;  // 8 ranks: the whole pipeline on one node
  CHECK(CostModel(hw, Precision::BF16, pp_in_node).pp_link(2).bandwidth == hw.intra_node.bandwidth);
}

TEST_CASE("the memory model: bytes per parameter, in-flight micro-batches, recomputation",
          "[partition]") {
  MemoryOptions o;
  o.precision = Precision::BF16;
  o.micro_batches = 16;
  PerParameter p = bytes_per_parameter(o);
  CHECK(p.weight + p.grad + p.optimizer == 18);  // 2 + 4 + 12, as Megatron's mixed precision
  o.zero1 = true;
  o.dp = 4;
  CHECK(bytes_per_parameter(o).optimizer == 3);
  o.precision = Precision::F32;
  o.zero1 = false;
  p = bytes_per_parameter(o);
  CHECK(p.weight + p.grad + p.optimizer == 16);

  // 1F1B: stage s of 4 holds 4 - s micro-batches; GPipe all of them; never more than exist.
  CHECK(in_flight(o, 0, 4) == 4);
  CHECK(in_flight(o, 3, 4) == 1);
  o.micro_batches = 2;
  CHECK(in_flight(o, 0, 4) == 2);
  o.micro_batches = 16;
  o.schedule = Schedule::GPipe;
  CHECK(in_flight(o, 3, 4) == 16);
  // Zero bubble: one warm-up forward more than 1F1B, except on the last stage.
  o.schedule = Schedule::ZeroBubble;
  CHECK(in_flight(o, 0, 4) == 5);
  CHECK(in_flight(o, 2, 4) == 3);
  CHECK(in_flight(o, 3, 4) == 1);
  o.schedule = Schedule::OneFOneB;

  // 1000 parameters, 100 MB of activations a micro-batch, 1 MB boundary input, 5 MB working.
  StageMemory plain = stage_memory(o, 1, 4, 1000, 100e6, 1e6, 5e6, false);
  CHECK(plain.activations == 3 * 100e6);
  CHECK(plain.total() == Approx(16000 + 300e6 + 5e6));
  // Without a recomputation mode a stage cannot recompute, whatever is asked.
  CHECK_FALSE(can_recompute(o, 1, 4));
  CHECK_FALSE(stage_memory(o, 1, 4, 1000, 100e6, 1e6, 5e6, true).recompute);
  for (Recompute mode : {Recompute::Full, Recompute::AsNeeded}) {
    o.recompute = mode;
    StageMemory rc = stage_memory(o, 1, 4, 1000, 100e6, 1e6, 5e6, true);
    CHECK(rc.recompute);
    CHECK(rc.activations == 3 * 1e6 + 100e6);
    CHECK(stage_memory(o, 1, 4, 1000, 100e6, 1e6, 5e6, false).activations == 3 * 100e6);
    CHECK(can_recompute(o, 1, 4));
    CHECK_FALSE(can_recompute(o, 3, 4));  // the last stage holds one micro-batch: nothing to save
    CHECK_FALSE(stage_memory(o, 3, 4, 1000, 100e6, 1e6, 5e6, true).recompute);
    CHECK(stage_memory(o, 3, 4, 1000, 100e6, 1e6, 5e6, true).activations == 100e6);
  }
  CHECK(parse_recompute("memory") == Recompute::AsNeeded);
  CHECK(std::string(recompute_name(Recompute::AsNeeded)) == "memory");
  CHECK_THROWS_WITH(parse_recompute("some"), Catch::Contains("none, full, memory"));
  // One micro-batch a step: gradients fill as activations are freed, so the larger one counts.
  o.micro_batches = 1;
  o.recompute = Recompute::None;
  StageMemory once = stage_memory(o, 0, 1, 1000, 100e6, 0, 5e6, false);
  CHECK(once.total() == Approx(4000 + 8000 + 105e6));
  // Zero bubble keeps its WeightGrad state: one micro-batch's output gradients when a step has
  // one; else the previous micro-batch's saved inputs and gradients, twice on the last stage.
  const DeferredBytes kept{10e6, 20e6};
  CHECK(stage_memory(o, 0, 1, 1000, 100e6, 0, 5e6, false, kept).deferred == 0);  // not zb
  o.schedule = Schedule::ZeroBubble;
  CHECK(stage_memory(o, 0, 2, 1000, 100e6, 0, 5e6, false, kept).deferred == 20e6);
  o.micro_batches = 8;
  CHECK(stage_memory(o, 0, 2, 1000, 100e6, 0, 5e6, false, kept).deferred == 30e6);
  const StageMemory last = stage_memory(o, 1, 2, 1000, 100e6, 0, 5e6, false, kept);
  CHECK(last.deferred == 60e6);
  CHECK(last.total() == Approx(4000 + 4000 + 8000 + 100e6 + 5e6 + 60e6));
}

TEST_CASE("activations: views share their storage, saved values count once", "[partition]") {
  const graph::Model m = test::trace(test::tiny_gpt(1), 2, 8);
  const GraphFacts f = analyze(m.graph());
  // q, k and v are views of the fused QKV output; the attention output merged back over heads
  // after a permute is a copy.
  const int qkv = f.find("blocks.0.attn.qkv/linear_0:0");
  const int sdpa = find_node(f, "blocks.0.attn/sdpa_0");
  for (int id : f.nodes[size_t(sdpa)].inputs)
    if (id >= 0) CHECK(f.values[size_t(id)].root == qkv);
  CHECK(f.values[size_t(f.find("blocks.0.attn/permute_0:0"))].contiguous == false);
  const int merged = f.find("blocks.0.attn/reshape_4:0");
  CHECK(f.values[size_t(merged)].root == merged);
  // sdpa keeps q, k, v (one storage), its output and lse; nothing is saved twice.
  const std::vector<int>& saved = f.nodes[size_t(sdpa)].saved;
  CHECK(saved.size() == 3);
  CHECK(std::count(saved.begin(), saved.end(), qkv) == 1);
  // Parameters are not activations but the embedding keeps its ids.
  const int emb = find_node(f, "wte/embedding_0");
  CHECK(f.nodes[size_t(emb)].saved == std::vector<int>{f.find("tokens")});
  CHECK(f.values[size_t(f.find("wte.weight"))].requires_grad);
  CHECK_FALSE(f.values[size_t(f.find("arange_0:0"))].requires_grad);
}
