#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "merak/data/dataset.h"

using namespace merak;
using namespace merak::data;

namespace {

using V = BertVocab;

std::string text_of(const TokenDataset& d) {
  std::vector<int64_t> ids(size_t(d.size()));
  d.read(0, d.size(), ids.data());
  return detokenize_bytes(ids);
}

// One row of a BertBatch, with the masked tokens put back.
struct Row {
  std::vector<int64_t> tokens, segments, targets;
  std::vector<bool> attention;
  int64_t nsp = 0;
  int64_t sep1 = -1, sep2 = -1;  // positions of the two [SEP]s
  std::string a, b;              // the segments' original bytes
};

std::vector<Row> rows_of(const BertBatch& batch) {
  const int64_t n = batch.tokens.size(0), len = batch.tokens.size(1);
  const auto tok = batch.tokens.to_vector<int64_t>();
  const auto seg = batch.segment_ids.to_vector<int64_t>();
  const auto tgt = batch.mlm_targets.to_vector<int64_t>();
  const auto nsp = batch.nsp_labels.to_vector<int64_t>();
  const auto att = batch.attention_mask.to_vector<bool>();
  std::vector<Row> rows(static_cast<size_t>(n));
  for (int64_t r = 0; r < n; ++r) {
    Row& row = rows[size_t(r)];
    const size_t at = size_t(r * len);
    row.tokens.assign(tok.begin() + at, tok.begin() + at + len);
    row.segments.assign(seg.begin() + at, seg.begin() + at + len);
    row.targets.assign(tgt.begin() + at, tgt.begin() + at + len);
    row.attention.assign(att.begin() + at, att.begin() + at + len);
    row.nsp = nsp[size_t(r)];
    for (int64_t j = 0; j < len; ++j) {
      if (row.tokens[size_t(j)] != V::kSep) continue;
      (row.sep1 < 0 ? row.sep1 : row.sep2) = j;
    }
    std::vector<int64_t> original = row.tokens;
    for (int64_t j = 0; j < len; ++j)
      if (row.targets[size_t(j)] != -100) original[size_t(j)] = row.targets[size_t(j)];
    if (row.sep1 > 0 && row.sep2 > row.sep1) {
      row.a = detokenize_bytes({original.begin() + 1, original.begin() + row.sep1});
      row.b = detokenize_bytes({original.begin() + row.sep1 + 1, original.begin() + row.sep2});
    }
  }
  return rows;
}

}  // namespace

TEST_CASE("BERT rows are [CLS] a [SEP] b [SEP] padded, with matching segments and mask",
          "[data][bert]") {
  auto corpus = generated_corpus(100000, 3);
  const std::string text = text_of(*corpus);
  BertSampler sampler(*corpus, 64, 16, 0.15, V::kSize, 9);
  const BertBatch batch = sampler.batch(0);
  CHECK(batch.tokens.shape() == Shape{16, 64});
  CHECK(batch.segment_ids.shape() == Shape{16, 64});
  CHECK(batch.attention_mask.shape() == Shape{16, 64});
  CHECK(batch.mlm_targets.shape() == Shape{16, 64});
  CHECK(batch.nsp_labels.shape() == Shape{16});
  CHECK(batch.tokens.dtype() == DType::I64);
  CHECK(batch.attention_mask.dtype() == DType::Bool);
  CHECK(batch.nsp_labels.dtype() == DType::I64);

  int padded_rows = 0, ends_at_sentence = 0;
  for (const Row& row : rows_of(batch)) {
    REQUIRE(row.tokens[0] == V::kCls);
    REQUIRE(row.sep1 > 1);             // a is not empty
    REQUIRE(row.sep2 > row.sep1 + 1);  // nor is b
    for (int64_t j = 0; j < 64; ++j) {
      const size_t i = size_t(j);
      INFO("position " << j);
      CHECK(row.attention[i] == (j <= row.sep2));
      CHECK(row.segments[i] == (j > row.sep1 && j <= row.sep2 ? 1 : 0));
      if (j > row.sep2) CHECK(row.tokens[i] == V::kPad);
      if (j > 0 && j != row.sep1 && j < row.sep2) CHECK(row.tokens[i] != V::kPad);
    }
    if (row.sep2 < 63) ++padded_rows;
    // Both segments are real text from the corpus; when b follows a, so is a + b.
    CHECK(text.find(row.a) != std::string::npos);
    CHECK(text.find(row.b) != std::string::npos);
    if (row.nsp == 1) CHECK(text.find(row.a + row.b) != std::string::npos);
    // Segments end at a sentence end ('.'); only a sentence longer than the room is cut.
    if (row.a.back() != '.') CHECK(row.a.find('.') == std::string::npos);
    if (row.b.back() != '.') CHECK(row.b.find('.') == std::string::npos);
    ends_at_sentence += row.a.back() == '.' && row.b.back() == '.';
  }
  CHECK(padded_rows > 0);
  CHECK(ends_at_sentence > 0);
}

