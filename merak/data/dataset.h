// Token data for language-model training: datasets, the sampler that makes global batches, the
// byte tokenizer and the generated default corpus.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "merak/core/error.h"
#include "merak/core/tensor.h"

namespace merak::data {

// A read-only sequence of token ids.
class TokenDataset {
 public:
  virtual ~TokenDataset() = default;
  virtual int64_t size() const = 0;  // number of tokens
  virtual void read(int64_t start, int64_t count, int64_t* out) const = 0;  // ids [start, +count)
  // Where token i lies, for messages: "FILE: byte N" for a file, a description otherwise.
  virtual std::string place(int64_t i) const = 0;
};

// Token data the model cannot take, found while reading it: bad input, as a bad config is (a
// tool ends with exit 2 naming the place), though it may show only after some steps.
class DataError : public Error {
 public:
  using Error::Error;
};

// Ends with DataError at the first of ids[0, n), tokens [start, start + n) of `data`, outside
// [0, vocab): its place, the id and the vocabulary, followed by `whose` (which setting the
// vocabulary comes from). The samplers run it on every window they read: files are not scanned
// up front (hours at a trillion tokens), and a bad id is refused before a kernel sees it.
void check_ids(const TokenDataset& data, int64_t start, const int64_t* ids, int64_t n,
               int64_t vocab, const std::string& whose);

// Our shard format (documented in merak/data/README.md) and llm.c's (int32 header[256] =
// {20240520, 1, token count, ...}, then uint16 tokens), both memory-mapped; the format is told
// by the magic number. Errors name the file and what is wrong (bad magic, truncated, ...).
std::unique_ptr<TokenDataset> open_shard(const std::string& path);
// Several shards read as one sequence.
std::unique_ptr<TokenDataset> open_shards(const std::vector<std::string>& paths);
// Datasets read one after another as one sequence.
std::unique_ptr<TokenDataset> concat(std::vector<std::unique_ptr<TokenDataset>> parts);
// Writes tokens in our shard format (uint16 when every id < 65536, else uint32), atomically.
void write_shard(const std::string& path, const std::vector<int64_t>& tokens);
// Streams tokens into llm.c's .bin (the header open_shard reads, then uint16 ids) through
// PATH.tmp: the header's count is filled in by close(), which fsyncs the file and renames it to
// PATH. Errors throw merak::Error naming the file: a vocab_size over 65536, an id outside
// uint16, more than 2^31 - 1 tokens. Destroyed before close(), it removes PATH.tmp.
class LlmcWriter {
 public:
  LlmcWriter(std::string path, int64_t vocab_size);
  ~LlmcWriter();
  LlmcWriter(const LlmcWriter&) = delete;
  LlmcWriter& operator=(const LlmcWriter&) = delete;
  void add(const std::vector<int64_t>& ids);
  void close();
  int64_t tokens() const { return tokens_; }

