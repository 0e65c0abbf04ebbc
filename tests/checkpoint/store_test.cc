// The checkpoint store: regions copy their overlaps exactly whatever the two layouts; a tensor
// written by one layout's ranks (boxes, fused boxes, ZeRO-1's flat runs) reads back whole and in
// any other layout's shards; steps are published atomically and `latest` follows only complete
// ones; damaged, truncated or foreign checkpoints are errors naming the file and the tensor.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "merak/checkpoint/checksum.h"
#include "merak/checkpoint/file_writer.h"
#include "merak/checkpoint/region.h"
#include "merak/checkpoint/reader.h"
#include "merak/checkpoint/store.h"
#include "tests/test_files.h"

using namespace merak;
using namespace merak::checkpoint;
namespace fs = std::filesystem;

using namespace merak::testing;  // tests/test_files.h

namespace {

// The global tensor's element i holds i (exact in f32 for these sizes).
Tensor iota(const Shape& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = float(i);
  return Tensor::from_vector(v, shape);
}

// `r`'s elements of `full`, in the region's order.
Tensor values_of(const Tensor& full, const Region& r) {
  Tensor box = full;
  for (size_t d = 0; d < r.shape.size(); ++d) box = box.narrow(int64_t(d), r.offset[d], r.shape[d]);
  box = box.contiguous().view({-1});
  return box.narrow(0, r.begin, r.numel()).contiguous();
}

Region box(Shape offset, Shape shape, int64_t begin = 0, int64_t end = -1) {
  Region r;
  r.offset = std::move(offset);
  r.shape = std::move(shape);
  r.begin = begin;
  r.end = end;
  return r;
}

std::string fresh_dir(const std::string& name) {
  const std::string dir = temp_path(name);
  fs::remove_all(dir);
  return dir;
}

bool same(const Tensor& a, const Tensor& b) { return a.to_vector<float>() == b.to_vector<float>(); }

// One checkpoint of tensor "w" (6 x 8) written as `pieces` of the iota tensor, at `step`.
std::string save(const std::string& dir, int64_t step, const std::vector<Region>& regions,
                 int files = 1) {
  const Shape g = {6, 8};
  const Tensor full = iota(g);
  const std::string tmp = begin_step(dir, step);
  std::vector<PieceEntry> entries;
  for (int f = 0; f < files; ++f) {
    std::vector<Piece> pieces;
    for (size_t k = 0; k < regions.size(); ++k)
      if (int(k) % files == f) pieces.push_back({"w", g, regions[k], values_of(full, regions[k])});
    const std::string file = "rank_" + std::to_string(f) + ".safetensors";
    for (const PieceEntry& e : write_pieces(tmp, file, pieces)) entries.push_back(e);
  }
  write_index(tmp, step, "model: {}\n", {{"adamw.step", std::to_string(step)}}, entries);
  publish(dir, step);
  point_latest(dir, step);
  return dir + "/" + step_name(step);
}

}  // namespace

TEST_CASE("regions copy exactly their overlap", "[checkpoint]") {
  const Shape g = {6, 8};
  const Tensor full = iota(g);
  // Writers: column halves (tp 2), one of them in two flat runs (ZeRO-1 over 2 replicas).
  const std::vector<Region> written = {box({0, 0}, {6, 4}), box({0, 4}, {6, 4}, 0, 10),
                                       box({0, 4}, {6, 4}, 10, 24)};
  // Readers: row thirds, a middle box, a flat run crossing rows, the whole.
  for (const Region& want : {box({0, 0}, {2, 8}), box({2, 0}, {2, 8}), box({1, 3}, {3, 4}),
                             box({0, 0}, {6, 8}, 13, 37), whole(g)}) {
    INFO(want.str());
    Tensor out = Tensor::zeros({want.numel()});
    int64_t n = 0;
    int64_t counted = 0;
    for (const Region& w : written) {
      n += copy_overlap(w, values_of(full, w).raw_data(), want, out.raw_data(), 4);
      counted += overlap_numel(w, want);
    }
    CHECK(n == want.numel());
    CHECK(counted == n);
    CHECK(same(out, values_of(full, want)));
  }
  // Boxes apart copy nothing; a scalar is its one element.
  float x = 7, y = 0;
  CHECK(copy_overlap(box({0, 0}, {2, 2}), &x, box({4, 4}, {2, 2}), &y, 4) == 0);
  CHECK(copy_overlap(box({}, {}), &x, box({}, {}), &y, 4) == 1);
  CHECK(y == 7);
  std::string why;
  CHECK_FALSE(region_fits(box({0, 6}, {6, 4}), g, &why));
  CHECK(why == "region [0:6, 6:10] lies outside the tensor's shape [6, 8]");
  // A corrupt index's numbers overflowed int64 here (found by fuzzing): now refused.
  const int64_t big = INT64_MAX;
  CHECK_FALSE(region_fits(box({big, 0}, {6, 8}), g, &why));
  CHECK(why == "region [9223372036854775807:?, 0:8] lies outside the tensor's shape [6, 8]");
  CHECK_FALSE(region_fits(box({0, 0}, {big / 2, 4}), {big / 2, 4}, &why));
  CHECK(why.find("has more elements than int64 counts") != std::string::npos);
}

