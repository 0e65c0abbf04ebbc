#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "merak/core/philox.h"

using namespace merak;

TEST_CASE("Philox4x32-10 matches the published known-answer vectors", "[core][rng]") {
  // Random123's kat_vectors for philox4x32_10.
  auto r = philox4x32({0, 0, 0, 0}, 0);
  CHECK(r == std::array<uint32_t, 4>{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u});
  r = philox4x32({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
                 0xffffffffffffffffull);
  CHECK(r == std::array<uint32_t, 4>{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu});
  r = philox4x32({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u},
                 (uint64_t(0x299f31d0u) << 32) | 0xa4093822u);
  CHECK(r == std::array<uint32_t, 4>{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u});
}

TEST_CASE("philox_run draws the blocks philox_at draws, one by one", "[core][rng]") {
  const uint64_t key = philox_key(7, "attention dropout:blocks.0.attn");
  // Runs shorter than the vector path's 8 blocks, multiples of it and with remainders; one
  // whose counters carry into the index's high word; a stream with both words set.
  for (const uint64_t first : {uint64_t(0), uint64_t(0xfffffff0u), uint64_t(123456789)})
    for (const int64_t n : {0, 1, 15, 16, 17, 50}) {
      const uint64_t stream = (uint64_t(3) << 32) | 9;
      std::vector<std::array<uint32_t, 4>> run(size_t(n) + 1, {1, 2, 3, 4});
      philox_run(key, first, stream, n, run.data());
      for (int64_t i = 0; i < n; ++i)
        REQUIRE(run[size_t(i)] == philox_at(key, first + uint64_t(i), stream));
      CHECK(run[size_t(n)] == std::array<uint32_t, 4>{1, 2, 3, 4});  // nothing written past n
    }
}

TEST_CASE("a slice drawn alone equals the same slice of the whole tensor", "[core][rng]") {
  const uint64_t key = philox_key(1234, "blocks.3.mlp.fc1.weight");
  Tensor full = Tensor::empty({12, 10});
  fill_normal(full, key, 0.0, 0.02);
  // Column shard (as tensor parallelism splits fc1) and a row shard.
  Tensor cols = Tensor::empty({12, 4});
  fill_normal(cols, key, 0.0, 0.02, SliceOf{{12, 10}, {0, 6}});
  CHECK(cols.to_vector<float>() == full.narrow(1, 6, 4).contiguous().to_vector<float>());
  Tensor rows = Tensor::empty({5, 10});
  fill_normal(rows, key, 0.0, 0.02, SliceOf{{12, 10}, {7, 0}});
  CHECK(rows.to_vector<float>() == full.narrow(0, 7, 5).contiguous().to_vector<float>());
  // Other names and seeds give other values.
  Tensor other = Tensor::empty({12, 10});
  fill_normal(other, philox_key(1234, "blocks.3.mlp.fc2.weight"), 0.0, 0.02);
  CHECK(other.to_vector<float>() != full.to_vector<float>());
  CHECK(philox_key(1, "w") != philox_key(2, "w"));
  CHECK_THROWS_WITH(fill_normal(rows, key, 0, 1, SliceOf{{12, 10}, {8, 0}}),
                    Catch::Contains("outside"));
}

TEST_CASE("normal and uniform draws have the right moments", "[core][rng]") {
  const int64_t n = 200000;
  Tensor t = Tensor::empty({n});
  fill_normal(t, philox_key(7, "x"), 1.0, 2.0);
  double s = 0, s2 = 0;
  for (float v : t.to_vector<float>()) { s += v; s2 += double(v) * v; }
  const double mean = s / n, var = s2 / n - mean * mean;
  CHECK(std::fabs(mean - 1.0) < 0.02);
  CHECK(std::fabs(std::sqrt(var) - 2.0) < 0.02);
  Tensor u = Tensor::empty({n}, DType::F64);
  fill_uniform(u, philox_key(7, "u"), -1.0, 3.0);
  double lo = 1e9, hi = -1e9, su = 0;
  for (double v : u.to_vector<double>()) { lo = std::min(lo, v); hi = std::max(hi, v); su += v; }
  CHECK(lo >= -1.0);
  CHECK(hi < 3.0);
  CHECK(std::fabs(su / n - 1.0) < 0.02);
  Tensor b = Tensor::empty({8}, DType::BF16);
  fill_normal(b, philox_key(7, "x"), 1.0, 2.0);  // same key: bf16 rounding of the f32 draws
  const auto f32 = t.narrow(0, 0, 8).contiguous().to_vector<float>();
  for (int i = 0; i < 8; ++i)
    CHECK(bf16_to_f32(static_cast<uint16_t*>(b.raw_data())[i]) == bf16_to_f32(f32_to_bf16(f32[i])));
}
