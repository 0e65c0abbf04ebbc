#include "merak/core/philox.h"

#include <cmath>

#include "merak/core/parallel.h"

namespace merak {

uint64_t philox_key(uint64_t seed, std::string_view name) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : name) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  // splitmix64 of (seed ^ h) so nearby seeds give unrelated keys.
  uint64_t z = seed * 0x9e3779b97f4a7c15ull ^ h;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> c, uint64_t key) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  uint32_t k0 = uint32_t(key), k1 = uint32_t(key >> 32);
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = uint64_t(kMul0) * c[0];
    const uint64_t p1 = uint64_t(kMul1) * c[2];
    c = {uint32_t(p1 >> 32) ^ c[1] ^ k0, uint32_t(p1), uint32_t(p0 >> 32) ^ c[3] ^ k1,
         uint32_t(p0)};
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return c;
}

namespace {
thread_local uint64_t t_rng_stream = 0;
}

uint64_t rng_stream() { return t_rng_stream; }
void set_rng_stream(uint64_t stream) { t_rng_stream = stream; }

float philox_uniform(uint64_t key, uint64_t index, uint64_t stream) {
  return uniform01(philox_at(key, index, stream)[0]);
}

float philox_normal(uint64_t key, uint64_t index, uint64_t stream) {
  const auto r = philox_at(key, index, stream);
  // u1 in (0, 1] so the log is finite.
  const double u1 = (double(r[0] >> 8) + 1.0) / 16777216.0;
  const double u2 = double(r[1] >> 8) / 16777216.0;
  return float(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}

namespace {

// Visits each element of `t` with its global flat index in the full tensor.
template <typename Draw>
void fill_with(const Tensor& t, const SliceOf& slice, Draw draw) {
  if (t.is_meta()) return;
  MERAK_CHECK(t.is_contiguous(), "random fill needs a contiguous tensor, got ", t.str());
  const Shape& shape = t.shape();
  const Shape full = slice.full_shape.empty() ? shape : slice.full_shape;
  const Shape offsets = slice.offsets.empty() ? Shape(shape.size(), 0) : slice.offsets;
  MERAK_CHECK(full.size() == shape.size() && offsets.size() == shape.size(),
              "random fill: slice rank does not match ", t.str());
  for (size_t d = 0; d < shape.size(); ++d)
    MERAK_CHECK(offsets[d] >= 0 && offsets[d] + shape[d] <= full[d], "random fill: slice ",
                shape_str(shape), " at ", shape_str(offsets), " outside ", shape_str(full));
  const Shape full_strides = contiguous_strides(full);
  const int64_t rank = int64_t(shape.size());
  const int64_t inner = rank ? shape.back() : 1;
  const int64_t rows = inner ? t.numel() / inner : 0;
  parallel_for(0, rows, 64, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      // Global index of the row's first element.
      int64_t rem = r, global = 0;
      for (int64_t d = rank - 2; d >= 0; --d) {
        global += (offsets[d] + rem % shape[d]) * full_strides[d];
        rem /= shape[d];
      }
      if (rank) global += offsets[rank - 1];
      for (int64_t i = 0; i < inner; ++i) draw(r * inner + i, uint64_t(global + i));
    }
  });
}

template <typename F>
void store_floats(const Tensor& t, const SliceOf& slice, F value_at) {
  void* p = t.is_meta() ? nullptr : t.raw_data();
  switch (t.dtype()) {
    case DType::F32:
      fill_with(t, slice, [&](int64_t i, uint64_t g) { static_cast<float*>(p)[i] = value_at(g); });
      break;
    case DType::F64:
      fill_with(t, slice, [&](int64_t i, uint64_t g) { static_cast<double*>(p)[i] = value_at(g); });
      break;
    case DType::BF16:
      fill_with(t, slice, [&](int64_t i, uint64_t g) {
        static_cast<uint16_t*>(p)[i] = f32_to_bf16(value_at(g));
      });
      break;
    case DType::F16:
      fill_with(t, slice, [&](int64_t i, uint64_t g) {
        static_cast<uint16_t*>(p)[i] = f32_to_f16(value_at(g));
      });
      break;
    default: MERAK_FAIL("random fill needs a floating tensor, got ", t.str());
  }
}

}  // namespace

void fill_uniform(const Tensor& t, uint64_t key, double lo, double hi, const SliceOf& slice) {
  store_floats(t, slice, [&](uint64_t g) {
    return float(lo + (hi - lo) * double(philox_uniform(key, g)));
  });
}

void fill_normal(const Tensor& t, uint64_t key, double mean, double stddev, const SliceOf& slice) {
  store_floats(t, slice, [&](uint64_t g) {
    return float(mean + stddev * double(philox_normal(key, g)));
  });
}

}  // namespace merak
