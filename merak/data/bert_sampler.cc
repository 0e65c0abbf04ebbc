// BERT pre-training batches from a byte-token stream. Sentences end at '.' bytes. A row:
//   a = whole sentences from a random sentence start, split at a random sentence boundary;
//   b = the sentences that follow a (NSP label 1) or ones from another random sentence start
//       (label 0), cut back to the last whole sentence that fits;
//   [CLS] a [SEP] b [SEP] then [PAD] up to seq_len;
//   each a/b token is chosen for MLM with probability p; a chosen token becomes [MASK] (80%),
//   a random byte (10%) or stays (10%), and its target is the original token.
// Every draw comes from Philox keyed by (seed, step, row), so a row never depends on which
// slice of the batch is asked for.
#include <algorithm>

#include "merak/core/philox.h"
#include "merak/data/dataset.h"

namespace merak::data {
namespace {

constexpr int64_t kPeriod = '.';
constexpr int64_t kNotPredicted = -100;
// Philox streams of one row: 0 and 1 for the layout, kMlmStream + position for MLM draws.
constexpr uint64_t kMlmStream = 16;

// The draws of one row of one step.
struct RowDraws {
  uint64_t key;
  int64_t step, row;
  std::array<uint32_t, 4> at(uint64_t stream) const {
    return philox_at(key, uint64_t(step), uint64_t(row) << 32 | stream);
  }
};

uint64_t below(uint32_t lo, uint32_t hi, uint64_t n) { return (uint64_t(hi) << 32 | lo) % n; }

// Tokens [pos, pos + n) of the data, which must be bytes: ids from 256 are the special tokens.
void read_bytes(const TokenDataset& data, int64_t pos, int64_t n, int64_t* out) {
  data.read(pos, n, out);
  check_ids(data, pos, out, n, BertVocab::kPad, "BERT reads byte tokens: data.tokenizer byte");
}

// The first sentence start in [pos, pos + budget]: just past the first '.' of the `budget`
// tokens from pos, or pos itself when they hold none (a sentence longer than the budget).
int64_t sentence_start(const TokenDataset& data, int64_t pos, int64_t budget,
                       std::vector<int64_t>& buf) {
  buf.resize(size_t(budget));
  read_bytes(data, pos, budget, buf.data());
  const auto dot = std::find(buf.begin(), buf.end(), kPeriod);
  return dot == buf.end() ? pos : pos + (dot - buf.begin()) + 1;
}

}  // namespace

BertSampler::BertSampler(const TokenDataset& data, int64_t seq_len, int64_t batch,
                         double mlm_probability, int64_t vocab, uint64_t seed)
    : data_(data), seq_len_(seq_len), batch_(batch), mlm_probability_(mlm_probability),
      vocab_(vocab), seed_(seed) {
  MERAK_CHECK(seq_len >= 5, "BertSampler: seq_len ", seq_len,
              " leaves no room for two segments (needs >= 5: [CLS] a [SEP] b [SEP])");
  MERAK_CHECK(batch > 0, "BertSampler: batch must be positive, got ", batch);
  MERAK_CHECK(mlm_probability >= 0 && mlm_probability <= 1, "BertSampler: mlm_probability ",
              mlm_probability, " is not in [0, 1]");
  MERAK_CHECK(vocab >= BertVocab::kSize, "BertSampler: vocab ", vocab,
              " cannot hold the 256 bytes and 4 special tokens (needs >= ", BertVocab::kSize,
              ")");
  MERAK_CHECK(data.size() >= min_tokens(seq_len), "BertSampler: the dataset holds ",
              data.size(), " tokens, fewer than the ", min_tokens(seq_len), " that seq_len ",
              seq_len, " needs");
}

BertBatch BertSampler::batch(int64_t step, int64_t row_begin, int64_t row_end) const {
  MERAK_CHECK(step >= 0, "BertSampler: step ", step, " is negative");
  MERAK_CHECK(0 <= row_begin && row_begin <= row_end && row_end <= batch_,
              "BertSampler: rows [", row_begin, ", ", row_end, ") are not within the batch of ",
              batch_);
  const int64_t rows = row_end - row_begin, L = seq_len_ - 3;
  BertBatch out{Tensor::empty({rows, seq_len_}, DType::I64),
                Tensor::empty({rows, seq_len_}, DType::I64),
                Tensor::empty({rows, seq_len_}, DType::Bool),
                Tensor::empty({rows, seq_len_}, DType::I64), Tensor::empty({rows}, DType::I64)};
  const uint64_t key = philox_key(seed_, "bert_sampler");
  // Sentence starts are drawn from [0, size - 2L] so a (within L of its start) and L tokens
  // after it always lie inside the data.
  const uint64_t starts = uint64_t(data_.size() - 2 * L + 1);
  std::vector<int64_t> buf, a(static_cast<size_t>(L)), b;
  for (int64_t r = 0; r < rows; ++r) {
    const RowDraws draws{key, step, row_begin + r};
    const auto d0 = draws.at(0), d1 = draws.at(1);

    // Segment a: L tokens from a sentence start, cut at a random sentence boundary.
    const int64_t a_start = sentence_start(data_, int64_t(below(d0[0], d0[1], starts)), L, buf);
    read_bytes(data_, a_start, L, a.data());
    std::vector<int64_t> cuts;
    for (int64_t k = 1; k < L; ++k)
      if (a[size_t(k - 1)] == kPeriod) cuts.push_back(k);
    const int64_t a_len = cuts.empty() ? 1 + int64_t(d0[3] % uint32_t(L - 1))
                                       : cuts[d0[3] % cuts.size()];

    // Segment b: what follows a, or text from another random sentence start.
    const bool is_next = (d0[2] & 1) != 0;
    const int64_t b_start =
        is_next ? a_start + a_len
                : sentence_start(data_, int64_t(below(d1[0], d1[1], starts)), L, buf);
    b.resize(size_t(L - a_len));
    read_bytes(data_, b_start, L - a_len, b.data());
    int64_t b_len = int64_t(b.size());
    while (b_len > 0 && b[size_t(b_len - 1)] != kPeriod) --b_len;
    if (b_len == 0) b_len = int64_t(b.size());  // no whole sentence fits: keep the cut one

    // Pack [CLS] a [SEP] b [SEP] [PAD]...
    int64_t* tok = out.tokens.data<int64_t>() + r * seq_len_;
    int64_t* seg = out.segment_ids.data<int64_t>() + r * seq_len_;
    bool* mask = out.attention_mask.data<bool>() + r * seq_len_;
    int64_t* tgt = out.mlm_targets.data<int64_t>() + r * seq_len_;
    std::fill(tok, tok + seq_len_, BertVocab::kPad);
    std::fill(seg, seg + seq_len_, 0);
    std::fill(mask, mask + seq_len_, false);
    std::fill(tgt, tgt + seq_len_, kNotPredicted);
    int64_t n = 0;
    tok[n++] = BertVocab::kCls;
    for (int64_t i = 0; i < a_len; ++i) tok[n++] = a[size_t(i)];
    tok[n++] = BertVocab::kSep;
    const int64_t b_begin = n;
    for (int64_t i = 0; i < b_len; ++i) tok[n++] = b[size_t(i)];
    tok[n++] = BertVocab::kSep;
    std::fill(seg + b_begin, seg + n, 1);
    std::fill(mask, mask + n, true);
    out.nsp_labels.data<int64_t>()[r] = is_next ? 1 : 0;

    // Masked-LM choice over the segment tokens only.
    for (int64_t j = 1; j < n - 1; ++j) {
      if (j == b_begin - 1) continue;  // the middle [SEP]
      const auto m = draws.at(kMlmStream + uint64_t(j));
      if (uniform01(m[0]) >= mlm_probability_) continue;
      tgt[j] = tok[j];
      const float how = uniform01(m[1]);
      if (how < 0.8f)
        tok[j] = BertVocab::kMask;
      else if (how < 0.9f)
        tok[j] = int64_t(m[2] % uint32_t(BertVocab::kPad));
    }
  }
  return out;
}

int64_t BertSampler::predicted(int64_t step) const {
  const Tensor targets = batch(step).mlm_targets;
  return count_predicted(targets.data<int64_t>(), targets.numel());
}

int64_t BertSampler::count_predicted(const int64_t* mlm_targets, int64_t n) {
  return std::count_if(mlm_targets, mlm_targets + n,
                       [](int64_t v) { return v != kNotPredicted; });
}

}  // namespace merak::data