TEST_CASE("MLM picks 15% of segment tokens, 80/10/10, never special ones; NSP is 50/50",
          "[data][bert]") {
  auto corpus = generated_corpus(200000, 4);
  const std::string text = text_of(*corpus);
  BertSampler sampler(*corpus, 128, 32, 0.15, V::kSize, 1);
  int64_t candidates = 0, chosen = 0, masked = 0, kept = 0, replaced = 0;
  int64_t rows = 0, next = 0, random_pairs_found = 0;
  for (int64_t step = 0; step < 12; ++step) {
    for (const Row& row : rows_of(sampler.batch(step))) {
      ++rows;
      next += row.nsp;
      if (row.nsp == 0 && text.find(row.a + row.b) != std::string::npos) ++random_pairs_found;
      for (size_t j = 0; j < row.tokens.size(); ++j) {
        const bool special = j == 0 || int64_t(j) == row.sep1 || int64_t(j) >= row.sep2;
        if (special) {
          INFO("special position " << j);
          CHECK(row.targets[j] == -100);
          continue;
        }
        ++candidates;
        if (row.targets[j] == -100) {
          CHECK(row.tokens[j] < 256);  // unchosen tokens are untouched bytes
          continue;
        }
        ++chosen;
        CHECK((row.targets[j] >= 0 && row.targets[j] < 256));
        if (row.tokens[j] == V::kMask)
          ++masked;
        else if (row.tokens[j] == row.targets[j])
          ++kept;
        else if (row.tokens[j] >= 0 && row.tokens[j] < 256)
          ++replaced;
        else
          FAIL_CHECK("chosen token became " << row.tokens[j]);
      }
    }
  }
  REQUIRE(candidates > 40000);
  const double rate = double(chosen) / candidates;
  INFO(chosen << " of " << candidates << " chosen; " << masked << " masked, " << kept
              << " kept, " << replaced << " replaced; " << next << " of " << rows << " NSP 1");
  CHECK(std::abs(rate - 0.15) < 0.015);
  CHECK(std::abs(double(masked) / chosen - 0.8) < 0.03);
  // A random byte equals the original 1/256 of the time, so "kept" is a touch over 10%.
  CHECK(std::abs(double(kept) / chosen - 0.1) < 0.025);
  CHECK(std::abs(double(replaced) / chosen - 0.1) < 0.025);
  CHECK(std::abs(double(next) / rows - 0.5) < 0.07);
  CHECK(random_pairs_found < rows / 20);  // a random b rarely happens to follow a
}

