// Language-model batches. Windows start every seq_len tokens and hold seq_len + 1, so their
// inputs never overlap and every token after the first is a target exactly once per epoch.
// Each epoch visits the windows in a Philox-keyed order fixed by (seed, epoch); step s reads
// positions [s * batch, (s + 1) * batch) of that order (modulo the epoch), so any row of any
// global batch is computed alone, the same in every process layout.
#include <algorithm>
#include <string>
#include <utility>

#include "merak/core/philox.h"
#include "merak/data/dataset.h"

namespace merak::data {
namespace {

// A pseudorandom permutation of [0, n): a balanced Feistel network, whose round function is
// Philox, over the smallest 4^k >= n, with cycle walking back into [0, n). Unlike a shuffled
// table it costs no memory and gives any position alone in O(1) expected time.
class KeyedPermutation {
 public:
  KeyedPermutation(uint64_t n, uint64_t key) : n_(n), key_(key) {
    while (half_bits_ < 32 && (uint64_t(1) << (2 * half_bits_)) < n) ++half_bits_;
    mask_ = (uint64_t(1) << half_bits_) - 1;
  }

  uint64_t operator()(uint64_t i) const {
    // Walking the bijection's cycle from i reaches a value < n (at worst i itself, again).
    uint64_t x = encrypt(i);
    while (x >= n_) x = encrypt(x);
    return x;
  }

 private:
  static constexpr uint32_t kRounds = 6;

  uint64_t encrypt(uint64_t x) const {
    uint64_t left = x >> half_bits_, right = x & mask_;
    for (uint32_t round = 0; round < kRounds; ++round) {
      const auto r = philox_at(key_, right, round);
      const uint64_t f = (uint64_t(r[1]) << 32 | r[0]) & mask_;
      left = std::exchange(right, left ^ f);
    }
    return left << half_bits_ | right;
  }

  uint64_t n_, key_;
  uint32_t half_bits_ = 1;
  uint64_t mask_ = 0;
};

int64_t window_count(const TokenDataset& data, int64_t seq_len) {
  return data.size() > 0 ? (data.size() - 1) / seq_len : 0;
}

}  // namespace

LmSampler::LmSampler(const TokenDataset& data, int64_t seq_len, int64_t batch, uint64_t seed,
                     int64_t vocab, std::string whose)
    : data_(data), seq_len_(seq_len), batch_(batch), seed_(seed), vocab_(vocab),
      whose_(std::move(whose)) {
  MERAK_CHECK(seq_len > 0, "LmSampler: seq_len must be positive, got ", seq_len);
  MERAK_CHECK(batch > 0, "LmSampler: batch must be positive, got ", batch);
  MERAK_CHECK(vocab > 0, "LmSampler: vocab must be positive, got ", vocab);
  MERAK_CHECK(data.size() >= min_tokens(seq_len, batch), "LmSampler: the dataset's ",
              data.size(), " tokens make ", window_count(data, seq_len),
              " windows of seq_len + 1 = ", seq_len + 1, " tokens, fewer than one batch of ",
              batch, " (needs at least ", min_tokens(seq_len, batch), " tokens)");
}

int64_t LmSampler::steps_per_epoch() const { return window_count(data_, seq_len_) / batch_; }

LmBatch LmSampler::batch(int64_t step, int64_t row_begin, int64_t row_end) const {
  MERAK_CHECK(step >= 0, "LmSampler: step ", step, " is negative");
  MERAK_CHECK(0 <= row_begin && row_begin <= row_end && row_end <= batch_,
              "LmSampler: rows [", row_begin, ", ", row_end, ") are not within the batch of ",
              batch_);
  const int64_t epoch = step / steps_per_epoch();
  const int64_t first = (step % steps_per_epoch()) * batch_;
  const KeyedPermutation order(uint64_t(window_count(data_, seq_len_)),
                               philox_key(seed_, "lm_sampler.epoch." + std::to_string(epoch)));
  const int64_t rows = row_end - row_begin;
  LmBatch out{Tensor::empty({rows, seq_len_}, DType::I64),
              Tensor::empty({rows, seq_len_}, DType::I64)};
  int64_t* tokens = out.tokens.data<int64_t>();
  int64_t* targets = out.targets.data<int64_t>();
  std::vector<int64_t> window(size_t(seq_len_ + 1));
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t w = int64_t(order(uint64_t(first + row_begin + r)));
    data_.read(w * seq_len_, seq_len_ + 1, window.data());
    check_ids(data_, w * seq_len_, window.data(), seq_len_ + 1, vocab_, whose_);
    std::copy(window.begin(), window.end() - 1, tokens + r * seq_len_);
    std::copy(window.begin() + 1, window.end(), targets + r * seq_len_);
  }
  return out;
}

}  // namespace merak::data
