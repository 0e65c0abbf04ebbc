// The vector instructions the f32 GEMM (sgemm.cc) is written against, for the widest set the
// compiler targets (-march=native): AVX-512, or AVX2 with FMA. Each set is a struct naming its
// register of kLanes floats, the handful of operations the register tile and the packing use,
// and its tile and cache blocking (the tile is kRows rows of C by two registers of columns).
// MERAK_SGEMM_SIMD is 1 where one of them is available, and simd::Native is that one.
#pragma once

#include <cstdint>

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#define MERAK_SGEMM_SIMD 1
#include <immintrin.h>

#include <algorithm>
#else
#define MERAK_SGEMM_SIMD 0
#endif

// GCC 12's AVX-512 intrinsics start unpacks and shuffles from _mm512_undefined_ps(), which,
// once inlined into the transposes below, it reports as maybe used uninitialized (GCC 12
// only, and false; every packing function drew it).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace merak::cpu::simd {

#if defined(__AVX512F__)

struct Avx512 {
  using Reg = __m512;
  static constexpr int64_t kLanes = 16;
  // 12 rows x 32 columns: 24 of the 32 registers accumulate; a depth step loads 2 vectors of B
  // and broadcasts 12 values of A for 24 FMAs.
  static constexpr int64_t kRows = 12;
  // A packed block of B, 1024 deep x 128 columns (512 KiB), stays in a 1 MiB L2; packed A comes
  // in blocks of 264 rows (22 panels). Deep blocks leave a product of depth K fewer passes over
  // C (each adds into C): on a Zen 5, against 256 deep x 512 columns, GPT-2 124M's products
  // ran up to 13% faster at two threads with the weights coming from memory (7% the whole
  // training step); 768, 1536 or 2048 deep were within the noise of 1024.
  static constexpr int64_t kDepth = 1024;
  static constexpr int64_t kBlockCols = 128;
  static constexpr int64_t kBlockRows = 264;

  // The lanes of a vector that hold the first n (<= 0: none) of the values left.
  static __mmask16 lanes(int64_t n) {
    if (n <= 0) return 0;
    return n >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << n) - 1);
  }
  static Reg zero() { return _mm512_setzero_ps(); }
  static Reg set1(float x) { return _mm512_set1_ps(x); }
  static Reg fmadd(Reg a, Reg b, Reg c) { return _mm512_fmadd_ps(a, b, c); }
  static Reg mul(Reg a, Reg b) { return _mm512_mul_ps(a, b); }
  static Reg load_aligned(const float* p) { return _mm512_load_ps(p); }
  static void store_aligned(float* p, Reg v) { _mm512_store_ps(p, v); }
  // The first n values (the other lanes zero); memory past them is not touched.
  static Reg load(const float* p, int64_t n) {
    return n >= kLanes ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(lanes(n), p);
  }
  static void store(float* p, int64_t n, Reg v) {
    if (n >= kLanes) _mm512_storeu_ps(p, v);
    else _mm512_mask_storeu_ps(p, lanes(n), v);
  }

  // Rows [0, rows) of src (row stride ld), their first `cols` (<= 16) values, transposed into
  // dst: value i of every row goes to dst + i * ld_dst, its first `keep` lanes (lanes of rows
  // past `rows` hold zero). Packing an operand that runs along the other dimension than the
  // tile reads it goes through this: a 16 x 16 block in registers, not one value at a time.
  __attribute__((always_inline)) static inline void transpose(const float* src, int64_t ld,
                                                              int64_t rows, int64_t cols,
                                                              float* dst, int64_t ld_dst,
                                                              int64_t keep) {
    __m512 r[16], t[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) r[i] = i < rows ? load(src + i * ld, cols) : zero();
#pragma GCC unroll 8
    for (int i = 0; i < 16; i += 2) {  // pairs of rows interleaved by value
      t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
      t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
#pragma GCC unroll 4
    for (int i = 0; i < 16; i += 4) {  // then by pairs of values: 4 rows per 128-bit lane
      r[i] = unpacklo_pairs(t[i], t[i + 2]);
      r[i + 1] = unpackhi_pairs(t[i], t[i + 2]);
      r[i + 2] = unpacklo_pairs(t[i + 1], t[i + 3]);
      r[i + 3] = unpackhi_pairs(t[i + 1], t[i + 3]);
    }
#pragma GCC unroll 2
    for (int i = 0; i < 16; i += 8)  // then the 128-bit lanes of 8 rows, and of all 16
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) {
        t[i + j] = _mm512_shuffle_f32x4(r[i + j], r[i + 4 + j], 0x88);
        t[i + 4 + j] = _mm512_shuffle_f32x4(r[i + j], r[i + 4 + j], 0xdd);
      }
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
      const __m512 lo = _mm512_shuffle_f32x4(t[j], t[8 + j], 0x88),
                   hi = _mm512_shuffle_f32x4(t[j], t[8 + j], 0xdd);
      if (j < cols) store(dst + j * ld_dst, keep, lo);
      if (8 + j < cols) store(dst + (8 + j) * ld_dst, keep, hi);
    }
  }

 private:
  static Reg unpacklo_pairs(Reg a, Reg b) {
    return _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)));
  }
  static Reg unpackhi_pairs(Reg a, Reg b) {
    return _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)));
  }
};
using Native = Avx512;

