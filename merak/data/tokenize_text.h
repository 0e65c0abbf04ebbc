// Text into token ids: documents read from text files (each one document) and JSONL files (each
// line's field one document), cut into pieces where the cut changes no token, and encoded on
// several threads, handed back in input order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <fstream>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "merak/data/gpt2_tokenizer.h"

namespace merak::data {

// Bytes (vocabulary 256, id = byte, no separator) or GPT-2 (separator <|endoftext|>, which only
// the writer puts between documents: the text "<|endoftext|>" encodes as plain text). Copyable:
// each thread encodes with its own copy, since Gpt2Tokenizer is not thread-safe.
class TextEncoder {
 public:
  TextEncoder() = default;  // bytes
  explicit TextEncoder(Gpt2Tokenizer gpt2) : gpt2_(std::move(gpt2)) {}
  bool gpt2() const { return gpt2_.has_value(); }
  std::vector<int64_t> encode(std::string_view text);
  int64_t vocab_size() const { return gpt2_ ? gpt2_->vocab_size() : 256; }
  int64_t separator() const { return gpt2_ ? gpt2_->eot_id() : -1; }  // -1: none

 private:
  std::optional<Gpt2Tokenizer> gpt2_;
};

// Where `text` may be cut without changing the tokens: anywhere for bytes; for GPT-2, before a
// space or newline that stands between two printable ASCII characters (GPT-2's pre-tokens never
// run from a non-space into a space, and the one after starts at that space either way), so
// encode(a + b) == encode(a) + encode(b).
bool safe_cut(std::string_view text, size_t p, bool gpt2);

// The size of an input file (text, token shards); merak::Error "PATH: cannot open: ...", "PATH: is a directory" or
// "PATH: not a regular file ...".
int64_t input_file_bytes(const std::string& path);

// A piece of a document, and what it stands for in the input.
struct TextPiece {
  std::string text;
  bool begins_document = false, ends_document = false;
  // Input bytes it accounts for (a JSONL line's on its document's last piece; blank lines of a
  // JSONL file's end come as a piece of their own that neither begins nor ends a document).
  int64_t input_bytes = 0;
};

struct TextOptions {
  bool jsonl = false;           // every input is JSONL (else only names ending in .jsonl)
  std::string field = "text";   // a JSONL line's member that is the document
  size_t chunk_bytes = SIZE_MAX;  // pieces of about this size (SIZE_MAX: whole documents)
  int threads = 1;              // encode_documents' workers
};

// The documents of `files`, in order, as pieces cut at safe_cut(gpt2_cuts) places. Files are
// opened as they are reached. Errors throw merak::Error naming the file, and for JSONL the line
// ("PATH:LINE: expected a JSON object on each line", a missing member, bad JSON).
class DocumentReader {
 public:
  DocumentReader(std::vector<std::string> files, TextOptions options, bool gpt2_cuts);
  bool next(TextPiece* out);  // false at the end

 private:
  bool load_document();
  std::vector<std::string> files_;
  TextOptions options_;
  bool gpt2_cuts_;
  size_t file_ = 0;
  std::ifstream in_;
  int64_t line_ = 0;
  std::deque<TextPiece> pending_;
};

// A worker's encoder failed; what() is its message.
class EncodeError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Encodes the documents of `files` on options.threads workers, each with its own copy of
// `encoder`, and calls each(piece, ids) on the calling thread for every piece in input order.
// Pieces are of about options.chunk_bytes, and go to the workers in jobs of about as many bytes,
// at most 4 jobs per worker ahead of the callback. The ids do not depend on threads or pieces.
// Input errors throw merak::Error, an encoder's EncodeError; what each() throws is passed on.
using PieceCallback = std::function<void(const TextPiece&, const std::vector<int64_t>&)>;
void encode_documents(const std::vector<std::string>& files, const TextEncoder& encoder,
                      const TextOptions& options, const PieceCallback& each);

}  // namespace merak::data
