// Shared pieces of the partitioner's tests: small traced models and batches, the unsplit
// graph's loss and gradients, hardware profiles from configs/hardware.
#pragma once

#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <string>

#include "merak/autograd/engine.h"
#include "merak/core/philox.h"
#include "merak/graph/executor.h"
#include "merak/graph/tracer.h"
#include "merak/partition/hardware.h"
#include "merak/partition/plan_builder.h"
#include "merak/partition/simulate.h"
#include "models/model.h"

namespace merak::test {

inline models::ModelOptions tiny_gpt(int64_t layers = 3, int64_t vocab = 96) {
  models::ModelOptions o;
  o.family = "gpt";
  o.layers = layers;
  o.hidden = 32;
  o.heads = 4;
  o.max_seq = 16;
  o.vocab = vocab;
  return o;
}

inline graph::Model trace(const models::ModelOptions& o, int64_t batch, int64_t seq,
                          uint64_t seed = 7) {
  auto model = models::make_model(o);
  return graph::trace_model(*model, batch, seq, seed);
}

// Deterministic ids in [0, vocab).
inline Tensor ids(const Shape& shape, int64_t vocab, uint64_t seed) {
  Tensor t = Tensor::empty(shape, DType::I64);
  for (int64_t i = 0; i < t.numel(); ++i)
    t.data<int64_t>()[i] = int64_t(philox_at(seed, uint64_t(i))[0] % uint64_t(vocab));
  return t;
}

inline std::map<std::string, Tensor> gpt_batch(int64_t b, int64_t t, int64_t vocab) {
  return {{"tokens", ids({b, t}, vocab, 1)}, {"targets", ids({b, t}, vocab, 2)}};
}

// The unsplit graph's loss and parameter gradients.
inline partition::StepResult unsplit_step(const graph::Model& m,
                                          const std::map<std::string, Tensor>& batch,
                                          uint64_t seed) {
  graph::Executor ex(m, seed);
  std::map<std::string, Tensor> in;
  for (const auto& v : m.graph().inputs()) in[v.name()] = batch.at(v.name());
  const std::vector<Tensor> out = ex.run(in);
  autograd::backward(out[0]);
  partition::StepResult r;
  r.loss = out[0].item();
  for (const auto& [name, p] : ex.parameters()) r.grads[name] = p.grad();
  return r;
}

inline double max_abs_diff(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  const auto x = a.to_vector<float>(), y = b.to_vector<float>();
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::fabs(double(x[i]) - double(y[i])));
  return m;
}

inline double max_abs(const Tensor& a) {
  double m = 0;
  for (float v : a.to_vector<float>()) m = std::max(m, std::fabs(double(v)));
  return m;
}

// Loss within 1e-6 relative and every gradient within 1e-5 of its largest entry.
inline void check_same_step(const partition::StepResult& got, const partition::StepResult& want) {
  INFO("loss " << got.loss << " vs unsplit " << want.loss);
  CHECK(std::fabs(got.loss - want.loss) <= 1e-6 * std::fabs(want.loss));
  REQUIRE(got.grads.size() == want.grads.size());
  for (const auto& [name, g] : want.grads) {
    INFO("gradient of " << name);
    REQUIRE(got.grads.count(name));
    CHECK(max_abs_diff(got.grads.at(name), g) <= 1e-5 * std::max(max_abs(g), 1e-3));
  }
}

inline partition::Hardware profile(const std::string& name) {
  return partition::load_hardware("configs/hardware/" + name + ".yaml");
}

// A dp = 1, tp = 1 plan of `m` with the given cuts, on the cpu-local profile.
inline partition::Plan plan_with_cuts(const graph::Model& m, const std::vector<int64_t>& cuts) {
  using namespace partition;
  const std::vector<TpRank> ranks = {whole_model(m)};
  const GraphFacts f = analyze(m.graph());
  Placement pl;
  pl.pp = int64_t(cuts.size()) - 1;
  MemoryOptions mem;
  const CostModel cost(profile("cpu-local"), Precision::F32, pl);
  const StageModel stages(f, cost, mem);
  PlanSettings st;
  st.pp = pl.pp;
  st.memory = mem;
  return build_plan(ranks, stages, evaluate(stages, cuts, "given"), st);
}

}  // namespace merak::test
