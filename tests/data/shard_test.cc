#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "merak/data/dataset.h"
#include "tests/test_files.h"

using namespace merak;
using namespace merak::data;

using namespace merak::testing;  // tests/test_files.h

namespace {

bool exists(const std::string& path) { return std::ifstream(path).good(); }

uint64_t le_at(const std::string& s, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(s[at + i]);
  return v;
}

std::string le(uint64_t v, int bytes) {
  std::string s;
  for (int i = 0; i < bytes; ++i) s += char((v >> (8 * i)) & 0xff);
  return s;
}

std::vector<int64_t> read_all(const TokenDataset& d) {
  std::vector<int64_t> out(size_t(d.size()));
  d.read(0, d.size(), out.data());
  return out;
}

// An llm.c shard written the way its tools do: int32 header[256], then uint16 tokens.
std::string llmc_shard(const std::vector<uint16_t>& tokens, int32_t stated_count) {
  std::string s = le(20240520, 4) + le(1, 4) + le(uint32_t(stated_count), 4);
  s.resize(1024, '\0');
  for (uint16_t t : tokens) s += le(t, 2);
  return s;
}

}  // namespace

TEST_CASE("write_shard lays out the documented header and uint16 tokens", "[data][shard]") {
  const std::string path = temp_path("merak_data_u16.tok");
  const std::vector<int64_t> tokens = {0, 1, 65535, 300, 7};
  write_shard(path, tokens);
  CHECK_FALSE(exists(path + ".tmp"));
  const std::string bytes = read_file(path);
  REQUIRE(bytes.size() == 64 + 5 * 2);
  CHECK(bytes.substr(0, 8) == "MERAKTOK");
  CHECK(le_at(bytes, 8, 4) == 1);    // version
  CHECK(le_at(bytes, 12, 4) == 2);   // bytes per token
  CHECK(le_at(bytes, 16, 8) == 5);   // token count
  CHECK(bytes.substr(24, 40) == std::string(40, '\0'));
  CHECK(le_at(bytes, 64 + 2 * 2, 2) == 65535);

  auto d = open_shard(path);
  CHECK(d->size() == 5);
  CHECK(read_all(*d) == tokens);
  std::vector<int64_t> mid(2);
  d->read(2, 2, mid.data());
  CHECK(mid == std::vector<int64_t>{65535, 300});
  CHECK_THROWS_WITH(d->read(4, 2, mid.data()), Catch::Contains(path) && Catch::Contains("outside"));
}

TEST_CASE("ids past uint16 are written as uint32 and read back", "[data][shard]") {
  const std::string path = temp_path("merak_data_u32.tok");
  const std::vector<int64_t> tokens = {65536, 0, 4294967295ll, 123456789};
  write_shard(path, tokens);
  const std::string bytes = read_file(path);
  REQUIRE(bytes.size() == 64 + 4 * 4);
  CHECK(le_at(bytes, 12, 4) == 4);
  auto d = open_shard(path);
  CHECK(read_all(*d) == tokens);

  // Rewriting replaces the file whole.
  write_shard(path, {5, 6});
  CHECK(read_all(*open_shard(path)) == std::vector<int64_t>{5, 6});

  CHECK_THROWS_WITH(write_shard(path, {1, -2}), Catch::Contains(path) && Catch::Contains("-2"));
  CHECK_THROWS_WITH(write_shard(path, {4294967296ll}), Catch::Contains("uint32"));
  CHECK(read_all(*open_shard(path)) == std::vector<int64_t>{5, 6});  // failed writes leave it
}

TEST_CASE("an empty shard opens with no tokens", "[data][shard]") {
  const std::string path = temp_path("merak_data_empty.tok");
  write_shard(path, {});
  auto d = open_shard(path);
  CHECK(d->size() == 0);
}

