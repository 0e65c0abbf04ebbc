// TokenWriter: every format reads back through the library's readers (open_shard,
// open_megatron) with the separator where the format puts it; errors name the file, and a
// writer destroyed before close() leaves nothing.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "merak/core/error.h"
#include "merak/data/dataset.h"
#include "merak/data/megatron.h"
#include "merak/data/token_writer.h"
#include "tests/test_files.h"

using namespace merak;
using namespace merak::data;

using namespace merak::testing;  // tests/test_files.h

namespace {

bool exists(const std::string& path) { return std::ifstream(path).good(); }

std::vector<int64_t> read_all(const TokenDataset& d) {
  std::vector<int64_t> out(size_t(d.size()));
  d.read(0, d.size(), out.data());
  return out;
}

// Three documents, the first in two pieces, the second empty.
void write_documents(TokenWriter& w) {
  w.begin_document();
  w.add({1, 2});
  w.add({3});
  w.end_document();
  w.begin_document();
  w.add({});
  w.end_document();
  w.begin_document();
  w.add({4, 300});
  w.end_document();
}

}  // namespace

TEST_CASE("TokenWriter merak and llmc: documents joined by the separator, read by open_shard") {
  for (const std::string format : {"merak", "llmc"}) {
    SECTION(format) {
      const std::string path = temp_path("token_writer_" + format);
      auto w = make_token_writer(format, path, 50256, 50257);
      write_documents(*w);
      w->close();
      const std::vector<int64_t> want = {1, 2, 3, 50256, 50256, 4, 300};
      CHECK(w->tokens() == int64_t(want.size()));
      CHECK(read_all(*open_shard(path)) == want);
      CHECK_FALSE(exists(path + ".tmp"));
      const std::string bytes = read_file(path);
      if (format == "merak") {
        CHECK(bytes.substr(0, 8) == "MERAKTOK");
      } else {  // int32 header[256] = {20240520, 1, N}, uint16 tokens
        REQUIRE(bytes.size() == 1024 + 2 * want.size());
        CHECK(bytes.substr(0, 12) == std::string("\x88\xd8\x34\x01\x01\0\0\0\x07\0\0\0", 12));
      }

      // No separator: the documents back to back.
      auto plain = make_token_writer(format, path, -1, 256);
      write_documents(*plain);
      plain->close();
      CHECK(read_all(*open_shard(path)) == std::vector<int64_t>{1, 2, 3, 4, 300});
    }
  }
}

TEST_CASE("TokenWriter megatron: the separator ends every document, read by open_megatron") {
  const std::string prefix = temp_path("token_writer_megatron");
  auto w = make_token_writer("megatron", prefix, 50256, 50257);
  write_documents(*w);
  w->close();
  CHECK(w->tokens() == 8);
  auto d = open_megatron(prefix);
  CHECK(read_all(*d) == std::vector<int64_t>{1, 2, 3, 50256, 50256, 4, 300, 50256});
  REQUIRE(d->document_count() == 3);
  CHECK(d->document_begin(1) == 4);
  CHECK(d->document_begin(2) == 5);
  CHECK(d->dtype_code() == 8);  // uint16
  CHECK_FALSE(exists(prefix + ".bin.tmp"));
  CHECK_FALSE(exists(prefix + ".idx.tmp"));
}

TEST_CASE("TokenWriter: unclosed writers leave nothing; errors name the path") {
  for (const std::string format : {"merak", "llmc", "megatron"}) {
    const std::string path = temp_path("token_writer_unclosed_" + format);
    {
      auto w = make_token_writer(format, path, 50256, 50257);
      write_documents(*w);
    }
    for (const std::string suffix : {"", ".tmp", ".bin", ".bin.tmp", ".idx", ".idx.tmp"})
      CHECK_FALSE(exists(path + suffix));
  }
  const std::string path = temp_path("token_writer_errors");
  CHECK_THROWS_WITH(make_token_writer("npz", path, -1, 256),
                    Catch::Contains(path + ": unknown token file format 'npz'"));
  CHECK_THROWS_WITH(make_token_writer("llmc", path, -1, 70000),
                    Catch::Contains(path + ": llm.c's format holds uint16 tokens"));
  auto w = make_token_writer("llmc", path, -1, 65536);
  w->begin_document();
  CHECK_THROWS_WITH(w->add({65536}), Catch::Contains(path + ": cannot write token id 65536"));
  const std::string missing = temp_path("token_writer_no/such/dir/x");
  CHECK_THROWS_WITH(make_token_writer("llmc", missing, -1, 256),
                    Catch::Contains(missing + ".tmp: cannot create"));
  CHECK_THROWS_WITH(make_token_writer("megatron", missing, -1, 256),
                    Catch::Contains(missing + ".bin.tmp: cannot create"));
  auto shard = make_token_writer("merak", missing, -1, 256);
  shard->begin_document();
  shard->add({1});
  CHECK_THROWS_WITH(shard->close(), Catch::Contains(missing + ".tmp: cannot create"));
}