TEST_CASE("a checksum changes with any one bit", "[checkpoint]") {
  std::vector<unsigned char> b(1000);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<unsigned char>(i * 7);
  const uint64_t c = checksum(b.data(), b.size());
  for (size_t at : {size_t(0), size_t(31), size_t(500), size_t(999)})
    for (int bit : {0, 3, 7}) {
      b[at] ^= static_cast<unsigned char>(1 << bit);
      CHECK(checksum(b.data(), b.size()) != c);
      b[at] ^= static_cast<unsigned char>(1 << bit);
    }
  CHECK(checksum(b.data(), b.size()) == c);
  CHECK(checksum(b.data(), 999) != c);  // a byte short
  CHECK(checksum_hex(0x1f) == "000000000000001f");
}

TEST_CASE("a tensor written by one layout reads back in any other", "[checkpoint]") {
  const std::string dir = fresh_dir("ckpt_layouts");
  const Shape g = {6, 8};
  const Tensor full = iota(g);
  // Two writing ranks: rank 0 the left columns, rank 1 the right ones as two ZeRO-1 runs.
  const std::string step = save(dir, 5, {box({0, 0}, {6, 4}), box({0, 4}, {6, 4}, 0, 7),
                                          box({0, 4}, {6, 4}, 7, 24)}, 2);
  CHECK(resolve(dir) == step);
  CHECK(resolve(step) == step);
  const Index index = read_index(step);
  CHECK(index.step == 5);
  CHECK(index.config == "model: {}\n");
  CHECK(index.state.at("adamw.step") == "5");
  REQUIRE(index.tensors.at("w").pieces.size() == 3);
  for (const Region& want : {whole(g), box({0, 0}, {3, 8}), box({3, 2}, {3, 6}),
                             box({0, 0}, {6, 8}, 20, 44)}) {
    INFO(want.str());
    Tensor out = Tensor::zeros({want.numel()});
    read_region(index, "w", g, DType::F32, want, out);
    CHECK(same(out, values_of(full, want)));
  }
  // The files are safetensors an outside reader can open: a valid 8-byte header length.
  std::ifstream f(step + "/rank_0.safetensors", std::ios::binary);
  unsigned char len[8];
  f.read(reinterpret_cast<char*>(len), 8);
  CHECK(len[0] % 8 == 0);
}

TEST_CASE("a checksum taken block by block is the checksum", "[checkpoint]") {
  std::vector<unsigned char> b(3 * kChecksumBlock + 5);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<unsigned char>(i * 13 + (i >> 11));
  for (size_t n : {size_t(100), kChecksumBlock, 2 * kChecksumBlock + 1, b.size()}) {
    std::vector<uint64_t> sums;
    for (size_t at = 0; at < n; at += kChecksumBlock)
      sums.push_back(block_checksum(b.data() + at, std::min(kChecksumBlock, n - at)));
    CHECK(combine_checksums(n, sums.data(), sums.size()) == checksum(b.data(), n));
  }
}

