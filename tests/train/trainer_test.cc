#include <catch2/catch.hpp>

#include "merak/config/config.h"
#include "tools/train/trainer.h"

using namespace merak;

namespace {
config::Config tiny(const std::vector<std::string>& extra = {}) {
  std::vector<std::string> sets = {"model.layers=2",  "model.hidden=64", "model.heads=4",
                                   "train.batch=8",   "train.seq_len=32", "train.steps=40",
                                   "optimizer.lr=3e-3", "schedule.warmup_steps=5",
                                   "data.generated_tokens=100000"};
  sets.insert(sets.end(), extra.begin(), extra.end());
  return config::parse("model: {family: gpt}\n", "tiny.yaml", sets);
}
}  // namespace

TEST_CASE("training the tiny GPT lowers the loss", "[train]") {
  train::Trainer trainer(tiny());
  double first = 0, last = 0;
  for (int i = 0; i < 40; ++i) {
    const train::StepStats s = trainer.step();
    CHECK(s.step == i + 1);
    CHECK(std::isfinite(s.loss));
    if (i == 0) first = s.loss;
    last = s.loss;
  }
  CHECK(first > 5.0);       // ~log(256) at init
  CHECK(last < first - 1.5);
  CHECK(trainer.steps_done() == 40);
}

TEST_CASE("micro-batches accumulate to the same step as one full batch", "[train]") {
  train::Trainer full(tiny());
  train::Trainer micro(tiny({"train.micro_batch=2"}));
  for (int i = 0; i < 3; ++i) {
    const auto a = full.step(), b = micro.step();
    CHECK(b.loss == Approx(a.loss).epsilon(1e-5));
    CHECK(b.grad_norm == Approx(a.grad_norm).epsilon(1e-4));
  }
  const auto pa = full.model().named_parameters(), pb = micro.model().named_parameters();
  for (size_t i = 0; i < pa.size(); ++i) {
    const auto va = pa[i].second.to_vector<float>(), vb = pb[i].second.to_vector<float>();
    for (size_t j = 0; j < va.size(); ++j) REQUIRE(vb[j] == Approx(va[j]).margin(1e-5));
  }
}

TEST_CASE("a vocabulary smaller than the data's is a config error naming the key", "[train]") {
  CHECK_THROWS_WITH(train::Trainer(tiny({"model.vocab=100"})),
                    Catch::Contains("tiny.yaml: key 'model.vocab': 100 is smaller than the "
                                    "data's vocabulary (256)"));
}

TEST_CASE("the tiny BERT trains on MLM + NSP", "[train][bert]") {
  train::Trainer trainer(config::parse(
      "model: {family: bert, vocab: 260}\n", "bert.yaml",
      {"model.layers=2", "model.hidden=64", "model.heads=4", "train.batch=8",
       "train.seq_len=32", "train.steps=30", "optimizer.lr=2e-3", "data.generated_tokens=100000"}));
  double first = 0, last = 0;
  for (int i = 0; i < 30; ++i) {
    const auto s = trainer.step();
    if (i == 0) first = s.loss;
    last = s.loss;
  }
  CHECK(last < first - 1.0);
}
