#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "merak/comm/host_reduce.h"

using namespace merak;
using namespace merak::comm;

TEST_CASE("bf16 and f16 reduce through f32 and round to nearest even", "[comm][reduce]") {
  // bf16 keeps 8 significant bits: 256 + 1 is a tie between 256 and 258 and goes to 256 (even);
  // 256 + 3 = 259 rounds to 260.
  std::vector<uint16_t> in = {f32_to_bf16(1), f32_to_bf16(3), f32_to_bf16(-2.5f)};
  std::vector<uint16_t> io = {f32_to_bf16(256), f32_to_bf16(256), f32_to_bf16(1.25f)};
  reduce_half(DType::BF16, ReduceOp::Sum, in.data(), io.data(), 3);
  CHECK(bf16_to_f32(io[0]) == 256.0f);
  CHECK(bf16_to_f32(io[1]) == 260.0f);
  CHECK(bf16_to_f32(io[2]) == -1.25f);

  // f16 has 11 significant bits: 2048 + 1 ties to 2048, 2048 + 3 goes to 2052.
  std::vector<uint16_t> hin = {f32_to_f16(1), f32_to_f16(3), f32_to_f16(0.5f)};
  std::vector<uint16_t> hio = {f32_to_f16(2048), f32_to_f16(2048), f32_to_f16(0.25f)};
  reduce_half(DType::F16, ReduceOp::Sum, hin.data(), hio.data(), 3);
  CHECK(f16_to_f32(hio[0]) == 2048.0f);
  CHECK(f16_to_f32(hio[1]) == 2052.0f);
  CHECK(f16_to_f32(hio[2]) == 0.75f);
}

TEST_CASE("half max picks the larger and propagates NaN", "[comm][reduce]") {
  std::vector<uint16_t> in = {f32_to_f16(-1), f32_to_f16(7), f32_to_f16(NAN), f32_to_f16(2)};
  std::vector<uint16_t> io = {f32_to_f16(-3), f32_to_f16(5), f32_to_f16(1), f32_to_f16(NAN)};
  reduce_half(DType::F16, ReduceOp::Max, in.data(), io.data(), 4);
  CHECK(f16_to_f32(io[0]) == -1.0f);
  CHECK(f16_to_f32(io[1]) == 7.0f);
  CHECK(std::isnan(f16_to_f32(io[2])));
  CHECK(std::isnan(f16_to_f32(io[3])));
  CHECK_THROWS_WITH(reduce_half(DType::F32, ReduceOp::Sum, in.data(), io.data(), 1),
                    Catch::Contains("not a 16-bit float type"));
}

TEST_CASE("avg divides floats exactly and integers toward zero", "[comm][reduce]") {
  std::vector<float> f = {9, -3};
  divide_in_place(DType::F32, f.data(), 2, 4);
  CHECK(f == std::vector<float>{2.25f, -0.75f});
  std::vector<int32_t> i = {9, -9, 7};
  divide_in_place(DType::I32, i.data(), 3, 4);
  CHECK(i == std::vector<int32_t>{2, -2, 1});
  std::vector<int64_t> l = {int64_t(3) << 40};
  divide_in_place(DType::I64, l.data(), 1, 8);
  CHECK(l[0] == int64_t(3) << 37);
  std::vector<uint16_t> b = {f32_to_bf16(5)};
  divide_in_place(DType::BF16, b.data(), 1, 2);
  CHECK(bf16_to_f32(b[0]) == 2.5f);
}