TEST_CASE("a file written from spans holds them at their offsets, zeros between, with their sums",
          "[checkpoint]") {
  // Spans from an aligned block (straight to the disk under direct I/O), from one byte into it
  // (through the aligned bounce buffer), longer than a chunk with a ragged end, and empty; on
  // the test's disk (direct I/O where it allows) and on /dev/shm (tmpfs: no direct I/O).
  std::vector<char> bytes((10 << 20) + 5000);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = char((i * 131 + i / 7) & 0xff);
  Tensor aligned = Tensor::empty({int64_t(bytes.size())}, DType::Bool);  // one byte each
  std::memcpy(aligned.raw_data(), bytes.data(), bytes.size());
  const char* a = static_cast<const char*>(aligned.raw_data());
  const std::vector<FileSpan> spans = {{0, a + 1, 4095},
                                       {8192, a, 9000},
                                       {32768, a + 3, bytes.size() - 3},
                                       {2572 * 4096, a, 0}};
  const int64_t size = 2572 * 4096 + 123;
  for (const std::string& dir : {fresh_dir("spans"), std::string("/dev/shm/merak_spans_test")}) {
    INFO(dir);
    fs::remove_all(dir);
    fs::create_directories(dir);
    const std::string path = dir + "/f.bin";
    const std::vector<uint64_t> sums = write_file(path, size, spans);
    const std::string got = read_file(path);
    REQUIRE(int64_t(got.size()) == size);
    std::string want(size_t(size), '\0');
    for (size_t k = 0; k < spans.size(); ++k) {
      std::memcpy(&want[size_t(spans[k].offset)], spans[k].data, spans[k].bytes);
      CHECK(sums[k] == checksum(spans[k].data, spans[k].bytes));
    }
    CHECK(got == want);
    fs::remove_all(dir);
  }
  // Off the page grid: refused before anything is written.
  CHECK_THROWS_WITH(write_file(fresh_dir("spans_bad"), 100, {{10, a, 5}}),
                    Catch::Contains("off the 4096-byte grid"));
}

TEST_CASE("pieces larger than a read chunk come back exactly in any layout and any placement",
          "[checkpoint]") {
  // 24 MB: the first piece is two read chunks; an odd row length, so no piece is a multiple of
  // the direct-I/O block and ZeRO-1's runs split rows.
  const Shape g = {1000, 6007};
  const Tensor full = iota(g);
  const std::vector<Region> written = {box({0, 0}, {500, 6007}),
                                       box({500, 0}, {500, 6007}, 0, 1777777),
                                       box({500, 0}, {500, 6007}, 1777777)};
  const std::string dir = fresh_dir("ckpt_large");
  const std::string tmp = begin_step(dir, 1);
  std::vector<PieceEntry> entries;
  for (int f = 0; f < 2; ++f) {  // two files: pieces 0 and 2, piece 1
    std::vector<Piece> pieces;
    for (size_t k = size_t(f); k < written.size(); k += 2)
      pieces.push_back({"big", g, written[k], values_of(full, written[k])});
    const std::string file = "rank_" + std::to_string(f) + ".safetensors";
    for (const PieceEntry& e : write_pieces(tmp, file, pieces)) entries.push_back(e);
  }
  write_index(tmp, 1, "", {}, entries);
  publish(dir, 1);
  const Index index = read_index(dir + "/" + step_name(1));
  for (const PieceEntry& e : index.tensors.at("big").pieces) CHECK(e.byte_begin % 4096 == 0);

  // Several regions in one call: each written piece as it is (straight into place), the whole
  // tensor and another layout's shards (through staging buffers).
  std::vector<Region> wanted = written;
  for (const Region& r :
       {whole(g), box({0, 1000}, {1000, 1001}), box({250, 0}, {500, 6007}, 5, 1000003)})
    wanted.push_back(r);
  std::vector<RegionRead> reads;
  for (const Region& r : wanted)
    reads.push_back({"big", g, DType::F32, r, Tensor::zeros({r.numel()})});
  read_regions(index, reads);
  for (const RegionRead& r : reads) {
    INFO(r.target.str());
    CHECK(same(r.out, values_of(full, r.target)));
  }
  // A destination that does not line up with the file (one element into a buffer): read
  // through the page cache, the same values.
  Tensor wide = Tensor::zeros({written[1].numel() + 1});
  const Tensor shifted = wide.narrow(0, 1, written[1].numel());
  read_region(index, "big", g, DType::F32, written[1], shifted);
  CHECK(same(shifted, values_of(full, written[1])));

  // A bit flipped in the second chunk of a piece; then the file cut in the middle of it.
  const PieceEntry& e = index.tensors.at("big").pieces[0];
  REQUIRE(e.byte_end - e.byte_begin > (9 << 20));
  const std::string file = index.dir + "/" + e.file;
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(e.byte_begin + (9 << 20));
    const int c = f.get();
    f.seekp(e.byte_begin + (9 << 20));
    f.put(char(c ^ 0x04));
  }
  const std::string damaged = file + ": checksum mismatch in tensor 'big' " + e.region.str();
  CHECK_THROWS_WITH(read_regions(index, reads), Catch::Contains(damaged));
  fs::resize_file(file, uint64_t(e.byte_begin + (3 << 20) + 7));
  CHECK_THROWS_WITH(read_regions(index, reads),
                    Catch::Contains(file + ": truncated: tensor 'big'"));
}