#elif defined(__AVX2__) && defined(__FMA__)

struct Avx2 {
  using Reg = __m256;
  static constexpr int64_t kLanes = 8;
  // 6 rows x 16 columns: 12 of the 16 registers accumulate, 2 hold B and one the broadcast;
  // a depth step loads 2 vectors of B and broadcasts 6 values of A for 12 FMAs.
  static constexpr int64_t kRows = 6;
  // A packed block of B 256 deep x 512 columns (512 KiB) and a block of packed A of 132 rows
  // (22 panels, 132 KiB). Measured on a Zen 3 (512 KiB of L2 a core) at GPT-2 124M's products
  // against 256 columns (7% slower in all), 1024 (13%), and 264 or 66 rows (no better).
  static constexpr int64_t kDepth = 256;
  static constexpr int64_t kBlockCols = 512;
  static constexpr int64_t kBlockRows = 132;

  static __m256i lanes(int64_t n) {
    const int32_t k = int32_t(std::clamp<int64_t>(n, 0, kLanes));
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static Reg zero() { return _mm256_setzero_ps(); }
  static Reg set1(float x) { return _mm256_set1_ps(x); }
  static Reg fmadd(Reg a, Reg b, Reg c) { return _mm256_fmadd_ps(a, b, c); }
  static Reg mul(Reg a, Reg b) { return _mm256_mul_ps(a, b); }
  static Reg load_aligned(const float* p) { return _mm256_load_ps(p); }
  static void store_aligned(float* p, Reg v) { _mm256_store_ps(p, v); }
  static Reg load(const float* p, int64_t n) {
    return n >= kLanes ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, lanes(n));
  }
  // Masked stores are slow on some AVX2 CPUs (AMD's): a packed A panel's 6 values a depth go
  // out as 4 + 2.
  static void store(float* p, int64_t n, Reg v) {
    if (n >= kLanes) {
      _mm256_storeu_ps(p, v);
    } else if (n == 6) {
      _mm_storeu_ps(p, _mm256_castps256_ps128(v));
      _mm_storel_pi(reinterpret_cast<__m64*>(p + 4), _mm256_extractf128_ps(v, 1));
    } else {
      _mm256_maskstore_ps(p, lanes(n), v);
    }
  }

  // As Avx512::transpose, for an 8 x 8 block.
  __attribute__((always_inline)) static inline void transpose(const float* src, int64_t ld,
                                                              int64_t rows, int64_t cols,
                                                              float* dst, int64_t ld_dst,
                                                              int64_t keep) {
    __m256 r[8], t[8];
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) r[i] = i < rows ? load(src + i * ld, cols) : zero();
#pragma GCC unroll 4
    for (int i = 0; i < 8; i += 2) {  // rows a, b: a0 b0 a1 b1 | a4 b4 a5 b5 and a2 b2 ...
      t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
      t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
#pragma GCC unroll 2
    for (int i = 0; i < 8; i += 4) {  // four rows' value v | v + 4, for v = 0, 1, 2, 3
      r[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
      r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
      r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
      r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
    }
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {  // the halves of rows 0-3 and 4-7 joined
      if (j < cols) store(dst + j * ld_dst, keep, _mm256_permute2f128_ps(r[j], r[4 + j], 0x20));
      if (4 + j < cols)
        store(dst + (4 + j) * ld_dst, keep, _mm256_permute2f128_ps(r[j], r[4 + j], 0x31));
    }
  }
};
using Native = Avx2;

#endif

}  // namespace merak::cpu::simd
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
