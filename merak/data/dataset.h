// Token data for language-model training: datasets, the sampler that makes global batches, the
// byte tokenizer and the generated default corpus.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "merak/core/tensor.h"

namespace merak::data {

// A read-only sequence of token ids.
class TokenDataset {
 public:
  virtual ~TokenDataset() = default;
  virtual int64_t size() const = 0;                 // number of tokens
  virtual int64_t vocab_hint() const = 0;           // largest id + 1 if known, else 0
  virtual void read(int64_t start, int64_t count, int64_t* out) const = 0;  // ids [start, +count)
  // Where token i lies, for messages: "FILE: byte N" for a file, a description otherwise.
  virtual std::string place(int64_t i) const = 0;
};

// Ends with merak::Error at the first id outside [0, vocab): its place, the id and the
// vocabulary, followed by `whose` (which setting the vocabulary comes from). One scan.
void check_ids_below(const TokenDataset& data, int64_t vocab, const std::string& whose);

// Our shard format (documented in merak/data/README.md) and llm.c's (int32 header[256] =
// {20240520, 1, token count, ...}, then uint16 tokens), both memory-mapped; the format is told
// by the magic number. Errors name the file and what is wrong (bad magic, truncated, ...).
std::unique_ptr<TokenDataset> open_shard(const std::string& path);
// Several shards read as one sequence.
std::unique_ptr<TokenDataset> open_shards(const std::vector<std::string>& paths);
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
// Tokens held in memory (the generated corpus, tokenized text); `what` names them in messages.
std::unique_ptr<TokenDataset> in_memory(std::vector<int64_t> tokens, int64_t vocab,
                                        std::string what = "the tokens held in memory");

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
class LmSampler {
 public:
  LmSampler(const TokenDataset& data, int64_t seq_len, int64_t batch, uint64_t seed);
  int64_t steps_per_epoch() const;
  // Rows [row_begin, row_end) of global batch `step` (counted from the start of training).
  LmBatch batch(int64_t step, int64_t row_begin, int64_t row_end) const;
  LmBatch batch(int64_t step) const { return batch(step, 0, batch_); }

 private:
  const TokenDataset& data_;
  int64_t seq_len_, batch_;
  uint64_t seed_;
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

class BertSampler {
 public:
  BertSampler(const TokenDataset& data, int64_t seq_len, int64_t batch, double mlm_probability,
              int64_t vocab, uint64_t seed);
  BertBatch batch(int64_t step, int64_t row_begin, int64_t row_end) const;
  BertBatch batch(int64_t step) const { return batch(step, 0, batch_); }

 private:
  const TokenDataset& data_;
  int64_t seq_len_, batch_;
  double mlm_probability_;
  int64_t vocab_;
  uint64_t seed_;
};

}  // namespace merak::data
