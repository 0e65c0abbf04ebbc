#include "merak/core/philox.h"

#include <cmath>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

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

namespace {

constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;

#if defined(__AVX2__)
// High words of the eight products a[l] * m (m the same in every 32-bit lane).
inline __m256i mul_hi(__m256i a, __m256i m) {
  const __m256i even = _mm256_mul_epu32(a, m);                        // lanes 0, 2, 4, 6
  const __m256i odd = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), m);  // lanes 1, 3, 5, 7
  return _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xAA);
}

// philox4x32's rounds on eight counters at a time; returns how many blocks it wrote (n rounded
// down to a multiple of 8).
int64_t philox_run_avx2(uint64_t key, uint64_t first, uint64_t stream, int64_t n,
                        std::array<uint32_t, 4>* out) {
  const __m256i mul0 = _mm256_set1_epi32(int(kMul0)), mul1 = _mm256_set1_epi32(int(kMul1));
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    alignas(32) uint32_t w[4][8];
    for (int l = 0; l < 8; ++l) {
      const uint64_t index = first + uint64_t(i + l);
      w[0][l] = uint32_t(index);
      w[1][l] = uint32_t(index >> 32);
    }
    __m256i c0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(w[0]));
    __m256i c1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(w[1]));
    __m256i c2 = _mm256_set1_epi32(int(uint32_t(stream)));
    __m256i c3 = _mm256_set1_epi32(int(uint32_t(stream >> 32)));
    uint32_t k0 = uint32_t(key), k1 = uint32_t(key >> 32);
    for (int round = 0; round < 10; ++round) {
      const __m256i hi0 = mul_hi(c0, mul0), lo0 = _mm256_mullo_epi32(c0, mul0);
      const __m256i hi1 = mul_hi(c2, mul1), lo1 = _mm256_mullo_epi32(c2, mul1);
      c0 = _mm256_xor_si256(_mm256_xor_si256(hi1, c1), _mm256_set1_epi32(int(k0)));
      c2 = _mm256_xor_si256(_mm256_xor_si256(hi0, c3), _mm256_set1_epi32(int(k1)));
      c1 = lo1;
      c3 = lo0;
      k0 += kWeyl0;
      k1 += kWeyl1;
    }
    _mm256_store_si256(reinterpret_cast<__m256i*>(w[0]), c0);
    _mm256_store_si256(reinterpret_cast<__m256i*>(w[1]), c1);
    _mm256_store_si256(reinterpret_cast<__m256i*>(w[2]), c2);
    _mm256_store_si256(reinterpret_cast<__m256i*>(w[3]), c3);
    for (int l = 0; l < 8; ++l) out[i + l] = {w[0][l], w[1][l], w[2][l], w[3][l]};
  }
  return i;
}
#endif

}  // namespace

std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> c, uint64_t key) {
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

void philox_run(uint64_t key, uint64_t first, uint64_t stream, int64_t n,
                std::array<uint32_t, 4>* out) {
  int64_t done = 0;
#if defined(__AVX2__)
  done = philox_run_avx2(key, first, stream, n, out);
#endif
  for (int64_t i = done; i < n; ++i) out[i] = philox_at(key, first + uint64_t(i), stream);
}

namespace {
thread_local RngPlace t_rng_place;
}

RngPlace rng_place() { return t_rng_place; }
void set_rng_place(const RngPlace& place) { t_rng_place = place; }
uint64_t rng_stream() { return t_rng_place.stream; }
void set_rng_stream(uint64_t stream) { t_rng_place = RngPlace{stream, 0, 0}; }

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
