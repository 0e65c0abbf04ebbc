// The summary: op histogram, parameter count and FLOPs per token of traced graphs, checked
// against what the model says of itself (its parameter count and analytic FLOPs formula).
#include "merak/graph/summary.h"

#include <catch2/catch.hpp>

#include "merak/graph/tracer.h"
#include "tests/graph/test_models.h"

using namespace merak;

TEST_CASE("summary of a traced GPT: ops, parameters, FLOPs per token", "[graph][summary]") {
  models::ModelOptions o = test::small_gpt();
  o.layers = 3;
  auto model = models::make_model(o);
  const graph::Model m = graph::trace_model(*model, 2, 16, 1);
  const graph::Summary s = graph::summarize(m);
  CHECK(s.name == "gpt");
  CHECK(s.nodes == m.graph().nodes_size());
  CHECK(s.parameters == model->num_parameters());
  CHECK(s.constants == 0);
  CHECK(s.tokens == 32);
  // Per block: qkv, attention projection, mlp projection; plus the tied LM head. The MLP's fc
  // and its GELU are one linear_gelu.
  CHECK(s.ops.at("linear") == 3 * o.layers + 1);
  CHECK(s.ops.at("linear_gelu") == o.layers);
  CHECK(s.ops.count("gelu") == 0);
  CHECK(s.ops.at("sdpa") == o.layers);
  CHECK(s.ops.at("layer_norm") == 2 * o.layers + 1);
  CHECK(s.ops.at("embedding") == 2);
  CHECK(s.ops.at("arange") == 1);
  CHECK(s.ops.at("cross_entropy") == 1);
  int64_t counted = 0;
  for (const auto& [op, n] : s.ops) counted += n;
  CHECK(counted == s.nodes);
  const std::string text = graph::format_summary(s);
  CHECK(text.find("linear") != std::string::npos);
  CHECK(text.find("FLOPs per token") != std::string::npos);
}

TEST_CASE("registry FLOPs per token agree with the analytic 6N + 6LTC of a GPT",
          "[graph][summary]") {
  // Wide enough that matmuls dominate, as in the formula (which ignores elementwise work and
  // counts the embedding lookups as matmuls): within 5%.
  models::ModelOptions o;
  o.family = "gpt";
  o.layers = 4;
  o.hidden = 512;
  o.heads = 8;
  o.max_seq = 256;
  o.vocab = 4096;
  auto model = models::make_model(o);
  const graph::Summary s = graph::summarize(graph::trace_model(*model, 1, 256, 1));
  const double formula = model->flops_per_token(256);
  INFO("registry " << s.flops_per_token() << ", formula " << formula);
  CHECK(s.flops_per_token() == Approx(formula).epsilon(0.05));
  CHECK(s.bwd_flops > s.fwd_flops);
}

TEST_CASE("summary errors name the node; symbolic dims need bindings", "[graph][summary]") {
  auto model = models::make_model(test::small_gpt());
  graph::Model m = graph::trace_model(*model, 2, 8, 1);
  graph::Model bad = m;
  bad.mutable_graph()->mutable_nodes(2)->set_op("nonesuch");
  CHECK_THROWS_WITH(graph::summarize(bad), Catch::Contains(m.graph().nodes(2).name()) &&
                                               Catch::Contains("not a registry op"));
  auto* dims = m.mutable_graph()->mutable_inputs(0)->mutable_type()->mutable_dims(0);
  dims->set_symbol("batch");
  CHECK_THROWS_WITH(graph::summarize(m), Catch::Contains("'batch' is not bound"));
  CHECK(graph::summarize(m, {{"batch", 2}}).fwd_flops > 0);
}