TEST_CASE("another model's checkpoint names the tensor and both shapes", "[checkpoint]") {
  const std::string dir = fresh_dir("ckpt_foreign");
  const Index index = read_index(save(dir, 1, {box({0, 0}, {6, 8})}));
  Tensor out = Tensor::zeros({48});
  CHECK_THROWS_WITH(read_region(index, "w", {8, 6}, DType::F32, whole({8, 6}), out),
                    Catch::Contains("tensor 'w' has shape [6, 8] there, [8, 6] here"));
  CHECK_THROWS_WITH(read_region(index, "v", {6, 8}, DType::F32, whole({6, 8}), out),
                    Catch::Contains("no tensor 'v' (of shape [6, 8])"));
  Tensor half = Tensor::zeros({48}, DType::BF16);
  CHECK_THROWS_WITH(read_region(index, "w", {6, 8}, DType::BF16, whole({6, 8}), half),
                    Catch::Contains("tensor 'w' is f32 there, bf16 here"));
}

TEST_CASE("a damaged or truncated file fails its checksum, naming file and tensor",
          "[checkpoint]") {
  const std::string dir = fresh_dir("ckpt_damaged");
  const std::string step = save(dir, 1, {box({0, 0}, {6, 8})});
  const Index index = read_index(step);
  const PieceEntry& e = index.tensors.at("w").pieces[0];
  const std::string file = step + "/" + e.file;
  Tensor out = Tensor::zeros({48});
  {  // one bit flipped in the middle of the data
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(e.byte_begin + 50);
    char c = 0;
    f.get(c);
    f.seekp(e.byte_begin + 50);
    f.put(char(c ^ 0x10));
  }
  CHECK_THROWS_WITH(read_region(index, "w", {6, 8}, DType::F32, whole({6, 8}), out),
                    Catch::Contains(file + ": checksum mismatch in tensor 'w'"));
  fs::resize_file(file, uint64_t(e.byte_end - 9));
  CHECK_THROWS_WITH(read_region(index, "w", {6, 8}, DType::F32, whole({6, 8}), out),
                    Catch::Contains(file + ": truncated: tensor 'w'"));
  // A malformed index names itself.
  std::ofstream(step + "/index.json") << "{\"format\": \"merak-checkpoint\", \"version\": 1";
  CHECK_THROWS_WITH(read_index(step), Catch::Contains(step + "/index.json: "));
}

TEST_CASE("pieces that miss an element or hold one twice are refused when the index is written",
          "[checkpoint]") {
  const std::string dir = fresh_dir("ckpt_holes");
  CHECK_THROWS_WITH(save(dir, 1, {box({0, 0}, {6, 4})}),
                    Catch::Contains("the pieces of 'w' hold 24 elements of its 48"));
  CHECK_THROWS_WITH(save(dir, 2, {box({0, 0}, {6, 8}), box({0, 0}, {1, 8})}),
                    Catch::Contains("tensor 'w': its pieces [0:1, 0:8] in rank_0.safetensors and "
                                    "[0:6, 0:8] in rank_0.safetensors lie in boxes that meet"));
  // 48 elements in all, but elements 20..28 twice and 40..48 nowhere: the count alone passed.
  CHECK_THROWS_WITH(save(dir, 3, {box({0, 0}, {6, 8}, 0, 28), box({0, 0}, {6, 8}, 20, 40)}, 2),
                    Catch::Contains("[0:6, 0:8] elements 0..28 in rank_0.safetensors and "
                                    "[0:6, 0:8] elements 20..40 in rank_1.safetensors overlap"));
  // Boxes that meet: row 2 twice, row 5 nowhere. A layout's boxes are one box or apart, so
  // boxes that meet are refused even where their runs happen not to share an element.
  CHECK_THROWS_WITH(save(dir, 4, {box({0, 0}, {3, 8}), box({2, 0}, {3, 8})}),
                    Catch::Contains("tensor 'w': its pieces [0:3, 0:8] in rank_0.safetensors and "
                                    "[2:5, 0:8] in rank_0.safetensors lie in boxes that meet"));
  CHECK_THROWS_WITH(save(dir, 5, {box({0, 0}, {6, 8}, 0, 8), box({1, 0}, {5, 8})}),
                    Catch::Contains("lie in boxes that meet"));
  // Many pieces: 8 column boxes, each in 6 one-element runs; then one run an element longer.
  std::vector<Region> runs;
  for (int64_t c = 0; c < 8; ++c)
    for (int64_t k = 0; k < 6; ++k) runs.push_back(box({0, c}, {6, 1}, k, k + 1));
  CHECK(read_index(save(dir, 6, runs)).tensors.at("w").pieces.size() == 48);
  runs[20].end += 1;
  CHECK_THROWS_WITH(save(dir, 7, runs), Catch::Contains("[0:6, 3:4] elements 2..4 in "
                                                        "rank_0.safetensors and [0:6, 3:4] "
                                                        "elements 3..4 in rank_0.safetensors "
                                                        "overlap"));
}

