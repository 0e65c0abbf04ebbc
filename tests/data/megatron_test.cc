// Megatron indexed datasets: MegatronWriter -> reader round trips, every kind of corrupt index
// named by file and byte offset, blends in proportion to their weights, and files written by an
// independent python writer (tests/data/megatron_writer.py, run with /usr/bin/python3).
#include <catch2/catch.hpp>

#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "merak/core/error.h"
#include "merak/data/megatron.h"
#include "tests/test_files.h"

using namespace merak;
using namespace merak::data;

using namespace merak::testing;  // tests/test_files.h

namespace {

bool exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

std::string le(uint64_t v, int bytes) {
  std::string s;
  for (int i = 0; i < bytes; ++i) s += char((v >> (8 * i)) & 0xff);
  return s;
}
uint64_t le_at(const std::string& s, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(s[at + i]);
  return v;
}

std::vector<int64_t> read_all(const TokenDataset& d) {
  std::vector<int64_t> out(size_t(d.size()));
  d.read(0, d.size(), out.data());
  return out;
}

// The message of the merak::Error that opening `prefix` throws ("" when it opens).
std::string open_error(const std::string& prefix) {
  try {
    open_megatron(prefix);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Documents of varied lengths (one empty) with ids below `vocab`.
std::vector<std::vector<int64_t>> sample_documents(int64_t vocab) {
  std::vector<std::vector<int64_t>> docs;
  for (int d = 0; d < 7; ++d) {
    std::vector<int64_t> doc;
    for (int i = 0; i < (d * 13) % 17; ++i) doc.push_back((d * 7919 + i * 104729) % vocab);
    if (d == 1) doc.push_back(vocab - 1);  // the largest id
    docs.push_back(doc);
  }
  return docs;
}

void write_documents(const std::string& prefix, int64_t vocab,
                     const std::vector<std::vector<int64_t>>& docs) {
  MegatronWriter w(prefix, vocab);
  for (const auto& d : docs) w.add_document(d);
  w.close();
}

}  // namespace

TEST_CASE("MegatronWriter output reads back: tokens, sequences, documents, layout") {
  for (int64_t vocab : {int64_t(50257), int64_t(70000)}) {
    const std::string prefix = temp_path("megatron_roundtrip_" + std::to_string(vocab));
    const auto docs = sample_documents(vocab);
    write_documents(prefix, vocab, docs);
    CHECK_FALSE(exists(prefix + ".bin.tmp"));
    CHECK_FALSE(exists(prefix + ".idx.tmp"));

    auto ds = open_megatron(prefix);
    const int width = vocab < 65500 ? 2 : 4;
    CHECK(ds->dtype_code() == (width == 2 ? 8 : 4));
    REQUIRE(ds->sequence_count() == int64_t(docs.size()));
    REQUIRE(ds->document_count() == int64_t(docs.size()));
    std::vector<int64_t> all;
    int64_t top = -1;
    for (size_t d = 0; d < docs.size(); ++d) {
      CHECK(ds->sequence(int64_t(d)) == docs[d]);
      CHECK(ds->document_begin(int64_t(d)) == int64_t(all.size()));
      all.insert(all.end(), docs[d].begin(), docs[d].end());
      for (int64_t t : docs[d]) top = std::max(top, t);
    }
    CHECK(ds->document_begin(ds->document_count()) == int64_t(all.size()));
    CHECK(ds->size() == int64_t(all.size()));
    CHECK(read_all(*ds) == all);
    if (width == 4) CHECK(top >= 65536);  // the int32 case holds ids uint16 cannot

    // The layout of the files, byte for byte where it is fixed.
    const std::string idx = read_file(prefix + ".idx");
    const uint64_t S = docs.size();
    REQUIRE(idx.size() == 34 + 12 * S + 8 * (S + 1));
    CHECK(idx.substr(0, 9) == std::string("MMIDIDX\0\0", 9));
    CHECK(le_at(idx, 9, 8) == 1);
    CHECK(le_at(idx, 18, 8) == S);
    CHECK(le_at(idx, 26, 8) == S + 1);
    for (uint64_t i = 0; i < S; ++i) CHECK(le_at(idx, 34 + 4 * i, 4) == docs[i].size());
    CHECK(read_file(prefix + ".bin").size() == all.size() * size_t(width));
    // Reads in the middle, across documents.
    std::vector<int64_t> mid(5);
    ds->read(3, 5, mid.data());
    CHECK(mid == std::vector<int64_t>(all.begin() + 3, all.begin() + 8));
    CHECK_THROWS_AS(ds->read(ds->size() - 2, 3, mid.data()), Error);
  }
}

TEST_CASE("MegatronWriter: tokens added before close form a last document") {
  const std::string prefix = temp_path("megatron_open_doc");
  MegatronWriter w(prefix, 1000);
  w.add_tokens({1, 2});
  w.add_tokens({3});
  w.end_document();
  w.add_tokens({4, 5});
  w.close();
  auto ds = open_megatron(prefix);
  CHECK(ds->document_count() == 2);
  CHECK(ds->sequence(0) == std::vector<int64_t>{1, 2, 3});
  CHECK(ds->sequence(1) == std::vector<int64_t>{4, 5});
}

TEST_CASE("MegatronWriter errors name the path; an unclosed writer leaves nothing") {
  const std::string prefix = temp_path("megatron_bad_id");
  {
    MegatronWriter w(prefix, 100);
    w.add_document({1, 2, 3});
    try {
      w.add_tokens({5, 100});
      FAIL("no error for an id outside the vocabulary");
    } catch (const Error& e) {
      CHECK_THAT(e.what(), Catch::Contains(prefix + ": token id 100 in document 1"));
    }
  }
  CHECK_FALSE(exists(prefix + ".bin.tmp"));
  CHECK_FALSE(exists(prefix + ".bin"));
  CHECK_FALSE(exists(prefix + ".idx"));

  const std::string missing = temp_path("megatron_no/such/dir/x");
  try {
    MegatronWriter w(missing, 100);
    FAIL("no error for a prefix in a missing directory");
  } catch (const Error& e) {
    CHECK_THAT(e.what(), Catch::Contains(missing + ".bin.tmp: cannot create"));
  }
}

TEST_CASE("a corrupt Megatron index names the file and the byte at fault") {
  const std::string good = temp_path("megatron_good");
  const std::vector<std::vector<int64_t>> docs = {{1, 2, 3}, {4}, {5, 6}, {7, 8, 9, 10}};
  write_documents(good, 1000, docs);
  const std::string idx = read_file(good + ".idx"), bin = read_file(good + ".bin");
  const size_t S = docs.size(), pointers_at = 34 + 4 * S, docs_at = 34 + 12 * S;
  REQUIRE(open_error(good).empty());

  int n = 0;
  // Writes the mutated files under a new prefix and checks the error's start and content.
  auto expect = [&](const std::string& new_idx, const std::string& new_bin,
                    const std::string& file, size_t byte, const std::string& what) {
    const std::string prefix = temp_path("megatron_bad" + std::to_string(n++));
    write_file(prefix + ".idx", new_idx);
    write_file(prefix + ".bin", new_bin);
    const std::string msg = open_error(prefix);
    INFO("case " << n << ": " << msg);
    CHECK_THAT(msg, Catch::Contains(prefix + file + ": byte " + std::to_string(byte) + ": "));
    CHECK_THAT(msg, Catch::Contains(what));
  };
  auto patched = [&](size_t at, const std::string& bytes) {
    std::string s = idx;
    s.replace(at, bytes.size(), bytes);
    return s;
  };

  // Truncated at several points: the field that is cut is named.
  expect(idx.substr(0, 0), bin, ".idx", 0, "truncated");
  expect(idx.substr(0, 5), bin, ".idx", 0, "truncated: the magic");
  expect(idx.substr(0, 12), bin, ".idx", 9, "truncated: the version");
  expect(idx.substr(0, 17), bin, ".idx", 17, "truncated: the dtype code");
  expect(idx.substr(0, 20), bin, ".idx", 18, "truncated: the sequence count");
  expect(idx.substr(0, 30), bin, ".idx", 26, "truncated: the document count");
  expect(idx.substr(0, 40), bin, ".idx", 34, "sequence sizes");
  expect(idx.substr(0, pointers_at + 9), bin, ".idx", pointers_at, "sequence pointers");
  expect(idx.substr(0, idx.size() - 1), bin, ".idx", docs_at, "document index entries");
  // Header fields.
  expect(patched(3, "X"), bin, ".idx", 0, "bad magic");
  expect(patched(9, le(2, 8)), bin, ".idx", 9, "index version 2");
  expect(patched(17, le(9, 1)), bin, ".idx", 17, "unknown dtype code 9");
  expect(patched(17, le(7, 1)), bin, ".idx", 17, "float type");
  expect(patched(18, le(1000, 8)), bin, ".idx", 34, "sequence sizes");
  expect(patched(26, le(uint64_t(1) << 62, 8)), bin, ".idx", docs_at, "document index");
  // Sizes and pointers.
  expect(patched(34 + 4, le(uint32_t(-5), 4)), bin, ".idx", 34 + 4, "negative size");
  expect(patched(pointers_at + 16, le(10, 8)), bin, ".idx", pointers_at + 16,
         "pointer of sequence 2 is 10, expected 8");
  expect(patched(pointers_at + 24, le(uint64_t(1) << 40, 8)), bin, ".idx", pointers_at + 24,
         "pointer of sequence 3");
  expect(patched(34 + 12, le(9, 4)), bin, ".bin", bin.size(), "truncated");  // last size + 5
  // The document index.
  expect(patched(docs_at, le(1, 8)), bin, ".idx", docs_at, "starts at 1");
  expect(patched(docs_at + 16, le(0, 8)), bin, ".idx", docs_at + 16, "is less than");
  expect(patched(docs_at + 8 * S, le(3, 8)), bin, ".idx", docs_at + 8 * S,
         "ends at sequence 3");
  expect(patched(docs_at + 8 * S, le(9, 8)), bin, ".idx", docs_at + 8 * S, "outside [0, 4]");
  expect(idx + "abc", bin, ".idx", docs_at + 8 * (S + 1), "3 unexpected bytes");
  // The data file.
  expect(idx, bin.substr(0, bin.size() - 2), ".bin", bin.size() - 2, "truncated");
  expect(idx, bin + "zz", ".bin", bin.size(), "2 bytes after the last sequence");

  // One int8 mode per sequence after the document index (multimodal datasets) is accepted.
  const std::string modes = temp_path("megatron_modes");
  write_file(modes + ".idx", idx + std::string(S, '\1'));
  write_file(modes + ".bin", bin);
  CHECK(open_error(modes).empty());
  CHECK(read_all(*open_megatron(modes)) == std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10});

  const std::string no_bin = temp_path("megatron_no_bin");
  write_file(no_bin + ".idx", idx);
  CHECK_THAT(open_error(no_bin), Catch::Contains(no_bin + ".bin: cannot open"));
  CHECK_THAT(open_error(temp_path("megatron_nothing")),
             Catch::Contains("nothing.idx: cannot open"));
}

TEST_CASE("a Megatron dataset named by one of its files says to give the prefix") {
  const std::string prefix = temp_path("megatron_named");
  write_documents(prefix, 1000, {{1, 2, 3}});
  for (const char* ext : {".bin", ".idx"})
    CHECK_THAT(open_error(prefix + ext),
               Catch::Contains(prefix + ext + ": a Megatron dataset is named by its prefix, '" +
                               prefix + "' for " + prefix + ".bin and " + prefix + ".idx"));
  CHECK(open_error(prefix).empty());
}

TEST_CASE("Megatron blends: concatenation, and interleaving in proportion to weights") {
  // Source k's tokens are k * 20000 + its document number; documents of different lengths.
  const std::vector<int> lengths = {10, 37, 5}, counts = {100, 50, 20};
  std::vector<std::string> prefixes;
  std::vector<std::vector<int64_t>> sources;
  for (int k = 0; k < 3; ++k) {
    prefixes.push_back(temp_path("megatron_blend" + std::to_string(k)));
    std::vector<std::vector<int64_t>> docs;
    std::vector<int64_t> flat;
    for (int d = 0; d < counts[size_t(k)]; ++d) {
      docs.emplace_back(size_t(lengths[size_t(k)]), k * 20000 + d);
      flat.insert(flat.end(), docs.back().begin(), docs.back().end());
    }
    write_documents(prefixes.back(), 65000, docs);
    sources.push_back(flat);
  }

  SECTION("without weights: the prefixes one after another") {
    auto ds = open_megatron(prefixes);
    std::vector<int64_t> want;
    for (const auto& s : sources) want.insert(want.end(), s.begin(), s.end());
    CHECK(read_all(*ds) == want);
  }

  SECTION("with weights: every prefix of the blend holds each source near its share") {
    // Blocks of 16 tokens, so the interleaving shows at this small scale.
    const int64_t block = 16;
    const std::vector<double> weights = {0.5, 0.3, 0.2};
    std::vector<std::unique_ptr<TokenDataset>> opened;
    for (const auto& p : prefixes) opened.push_back(open_megatron(p));
    auto ds = blend(std::move(opened), weights, prefixes, block);
    const std::vector<int64_t> tokens = read_all(*ds);
    const int64_t total = 1000 + 1850 + 100;
    CHECK(std::abs(ds->size() - total) <= 2);  // each share rounded
    std::vector<int64_t> count(3, 0);
    std::map<int64_t, int64_t> per_doc;  // token -> occurrences
    for (size_t t = 0; t < tokens.size(); ++t) {
      const int64_t k = tokens[t] / 20000;
      REQUIRE(k < 3);
      ++count[size_t(k)];
      ++per_doc[tokens[t]];
      // Behind or ahead of its share by at most about one block.
      for (int j = 0; j < 3; ++j) {
        const double share = weights[size_t(j)] * double(t + 1);
        if (std::abs(double(count[size_t(j)]) - share) > 2 * block + 1)
          FAIL("source " << j << " has " << count[size_t(j)] << " of the first " << t + 1
                         << " tokens, its share is " << share);
      }
    }
    for (int k = 0; k < 3; ++k) {
      INFO("source " << k);
      CHECK(std::abs(double(count[size_t(k)]) - weights[size_t(k)] * double(total)) <= 1);
    }
    // Each source's tokens in order, from its start again when it runs out.
    for (int k = 0; k < 3; ++k) {
      std::vector<int64_t> got;
      for (int64_t t : tokens)
        if (t / 20000 == k) got.push_back(t);
      for (size_t i = 0; i < got.size(); ++i)
        REQUIRE(got[i] == sources[size_t(k)][i % sources[size_t(k)].size()]);
    }
    // Source 2 (100 tokens, share 590) repeats from its start: document 0 5 or 6 times.
    CHECK(per_doc[2 * 20000 + 0] >= 5 * 5);
    // Source 1 (1850 tokens, share 885) is down-sampled: its first 885 tokens, no wrap.
    CHECK(per_doc.count(1 * 20000 + 30) == 0);
    CHECK(per_doc[1 * 20000 + 0] == 37);
    // Deterministic, and a place names the source file and its byte, past a wrap too.
    std::vector<std::unique_ptr<TokenDataset>> again;
    for (const auto& p : prefixes) again.push_back(open_megatron(p));
    CHECK(read_all(*blend(std::move(again), weights, prefixes, block)) == tokens);
    // Source 2's last token in the blend is its 590th: its token 89, in the sixth pass.
    int64_t at = int64_t(tokens.size()) - 1;
    while (tokens[size_t(at)] / 20000 != 2) --at;
    CHECK(ds->place(at) == prefixes[2] + ".bin: byte " + std::to_string(2 * 89));
    // Reads at any offset agree with the whole.
    std::vector<int64_t> part(100);
    ds->read(1234, 100, part.data());
    CHECK(part == std::vector<int64_t>(tokens.begin() + 1234, tokens.begin() + 1334));
  }

  SECTION("open_megatron blends in blocks of kBlendBlockTokens: here one per source") {
    const std::vector<double> weights = {0.5, 0.3, 0.2};
    const std::vector<int64_t> tokens = read_all(*open_megatron(prefixes, weights));
    std::vector<int64_t> want;
    const int64_t shares[3] = {1475, 885, 590};
    for (size_t k = 0; k < 3; ++k)
      for (int64_t i = 0; i < shares[k]; ++i)
        want.push_back(sources[k][size_t(i) % sources[k].size()]);
    CHECK(tokens == want);
  }

  SECTION("bad weights") {
    CHECK_THROWS_WITH(open_megatron(prefixes, {1.0, 2.0}), Catch::Contains("2 weights for 3"));
    CHECK_THROWS_WITH(open_megatron(prefixes, {1.0, -1.0, 1.0}),
                      Catch::Contains(prefixes[1] + ": blend weight -1"));
  }
}

// Files from an independent writer: tests/data/megatron_writer.py, written from the format's
// description. Document d has (d % 3) + 1 sequences (several sequences per document, as
// Megatron's sentence splitting makes); sequence j of document d has (5 d + 3 j) % 11 tokens,
// token i being (1000 d + 100 j + 7 i) % 60000 + offset.
TEST_CASE("files written by the python writer read back with the same tokens") {
  const char* python = "/usr/bin/python3";
  REQUIRE(::access(python, X_OK) == 0);  // no python: the test fails, it does not pass
  const std::string script = runfile("tests/data/megatron_writer.py");
  REQUIRE(exists(script));
  const int kDocs = 12;
  for (const auto& [dtype, code, offset] :
       std::vector<std::tuple<std::string, int, int64_t>>{
           {"uint16", 8, 0}, {"int32", 4, 100000}, {"int64", 5, int64_t(1) << 33},
           {"uint8", 1, -1}}) {
    INFO("dtype " << dtype);
    const std::string prefix = temp_path("megatron_python_" + dtype);
    const std::string cmd = std::string(python) + " " + script + " " + prefix + " " + dtype +
                            " " + std::to_string(kDocs);
    REQUIRE(std::system(cmd.c_str()) == 0);
    auto ds = open_megatron(prefix);
    CHECK(ds->dtype_code() == code);
    CHECK(ds->document_count() == kDocs);
    std::vector<int64_t> want;
    int64_t seq = 0;
    for (int d = 0; d < kDocs; ++d) {
      CHECK(ds->document_begin(d) == int64_t(want.size()));
      for (int j = 0; j <= d % 3; ++j, ++seq) {
        std::vector<int64_t> s;
        for (int i = 0; i < (5 * d + 3 * j) % 11; ++i) {
          const int64_t v = (1000 * d + 100 * j + 7 * i) % 60000;
          s.push_back(offset < 0 ? v % 256 : v + offset);  // uint8: the low byte
        }
        CHECK(ds->sequence(seq) == s);
        want.insert(want.end(), s.begin(), s.end());
      }
    }
    CHECK(ds->sequence_count() == seq);
    CHECK(read_all(*ds) == want);
  }
}

// Table memory is measured as the heap in use (glibc's mallinfo2: arena plus mmapped blocks).
TEST_CASE("a weighted blend of many small documents keeps a small table") {
  // 200000 one-token documents per prefix, weights 1:1: a table with an entry per document
  // switch would hold about 400000 entries (12 MB); blocks make it one per 2^20 tokens.
  std::vector<std::string> prefixes;
  for (int k = 0; k < 2; ++k) {
    prefixes.push_back(temp_path("megatron_tiny_docs" + std::to_string(k)));
    MegatronWriter w(prefixes.back(), 1000);
    for (int d = 0; d < 200000; ++d) w.add_document({int64_t(k * 500 + d % 500)});
    w.close();
  }
  const auto heap = [] {
    const struct mallinfo2 m = mallinfo2();
    return int64_t(m.uordblks + m.hblkhd);
  };
  const int64_t before = heap();
  auto ds = open_megatron(prefixes, {1.0, 1.0});
  const int64_t grown = heap() - before;
  INFO("the blend holds " << grown << " bytes of heap");
  CHECK(grown < (int64_t(1) << 20));
  CHECK(ds->size() == 400000);
}

// Signed Megatron dtypes give negative ids (an int16 file of GPT-2 ids, bytes stored as int8):
// the sampler refuses them where it reads them, naming the file and byte.
TEST_CASE("negative ids from int8 and int16 Megatron files are refused as they are read") {
  // An index of one document of n tokens of `width` bytes, dtype `code`.
  auto index = [](uint8_t code, uint64_t n) {
    return std::string("MMIDIDX\0\0", 9) + le(1, 8) + le(code, 1) + le(1, 8) + le(2, 8) +
           le(n, 4) + le(0, 8) + le(0, 8) + le(1, 8);
  };
  // int16: 50256 (GPT-2's <|endoftext|>) reads as -15280, at token 20.
  std::string bin16;
  for (int i = 0; i < 40; ++i) bin16 += le(i == 20 ? 50256 : 100 + i, 2);
  const std::string p16 = temp_path("megatron_int16");
  write_file(p16 + ".idx", index(3, 40));
  write_file(p16 + ".bin", bin16);
  // int8: byte 0xbb reads as -69, at token 9.
  std::string bin8;
  for (int i = 0; i < 40; ++i) bin8 += char(i == 9 ? 0xbb : 'a');
  const std::string p8 = temp_path("megatron_int8");
  write_file(p8 + ".idx", index(2, 40));
  write_file(p8 + ".bin", bin8);

  for (const auto& [prefix, want] : std::vector<std::pair<std::string, std::string>>{
           {p16, p16 + ".bin: byte 40: token id -15280 is negative, not in the vocabulary of "
                       "50257 (model.vocab in x.yaml)"},
           {p8, p8 + ".bin: byte 9: token id -69 is negative, not in the vocabulary of 50257 "
                     "(model.vocab in x.yaml)"}}) {
    auto ds = open_megatron(prefix);
    REQUIRE(ds->size() == 40);
    // 39 windows of 1 + 1 tokens in one batch: every token is read.
    LmSampler sampler(*ds, 1, 39, 0, 50257, "model.vocab in x.yaml");
    CHECK_THROWS_WITH(sampler.batch(0), Catch::StartsWith(want));
  }
}
