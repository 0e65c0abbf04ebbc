#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "merak/autograd/grad_mode.h"
#include "merak/core/philox.h"
#include "models/gpt.h"
#include "models/gpt_decode.h"
#include "models/sampling.h"

using namespace merak;

namespace {

models::ModelOptions small_gpt() {
  models::ModelOptions o;
  o.family = "gpt";
  o.layers = 3;
  o.hidden = 32;
  o.heads = 4;
  o.max_seq = 24;
  o.vocab = 50;
  return o;
}

std::vector<int64_t> random_ids(int64_t n, int64_t vocab, uint64_t seed) {
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < n; ++i)
    ids.push_back(int64_t(philox_at(seed, uint64_t(i))[0] % uint64_t(vocab)));
  return ids;
}

std::map<std::string, Tensor> weights_of(const nn::Module& model) {
  std::map<std::string, Tensor> w;
  for (const auto& [name, p] : model.named_parameters()) w[name] = p;
  return w;
}

// max |a - b| over row `row` of the full logits [1, T, V] and the decoder's row.
double row_diff(const Tensor& full, int64_t row, const Tensor& got) {
  const int64_t v = full.size(2);
  const std::vector<float> a = full.narrow(1, row, 1).contiguous().to_vector<float>();
  const std::vector<float> b = got.to_vector<float>();
  REQUIRE(int64_t(b.size()) == v);
  double worst = 0;
  for (int64_t i = 0; i < v; ++i) worst = std::max(worst, std::fabs(double(a[i]) - double(b[i])));
  return worst;
}

}  // namespace

TEST_CASE("cached decoding gives the full forward's logits", "[models][decode]") {
  const models::ModelOptions o = small_gpt();
  auto model = models::make_model(o);
  model->materialize(7);
  model->train(false);
  const auto& gpt = dynamic_cast<const models::Gpt&>(*model);
  const int64_t t = 20;
  const std::vector<int64_t> ids = random_ids(t, o.vocab, 3);
  autograd::NoGradGuard no_grad;
  const Tensor full = gpt.logits(Tensor::from_vector(ids, {1, t}));  // [1, T, V]

  for (int64_t prefill : {int64_t(1), int64_t(6)}) {
    CAPTURE(prefill);
    models::GptDecoder decoder(o, weights_of(*model));
    const Tensor first =
        decoder.logits_for(std::vector<int64_t>(ids.begin(), ids.begin() + prefill));
    REQUIRE(first.shape() == Shape{prefill, o.vocab});
    for (int64_t i = 0; i < prefill; ++i) CHECK(row_diff(full, i, first.narrow(0, i, 1)) < 1e-5);
    for (int64_t i = prefill; i < t; ++i) {
      CAPTURE(i);
      CHECK(row_diff(full, i, decoder.next(ids[size_t(i)])) < 1e-5);
    }
    CHECK(decoder.length() == t);
  }
}

TEST_CASE("the decoder starts over on logits_for and stops at max_seq", "[models][decode]") {
  const models::ModelOptions o = small_gpt();
  auto model = models::make_model(o);
  model->materialize(11);
  models::GptDecoder decoder(o, weights_of(*model));
  const std::vector<int64_t> ids = random_ids(o.max_seq, o.vocab, 5);
  const std::vector<float> a = decoder.logits_for({ids[0], ids[1]}).to_vector<float>();
  decoder.next(ids[2]);
  const std::vector<float> b = decoder.logits_for({ids[0], ids[1]}).to_vector<float>();
  CHECK(a == b);
  CHECK(decoder.length() == 2);
  decoder.logits_for(ids);  // a full context
  CHECK_THROWS_WITH(decoder.next(ids[0]), Catch::Contains("model.max_seq 24"));
  CHECK_THROWS_WITH(decoder.logits_for(random_ids(o.max_seq + 1, o.vocab, 5)),
                    Catch::Contains("exceed model.max_seq"));
  auto w = weights_of(*model);
  w.erase("blocks.1.mlp.fc.bias");
  CHECK_THROWS_WITH(models::GptDecoder(o, w), Catch::Contains("blocks.1.mlp.fc.bias"));
}

TEST_CASE("sampling: greedy, top-k, temperature and seeds", "[models][sampling]") {
  const std::vector<float> logits = {0.1f, 2.0f, -1.0f, 1.9f, 0.5f};
  models::SamplingOptions greedy;
  greedy.temperature = 0;
  CHECK(models::sample_token(logits.data(), 5, greedy, 0) == 1);
  models::SamplingOptions top1;
  top1.top_k = 1;
  for (uint64_t i = 0; i < 20; ++i) CHECK(models::sample_token(logits.data(), 5, top1, i) == 1);
  models::SamplingOptions top2;
  top2.top_k = 2;
  std::set<int64_t> seen;
  for (uint64_t i = 0; i < 200; ++i) seen.insert(models::sample_token(logits.data(), 5, top2, i));
  CHECK(seen == std::set<int64_t>{1, 3});
  // Same seed, same draws; another seed, other draws; frequencies follow the softmax.
  models::SamplingOptions a, b;
  a.seed = 1, b.seed = 2;
  std::vector<int64_t> da, da2, db;
  std::vector<int64_t> counts(5, 0);
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    da.push_back(models::sample_token(logits.data(), 5, a, uint64_t(i)));
    da2.push_back(models::sample_token(logits.data(), 5, a, uint64_t(i)));
    db.push_back(models::sample_token(logits.data(), 5, b, uint64_t(i)));
    ++counts[size_t(da.back())];
  }
  CHECK(da == da2);
  CHECK(da != db);
  double z = 0;
  for (float l : logits) z += std::exp(double(l));
  for (size_t k = 0; k < 5; ++k)
    CHECK(double(counts[k]) / n == Approx(std::exp(double(logits[k])) / z).margin(0.015));
}
