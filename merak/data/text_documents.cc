// The documents of text and JSONL files, in order, cut into pieces where the cut changes no
// token (DocumentReader).
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "merak/core/error.h"
#include "merak/core/json.h"
#include "merak/data/tokenize_text.h"

namespace merak::data {
namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

bool ascii_graph(char c) { return c > ' ' && c < 127; }

std::string read_file(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  MERAK_CHECK(f, path, ": cannot open: ", std::strerror(errno));
  std::string text;
  char block[1 << 16];
  size_t got;
  while ((got = std::fread(block, 1, sizeof block, f)) > 0) text.append(block, got);
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  MERAK_CHECK(!failed, path, ": read failed");
  return text;
}

// The document on one JSONL line: its `field` member, a string. A key given twice takes its
// last value, as Python's json and JavaScript's JSON.parse (which write most JSONL) read it.
std::string jsonl_document(const std::string& path, int64_t line_no, const std::string& line,
                           const std::string& field) {
  const std::string where = path + ":" + std::to_string(line_no);
  try {
    const JsonValue v = parse_json(line);
    MERAK_CHECK(v.kind() == JsonValue::Kind::Object, where,
                ": expected a JSON object on each line");
    const auto& members = v.members("the line");
    const auto last = std::find_if(members.rbegin(), members.rend(),
                                   [&](const auto& m) { return m.first == field; });
    MERAK_CHECK(last != members.rend(), where, ": the object has no '", field,
                "' member (--field)");
    const JsonValue* f = &last->second;
    return f->string("member '" + field + "'");
  } catch (const JsonError& e) {
    MERAK_FAIL(where, ": ", e.what());
  }
}

}  // namespace

bool safe_cut(std::string_view text, size_t p, bool gpt2) {
  if (!gpt2) return true;
  return p >= 1 && p + 1 < text.size() && (text[p] == ' ' || text[p] == '\n') &&
         ascii_graph(text[p - 1]) && ascii_graph(text[p + 1]);
}

int64_t input_file_bytes(const std::string& path) {
  struct stat st;
  MERAK_CHECK(::stat(path.c_str(), &st) == 0, path, ": cannot open: ", std::strerror(errno));
  MERAK_CHECK(!S_ISDIR(st.st_mode), path, ": is a directory");
  // A device or a pipe may never end (/dev/zero) or never start (a FIFO without a writer
  // blocks its reader's open), and its size says nothing.
  MERAK_CHECK(S_ISREG(st.st_mode), path, ": not a regular file (a device or a pipe): give a file");
  return int64_t(st.st_size);
}

DocumentReader::DocumentReader(std::vector<std::string> files, TextOptions options,
                               bool gpt2_cuts)
    : files_(std::move(files)), options_(std::move(options)), gpt2_cuts_(gpt2_cuts) {}

bool DocumentReader::next(TextPiece* out) {
  while (pending_.empty()) {
    if (!load_document()) return false;
  }
  *out = std::move(pending_.front());
  pending_.pop_front();
  return true;
}

// Splits the next document into pending_; false when the inputs are done.
bool DocumentReader::load_document() {
  std::string text;
  int64_t input_bytes = 0;
  for (;;) {
    if (in_.is_open()) {
      std::string line;
      if (std::getline(in_, line)) {
        ++line_;
        input_bytes += int64_t(line.size()) + 1;
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;  // blank line
        text = jsonl_document(files_[file_ - 1], line_, line, options_.field);
        break;
      }
      MERAK_CHECK(!in_.bad(), files_[file_ - 1], ": read failed after line ", line_);
      in_.close();
    }
    if (input_bytes > 0) {  // trailing blank lines: account for them
      TextPiece s;
      s.input_bytes = input_bytes;
      pending_.push_back(std::move(s));
      return true;
    }
    if (file_ >= files_.size()) return false;
    const std::string& path = files_[file_++];
    input_file_bytes(path);
    if (options_.jsonl || ends_with(path, ".jsonl")) {
      in_.clear();
      in_.open(path, std::ios::binary);
      MERAK_CHECK(in_, path, ": cannot open: ", std::strerror(errno));
      line_ = 0;
      continue;
    }
    text = read_file(path);
    input_bytes = int64_t(text.size());
    break;
  }
  // Cut the document into pieces of about chunk_bytes at safe places.
  const size_t chunk = options_.chunk_bytes;
  size_t begin = 0;
  do {
    size_t end = text.size();
    if (end - begin > chunk) {
      size_t p = begin + chunk;
      while (p > begin && !safe_cut(text, p, gpt2_cuts_)) --p;
      if (p == begin) {  // none before: the first one after
        p = begin + chunk + 1;
        while (p < text.size() && !safe_cut(text, p, gpt2_cuts_)) ++p;
      }
      end = p;
    }
    TextPiece s;
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

}  // namespace merak::data