TEST_CASE("llm.c shards are read", "[data][shard]") {
  const std::string path = temp_path("merak_data_llmc.bin");
  const std::vector<uint16_t> tokens = {50256, 15496, 11, 995, 0, 65535};
  write_file(path, llmc_shard(tokens, 6));
  auto d = open_shard(path);
  CHECK(d->size() == 6);
  CHECK(read_all(*d) == std::vector<int64_t>{50256, 15496, 11, 995, 0, 65535});

  write_file(path, llmc_shard(tokens, 9));
  CHECK_THROWS_WITH(open_shard(path),
                    Catch::StartsWith(path + ": truncated: header says 9 tokens, file holds 6"));
  std::string v2 = llmc_shard(tokens, 6);
  v2[4] = 2;
  write_file(path, v2);
  CHECK_THROWS_WITH(open_shard(path), Catch::Contains(path) && Catch::Contains("version 2"));
  write_file(path, llmc_shard(tokens, 6).substr(0, 500));
  CHECK_THROWS_WITH(open_shard(path), Catch::Contains(path) && Catch::Contains("truncated"));
}

TEST_CASE("truncated, oversized, bad-magic and missing shards are refused by name",
          "[data][shard]") {
  const std::string path = temp_path("merak_data_bad.tok");
  write_shard(path, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
  const std::string good = read_file(path);

  write_file(path, good.substr(0, 64 + 7 * 2 + 1));  // 7 whole tokens and half of one
  CHECK_THROWS_WITH(open_shard(path),
                    Catch::StartsWith(path + ": truncated: header says 10 tokens, file holds 7"));
  write_file(path, good.substr(0, 40));
  CHECK_THROWS_WITH(open_shard(path), Catch::StartsWith(path + ": truncated"));
  write_file(path, good + "xy");
  CHECK_THROWS_WITH(open_shard(path), Catch::StartsWith(path) && Catch::Contains("2 bytes more"));

  std::string wrong_width = good;
  wrong_width[12] = 3;
  write_file(path, wrong_width);
  CHECK_THROWS_WITH(open_shard(path),
                    Catch::StartsWith(path) && Catch::Contains("bytes per token 3"));
  std::string wrong_version = good;
  wrong_version[8] = 9;
  write_file(path, wrong_version);
  CHECK_THROWS_WITH(open_shard(path), Catch::StartsWith(path) && Catch::Contains("version 9"));

  write_file(path, "hello, this is plain text and not a shard at all");
  CHECK_THROWS_WITH(open_shard(path), Catch::StartsWith(path) && Catch::Contains("unknown magic"));
  write_file(path, "");
  CHECK_THROWS_WITH(open_shard(path), Catch::StartsWith(path) && Catch::Contains("unknown magic"));

  const std::string missing = temp_path("merak_data_no_such_shard.tok");
  CHECK_THROWS_WITH(open_shard(missing), Catch::StartsWith(missing + ": cannot open"));
}

TEST_CASE("open_shards reads several shards as one sequence", "[data][shard]") {
  const std::string p0 = temp_path("merak_data_part0.tok"),
                    p1 = temp_path("merak_data_part1.tok"),
                    p2 = temp_path("merak_data_part2.tok"),
                    p3 = temp_path("merak_data_part3.bin");
  write_shard(p0, {1, 2, 3});
  write_shard(p1, {});  // an empty part is skipped over
  write_shard(p2, {70000});
  write_file(p3, llmc_shard({4, 5, 6, 7}, 4));
  auto d = open_shards({p0, p1, p2, p3});
  CHECK(d->size() == 8);
  CHECK(read_all(*d) == std::vector<int64_t>{1, 2, 3, 70000, 4, 5, 6, 7});
  std::vector<int64_t> across(4);
  d->read(2, 4, across.data());
  CHECK(across == std::vector<int64_t>{3, 70000, 4, 5});
  CHECK_THROWS_WITH(d->read(7, 2, across.data()), Catch::Contains("outside"));
  CHECK_THROWS_WITH(open_shards({p0, temp_path("merak_data_absent.tok")}),
                    Catch::Contains(temp_path("merak_data_absent.tok")));
  CHECK_THROWS(open_shards({}));
}

TEST_CASE("in-memory datasets check ids against their vocabulary", "[data]") {
  auto d = in_memory({3, 1, 2}, 4);
  CHECK(d->size() == 3);
  CHECK(read_all(*d) == std::vector<int64_t>{3, 1, 2});
  CHECK_THROWS_WITH(in_memory({3, 4}, 4), Catch::Contains("token 4 at position 1"));
  CHECK_THROWS_WITH(in_memory({-1}, 0), Catch::Contains("token -1"));
}
