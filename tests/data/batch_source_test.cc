// train::BatchSource over the data a config names: ids checked against model.vocab as batches
// are read (negative ones too), data.valid_split on a weighted Megatron blend holding out no
// training token, config errors naming the keys for data too small for a batch or for
// eval.batches, and training and validation reading one opening of their files.
#include <catch2/catch.hpp>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "merak/config/config.h"
#include "merak/core/error.h"
#include "merak/data/megatron.h"
#include "merak/train/batches.h"
#include "tests/test_files.h"

using namespace merak;
using namespace merak::testing;  // tests/test_files.h

namespace {

config::Config make(const std::vector<std::string>& sets) {
  std::vector<std::string> all = {"train.batch=2", "train.seq_len=4", "model.vocab=256",
                                  "data.generated_tokens=5000"};
  all.insert(all.end(), sets.begin(), sets.end());
  return config::parse("model: {family: gpt}\n", "t.yaml", all);
}

std::string le(uint64_t v, int bytes) {
  std::string s;
  for (int i = 0; i < bytes; ++i) s += char((v >> (8 * i)) & 0xff);
  return s;
}

// Every token id in `steps` global batches of `source`.
std::set<int64_t> ids_read(const train::BatchSource& source, int64_t steps) {
  std::set<int64_t> ids;
  for (int64_t s = 0; s < steps; ++s)
    for (int64_t id : source.batch(s, 0, 2).tokens.to_vector<int64_t>()) ids.insert(id);
  return ids;
}

}  // namespace

TEST_CASE("BatchSource: ids not below model.vocab are refused, naming the file and byte",
          "[data][batches]") {
  // The generated corpus is English bytes: lower-case letters are 97..122.
  CHECK_THROWS_WITH(train::BatchSource(make({"model.vocab=90"})),
                    Catch::Matches("the generated corpus: token [0-9]+: token id [0-9]+ is not "
                                   "below the vocabulary of 90 \\(model.vocab in t.yaml\\).*"));
  // Bytes stored as int8 (Megatron's code 2): their largest id fits any vocabulary of 128 or
  // more, but the bytes from 0x80 read negative.
  const std::string prefix = temp_path("batches_int8");
  std::string bin;
  for (int i = 0; i < 64; ++i) bin += char(i % 3 == 0 ? 0x80 + i : 'a' + i % 26);
  write_file(prefix + ".idx", std::string("MMIDIDX\0\0", 9) + le(1, 8) + le(2, 1) + le(1, 8) +
                                  le(2, 8) + le(64, 4) + le(0, 8) + le(0, 8) + le(1, 8));
  write_file(prefix + ".bin", bin);
  CHECK_THROWS_WITH(
      train::BatchSource(make({"data.source=megatron", "data.files=[" + prefix + "]"})),
      Catch::Matches(".*batches_int8\\.bin: byte [0-9]+: token id -[0-9]+ is negative, not in "
                     "the vocabulary of 256 \\(model.vocab in t.yaml\\).*"));
}

TEST_CASE("BatchSource: data.valid_split on a weighted blend holds out no training token",
          "[data][batches]") {
  // Token ids name their place: prefix k's token i is k * 10000 + i. The small prefix is
  // repeated about 5 times by the 1:1 blend.
  const std::vector<int64_t> sizes = {200, 2000};
  std::string files = "[";
  for (int k = 0; k < 2; ++k) {
    const std::string prefix = temp_path("batches_blend" + std::to_string(k));
    data::MegatronWriter w(prefix, 20000);
    for (int64_t i = 0; i < sizes[size_t(k)]; ++i) {
      w.add_tokens({k * 10000 + i});
      if (i % 10 == 9) w.end_document();
    }
    w.close();
    files += std::string(k ? ", " : "") + "1, " + prefix;
  }
  const config::Config c = make({"model.vocab=20000", "data.source=megatron", "data.files=" +
                                 files + "]", "data.valid_split=0.1", "eval.batches=1"});
  const train::BatchSource train(c), valid(c, train::Split::Valid);
  const std::set<int64_t> trained = ids_read(train, 2000), held = ids_read(valid, 200);
  // The held-out tokens are each prefix's last tenth, and none of them is trained on.
  for (int64_t id : held) {
    INFO("held-out id " << id);
    CHECK(id % 10000 >= sizes[size_t(id / 10000)] * 9 / 10);
    CHECK(trained.count(id) == 0);
  }
  // Both prefixes are in the held-out blend, each from the start of its held-out part.
  CHECK(held.count(180) == 1);
  CHECK(held.count(11800) == 1);
}

