// The token file formats behind one streaming interface: which writer each format uses and
// where its separator goes. The formats themselves are written by shard.cc and megatron.cc.
#include "merak/data/token_writer.h"

#include "merak/core/error.h"
#include "merak/data/dataset.h"
#include "merak/data/megatron.h"

namespace merak::data {
namespace {

// Our shard: all tokens in memory, written at close() by write_shard.
class ShardWriter : public TokenWriter {
 public:
  ShardWriter(std::string path, int64_t separator) : path_(std::move(path)), sep_(separator) {}
  void begin_document() override {
    if (documents_++ > 0 && sep_ >= 0) add({sep_});
  }
  void add(const std::vector<int64_t>& ids) override {
    all_.insert(all_.end(), ids.begin(), ids.end());
    tokens_ += int64_t(ids.size());
  }
  void end_document() override {}
  void close() override { write_shard(path_, all_); }

 private:
  std::string path_;
  int64_t sep_, documents_ = 0;
  std::vector<int64_t> all_;
};

// llm.c's .bin: the separator between documents (llm.c's data scripts put GPT-2's <|endoftext|>
// before every document, the first too: their files start with one more token).
class LlmcTokenWriter : public TokenWriter {
 public:
  LlmcTokenWriter(std::string path, int64_t separator, int64_t vocab_size)
      : file_(std::move(path), vocab_size), sep_(separator) {}
  void begin_document() override {
    if (documents_++ > 0 && sep_ >= 0) add({sep_});
  }
  void add(const std::vector<int64_t>& ids) override {
    if (ids.empty()) return;
    file_.add(ids);
    tokens_ = file_.tokens();
  }
  void end_document() override {}
  void close() override { file_.close(); }

 private:
  LlmcWriter file_;
  int64_t sep_, documents_ = 0;
};

// Megatron's indexed dataset: one sequence per document, the separator closing each.
class MegatronTokenWriter : public TokenWriter {
 public:
  MegatronTokenWriter(const std::string& prefix, int64_t separator, int64_t vocab_size)
      : file_(prefix, vocab_size), sep_(separator) {}
  void begin_document() override {}
  void add(const std::vector<int64_t>& ids) override {
    if (ids.empty()) return;
    file_.add_tokens(ids);
    tokens_ += int64_t(ids.size());
  }
  void end_document() override {
    if (sep_ >= 0) add({sep_});
    file_.end_document();
  }
  void close() override { file_.close(); }

 private:
  MegatronWriter file_;
  int64_t sep_;
};

}  // namespace

std::unique_ptr<TokenWriter> make_token_writer(const std::string& format,
                                               const std::string& path, int64_t separator,
                                               int64_t vocab_size) {
  if (format == "merak") return std::make_unique<ShardWriter>(path, separator);
  if (format == "llmc") return std::make_unique<LlmcTokenWriter>(path, separator, vocab_size);
  if (format == "megatron")
    return std::make_unique<MegatronTokenWriter>(path, separator, vocab_size);
  MERAK_FAIL(path, ": unknown token file format '", format, "' (merak, llmc or megatron)");
}

std::vector<std::string> token_writer_files(const std::string& format, const std::string& path) {
  // write_shard, LlmcWriter and MegatronWriter each write FILE.tmp and rename it to FILE.
  if (format == "megatron")
    return {path + ".bin", path + ".idx", path + ".bin.tmp", path + ".idx.tmp"};
  return {path, path + ".tmp"};
}

}  // namespace merak::data