TEST_CASE("BERT rows depend on (seed, step, row) only, not on the slice", "[data][bert]") {
  auto corpus = generated_corpus(50000, 5);
  BertSampler sampler(*corpus, 48, 8, 0.15, V::kSize, 2);
  const BertBatch full = sampler.batch(3);
  for (int64_t ranks : {2, 3, 8}) {
    std::vector<int64_t> tokens, segments, targets, nsp;
    std::vector<bool> attention;
    for (int64_t rank = 0; rank < ranks; ++rank) {
      const BertBatch part = sampler.batch(3, rank * 8 / ranks, (rank + 1) * 8 / ranks);
      for (int64_t x : part.tokens.to_vector<int64_t>()) tokens.push_back(x);
      for (int64_t x : part.segment_ids.to_vector<int64_t>()) segments.push_back(x);
      for (int64_t x : part.mlm_targets.to_vector<int64_t>()) targets.push_back(x);
      for (int64_t x : part.nsp_labels.to_vector<int64_t>()) nsp.push_back(x);
      for (bool x : part.attention_mask.to_vector<bool>()) attention.push_back(x);
    }
    INFO(ranks << " ranks");
    CHECK(tokens == full.tokens.to_vector<int64_t>());
    CHECK(segments == full.segment_ids.to_vector<int64_t>());
    CHECK(targets == full.mlm_targets.to_vector<int64_t>());
    CHECK(nsp == full.nsp_labels.to_vector<int64_t>());
    CHECK(attention == full.attention_mask.to_vector<bool>());
  }
  CHECK(sampler.batch(3).tokens.to_vector<int64_t>() == full.tokens.to_vector<int64_t>());
  CHECK(sampler.batch(4).tokens.to_vector<int64_t>() != full.tokens.to_vector<int64_t>());
  BertSampler other(*corpus, 48, 8, 0.15, V::kSize, 3);
  CHECK(other.batch(3).tokens.to_vector<int64_t>() != full.tokens.to_vector<int64_t>());
}

TEST_CASE("BERT sampler arguments and data are checked", "[data][bert]") {
  auto corpus = generated_corpus(1000, 1);
  CHECK_THROWS_WITH(BertSampler(*corpus, 64, 4, 0.15, 256, 0), Catch::Contains("vocab 256"));
  CHECK_THROWS_WITH(BertSampler(*corpus, 4, 4, 0.15, V::kSize, 0), Catch::Contains("seq_len 4"));
  CHECK_THROWS_WITH(BertSampler(*corpus, 64, 4, 1.5, V::kSize, 0),
                    Catch::Contains("mlm_probability"));
  CHECK_THROWS_WITH(BertSampler(*corpus, 600, 4, 0.15, V::kSize, 0),
                    Catch::Contains("holds 1000 tokens"));
  // Ids from 256 are BERT's special tokens: data holding them is refused where it is read.
  std::vector<int64_t> ids(64, 'a');
  for (size_t i = 0; i < ids.size(); i += 8) ids[i] = 300;
  auto wide = in_memory(ids, 301);
  CHECK_THROWS_WITH(BertSampler(*wide, 16, 1, 0.15, V::kSize, 0).batch(0),
                    Catch::Matches("the tokens held in memory: token [0-9]+: token id 300 is not "
                                   "below the vocabulary of 256 \\(BERT reads byte tokens: "
                                   "data.tokenizer byte\\).*"));
  BertSampler ok(*corpus, 64, 4, 0.15, V::kSize, 0);
  CHECK_THROWS_WITH(ok.batch(0, 2, 5), Catch::Contains("rows [2, 5)"));
  // No masking at probability 0, every segment token at 1.
  const BertBatch none = BertSampler(*corpus, 64, 4, 0.0, V::kSize, 0).batch(0);
  for (int64_t t : none.mlm_targets.to_vector<int64_t>()) CHECK(t == -100);
  for (const Row& row : rows_of(BertSampler(*corpus, 64, 4, 1.0, V::kSize, 0).batch(0)))
    for (int64_t j = 1; j < row.sep2; ++j)
      if (j != row.sep1) CHECK(row.targets[size_t(j)] != -100);
}
