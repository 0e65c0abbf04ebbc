#include <catch2/catch.hpp>

#include <algorithm>
#include <numeric>
#include <set>
#include <vector>

#include "merak/core/error.h"
#include "merak/data/dataset.h"

using namespace merak;
using namespace merak::data;

namespace {

constexpr int64_t kVocab = 1 << 20;

// Token i at position i, so a window's first token is its start.
std::unique_ptr<TokenDataset> iota(int64_t n) {
  std::vector<int64_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), 0);
  return in_memory(std::move(t), 0);
}

std::vector<int64_t> starts_of(const LmBatch& b) {
  std::vector<int64_t> s;
  const auto tokens = b.tokens.to_vector<int64_t>();
  for (int64_t r = 0; r < b.tokens.size(0); ++r) s.push_back(tokens[size_t(r * b.tokens.size(1))]);
  return s;
}

}  // namespace

TEST_CASE("LM batches are windows of seq_len + 1 tokens split into inputs and targets",
          "[data][sampler]") {
  auto data = iota(8 * 40 + 1);  // 40 windows of 8 + 1
  LmSampler sampler(*data, 8, 6, 42, kVocab, "test");
  CHECK(sampler.steps_per_epoch() == 6);  // 40 / 6, the rest dropped
  const LmBatch b = sampler.batch(0);
  CHECK(b.tokens.shape() == Shape{6, 8});
  CHECK(b.targets.shape() == Shape{6, 8});
  CHECK(b.tokens.dtype() == DType::I64);
  CHECK(b.targets.dtype() == DType::I64);
  const auto tokens = b.tokens.to_vector<int64_t>(), targets = b.targets.to_vector<int64_t>();
  for (int64_t r = 0; r < 6; ++r) {
    const int64_t start = tokens[size_t(r * 8)];
    CHECK(start % 8 == 0);
    for (int64_t j = 0; j < 8; ++j) {
      CHECK(tokens[size_t(r * 8 + j)] == start + j);
      CHECK(targets[size_t(r * 8 + j)] == start + j + 1);
    }
  }
}

TEST_CASE("an epoch visits distinct windows, in a new order each epoch", "[data][sampler]") {
  auto data = iota(8 * 36 + 1);  // 36 windows = exactly 6 batches of 6
  LmSampler sampler(*data, 8, 6, 42, kVocab, "test");
  REQUIRE(sampler.steps_per_epoch() == 6);
  std::vector<int64_t> epoch0, epoch1;
  for (int64_t s = 0; s < 6; ++s) {
    for (int64_t x : starts_of(sampler.batch(s))) epoch0.push_back(x);
    for (int64_t x : starts_of(sampler.batch(6 + s))) epoch1.push_back(x);
  }
  std::vector<int64_t> all(36);
  for (int64_t w = 0; w < 36; ++w) all[size_t(w)] = w * 8;
  std::vector<int64_t> sorted0 = epoch0, sorted1 = epoch1;
  std::sort(sorted0.begin(), sorted0.end());
  std::sort(sorted1.begin(), sorted1.end());
  CHECK(sorted0 == all);
  CHECK(sorted1 == all);
  CHECK(epoch0 != epoch1);
  CHECK(epoch0 != all);  // shuffled, not in file order

  // Over many epochs the window that comes first is close to uniform (36 windows, 3600 epochs:
  // about 100 each, and no window anywhere near never or twice as often).
  std::vector<int> first(36, 0);
  for (int64_t e = 0; e < 3600; ++e) ++first[size_t(starts_of(sampler.batch(e * 6, 0, 1))[0] / 8)];
  CHECK(*std::min_element(first.begin(), first.end()) > 55);
  CHECK(*std::max_element(first.begin(), first.end()) < 150);
}

TEST_CASE("rank slices of a global batch concatenate to the full batch", "[data][sampler]") {
  auto data = iota(16 * 200 + 1);
  LmSampler sampler(*data, 16, 10, 7, kVocab, "test");
  for (int64_t step : {0, 3, 12, 25}) {
    const LmBatch full = sampler.batch(step);
    for (int64_t ranks : {1, 2, 3, 4, 10}) {
      std::vector<int64_t> tokens, targets;
      for (int64_t rank = 0; rank < ranks; ++rank) {
        const LmBatch part = sampler.batch(step, rank * 10 / ranks, (rank + 1) * 10 / ranks);
        CHECK(part.tokens.size(0) == (rank + 1) * 10 / ranks - rank * 10 / ranks);
        for (int64_t x : part.tokens.to_vector<int64_t>()) tokens.push_back(x);
        for (int64_t x : part.targets.to_vector<int64_t>()) targets.push_back(x);
      }
      INFO("step " << step << ", " << ranks << " ranks");
      CHECK(tokens == full.tokens.to_vector<int64_t>());
      CHECK(targets == full.targets.to_vector<int64_t>());
    }
  }
  CHECK(sampler.batch(0, 4, 4).tokens.shape() == Shape{0, 16});
}