TEST_CASE("an index whose pieces overlap is refused, naming it and the tensor", "[checkpoint]") {
  // Hand-edited or damaged: the second half's entry made a copy of the first's. Counted, the
  // elements still add up; read, the second half would keep whatever the destination held.
  const std::string dir = fresh_dir("ckpt_overlap");
  const std::string step = save(dir, 1, {box({0, 0}, {6, 8}, 0, 24), box({0, 0}, {6, 8}, 24, 48)});
  std::string text = read_file(step + "/index.json");
  const size_t first = text.find("{\"file\"");
  const size_t second = text.find("{\"file\"", first + 1);
  REQUIRE(second != std::string::npos);
  const std::string copy = text.substr(first, text.find('}', first) + 1 - first);
  text.replace(second, text.find('}', second) + 1 - second, copy);
  std::ofstream(step + "/index.json") << text;
  CHECK_THROWS_WITH(read_index(step),
                    Catch::Contains(step + "/index.json: tensor 'w': its pieces [0:6, 0:8] "
                                           "elements 0..24 in rank_0.safetensors and [0:6, 0:8] "
                                           "elements 0..24 in rank_0.safetensors overlap"));
}

TEST_CASE("an index's bad step or checksum is refused, naming the file and the field",
          "[checkpoint]") {
  const std::string dir = fresh_dir("ckpt_fields");
  const std::string step = save(dir, 1, {box({0, 0}, {6, 8})});
  const std::string good = read_file(step + "/index.json");
  const size_t sum = good.find("\"checksum\": \"") + 13;
  auto with = [&](size_t at, size_t n, const std::string& text) {
    std::ofstream(step + "/index.json") << std::string(good).replace(at, n, text);
  };
  with(good.find("\"step\": 1"), 9, "\"step\": -3");
  CHECK_THROWS_WITH(read_index(step), step + "/index.json: step -3 is negative");
  for (const std::string bad : {"zz", "0123456789abcdef0"}) {
    with(sum, 16, bad);
    CHECK_THROWS_WITH(read_index(step), step + "/index.json: tensor 'w': a piece's checksum '" +
                                            bad + "' is not 1 to 16 hex digits");
  }
  // Pieces lie in the step's directory: a path out of it is refused before anything is opened.
  const size_t file = good.find("\"file\": \"rank_0.safetensors\"");
  REQUIRE(file != std::string::npos);
  for (const std::string bad : {"../../etc/passwd", "/etc/passwd", "..", ""}) {
    with(file, 28, "\"file\": \"" + bad + "\"");
    CHECK_THROWS_WITH(read_index(step), step + "/index.json: tensor 'w': piece file '" + bad +
                                            "' is not a file of the step's directory");
  }
  // The scalar state is numbers: the key named, not the conversion that would fail on it later.
  const size_t state = good.find("\"adamw.step\": \"1\"");
  // A long one too: a regex's recursion would overflow the stack on it.
  for (const std::string& bad : std::vector<std::string>{"x", "", "99999999999999999999", "1e999",
                                                         "1.5e", "-", "1x",
                                                         std::string(1 << 20, '7')}) {
    with(state, 17, "\"adamw.step\": \"" + bad + "\"");
    CHECK_THROWS_WITH(read_index(step), step + "/index.json: state 'adamw.step': '" + bad +
                                            "' is not a number");
  }
  for (const std::string good_number : {"1.52587891e-05", "-7", "1e-320"}) {
    with(state, 17, "\"adamw.step\": \"" + good_number + "\"");
    CHECK(read_index(step).state.at("adamw.step") == good_number);
  }
  // A key given twice, at any level, is refused naming it (readers differ on which counts).
  with(state, 17, "\"adamw.step\": \"1\", \"adamw.step\": \"9\"");
  CHECK_THROWS_WITH(read_index(step), Catch::Contains(step + "/index.json: malformed index: "
                                                      "state: key 'adamw.step' is given twice"));
  with(good.find("\"step\": 1"), 9, "\"step\": 1, \"step\": 2");
  CHECK_THROWS_WITH(read_index(step), Catch::Contains("index: key 'step' is given twice"));
  with(good.find("\"dtype\": "), 0, "\"dtype\": \"F64\", ");
  CHECK_THROWS_WITH(read_index(step),
                    Catch::Contains("tensor 'w': key 'dtype' is given twice"));
  with(sum - 13, 0, "\"checksum\": \"0\", ");
  CHECK_THROWS_WITH(read_index(step),
                    Catch::Contains("tensor 'w' piece: key 'checksum' is given twice"));
  const size_t tensors = good.find("\"tensors\": {") + 13;
  const size_t w_end = good.find("]}", good.find("\"pieces\"")) + 2;
  with(tensors, 0, good.substr(tensors, w_end - tensors) + ", ");
  CHECK_THROWS_WITH(read_index(step), Catch::Contains("tensors: key 'w' is given twice"));
  with(0, 0, "");
  CHECK(read_index(step).tensors.at("w").pieces.at(0).checksum != 0);
}

