#include <catch2/catch.hpp>

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "merak/data/dataset.h"
#include "tests/test_files.h"

using namespace merak;
using namespace merak::data;

using namespace merak::testing;  // tests/test_files.h

namespace {

std::string text_of(const TokenDataset& d) {
  std::vector<int64_t> ids(size_t(d.size()));
  d.read(0, d.size(), ids.data());
  return detokenize_bytes(ids);
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("byte tokens round-trip every byte", "[data][tokenizer]") {
  std::string all;
  for (int b = 0; b < 256; ++b) all += char(b);
  const std::vector<int64_t> ids = tokenize_bytes(all);
  REQUIRE(ids.size() == 256);
  for (int b = 0; b < 256; ++b) CHECK(ids[b] == b);
  CHECK(detokenize_bytes(ids) == all);
  CHECK(tokenize_bytes("hi") == std::vector<int64_t>{104, 105});
  CHECK_THROWS_WITH(detokenize_bytes({65, 256}), Catch::Contains("256 at position 1"));
}

TEST_CASE("text files are tokenized and concatenated in order", "[data][tokenizer]") {
  const std::string a = temp_path("merak_data_a.txt"), b = temp_path("merak_data_b.txt");
  write_file(a, "Hello\n");
  write_file(b, "w\xc3\xb6rld");
  auto d = tokenize_text_files({a, b});
  CHECK(text_of(*d) == "Hello\nw\xc3\xb6rld");
  const std::string missing = temp_path("merak_data_missing.txt");
  CHECK_THROWS_WITH(tokenize_text_files({a, missing}), Catch::StartsWith(missing));
}

TEST_CASE("the generated corpus is deterministic in its seed and exactly sized",
          "[data][corpus]") {
  auto c1 = generated_corpus(5000, 1);
  CHECK(c1->size() == 5000);
  for (unsigned char ch : text_of(*c1)) CHECK(ch < 128);  // ASCII text
  const std::string t1 = text_of(*c1);
  CHECK(text_of(*generated_corpus(5000, 1)) == t1);
  CHECK(text_of(*generated_corpus(5000, 2)) != t1);
  CHECK(text_of(*generated_corpus(1234, 1)) == t1.substr(0, 1234));  // a prefix of the longer
  CHECK_THROWS(generated_corpus(0, 1));
}

TEST_CASE("the generated corpus is English-like text with grammar", "[data][corpus]") {
  const std::string text = text_of(*generated_corpus(200000, 11));
  for (unsigned char c : text) {
    INFO("byte " << int(c));
    REQUIRE((std::isprint(c) || c == '\n'));
  }
  // Sentences: many, each starting with a capital after ". " or "\n".
  CHECK(count(text, ".") > 2000);
  size_t capitals = 0, starts = 0;
  for (size_t i = 2; i < text.size(); ++i) {
    if ((text[i - 2] == '.' || text[i - 2] == '!') && (text[i - 1] == ' ' || text[i - 1] == '\n')) {
      ++starts;
      capitals += std::isupper(static_cast<unsigned char>(text[i])) ? 1 : 0;
    }
  }
  CHECK(starts > 2000);
  CHECK(capitals == starts);
  // Agreement: singular subjects take singular verbs, plural ones plural verbs; a/an.
  CHECK(count(text, " cat sees ") > 0);
  CHECK(count(text, " cats see ") > 0);
  CHECK(count(text, " cat see ") == 0);
  CHECK(count(text, " cats sees ") == 0);
  CHECK(count(text, " children sleep") > 0);
  CHECK(count(text, " children sleeps") == 0);
  CHECK(count(text, "an owl") > 0);
  CHECK(count(text, "a owl") == 0);
  CHECK(count(text, "an cat") == 0);
  // Recurring phrases.
  CHECK(count(text, "under the big tree") > 50);
}

TEST_CASE("the generated corpus is far more predictable than random bytes", "[data][corpus]") {
  // Cross-entropy on held-out text of a byte model conditioned on the previous three bytes,
  // fitted on the rest (add-0.05 smoothing). A model that learned nothing pays log(256) = 5.5
  // nats per byte; a small transformer must be able to get near 1.5, so even this crude model
  // has to land well under 2.
  const std::string text = text_of(*generated_corpus(400000, 5));
  const size_t split = 300000;
  std::map<std::string, std::map<char, int>> counts;
  std::map<std::string, int> totals;
  for (size_t i = 3; i < split; ++i) {
    const std::string ctx = text.substr(i - 3, 3);
    ++counts[ctx][text[i]];
    ++totals[ctx];
  }
  double nats = 0;
  for (size_t i = split; i < text.size(); ++i) {
    const std::string ctx = text.substr(i - 3, 3);
    const auto c = counts.find(ctx);
    const int hits = c == counts.end() ? 0 : (c->second.count(text[i]) ? c->second.at(text[i]) : 0);
    const int total = c == counts.end() ? 0 : totals[ctx];
    nats -= std::log((hits + 0.05) / (total + 0.05 * 256));
  }
  const double per_byte = nats / double(text.size() - split);
  INFO("held-out cross-entropy " << per_byte << " nats per byte");
  CHECK(per_byte < 2.0);
}
