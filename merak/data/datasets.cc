// Datasets that are not files of their own: tokens held in memory, several datasets read as one
// sequence, a slice of one, and weighted blends.
#include <algorithm>
#include <cmath>

#include "merak/data/dataset.h"

namespace merak::data {
namespace {

class InMemoryDataset : public TokenDataset {
 public:
  InMemoryDataset(std::vector<int64_t> tokens, std::string what)
      : tokens_(std::move(tokens)), what_(std::move(what)) {}
  int64_t size() const override { return int64_t(tokens_.size()); }
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
  void read(int64_t start, int64_t count, int64_t* out) const override {
    MERAK_CHECK(start >= 0 && count >= 0 && start <= size() - count, "read of tokens [", start,
                ", ", start + count, ") outside ", parts_.size(), " parts of ", size(),
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

class SliceDataset final : public TokenDataset {
 public:
  SliceDataset(std::shared_ptr<const TokenDataset> whole, int64_t begin, int64_t count)
      : whole_(std::move(whole)), begin_(begin), count_(count) {}
  int64_t size() const override { return count_; }
  void read(int64_t start, int64_t count, int64_t* out) const override {
    MERAK_CHECK(start >= 0 && count >= 0 && start <= count_ - count, "read of tokens [", start,
                ", ", start + count, ") outside a slice of ", count_, " tokens");
    whole_->read(begin_ + start, count, out);
  }
  std::string place(int64_t i) const override { return whole_->place(begin_ + i); }

 private:
  std::shared_ptr<const TokenDataset> whole_;
  int64_t begin_, count_;
};

// Pieces of the sources one after another: piece k is tokens [begin, begin + length) of source
// `source` repeated end to end (so a piece may run past the source's end and on from its start),
// at offset `at` of the blend.
class BlendDataset : public TokenDataset {
 public:
  struct Piece {
    int32_t source;
    int64_t begin, length, at;
  };
  BlendDataset(std::vector<std::unique_ptr<TokenDataset>> sources, std::vector<Piece> pieces)
      : sources_(std::move(sources)), pieces_(std::move(pieces)) {
    size_ = pieces_.empty() ? 0 : pieces_.back().at + pieces_.back().length;
  }
  int64_t size() const override { return size_; }
  void read(int64_t start, int64_t count, int64_t* out) const override {
    MERAK_CHECK(start >= 0 && count >= 0 && start <= size_ - count, "read of tokens [", start,
                ", ", start + count, ") outside the blend's ", size_, " tokens");
    // The piece holding `start`, then the ones after it; within a piece, the source from its
    // start again wherever it ends.
    for (size_t k = piece_index(start); count > 0; ++k) {
      const Piece& p = pieces_[k];
      const TokenDataset& s = *sources_[size_t(p.source)];
      int64_t from = p.begin + (start - p.at);
      for (int64_t left = std::min(count, p.at + p.length - start); left > 0;) {
        const int64_t pos = from % s.size(), n = std::min(left, s.size() - pos);
        s.read(pos, n, out);
        out += n, start += n, count -= n, from += n, left -= n;
      }
    }
  }
  std::string place(int64_t i) const override {
    const Piece& p = pieces_[piece_index(i)];
    const TokenDataset& s = *sources_[size_t(p.source)];
    return s.place((p.begin + (i - p.at)) % s.size());
  }

 private:
  // The last piece starting at or before token i.
  size_t piece_index(int64_t i) const {
    return size_t(std::upper_bound(pieces_.begin(), pieces_.end(), i,
                                   [](int64_t pos, const Piece& p) { return pos < p.at; }) -
                  pieces_.begin()) - 1;
  }

  std::vector<std::unique_ptr<TokenDataset>> sources_;
  std::vector<Piece> pieces_;
  int64_t size_ = 0;
};

}  // namespace

std::unique_ptr<TokenDataset> in_memory(std::vector<int64_t> tokens, int64_t vocab,
                                        std::string what) {
  MERAK_CHECK(vocab >= 0, "in_memory: vocab ", vocab, " is negative (0 means unknown)");
  for (size_t i = 0; i < tokens.size(); ++i)
    MERAK_CHECK(tokens[i] >= 0 && (vocab == 0 || tokens[i] < vocab), "in_memory: token ",
                tokens[i], " at position ", i, " is outside the vocabulary [0, ", vocab, ")");
  return std::make_unique<InMemoryDataset>(std::move(tokens), std::move(what));
}

std::unique_ptr<TokenDataset> concat(std::vector<std::unique_ptr<TokenDataset>> parts) {
  return std::make_unique<ConcatDataset>(std::move(parts));
}

std::unique_ptr<TokenDataset> open_shards(const std::vector<std::string>& paths) {
  MERAK_CHECK(!paths.empty(), "open_shards: no shard paths given");
  std::vector<std::unique_ptr<TokenDataset>> parts;
  for (const auto& p : paths) parts.push_back(open_shard(p));
  return concat(std::move(parts));
}

std::unique_ptr<TokenDataset> slice(std::shared_ptr<const TokenDataset> whole, int64_t begin,
                                    int64_t count) {
  MERAK_CHECK(begin >= 0 && count >= 0 && begin <= whole->size() - count, "slice [", begin,
              ", ", begin + count, ") outside a dataset of ", whole->size(), " tokens");
  return std::make_unique<SliceDataset>(std::move(whole), begin, count);
}

// The table holds one 32-byte piece per block, not per document: at the default block of 2^20
// tokens about 30 MB for a trillion-token blend (2^16 would be 16 times that), whatever the
// document sizes. Coarse blocks cost nothing in the mix of a batch, whose windows the sampler
// draws from the whole blend in random order; they only bound how far a stretch of the blend
// strays from the weights (by about one block per source).
std::unique_ptr<TokenDataset> blend(std::vector<std::unique_ptr<TokenDataset>> sources,
                                    const std::vector<double>& weights,
                                    const std::vector<std::string>& names, int64_t block) {
  const size_t K = sources.size();
  MERAK_CHECK(K > 0, "blend: no sources given");
  MERAK_CHECK(weights.size() == K && names.size() == K, "blend: ", weights.size(),
              " weights and ", names.size(), " names for ", K, " sources");
  MERAK_CHECK(block > 0, "blend: block ", block, " tokens is not positive");
  double weight_sum = 0;
  int64_t total = 0;
  for (size_t k = 0; k < K; ++k) {
    MERAK_CHECK(std::isfinite(weights[k]) && weights[k] > 0, names[k], ": blend weight ",
                weights[k], " (weights must be positive)");
    MERAK_CHECK(sources[k]->size() > 0, names[k],
                ": has no tokens, so it cannot have a blend weight");
    weight_sum += weights[k];
    total += sources[k]->size();
  }
  std::vector<int64_t> quota(K), taken(K, 0);
  for (size_t k = 0; k < K; ++k)
    quota[k] = std::max<int64_t>(1, std::llround(double(total) * weights[k] / weight_sum));
  using Piece = BlendDataset::Piece;
  std::vector<Piece> pieces;
  int64_t at = 0;
  for (;;) {
    // The source furthest behind its share that still has quota left.
    int best = -1;
    for (size_t k = 0; k < K; ++k) {
      if (taken[k] >= quota[k]) continue;
      if (best < 0 || double(taken[k]) / weights[k] <
                          double(taken[size_t(best)]) / weights[size_t(best)])
        best = int(k);
    }
    if (best < 0) break;
    const int64_t n = std::min(block, quota[size_t(best)] - taken[size_t(best)]);
    // A block that follows on from the same source extends the last piece.
    if (!pieces.empty() && pieces.back().source == best)
      pieces.back().length += n;
    else
      pieces.push_back({int32_t(best), taken[size_t(best)], n, at});
    at += n;
    taken[size_t(best)] += n;
  }
  return std::make_unique<BlendDataset>(std::move(sources), std::move(pieces));
}

void check_ids(const TokenDataset& data, int64_t start, const int64_t* ids, int64_t n,
               int64_t vocab, const std::string& whose) {
  // One unsigned compare per id (a negative id wraps above any vocabulary); the loop has no
  // branch out, so it vectorizes, and only a bad window is searched for its first bad id.
  bool bad = false;
  for (int64_t i = 0; i < n; ++i) bad |= uint64_t(ids[i]) >= uint64_t(vocab);
  if (!bad) return;
  for (int64_t i = 0; i < n; ++i)
    if (uint64_t(ids[i]) >= uint64_t(vocab))
      throw DataError(data.place(start + i) + ": token id " + std::to_string(ids[i]) +
                      (ids[i] < 0 ? " is negative, not in" : " is not below") +
                      " the vocabulary of " + std::to_string(vocab) + " (" + whose + ")");
}

}  // namespace merak::data