 private:
  void put(const unsigned char* bytes, size_t n);
  std::string path_, tmp_;
  std::FILE* file_ = nullptr;
  int64_t tokens_ = 0;
};
// Tokens held in memory (the generated corpus, tokenized text), checked to lie in [0, vocab)
// (vocab 0: only that they are not negative); `what` names them in messages.
std::unique_ptr<TokenDataset> in_memory(std::vector<int64_t> tokens, int64_t vocab,
                                        std::string what = "the tokens held in memory");
// Tokens [begin, begin + count) of `whole` (a held-out split and what remains of it).
std::unique_ptr<TokenDataset> slice(std::shared_ptr<const TokenDataset> whole, int64_t begin,
                                    int64_t count);

// Tokens per block of a weighted blend; see blend().
constexpr int64_t kBlendBlockTokens = int64_t(1) << 20;
// Several datasets interleaved by weight (one positive weight per source, any scale). Let T be
// their total tokens: source k's share is T * w_k / sum(w) tokens (at least 1), taken in order
// and from its start again when it runs out, in blocks of `block` tokens (fewer for a share's
// last block); the next block comes from the source furthest behind its share (tokens taken /
// w_k smallest, ties to the earlier source). Block boundaries ignore documents, as training
// windows do. Deterministic. `names[k]` names source k in errors (a weight that is not
// positive, a source with no tokens).
std::unique_ptr<TokenDataset> blend(std::vector<std::unique_ptr<TokenDataset>> sources,
                                    const std::vector<double>& weights,
                                    const std::vector<std::string>& names,
                                    int64_t block = kBlendBlockTokens);

// Byte-level tokenizer: vocab 256, id = byte value.
std::vector<int64_t> tokenize_bytes(const std::string& text);
std::string detokenize_bytes(const std::vector<int64_t>& ids);
std::unique_ptr<TokenDataset> tokenize_text_files(const std::vector<std::string>& paths);

// A corpus with learnable structure and no download: byte tokens of sentences generated from a
// small grammar (words from a fixed lexicon, agreement, repeated phrases), deterministic in seed.
std::unique_ptr<TokenDataset> generated_corpus(int64_t tokens, uint64_t seed);

// Language-model batches: windows of seq_len + 1 tokens; tokens = window[:-1], targets = [1:].
struct LmBatch {
  Tensor tokens;   // i64 [batch, seq_len]
  Tensor targets;  // i64 [batch, seq_len]
};

// Deterministic sampling: global batch `step` of an epoch is a function of (seed, epoch, step)
// only, so every process layout sees the same global batch; a data-parallel rank takes rows
// [rank * batch / ranks, (rank + 1) * batch / ranks) of it.
// Every window read is checked to hold ids in [0, vocab) (check_ids; `whose` says where vocab
// comes from, e.g. "model.vocab in CONFIG").
class LmSampler {
 public:
  LmSampler(const TokenDataset& data, int64_t seq_len, int64_t batch, uint64_t seed,
            int64_t vocab, std::string whose);
  // The fewest tokens that make one batch: batch windows of seq_len + 1 tokens, seq_len apart.
  static int64_t min_tokens(int64_t seq_len, int64_t batch) { return batch * seq_len + 1; }
  int64_t steps_per_epoch() const;
  // Rows [row_begin, row_end) of global batch `step` (counted from the start of training).
  LmBatch batch(int64_t step, int64_t row_begin, int64_t row_end) const;
  LmBatch batch(int64_t step) const { return batch(step, 0, batch_); }

 private:
  const TokenDataset& data_;
  int64_t seq_len_, batch_;
  uint64_t seed_;
  int64_t vocab_;
  std::string whose_;
};

// BERT pre-training batches: sentence pairs (NSP: half the time the true next segment, else a
// random one), [CLS] a [SEP] b [SEP] packed to seq_len, 15% of non-special tokens chosen for MLM
// (80% -> [MASK], 10% -> random token, 10% unchanged); targets are -100 where not chosen.
struct BertBatch {
  Tensor tokens;          // i64 [batch, seq_len]
  Tensor segment_ids;     // i64 [batch, seq_len], 0 for a, 1 for b
  Tensor attention_mask;  // bool [batch, seq_len], false on padding
  Tensor mlm_targets;     // i64 [batch, seq_len], -100 = not predicted
  Tensor nsp_labels;      // i64 [batch], 1 = b follows a, 0 = random b
};

// Special ids appended after the byte vocabulary: vocab = 256 + 4.
struct BertVocab {
  static constexpr int64_t kPad = 256, kCls = 257, kSep = 258, kMask = 259, kSize = 260;
};

// The data must be byte tokens: every segment read is checked to hold ids in [0, 256).
class BertSampler {
 public:
  BertSampler(const TokenDataset& data, int64_t seq_len, int64_t batch, double mlm_probability,
              int64_t vocab, uint64_t seed);
  // The fewest tokens the sampler draws from: two segments of seq_len - 3.
  static int64_t min_tokens(int64_t seq_len) { return 2 * (seq_len - 3); }
  BertBatch batch(int64_t step, int64_t row_begin, int64_t row_end) const;
  BertBatch batch(int64_t step) const { return batch(step, 0, batch_); }
  int64_t batch_size() const { return batch_; }
  // How many tokens of global batch `step` the masked LM predicts.
  int64_t predicted(int64_t step) const;
  // How many of the n targets from `mlm_targets` (a BertBatch's) are predicted: not -100.
  static int64_t count_predicted(const int64_t* mlm_targets, int64_t n);

 private:
  const TokenDataset& data_;
  int64_t seq_len_, batch_;
  double mlm_probability_;
  int64_t vocab_;
  uint64_t seed_;
};

}  // namespace merak::data