TEST_CASE("LM batches are a function of (seed, step) only", "[data][sampler]") {
  auto data = iota(16 * 200 + 1);
  LmSampler a(*data, 16, 10, 7, kVocab, "test"), same(*data, 16, 10, 7, kVocab, "test"),
      other_seed(*data, 16, 10, 8, kVocab, "test");
  CHECK(a.batch(5).tokens.to_vector<int64_t>() == a.batch(5).tokens.to_vector<int64_t>());
  CHECK(a.batch(5).tokens.to_vector<int64_t>() == same.batch(5).tokens.to_vector<int64_t>());
  CHECK(a.batch(5).tokens.to_vector<int64_t>() != a.batch(6).tokens.to_vector<int64_t>());
  CHECK(a.batch(5).tokens.to_vector<int64_t>() != other_seed.batch(5).tokens.to_vector<int64_t>());
}

TEST_CASE("LM sampler arguments are checked", "[data][sampler]") {
  auto data = iota(100);
  CHECK_THROWS_WITH(LmSampler(*data, 10, 10, 0, kVocab, "test"),
                    Catch::Contains("fewer than one batch"));
  CHECK_THROWS_WITH(LmSampler(*data, 0, 1, 0, kVocab, "test"), Catch::Contains("seq_len"));
  CHECK_THROWS_WITH(LmSampler(*data, 10, 0, 0, kVocab, "test"), Catch::Contains("batch"));
  LmSampler ok(*data, 10, 9, 0, kVocab, "test");  // 99 / 10 = 9 windows: exactly one batch
  CHECK(ok.steps_per_epoch() == 1);
  CHECK_THROWS_WITH(ok.batch(0, 3, 10), Catch::Contains("rows [3, 10)"));
  CHECK_THROWS_WITH(ok.batch(0, 5, 4), Catch::Contains("rows"));
  CHECK_THROWS_WITH(ok.batch(-1), Catch::Contains("negative"));
}

TEST_CASE("every window read is checked against the vocabulary, naming where the id is",
          "[data][sampler]") {
  // Token i at position i: ids from 100 on are outside a vocabulary of 100.
  auto data = iota(8 * 20 + 1);
  LmSampler sampler(*data, 8, 4, 3, 100, "model.vocab in my.yaml");
  CHECK_THROWS_WITH(LmSampler(*data, 8, 4, 3, 0, "x"), Catch::Contains("vocab must be positive"));
  // Some step reads a window holding ids of 100 or more; its first such id is named.
  bool refused = false;
  for (int64_t step = 0; step < 5 && !refused; ++step) {
    try {
      sampler.batch(step);
    } catch (const Error& e) {
      refused = true;
      CHECK_THAT(e.what(), Catch::Matches("the tokens held in memory: token (10[0-9]|1[1-5][0-9]|"
                                          "160): token id \\1 is not below the vocabulary of "
                                          "100 \\(model.vocab in my.yaml\\).*"));
    }
  }
  CHECK(refused);
  // A window entirely below 100 reads: window 0 (ids 0..8) is in some batch of the epoch.
  LmSampler wide(*data, 8, 4, 3, 161, "x");
  for (int64_t step = 0; step < wide.steps_per_epoch(); ++step) wide.batch(step);
}

namespace {

// Negative ids: a dataset that hands out what it is given (in_memory refuses them).
class Raw : public TokenDataset {
 public:
  explicit Raw(std::vector<int64_t> ids) : ids_(std::move(ids)) {}
  int64_t size() const override { return int64_t(ids_.size()); }
  void read(int64_t start, int64_t count, int64_t* out) const override {
    std::copy_n(ids_.begin() + start, count, out);
  }
  std::string place(int64_t i) const override { return "raw: token " + std::to_string(i); }

 private:
  std::vector<int64_t> ids_;
};

}  // namespace

TEST_CASE("a negative id is refused as it is read", "[data][sampler]") {
  std::vector<int64_t> ids(33, 5);
  ids[17] = -100;  // the cross-entropy's ignore_index: never a silent "not a target"
  Raw data(ids);
  LmSampler sampler(data, 8, 4, 0, 50257, "model.vocab in v.yaml");
  CHECK_THROWS_WITH(sampler.batch(0),
                    Catch::StartsWith("raw: token 17: token id -100 is negative, not in the "
                                      "vocabulary of 50257 (model.vocab in v.yaml)"));
}
