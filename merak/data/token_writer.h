// Token files written as a stream of documents, in each format the readers take: our shards
// (open_shard), llm.c's .bin (open_shard) and Megatron's indexed datasets (open_megatron), with
// the separator between documents placed as each format's users expect.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace merak::data {

class TokenWriter {
 public:
  // Destroyed before close(): no file is left at the path (nor its .tmp).
  virtual ~TokenWriter() = default;
  virtual void begin_document() = 0;
  // Appends ids to the current document.
  virtual void add(const std::vector<int64_t>& ids) = 0;
  virtual void end_document() = 0;
  // Finishes the file(s) and puts them in place atomically.
  virtual void close() = 0;
  // Tokens written so far, separators included.
  int64_t tokens() const { return tokens_; }

 protected:
  int64_t tokens_ = 0;
};

// format "merak": our shard at `path`, built in memory and written by write_shard at close();
// "llmc": llm.c's .bin at `path`, streamed (LlmcWriter; vocab_size at most 65536);
// "megatron": `path`.bin and `path`.idx, streamed (MegatronWriter), one sequence per document.
// `separator` (an id, or -1 for none) goes between documents in merak and llmc, and at the end
// of every document in megatron (Megatron's --append-eod). Errors throw merak::Error naming the
// file; an unknown format too.
std::unique_ptr<TokenWriter> make_token_writer(const std::string& format,
                                               const std::string& path, int64_t separator,
                                               int64_t vocab_size);

// Every file make_token_writer(format, path, ...) creates, the finished ones and their
// temporaries (which are created, truncated, before any document is added): what a tool checks
// its inputs against.
std::vector<std::string> token_writer_files(const std::string& format, const std::string& path);

}  // namespace merak::data
