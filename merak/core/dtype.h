// Element types and the bf16/f16 <-> f32 conversions (round to nearest even).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

namespace merak {

// F64 is not a training type: it exists so gradient checks and references can run in double.
enum class DType : uint8_t { F32, BF16, F16, I32, I64, Bool, F64 };

size_t dtype_size(DType t);
const char* dtype_name(DType t);
DType dtype_from_name(const std::string& name);  // throws on an unknown name
inline bool is_floating(DType t) {
  return t == DType::F32 || t == DType::BF16 || t == DType::F16 || t == DType::F64;
}

// bf16: the top 16 bits of an f32, rounded to nearest even; NaN stays NaN.
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
inline float bf16_to_f32(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// IEEE half precision, round to nearest even, with subnormals, infinities and NaN.
uint16_t f32_to_f16(float f);
float f16_to_f32(uint16_t h);

// Maps a C++ type to its DType, for typed accessors.
template <typename T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::F32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::F64; };
template <> struct dtype_of<int32_t> { static constexpr DType value = DType::I32; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::I64; };
template <> struct dtype_of<bool> { static constexpr DType value = DType::Bool; };

}  // namespace merak