TEST_CASE("BatchSource: too little data for a batch, or for eval.batches, names the keys",
          "[data][batches]") {
  CHECK_THROWS_WITH(train::BatchSource(make({"data.valid_split=0.001"}), train::Split::Valid),
                    "t.yaml: keys 'train.batch' / 'train.seq_len' / 'data.valid_split': the "
                    "validation data has 5 tokens, fewer than the 9 that one batch of 2 x 4 "
                    "needs");
  CHECK_THROWS_WITH(train::BatchSource(make({"data.generated_tokens=8"})),
                    "t.yaml: keys 'train.batch' / 'train.seq_len' / 'data.generated_tokens': "
                    "the training data has 8 tokens, fewer than the 9 that one batch of 2 x 4 "
                    "needs");
  // 5000 * 0.01 = 50 tokens: 12 windows of 4 + 1, 6 batches of 2.
  const config::Config c = make({"data.valid_split=0.01", "eval.batches=6"});
  train::BatchSource ok(c, train::Split::Valid);
  CHECK_THROWS_WITH(train::BatchSource(make({"data.valid_split=0.01", "eval.batches=7"}),
                                       train::Split::Valid),
                    "t.yaml: key 'eval.batches': 7 batches of 2 x 4 are more than the "
                    "validation data's 50 tokens hold without reading a window twice: at most "
                    "6");
  CHECK_THROWS_WITH(train::BatchSource(make({"data.valid_split=0.01",
                                             "eval.batches=1000000000000"}),
                                       train::Split::Valid),
                    Catch::Contains("at most 6"));
}

TEST_CASE("BatchSource: training and validation parts of one data.valid_split open its files once",
          "[data][batches]") {
  // Text tokenized by bytes: opened for training, reused for validation.
  const std::string text = temp_path("once.txt");
  std::string body;
  for (int i = 0; i < 400; ++i) body += "line " + std::to_string(i) + " of the text\n";
  write_file(text, body);
  const config::Config c =
      make({"data.source=text", "data.files=[" + text + "]", "data.valid_split=0.1"});
  train::OpenedData opened;
  const train::BatchSource train_part(c, train::Split::Train, &opened);
  REQUIRE(opened.size() == 1);
  const std::shared_ptr<const data::TokenDataset> first = opened.begin()->second;
  const train::BatchSource valid_part(c, train::Split::Valid, &opened);
  REQUIRE(opened.size() == 1);
  CHECK(opened.begin()->second == first);
  CHECK(first.use_count() == 4);  // the map, `first`, and each part's slice of it
  // The parts are what sources opening the file on their own read.
  const train::BatchSource train_alone(c, train::Split::Train);
  const train::BatchSource valid_alone(c, train::Split::Valid);
  for (int64_t step : {0, 3}) {
    CHECK(train_part.batch(step, 0, 2).tokens.to_vector<int64_t>() ==
          train_alone.batch(step, 0, 2).tokens.to_vector<int64_t>());
    CHECK(valid_part.batch(step, 0, 2).tokens.to_vector<int64_t>() ==
          valid_alone.batch(step, 0, 2).tokens.to_vector<int64_t>());
  }
  CHECK(train_part.batch(0, 0, 2).tokens.to_vector<int64_t>() !=
        valid_part.batch(0, 0, 2).tokens.to_vector<int64_t>());
}

TEST_CASE("BatchSource: BERT's masked-LM weights make the micro-batches' mean the global batch's") {
  // Per row: its predicted tokens times M / N (N: the global batch's, M: its micro-batches).
  // Then sum over a micro-batch's rows x its mean loss, averaged over the M micro-batches, is
  // the mean over all N predicted tokens, however the batch is cut.
  const config::Config c = config::parse(
      "model: {family: bert}\n", "t.yaml",
      {"train.batch=8", "train.seq_len=16", "model.vocab=260", "data.generated_tokens=20000"});
  const train::BatchSource source(c);
  for (int64_t step : {0, 3}) {
    const models::Batch whole = source.batch(step, 0, 8);
    const std::vector<int64_t> targets = whole.mlm_targets.to_vector<int64_t>();
    const int64_t n = std::count_if(targets.begin(), targets.end(), [](int64_t t) {
      return t != -100;
    });
    REQUIRE(n > 0);
    const std::vector<float> w = whole.mlm_weight.to_vector<float>();
    REQUIRE(w.size() == 8);
    double sum = 0;
    for (int64_t r = 0; r < 8; ++r) {
      const int64_t row_n = std::count_if(targets.begin() + r * 16, targets.begin() + r * 16 + 16,
                                          [](int64_t t) { return t != -100; });
      CHECK(w[size_t(r)] == Approx(double(row_n) / double(n)));
      sum += w[size_t(r)];
    }
    CHECK(sum == Approx(1));  // one micro-batch: weight 1
    // Four micro-batches of 2 rows: each row weighs 4 times as much, the same tokens' share.
    for (int64_t m = 0; m < 4; ++m) {
      const std::vector<float> part =
          source.batch(step, 2 * m, 2 * m + 2).mlm_weight.to_vector<float>();
      REQUIRE(part.size() == 2);
      CHECK(part[0] == Approx(4 * w[size_t(2 * m)]));
      CHECK(part[1] == Approx(4 * w[size_t(2 * m + 1)]));
    }
  }
  // GPT's batches carry none.
  CHECK(!train::BatchSource(make({})).batch(0, 0, 2).mlm_weight.defined());
}
