#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "merak/checkpoint/safetensors.h"
#include "tests/test_files.h"

using namespace merak;
using merak::checkpoint::load_safetensors;
using merak::checkpoint::save_safetensors;

using namespace merak::testing;  // tests/test_files.h

namespace {

// This process's scratch files: temp_path(kTemp + name).
const std::string kTemp = "merak_st_" + std::to_string(::getpid()) + "_";

// A safetensors file from its parts: the 8-byte little-endian header length, header, data.
std::string file_from(const std::string& header, const std::string& data) {
  std::string out;
  for (int i = 0; i < 8; ++i) out += char((uint64_t(header.size()) >> (8 * i)) & 0xff);
  return out + header + data;
}

template <typename T>
std::string raw(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

std::string tensor_bytes(const Tensor& t) {
  const Tensor c = t.contiguous();
  return std::string(static_cast<const char*>(c.raw_data()), size_t(c.nbytes()));
}

Tensor half_tensor(DType dt, const std::vector<float>& values, const Shape& shape) {
  Tensor t = Tensor::empty(shape, dt);
  auto* p = static_cast<uint16_t*>(t.raw_data());
  for (size_t i = 0; i < values.size(); ++i)
    p[i] = dt == DType::BF16 ? f32_to_bf16(values[i]) : f32_to_f16(values[i]);
  return t;
}

// The tensors of every dtype, including a scalar, an empty tensor and a strided view.
std::vector<std::pair<std::string, Tensor>> sample_tensors() {
  Tensor m = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  return {
      {"f32", Tensor::from_vector<float>({1.5f, -2.25f, 3e-38f, 1e30f}, {2, 2})},
      {"f64", Tensor::from_vector<double>({3.141592653589793, -1e-300, 7}, {3})},
      {"bf16", half_tensor(DType::BF16, {1.0f, -0.5f, 3.0f, 256.0f}, {4})},
      {"f16", half_tensor(DType::F16, {0.1f, -65504.0f, 6e-8f}, {3, 1})},
      {"i32", Tensor::from_vector<int32_t>({-7, 0, 2147483647}, {3})},
      {"i64", Tensor::from_vector<int64_t>({int64_t(1) << 40, -5}, {1, 2})},
      {"bool", Tensor::from_vector<bool>({true, false, true}, {3})},
      {"scalar", Tensor::scalar(42.0)},
      {"empty", Tensor::zeros({0, 3})},
      {"transposed", m.transpose(0, 1)},
  };
}

}  // namespace

TEST_CASE("safetensors round trip keeps names, order, dtypes, shapes and bytes", "[checkpoint]") {
  const auto tensors = sample_tensors();
  const std::string path = temp_path(kTemp + "roundtrip.safetensors");
  save_safetensors(path, tensors);
  const auto loaded = load_safetensors(path);
  REQUIRE(loaded.size() == tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    INFO("tensor " << tensors[i].first);
    CHECK(loaded[i].first == tensors[i].first);
    CHECK(loaded[i].second.dtype() == tensors[i].second.dtype());
    CHECK(loaded[i].second.shape() == tensors[i].second.shape());
    CHECK(loaded[i].second.is_contiguous());
    CHECK(tensor_bytes(loaded[i].second) == tensor_bytes(tensors[i].second));
  }
  CHECK(loaded[9].second.to_vector<float>() == std::vector<float>{1, 4, 2, 5, 3, 6});
  CHECK(loaded[7].second.item() == 42.0);
  std::remove(path.c_str());
}

TEST_CASE("safetensors files follow the format's layout", "[checkpoint]") {
  const std::string path = temp_path(kTemp + "layout.safetensors");
  Tensor a = Tensor::from_vector<float>({1, 2, 3}, {3});
  Tensor b = Tensor::from_vector<int64_t>({7, 8}, {2});
  save_safetensors(path, {{"a", a}, {"b", b}});
  const std::string bytes = read_file(path);
  REQUIRE(bytes.size() >= 8);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(static_cast<unsigned char>(bytes[i])) << (8 * i);
  CHECK(n % 8 == 0);  // header padded so the data starts 8-byte aligned
  REQUIRE(bytes.size() == 8 + n + 12 + 16);
  const std::string header = bytes.substr(8, n);
  CHECK(header.front() == '{');
  const size_t close = header.rfind('}');
  CHECK(header.find_first_not_of(' ', close + 1) == std::string::npos);  // padding: spaces
  CHECK(bytes.substr(8 + n) == raw<float>({1, 2, 3}) + raw<int64_t>({7, 8}));
  std::remove(path.c_str());
}

TEST_CASE("safetensors metadata round trips, escapes included", "[checkpoint]") {
  const std::string path = temp_path(kTemp + "meta.safetensors");
  const std::map<std::string, std::string> meta = {
      {"format", "pt"},
      {"quote \" and \\ backslash", "line\nbreak\ttab \x01 control"},
      {"unicode", "h\xc3\xa9llo \xe2\x9c\x93"},
      {"", "empty key"}};
  save_safetensors(path, {{"x", Tensor::ones({2})}}, meta);
  std::map<std::string, std::string> got = {{"stale", "entry"}};
  const auto loaded = load_safetensors(path, &got);
  CHECK(got == meta);
  REQUIRE(loaded.size() == 1);
  CHECK(loaded[0].second.to_vector<float>() == std::vector<float>{1, 1});

  save_safetensors(path, {{"x", Tensor::ones({2})}});  // replaces the file; no metadata
  load_safetensors(path, &got);
  CHECK(got.empty());
  std::remove(path.c_str());
}

TEST_CASE("safetensors reads a file laid out as the safetensors library writes it",
          "[checkpoint]") {
  // What safetensors.torch.save_file({"weight": ..., "bias": ..., "step": ...},
  // metadata={"format": "pt"}) produces: compact JSON with __metadata__ first, tensors ordered
  // by dtype alignment then name (so the I64 comes first), header padded with spaces to a
  // multiple of 8.
  std::string header =
      "{\"__metadata__\":{\"format\":\"pt\"},"
      "\"step\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[0,8]},"
      "\"bias\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]},"
      "\"weight\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[16,32]},"
      "\"mask\":{\"dtype\":\"BOOL\",\"shape\":[3],\"data_offsets\":[32,35]}}";
  header.append((8 - header.size() % 8) % 8, ' ');
  // The mask's bytes with an explicit length: as a C string "\x01\x00\x01" would end at the zero.
  const std::string data = raw<int64_t>({1000}) + raw<float>({0.5f, -0.5f}) +
                           raw<float>({1, 2, 3, 4}) + std::string("\x01\x00\x01", 3);
  REQUIRE(data.size() == 35);
  const std::string path = temp_path(kTemp + "library.safetensors");
  write_file(path, file_from(header, data));
  std::map<std::string, std::string> meta;
  const auto t = load_safetensors(path, &meta);
  CHECK(meta == std::map<std::string, std::string>{{"format", "pt"}});
  REQUIRE(t.size() == 4);
  CHECK(t[0].first == "step");
  CHECK(t[0].second.dtype() == DType::I64);
  CHECK(t[0].second.shape() == Shape{});
  CHECK(t[0].second.item() == 1000.0);
  CHECK(t[1].first == "bias");
  CHECK(t[1].second.to_vector<float>() == std::vector<float>{0.5f, -0.5f});
  CHECK(t[2].first == "weight");
  CHECK(t[2].second.shape() == Shape{2, 2});
  CHECK(t[2].second.to_vector<float>() == std::vector<float>{1, 2, 3, 4});
  CHECK(t[3].second.to_vector<bool>() == std::vector<bool>{true, false, true});
  std::remove(path.c_str());
}

TEST_CASE("safetensors header parsing accepts any JSON spacing, field order and escapes",
          "[checkpoint]") {
  const std::string header =
      "{\n  \"caf\\u00e9\\/\\ud83d\\ude00\" : {\n    \"data_offsets\" : [ 0 , 4 ],\n"
      "    \"shape\" : [ 1 ], \"dtype\" : \"I32\"\n  },\n"
      "  \"__metadata__\" : { \"k\" : \"v\\u0041\" }\n}\n";
  const std::string path = temp_path(kTemp + "spacing.safetensors");
  write_file(path, file_from(header, raw<int32_t>({-3})));
  std::map<std::string, std::string> meta;
  const auto t = load_safetensors(path, &meta);
  REQUIRE(t.size() == 1);
  CHECK(t[0].first == "caf\xc3\xa9/\xf0\x9f\x98\x80");
  CHECK(t[0].second.item() == -3.0);
  CHECK(meta.at("k") == "vA");
  std::remove(path.c_str());
}

TEST_CASE("corrupt safetensors files fail with the file and the problem", "[checkpoint]") {
  const std::string path = temp_path(kTemp + "corrupt.safetensors");
  const std::string ok_header =
      "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
      "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}";
  const std::string ok_data = raw<float>({1, 2, 3});
  write_file(path, file_from(ok_header, ok_data));
  REQUIRE(load_safetensors(path).size() == 2);  // the base case is valid

  auto fails_with = [&](const std::string& bytes, const std::string& problem) {
    write_file(path, bytes);
    INFO("expecting: " << problem);
    CHECK_THROWS_WITH(load_safetensors(path), Catch::Contains(path) && Catch::Contains(problem));
  };
  auto with_header = [&](const std::string& from, const std::string& to,
                         const std::string& data = raw<float>({1, 2, 3})) {
    std::string h = ok_header;
    h.replace(h.find(from), from.size(), to);
    return file_from(h, data);
  };

  const std::string whole = file_from(ok_header, ok_data);
  fails_with(whole.substr(0, 5), "truncated");
  fails_with(whole.substr(0, 8 + 20), "bad header length");   // header cut short
  fails_with(file_from("", ""), "bad header length");
  fails_with(whole.substr(0, whole.size() - 2), "past the end");  // data cut short
  fails_with(with_header("[8,12]", "[8,16]"), "past the end");
  fails_with(with_header("[8,12]", "[4,8]"), "overlaps");
  fails_with(with_header("[8,12]", "[12,16]", raw<float>({1, 2, 3, 4})), "gap of 4 bytes");
  fails_with(whole + "xxxx", "cover 12");  // trailing bytes no tensor claims
  fails_with(with_header("\"shape\":[1]", "\"shape\":[2]"), "hold 4 bytes");
  fails_with(with_header("\"F32\",\"shape\":[1]", "\"F8_E4M3\",\"shape\":[1]"),
             "unknown dtype 'F8_E4M3'");
  fails_with(with_header("\"shape\":[1],", ""), "lacks shape");
  fails_with(with_header("\"shape\":[1]", "\"shape\":[-1]"), "non-negative integer");
  fails_with(with_header("\"shape\":[1]", "\"shape\":[1],\"extra\":1"), "unexpected field");
  fails_with(with_header("\"b\":", "\"a\":"), "duplicate key 'a'");
  fails_with(with_header("\"shape\":[1]", "\"shape\":[1],\"dtype\":\"I32\""),
             "duplicate field 'dtype' in tensor 'b'");
  fails_with(with_header("}}", "}"), "expected '}'");
  fails_with(with_header("\"b\"", "\"b"), "bad header JSON");
  std::remove(path.c_str());
  CHECK_THROWS_WITH(load_safetensors(path),
                    Catch::Contains(path) && Catch::Contains("cannot open"));
}

TEST_CASE("save_safetensors is atomic and rejects bad input by name", "[checkpoint]") {
  const std::string path = temp_path(kTemp + "atomic.safetensors");
  save_safetensors(path, {{"x", Tensor::full({4}, 1.0)}});
  save_safetensors(path, {{"y", Tensor::full({2}, 2.0)}});  // replaces the old file whole
  const auto t = load_safetensors(path);
  REQUIRE(t.size() == 1);
  CHECK(t[0].first == "y");
  CHECK(::access((path + ".tmp." + std::to_string(::getpid())).c_str(), F_OK) != 0);

  // A failed save leaves the previous file untouched.
  CHECK_THROWS_WITH(save_safetensors(path, {{"a", Tensor::ones({1})}, {"a", Tensor::ones({1})}}),
                    Catch::Contains("tensor 'a' given twice"));
  CHECK_THROWS_WITH(save_safetensors(path, {{"__metadata__", Tensor::ones({1})}}),
                    Catch::Contains("not a valid tensor name"));
  const Tensor meta = Tensor::empty({2}, DType::F32, Device::meta());
  CHECK_THROWS_WITH(save_safetensors(path, {{"m", meta}}), Catch::Contains("tensor 'm'"));
  CHECK(load_safetensors(path)[0].first == "y");
  std::remove(path.c_str());

  const std::string nowhere = temp_path(kTemp + "no/such/dir/x.safetensors");
  CHECK_THROWS_WITH(save_safetensors(nowhere, {{"x", Tensor::ones({1})}}),
                    Catch::Contains(nowhere) && Catch::Contains("cannot create"));
}

TEST_CASE("a reader takes only the bytes of the tensor asked for", "[checkpoint]") {
  // What model.init_from relies on to hold one whole tensor at a time.
  const std::string path = temp_path(kTemp + "reader.safetensors");
  const Tensor a = Tensor::from_vector<float>({1, 2, 3, 4}, {2, 2});
  const Tensor b = Tensor::from_vector<float>({5, 6, 7}, {3});
  save_safetensors(path, {{"a", a}, {"b", b}});
  const merak::checkpoint::SafetensorsReader file(path);
  CHECK(file.names() == std::vector<std::string>{"a", "b"});
  CHECK(file.has("b"));
  CHECK_FALSE(file.has("c"));
  CHECK_THROWS_WITH(file.read("c"), Catch::Contains(path) && Catch::Contains("no tensor 'c'"));
  // Cut the file after a's data, once its header has been read: a still reads, b is named.
  const std::string whole = read_file(path);
  REQUIRE(::truncate(path.c_str(), off_t(whole.size() - b.nbytes())) == 0);
  CHECK(tensor_bytes(file.read("a")) == tensor_bytes(a));
  CHECK_THROWS_WITH(file.read("b"), Catch::Contains(path) && Catch::Contains("tensor 'b'"));
}

TEST_CASE("a writer streams declared tensors in order and publishes only when complete",
          "[checkpoint]") {
  using merak::checkpoint::SafetensorsWriter;
  const std::string path = temp_path(kTemp + "writer.safetensors");
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const Tensor a = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor b = Tensor::from_vector<int64_t>({7, -8}, {2});
  save_safetensors(path, {{"old", Tensor::ones({1})}});
  {
    SafetensorsWriter out(path, {{"a", DType::F32, {2, 3}}, {"b", DType::I64, {2}}});
    CHECK(::access(tmp.c_str(), F_OK) == 0);
    CHECK_THROWS_WITH(out.write(b), Catch::Contains(path) && Catch::Contains("tensor 'a'") &&
                                        Catch::Contains("declared"));
    out.write(a);
    // Dropped before commit: the temporary file goes, the old file stays.
  }
  CHECK(::access(tmp.c_str(), F_OK) != 0);
  CHECK(load_safetensors(path)[0].first == "old");
  {
    SafetensorsWriter out(path, {{"a", DType::F32, {2, 3}}, {"b", DType::I64, {2}}});
    out.write(a);
    CHECK_THROWS_WITH(out.commit(), Catch::Contains("only 1 of 2 tensors written"));
  }
  CHECK(load_safetensors(path)[0].first == "old");
  SafetensorsWriter out(path, {{"a", DType::F32, {2, 3}}, {"b", DType::I64, {2}}},
                        {{"format", "pt"}});
  out.write(a.transpose(0, 1).contiguous().transpose(0, 1));  // a strided view of the same values
  out.write(b);
  out.commit();
  std::map<std::string, std::string> meta;
  const auto t = load_safetensors(path, &meta);
  REQUIRE(t.size() == 2);
  CHECK(tensor_bytes(t[0].second) == tensor_bytes(a));
  CHECK(tensor_bytes(t[1].second) == tensor_bytes(b));
  CHECK(meta.at("format") == "pt");
  CHECK(::access(tmp.c_str(), F_OK) != 0);
}