TEST_CASE("a read takes only the pieces holding its elements, not every run of their box",
          "[checkpoint]") {
  // ZeRO-1 over 4 replicas: one box, 4 runs, a file each. A replica reading its own run back
  // needs its own file only.
  const std::string dir = fresh_dir("ckpt_runs");
  const std::string step = save(dir, 1, {box({0, 0}, {6, 8}, 0, 12), box({0, 0}, {6, 8}, 12, 24),
                                         box({0, 0}, {6, 8}, 24, 36), box({0, 0}, {6, 8}, 36, 48)},
                                4);
  const Index index = read_index(step);
  for (int f = 1; f < 4; ++f) fs::remove(step + "/rank_" + std::to_string(f) + ".safetensors");
  for (const Region& want : {box({0, 0}, {6, 8}, 0, 12), box({1, 0}, {1, 4})}) {  // in run 0
    INFO(want.str());
    Tensor out = Tensor::zeros({want.numel()});
    read_region(index, "w", {6, 8}, DType::F32, want, out);
    CHECK(same(out, values_of(iota({6, 8}), want)));
  }
  Tensor row = Tensor::zeros({8});  // row 1 is elements 8..16: runs 0 and 1
  CHECK_THROWS_WITH(read_region(index, "w", {6, 8}, DType::F32, box({1, 0}, {1, 8}), row),
                    Catch::Contains("rank_1.safetensors"));
}

TEST_CASE("steps publish atomically; latest follows complete steps; keep prunes the oldest",
          "[checkpoint]") {
  const std::string dir = fresh_dir("ckpt_steps");
  CHECK(resolve(dir, true).empty());  // nothing yet: a fresh start
  CHECK_THROWS_WITH(resolve(dir), Catch::Equals("checkpoint '" + dir + "': does not exist"));
  fs::create_directories(dir);
  CHECK_THROWS_WITH(resolve(dir), Catch::Contains("neither a step"));
  save(dir, 10, {box({0, 0}, {6, 8})});
  save(dir, 20, {box({0, 0}, {6, 8})});
  // An interrupted save of step 30: files written, never published. Latest stays at 20, and the
  // next save of 30 starts over.
  const std::string tmp = begin_step(dir, 30);
  write_pieces(tmp, "rank_0.safetensors", {});
  CHECK(resolve(dir) == dir + "/" + step_name(20));
  // Published but killed before latest moved: still 20.
  write_index(tmp, 30, "", {}, {});
  publish(dir, 30);
  CHECK(resolve(dir) == dir + "/" + step_name(20));
  point_latest(dir, 30);
  CHECK(resolve(dir) == dir + "/" + step_name(30));
  prune(dir, 2);
  CHECK_FALSE(fs::exists(dir + "/" + step_name(10)));
  CHECK(fs::exists(dir + "/" + step_name(20)));
  CHECK(fs::exists(dir + "/" + step_name(30)));
  // The same step saved again replaces it.
  save(dir, 30, {box({0, 0}, {6, 8})});
  CHECK(read_index(resolve(dir)).tensors.count("w") == 1);
}

