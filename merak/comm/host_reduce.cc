#include "merak/comm/host_reduce.h"

#include <cmath>

namespace merak::comm {

namespace {

float reduce1(ReduceOp op, float a, float b) {
  if (op != ReduceOp::Max) return a + b;
  if (std::isnan(a) || std::isnan(b)) return NAN;
  return a > b ? a : b;
}

template <float (*ToF32)(uint16_t), uint16_t (*FromF32)(float)>
void reduce_16(ReduceOp op, const uint16_t* in, uint16_t* inout, int64_t n) {
  for (int64_t i = 0; i < n; ++i) inout[i] = FromF32(reduce1(op, ToF32(in[i]), ToF32(inout[i])));
}

template <float (*ToF32)(uint16_t), uint16_t (*FromF32)(float)>
void divide_16(uint16_t* p, int64_t n, float d) {
  for (int64_t i = 0; i < n; ++i) p[i] = FromF32(ToF32(p[i]) / d);
}

template <typename T>
void divide_plain(T* p, int64_t n, T d) {
  for (int64_t i = 0; i < n; ++i) p[i] /= d;
}

}  // namespace

void reduce_half(DType dtype, ReduceOp op, const void* in, void* inout, int64_t n) {
  auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  switch (dtype) {
    case DType::BF16: return reduce_16<bf16_to_f32, f32_to_bf16>(op, a, b, n);
    case DType::F16: return reduce_16<f16_to_f32, f32_to_f16>(op, a, b, n);
    default: MERAK_FAIL("reduce_half: ", dtype_name(dtype), " is not a 16-bit float type");
  }
}

void divide_in_place(DType dtype, void* data, int64_t n, int divisor) {
  switch (dtype) {
    case DType::F32: return divide_plain(static_cast<float*>(data), n, float(divisor));
    case DType::I32: return divide_plain(static_cast<int32_t*>(data), n, int32_t(divisor));
    case DType::I64: return divide_plain(static_cast<int64_t*>(data), n, int64_t(divisor));
    case DType::BF16:
      return divide_16<bf16_to_f32, f32_to_bf16>(static_cast<uint16_t*>(data), n, divisor);
    case DType::F16:
      return divide_16<f16_to_f32, f32_to_f16>(static_cast<uint16_t*>(data), n, divisor);
    default: MERAK_FAIL("divide_in_place: unsupported dtype ", dtype_name(dtype));
  }
}

}  // namespace merak::comm
