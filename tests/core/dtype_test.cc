#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include "merak/core/dtype.h"

using namespace merak;

TEST_CASE("bf16 rounds to nearest even and round-trips its own values", "[core][dtype]") {
  CHECK(f32_to_bf16(1.0f) == 0x3f80);
  CHECK(bf16_to_f32(0x3f80) == 1.0f);
  // 1 + 2^-8 is exactly halfway between bf16 1.0 and 1.0078125: ties go to even (1.0).
  CHECK(bf16_to_f32(f32_to_bf16(1.0f + std::ldexp(1.0f, -8))) == 1.0f);
  // 1 + 3*2^-8 is halfway between 1.0078125 (odd) and 1.015625 (even).
  CHECK(bf16_to_f32(f32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8))) == 1.015625f);
  // Just above halfway rounds up.
  CHECK(bf16_to_f32(f32_to_bf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20))) ==
        1.0078125f);
  CHECK(std::isnan(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  CHECK(std::isinf(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::infinity()))));
  for (uint32_t h = 0; h < 0x7f80; h += 7) CHECK(f32_to_bf16(bf16_to_f32(uint16_t(h))) == h);
}

TEST_CASE("f16 conversion: normals, ties to even, subnormals, overflow", "[core][dtype]") {
  CHECK(f32_to_f16(1.0f) == 0x3c00);
  CHECK(f16_to_f32(0x3c00) == 1.0f);
  CHECK(f16_to_f32(0x7bff) == 65504.0f);                    // largest normal
  CHECK(f32_to_f16(65520.0f) == 0x7c00);                    // rounds to infinity
  CHECK(f32_to_f16(65519.0f) == 0x7bff);
  CHECK(f16_to_f32(0x0001) == std::ldexp(1.0f, -24));       // smallest subnormal
  CHECK(f32_to_f16(std::ldexp(1.0f, -25)) == 0x0000);       // halfway to 0: even (0)
  CHECK(f32_to_f16(std::ldexp(1.5f, -25)) == 0x0001);       // above halfway
  CHECK(f32_to_f16(std::ldexp(3.0f, -25)) == 0x0002);       // 1.5 ulp: tie to even (2)
  CHECK(f32_to_f16(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);  // tie to even
  CHECK(f32_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3c02);
  CHECK(f32_to_f16(-2.0f) == 0xc000);
  CHECK(std::isnan(f16_to_f32(f32_to_f16(std::nanf("")))));
  // Every finite f16 value survives f16 -> f32 -> f16.
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    CHECK(f32_to_f16(f16_to_f32(uint16_t(h))) == h);
    CHECK(f32_to_f16(f16_to_f32(uint16_t(h | 0x8000))) == (h | 0x8000));
  }
}

TEST_CASE("dtype names and sizes", "[core][dtype]") {
  CHECK(dtype_size(DType::BF16) == 2);
  CHECK(dtype_size(DType::I64) == 8);
  CHECK(dtype_from_name("bf16") == DType::BF16);
  CHECK_THROWS_WITH(dtype_from_name("f8"), Catch::Contains("unknown dtype 'f8'"));
}
