// Datasets that are not files of their own: tokens held in memory, and several shards read as
// one sequence.
#include <algorithm>

#include "merak/data/dataset.h"

namespace merak::data {
namespace {

class InMemoryDataset : public TokenDataset {
 public:
  InMemoryDataset(std::vector<int64_t> tokens, int64_t vocab, std::string what)
      : tokens_(std::move(tokens)), vocab_(vocab), what_(std::move(what)) {}
  int64_t size() const override { return int64_t(tokens_.size()); }
  int64_t vocab_hint() const override { return vocab_; }
  void read(int64_t start, int64_t count, int64_t* out) const override {
    MERAK_CHECK(start >= 0 && count >= 0 && start <= size() - count, "read of tokens [", start,
                ", ", start + count, ") outside an in-memory dataset of ", size(), " tokens");
    std::copy_n(tokens_.begin() + start, count, out);
  }
  std::string place(int64_t i) const override {
    return what_ + ": token " + std::to_string(i);
  }

 private:
  std::vector<int64_t> tokens_;
  int64_t vocab_;
  std::string what_;
};

class ConcatDataset : public TokenDataset {
 public:
  explicit ConcatDataset(std::vector<std::unique_ptr<TokenDataset>> parts)
      : parts_(std::move(parts)) {
    starts_.push_back(0);
    for (const auto& p : parts_) starts_.push_back(starts_.back() + p->size());
  }
  int64_t size() const override { return starts_.back(); }
  int64_t vocab_hint() const override {
    int64_t v = 0;
    for (const auto& p : parts_) {
      if (p->size() == 0) continue;
      if (p->vocab_hint() == 0) return 0;  // one unknown part makes the whole unknown
      v = std::max(v, p->vocab_hint());
    }
    return v;
  }
  void read(int64_t start, int64_t count, int64_t* out) const override {
    MERAK_CHECK(start >= 0 && count >= 0 && start <= size() - count, "read of tokens [", start,
                ", ", start + count, ") outside ", parts_.size(), " shards of ", size(),
                " tokens");
    size_t i = part_index(start);
    while (count > 0) {
      const int64_t offset = start - starts_[i];
      const int64_t n = std::min(count, parts_[i]->size() - offset);
      if (n > 0) parts_[i]->read(offset, n, out);
      start += n;
      out += n;
      count -= n;
      ++i;
    }
  }
  std::string place(int64_t i) const override {
    const size_t k = part_index(i);
    return parts_[k]->place(i - starts_[k]);
  }

 private:
  // The part holding token i: the last one starting at or before it.
  size_t part_index(int64_t i) const {
    return size_t(std::upper_bound(starts_.begin(), starts_.end(), i) - starts_.begin()) - 1;
  }

  std::vector<std::unique_ptr<TokenDataset>> parts_;
  std::vector<int64_t> starts_;  // starts_[i] = first global index of part i; back() = size
};

}  // namespace

std::unique_ptr<TokenDataset> in_memory(std::vector<int64_t> tokens, int64_t vocab,
                                        std::string what) {
  MERAK_CHECK(vocab >= 0, "in_memory: vocab ", vocab, " is negative (0 means unknown)");
  for (size_t i = 0; i < tokens.size(); ++i)
    MERAK_CHECK(tokens[i] >= 0 && (vocab == 0 || tokens[i] < vocab), "in_memory: token ",
                tokens[i], " at position ", i, " is outside the vocabulary [0, ", vocab, ")");
  return std::make_unique<InMemoryDataset>(std::move(tokens), vocab, std::move(what));
}

std::unique_ptr<TokenDataset> open_shards(const std::vector<std::string>& paths) {
  MERAK_CHECK(!paths.empty(), "open_shards: no shard paths given");
  std::vector<std::unique_ptr<TokenDataset>> parts;
  for (const auto& p : paths) parts.push_back(open_shard(p));
  return std::make_unique<ConcatDataset>(std::move(parts));
}

void check_ids_below(const TokenDataset& data, int64_t vocab, const std::string& whose) {
  std::vector<int64_t> ids(size_t(1) << 20);
  for (int64_t at = 0; at < data.size(); at += int64_t(ids.size())) {
    const int64_t n = std::min<int64_t>(int64_t(ids.size()), data.size() - at);
    data.read(at, n, ids.data());
    for (int64_t i = 0; i < n; ++i)
      MERAK_CHECK(ids[size_t(i)] >= 0 && ids[size_t(i)] < vocab, data.place(at + i),
                  ": token id ", ids[size_t(i)], " is not below the vocabulary of ", vocab, " (",
                  whose, ")");
  }
}

}  // namespace merak::data
