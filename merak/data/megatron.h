// Megatron-LM's indexed datasets (PREFIX.bin + PREFIX.idx, index magic "MMIDIDX"): a
// memory-mapped reader that is a TokenDataset, blends of several of them, and a streaming
// writer. The byte layout, as we read it, is in merak/data/README.md.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "merak/data/dataset.h"

namespace merak::data {

// One indexed dataset. Its tokens are the documents' tokens concatenated in order (no separator
// added: Megatron's preprocessing puts the end-of-document token into the documents), so a
// training window may run across a document boundary, as Megatron's GPT samples do.
// Opening checks the whole index; a fault throws merak::Error "FILE: byte OFFSET: what".
class MegatronDataset : public TokenDataset {
 public:
  static std::unique_ptr<MegatronDataset> open(const std::string& prefix);
  ~MegatronDataset() override;

  int64_t size() const override;
  void read(int64_t start, int64_t count, int64_t* out) const override;
  std::string place(int64_t i) const override;  // "PREFIX.bin: byte N"

  int64_t sequence_count() const;  // S
  int64_t document_count() const;  // documents: the document index's entries less one
  std::vector<int64_t> sequence(int64_t i) const;  // the tokens of sequence i
  // Token offset of document d's first token in this dataset; document_begin(document_count())
  // is size().
  int64_t document_begin(int64_t d) const;
  int dtype_code() const;  // Megatron's code: 1 uint8 ... 8 uint16 (README)
  const std::string& prefix() const;

 private:
  struct Impl;
  explicit MegatronDataset(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

std::unique_ptr<MegatronDataset> open_megatron(const std::string& prefix);

// Several prefixes as one dataset. Without weights: their tokens one after the other. With
// weights (one per prefix, positive): blend() of the prefixes, named by them; see README.
std::unique_ptr<TokenDataset> open_megatron(const std::vector<std::string>& prefixes,
                                            const std::vector<double>& weights = {});

// Writes documents to PREFIX.bin as they come and PREFIX.idx at close(), one sequence per
// document; tokens are uint16 when vocab_size < 65500, else int32 (Megatron's choice). Both
// files are written as PATH.tmp, fsynced and renamed at close(), so a reader never sees a half
// written dataset. Errors throw merak::Error naming the path. Not closed: the .tmp files are
// removed.
class MegatronWriter {
 public:
  MegatronWriter(std::string prefix, int64_t vocab_size);
  ~MegatronWriter();
  MegatronWriter(const MegatronWriter&) = delete;
  MegatronWriter& operator=(const MegatronWriter&) = delete;

  // Appends tokens to the current document (ids in [0, vocab_size)).
  void add_tokens(const int64_t* ids, int64_t count);
  void add_tokens(const std::vector<int64_t>& ids) { add_tokens(ids.data(), int64_t(ids.size())); }
  // Ends the current document (possibly empty).
  void end_document();
  void add_document(const std::vector<int64_t>& ids) {
    add_tokens(ids);
    end_document();
  }
  // Flushes PREFIX.bin, writes PREFIX.idx; tokens added since the last end_document() form a
  // last document.
  void close();

  int64_t documents() const { return int64_t(sizes_.size()); }
  int64_t tokens() const { return tokens_; }

 private:
  void flush();
  std::string prefix_;
  int width_;  // 2 or 4 bytes per token
  int64_t vocab_;
  std::FILE* bin_ = nullptr;
  std::vector<unsigned char> buffer_;
  std::vector<int32_t> sizes_;
  int64_t current_ = 0;  // tokens of the open document
  int64_t tokens_ = 0;
  bool closed_ = false;
};

}  // namespace merak::data
