// encode_documents and DocumentReader: text and JSONL documents, encoded on any number of threads
// in pieces of any size, come back in input order with the same ids; errors name file and line.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>
#include <vector>

#include "merak/core/error.h"
#include "merak/data/tokenize_text.h"
#include "tests/test_files.h"

using namespace merak;
using namespace merak::data;

using namespace merak::testing;  // tests/test_files.h

namespace {

std::string temp_file(const std::string& name, const std::string& bytes) {
  const std::string path = temp_path("tokenize_text_" + name);
  write_file(path, bytes);
  return path;
}

std::vector<int64_t> bytes_of(const std::string& s) {
  return std::vector<int64_t>(s.begin(), s.end());
}

}  // namespace

TEST_CASE("encode_documents: documents in input order, whatever the threads and pieces") {
  const std::string text = "Hello there, a text file of one document.\nTwo lines.";
  const std::vector<std::string> files = {
      temp_file("a.txt", text),
      temp_file("b.jsonl", "{\"text\": \"first\"}\n\n{\"x\": 1, \"text\": \"second one\"}\n\n"),
      temp_file("empty.txt", "")};
  const std::vector<std::vector<int64_t>> want = {bytes_of(text), bytes_of("first"),
                                                  bytes_of("second one"), {}};
  int64_t input = 0;
  for (const std::string& f : files) input += input_file_bytes(f);
  for (int threads : {1, 2, 3}) {
    for (size_t chunk : {size_t(3), size_t(7), size_t(1) << 20}) {
      TextOptions options;
      options.threads = threads;
      options.chunk_bytes = chunk;
      std::vector<std::vector<int64_t>> docs;
      int64_t seen = 0;
      encode_documents(files, TextEncoder(), options,
                       [&](const TextPiece& piece, const std::vector<int64_t>& ids) {
                         CHECK(ids == bytes_of(piece.text));
                         CHECK(piece.text.size() <= chunk);  // bytes: cut anywhere
                         if (piece.begins_document) docs.emplace_back();
                         REQUIRE(!docs.empty());
                         docs.back().insert(docs.back().end(), ids.begin(), ids.end());
                         seen += piece.input_bytes;
                       });
      CHECK(docs == want);
      CHECK(seen == input);
    }
  }
}

TEST_CASE("safe_cut: GPT-2 cuts only before a space or newline between printable ASCII") {
  const std::string t = "ab cd\nef  g";
  CHECK(safe_cut(t, 2, true));    // "ab| cd"
  CHECK(safe_cut(t, 5, true));    // "cd|\nef"
  CHECK_FALSE(safe_cut(t, 1, true));
  CHECK_FALSE(safe_cut(t, 8, true));  // before a double space
  CHECK(safe_cut(t, 1, false));
}

TEST_CASE("DocumentReader: errors name the file, and the line for JSONL") {
  const std::string ok = temp_file("ok.txt", "fine");
  const std::string array = temp_file("array.jsonl", "{\"text\": \"ok\"}\n[1, 2]\n");
  const std::string field = temp_file("field.jsonl", "{\"body\": \"ok\"}\n");
  const std::string missing = ok + ".missing";
  auto drain = [](const std::vector<std::string>& files) {
    DocumentReader reader(files, TextOptions(), true);
    TextPiece piece;
    while (reader.next(&piece)) {
    }
  };
  CHECK_THROWS_WITH(drain({ok, array}),
                    Catch::Contains(array + ":2: expected a JSON object on each line"));
  CHECK_THROWS_WITH(drain({field}), Catch::Contains(field + ":1: the object has no 'text'"));
  CHECK_THROWS_WITH(drain({ok, missing}), Catch::Contains(missing + ": cannot open"));
  CHECK_THROWS_WITH(input_file_bytes(missing), Catch::Contains(missing + ": cannot open"));
  // A device never ends (/dev/zero) or means nothing as a size: refused by name.
  CHECK_THROWS_WITH(input_file_bytes("/dev/zero"),
                    Catch::Contains("/dev/zero: not a regular file"));
  CHECK_THROWS_WITH(drain({"/dev/zero"}), Catch::Contains("/dev/zero: not a regular file"));
}

TEST_CASE("DocumentReader: a JSONL key given twice takes its last value, as Python and JS do") {
  const std::string twice = temp_file(
      "twice.jsonl", "{\"text\": \"a\", \"text\": \"b\"}\n{\"text\": 1, \"text\": \"c\"}\n");
  DocumentReader reader({twice}, TextOptions(), false);
  std::vector<std::string> docs;
  TextPiece piece;
  while (reader.next(&piece))
    if (piece.ends_document) docs.push_back(piece.text);
  CHECK(docs == std::vector<std::string>{"b", "c"});
}