TEST_CASE("saving again the step `latest` names swaps it in whole: it never names nothing",
          "[checkpoint]") {
  // A run resumed from an earlier step saves this step again. The step directory is replaced
  // while a reader keeps resolving `latest`: every look finds a complete step.
  const std::string dir = fresh_dir("ckpt_resave");
  save(dir, 10, {box({0, 0}, {6, 8})});
  std::atomic<bool> done{false};
  std::atomic<int> looks{0}, empty{0};
  std::thread reader([&] {
    const std::string index = dir + "/" + step_name(10) + "/index.json";
    while (!done) {
      if (!fs::exists(index)) ++empty;
      ++looks;
    }
  });
  for (int i = 0; i < 100; ++i) {
    const std::string tmp = begin_step(dir, 10);
    write_index(tmp, 10, "", {}, {});
    publish(dir, 10);
  }
  done = true;
  reader.join();
  CHECK(looks > 0);
  CHECK(empty == 0);
  CHECK(resolve(dir) == dir + "/" + step_name(10));
  // Nothing left beside it: the old copies are gone.
  int entries = 0;
  for (const auto& e : fs::directory_iterator(dir)) entries += e.path().filename() != "latest";
  CHECK(entries == 1);
}

TEST_CASE("keep counts this run's steps, not newer ones of a run it resumed before",
          "[checkpoint]") {
  // Steps 2..8 saved; the run resumed from step 2 saves 4 and 6 again with keep 2. Steps after
  // `latest` (the earlier run's) are neither counted nor deleted; this run's last two stay.
  const std::string dir = fresh_dir("ckpt_abandoned");
  for (int64_t step : {2, 4, 6, 8}) save(dir, step, {box({0, 0}, {6, 8})});
  auto present = [&] {
    std::vector<int64_t> out;
    for (int64_t step : {2, 4, 6, 8})
      if (fs::exists(dir + "/" + step_name(step))) out.push_back(step);
    return out;
  };
  save(dir, 4, {box({0, 0}, {6, 8})});
  prune(dir, 2);
  CHECK(present() == std::vector<int64_t>{2, 4, 6, 8});
  save(dir, 6, {box({0, 0}, {6, 8})});
  prune(dir, 2);
  CHECK(present() == std::vector<int64_t>{4, 6, 8});
  CHECK(resolve(dir) == dir + "/" + step_name(6));
}

TEST_CASE("latest names a step of its own directory", "[checkpoint]") {
  const std::string dir = fresh_dir("ckpt_latest_out");
  save(dir, 2, {box({0, 0}, {6, 8})});
  const std::string other = fresh_dir("ckpt_latest_other");
  save(other, 4, {box({0, 0}, {6, 8})});
  std::ofstream(dir + "/latest") << "../ckpt_latest_other/" << step_name(4) << "\n";
  CHECK_THROWS_WITH(resolve(dir), Catch::Contains("latest names '../ckpt_latest_other/" +
                                                  step_name(4) + "', not a step of its directory"));
}

TEST_CASE("a save never replaces what is not a step under a step's name", "[checkpoint]") {
  const std::string dir = fresh_dir("ckpt_not_ours");
  save(dir, 2, {box({0, 0}, {6, 8})});
  // A user's folder and a user's file where steps 4 and 6 would go: both stay, each save fails
  // naming it, and `latest` stays at the last step saved.
  fs::create_directory(dir + "/" + step_name(4));
  std::ofstream(dir + "/" + step_name(4) + "/notes.txt") << "precious";
  std::ofstream(dir + "/" + step_name(6)) << "also precious";
  for (int64_t step : {4, 6}) {
    const std::string tmp = begin_step(dir, step);
    write_index(tmp, step, "", {}, {});
    CHECK_THROWS_WITH(publish(dir, step),
                      Catch::Contains(step_name(step) + "' exists and is not a checkpoint step"));
  }
  std::string notes, file;
  std::getline(std::ifstream(dir + "/" + step_name(4) + "/notes.txt"), notes);
  std::getline(std::ifstream(dir + "/" + step_name(6)), file);
  CHECK(notes == "precious");
  CHECK(file == "also precious");
  CHECK(resolve(dir) == dir + "/" + step_name(2));
}

TEST_CASE("a save starts by removing what interrupted saves of any step left", "[checkpoint]") {
  const std::string dir = fresh_dir("ckpt_leftovers");
  save(dir, 2, {box({0, 0}, {6, 8})});
  // Killed while writing step 4, and while swapping step 2 where renames cannot exchange.
  write_pieces(begin_step(dir, 4), "rank_0.safetensors", {});
  fs::create_directory(dir + "/." + step_name(2) + ".old");
  std::ofstream(dir + "/." + step_name(2) + ".old/rank_0.safetensors") << "old";
  std::ofstream(dir + "/notes.tmp") << "the user's";  // not ours: stays
  const std::string tmp = begin_step(dir, 6);
  CHECK(fs::exists(tmp));
  CHECK_FALSE(fs::exists(dir + "/." + step_name(4) + ".tmp"));
  CHECK_FALSE(fs::exists(dir + "/." + step_name(2) + ".old"));
  CHECK(fs::exists(dir + "/notes.tmp"));
  CHECK(fs::exists(dir + "/" + step_name(2) + "/index.json"));
}

TEST_CASE("a step killed between the fallback swap's renames is found, then put back",
          "[checkpoint]") {
  // publish without RENAME_EXCHANGE: step_N -> .step_N.old, then .step_N.tmp -> step_N. A kill
  // between them leaves both copies complete and `latest` naming a step that is not there.
  const std::string dir = fresh_dir("ckpt_half_swap");
  save(dir, 2, {box({0, 0}, {6, 8})});
  const std::string named = dir + "/" + step_name(2), aside = dir + "/." + step_name(2) + ".old";
  fs::rename(named, aside);
  write_pieces(begin_step(dir, 9), "rank_0.safetensors", {});  // put back at once ...
  CHECK(fs::exists(named + "/index.json"));
  CHECK_FALSE(fs::exists(aside));
  fs::rename(named, aside);
  CHECK(resolve(dir) == aside);  // ... and found where it is before that
  CHECK(read_index(resolve(dir)).tensors.count("w") == 1);
  save(dir, 4, {box({0, 0}, {6, 8})});
  CHECK(fs::exists(named + "/index.json"));
  CHECK_FALSE(fs::exists(aside));
}

TEST_CASE("an unwritable checkpoint directory is an error naming the path", "[checkpoint]") {
  const std::string dir = fresh_dir("ckpt_file");
  std::ofstream(dir) << "a file, not a directory";
  CHECK_THROWS_WITH(begin_step(dir + "/sub", 1), Catch::Contains(dir + "/sub"));
}

TEST_CASE("state scalars convert strictly, naming the index and the key", "[checkpoint]") {
  Index index;
  index.dir = "ck/step_000000002";
  index.state = {{"steps", "2"}, {"zero", "0"}, {"scale", "65536"}, {"small", "1.52587891e-05"}};
  CHECK(state_count(index, "steps") == 2);
  CHECK(state_count(index, "zero") == 0);
  CHECK(state_float(index, "scale") == 65536.0f);
  CHECK(state_float(index, "small") == 1.52587891e-05f);
  CHECK(state_float(index, "steps") == 2.0f);
  const std::string where = "ck/step_000000002/index.json: state ";
  CHECK_THROWS_WITH(state_count(index, "nope"), where + "'nope' is missing");
  CHECK_THROWS_AS(state_float(index, "nope"), CheckpointError);
  // A conversion that stops at the first non-digit would read "1e3" as 1 and "2.9" as 2; a
  // negative count is no count.
  for (const std::string bad : {"1e3", "2.9", "-5", "1x", " 1", "+1", "", "99999999999999999999"}) {
    index.state["k"] = bad;
    CHECK_THROWS_WITH(state_count(index, "k"),
                      where + "'k': '" + bad + "' is not a count (a whole number >= 0)");
  }
  // Out of f32's range, whatever a double holds (std::stof throws a bare "stof" on these).
  for (const std::string bad : {"1e39", "-1e39", "1e-50", "1e999", "nan", "inf", "x"}) {
    index.state["k"] = bad;
    CHECK_THROWS_WITH(state_float(index, "k"),
                      where + "'k': '" + bad + "' is not a number f32 holds");
  }
}
