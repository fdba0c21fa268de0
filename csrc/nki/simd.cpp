#include "simd.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#include "kernels/simd.h"
#include "simd_transpose.h"

namespace neuron::nki::simd {

namespace {

inline float bf16_to_f32(uint16_t h) {
  return std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
}

inline float ld_bf16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return bf16_to_f32(h);
}
inline float ld_f32(const uint8_t* p) {
  float f;
  std::memcpy(&f, p, 4);
  return f;
}

#if defined(__x86_64__) && defined(__GNUC__)
#define NKI_SIMD_AVX2 1
// The same loops as the portable versions; the target attribute lets -O3 vectorise them with
// 256-bit FMAs.
__attribute__((target("avx2,fma"))) void axpy_f32_avx2(float* __restrict y, float a,
                                                       const float* __restrict x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}
__attribute__((target("avx2,fma"))) void axpy_bf16_avx2(float* __restrict y, float a,
                                                        const uint16_t* __restrict x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * bf16_to_f32(x[i]);
}


// Scalar columns j0..j1 over every k (fused multiply-adds, the axpy loops' arithmetic).
template <bool BF16>
__attribute__((target("avx2,fma"))) void gemv_cols_scalar_fma(float* acc, const float* coef,
                                                              const uint8_t* w, int64_t ks,
                                                              int64_t js, int64_t K, int64_t j0,
                                                              int64_t j1) {
  for (int64_t j = j0; j < j1; ++j) {
    float a = 0.0f;
    const uint8_t* p = w + j * js;
    for (int64_t k = 0; k < K; ++k)
      a = std::fma(coef[k], BF16 ? ld_bf16(p + k * ks) : ld_f32(p + k * ks), a);
    acc[j] = a;
  }
}

__attribute__((target("avx2,fma"))) inline __m256 cvt_bf16x8(__m128i v) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(v), 16));
}

// 8 row-contiguous elements of w at p as fp32.
template <bool BF16>
__attribute__((target("avx2,fma"))) inline __m256 load8(const uint8_t* p) {
  if constexpr (BF16)
    return cvt_bf16x8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  else
    return _mm256_loadu_ps(reinterpret_cast<const float*>(p));
}

// Row-contiguous w (js = element size): 64 columns per pass with 8 accumulators, then 8 at a
// time, then scalar.
template <bool BF16>
__attribute__((target("avx2,fma"))) void gemv_rows_avx2(float* acc, const float* coef,
                                                        const uint8_t* w, int64_t ks, int64_t K,
                                                        int64_t n) {
  constexpr int64_t es = BF16 ? 2 : 4;
  int64_t j = 0;
  for (; j + 64 <= n; j += 64) {
    __m256 a[8];
    for (int r = 0; r < 8; ++r) a[r] = _mm256_setzero_ps();
    const uint8_t* p = w + j * es;
    for (int64_t k = 0; k < K; ++k, p += ks) {
      const __m256 c = _mm256_set1_ps(coef[k]);
      for (int r = 0; r < 8; ++r) a[r] = _mm256_fmadd_ps(c, load8<BF16>(p + r * 8 * es), a[r]);
    }
    for (int r = 0; r < 8; ++r) _mm256_storeu_ps(acc + j + r * 8, a[r]);
  }
  for (; j + 8 <= n; j += 8) {
    __m256 a = _mm256_setzero_ps();
    const uint8_t* p = w + j * es;
    for (int64_t k = 0; k < K; ++k, p += ks)
      a = _mm256_fmadd_ps(_mm256_set1_ps(coef[k]), load8<BF16>(p), a);
    _mm256_storeu_ps(acc + j, a);
  }
  gemv_cols_scalar_fma<BF16>(acc, coef, w, ks, es, K, j, n);
}

// Column-contiguous bf16 (ks = 2, a [n, K] row-major matrix read as its transpose): blocks of
// B x 8 columns, 8 k at a time through register transposes; every column's terms still add in
// k order. The k tail (K % 8) finishes each column in scalar.
// The rows are short (K elements each) and far apart, too short for the hardware prefetchers:
// while a block runs, the rows of the next `next_rows` columns are prefetched, spread over its
// k steps.
template <int B>
__attribute__((target("avx2,fma"))) void gemv_colsT_block(float* acc, const float* coef,
                                                          const uint8_t* w, int64_t js, int64_t K,
                                                          int64_t j, int64_t next_rows) {
  __m256 a[B];
  for (int b = 0; b < B; ++b) a[b] = _mm256_setzero_ps();
  const int64_t K8 = K / 8 * 8;
  const int64_t lines_per_row = (K * 2 + 63) / 64;
  const int64_t lines = next_rows * lines_per_row;
  const int64_t steps = std::max<int64_t>(1, K8 / 8);
  const int64_t per_step = (lines + steps - 1) / steps;
  const uint8_t* next = w + (j + B * 8) * js;
  int64_t line = 0;
  for (int64_t k = 0; k < K8; k += 8) {
    for (int64_t q = 0; q < per_step && line < lines; ++q, ++line)
      _mm_prefetch(reinterpret_cast<const char*>(next + (line / lines_per_row) * js +
                                                 (line % lines_per_row) * 64),
                   _MM_HINT_T0);
    __m256 c[8];
    for (int t = 0; t < 8; ++t) c[t] = _mm256_set1_ps(coef[k + t]);
    for (int b = 0; b < B; ++b) {
      __m128i r[8], o[8];
      const uint8_t* p = w + (j + b * 8) * js + k * 2;
      for (int i = 0; i < 8; ++i) r[i] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i * js));
      transpose8x8_epi16(r, o);
      for (int t = 0; t < 8; ++t) a[b] = _mm256_fmadd_ps(c[t], cvt_bf16x8(o[t]), a[b]);
    }
  }
  for (int b = 0; b < B; ++b) {
    float* out = acc + j + b * 8;
    _mm256_storeu_ps(out, a[b]);
    for (int i = 0; i < 8; ++i) {
      float x = out[i];
      const uint8_t* p = w + (j + b * 8 + i) * js;
      for (int64_t k = K8; k < K; ++k) x = std::fma(coef[k], ld_bf16(p + k * 2), x);
      out[i] = x;
    }
  }
}

__attribute__((target("avx2,fma"))) void gemv_colsT_bf16_avx2(float* acc, const float* coef,
                                                              const uint8_t* w, int64_t js,
                                                              int64_t K, int64_t n) {
  int64_t j = 0;
  for (; j + 32 <= n; j += 32)
    gemv_colsT_block<4>(acc, coef, w, js, K, j, std::min<int64_t>(32, n - j - 32));
  for (; j + 8 <= n; j += 8)
    gemv_colsT_block<1>(acc, coef, w, js, K, j, std::min<int64_t>(8, n - j - 8));
  gemv_cols_scalar_fma<true>(acc, coef, w, 2, js, K, j, n);
}

// R row-contiguous GEMVs sharing w (8 columns per pass): every loaded w vector feeds the R
// accumulators; each (row, column) is the chain gemv_rows_avx2 computes for that row.
template <bool BF16, int R>
__attribute__((target("avx2,fma"))) void gemv_multi_rows_avx2(float* acc, int64_t lda,
                                                              const float* coef, int64_t ldc,
                                                              const uint8_t* w, int64_t ks,
                                                              int64_t K, int64_t n) {
  constexpr int64_t es = BF16 ? 2 : 4;
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    __m256 a[R];
    for (int r = 0; r < R; ++r) a[r] = _mm256_setzero_ps();
    const uint8_t* p = w + j * es;
    for (int64_t k = 0; k < K; ++k, p += ks) {
      const __m256 x = load8<BF16>(p);
      for (int r = 0; r < R; ++r) a[r] = _mm256_fmadd_ps(_mm256_set1_ps(coef[r * ldc + k]), x, a[r]);
    }
    for (int r = 0; r < R; ++r) _mm256_storeu_ps(acc + r * lda + j, a[r]);
  }
  for (int r = 0; r < R; ++r)
    gemv_cols_scalar_fma<BF16>(acc + r * lda, coef + r * ldc, w, ks, es, K, j, n);
}

void gemv_bf16_avx2(float* acc, const float* coef, const uint8_t* w, int64_t ks, int64_t js,
                    int64_t K, int64_t n) {
  if (js == 2)
    gemv_rows_avx2<true>(acc, coef, w, ks, K, n);
  else if (ks == 2)
    gemv_colsT_bf16_avx2(acc, coef, w, js, K, n);
  else
    gemv_cols_scalar_fma<true>(acc, coef, w, ks, js, K, 0, n);
}
void gemv_f32_avx2(float* acc, const float* coef, const uint8_t* w, int64_t ks, int64_t js,
                   int64_t K, int64_t n) {
  if (js == 4)
    gemv_rows_avx2<false>(acc, coef, w, ks, K, n);
  else
    gemv_cols_scalar_fma<false>(acc, coef, w, ks, js, K, 0, n);
}
// AVX-512 version of the column-contiguous bf16 GEMV: 16 columns x 32 k per step. Each column's
// 32 k values are one 64-byte load; a 16 x 16 transpose of 32-bit lanes gives, per k pair, the
// 16 columns' (k, k + 1) elements, and a bf16 is the top half of an fp32, so the even element
// is the lane shifted left by 16 and the odd one the lane with its low half cleared. The terms
// still add in k order, one FMA each: the same bits as the AVX2 and portable paths.
#define NKI_SIMD_AVX512 1
// GCC 12 reports the undefined pass-through operand inside its AVX-512 unpack intrinsics.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#define NKI_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx2,fma")))

NKI_AVX512 inline void transpose16x16_epi32(__m512i r[16]) {
  __m512i t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  // r[4g + c], 128-bit lane L: rows 4g..4g+3 of column 4L + c.
  for (int c = 0; c < 4; ++c) {
    const __m512i s0 = _mm512_shuffle_i32x4(r[c], r[4 + c], 0x88);
    const __m512i s1 = _mm512_shuffle_i32x4(r[c], r[4 + c], 0xDD);
    const __m512i s2 = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0x88);
    const __m512i s3 = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0xDD);
    t[c] = _mm512_shuffle_i32x4(s0, s2, 0x88);
    t[4 + c] = _mm512_shuffle_i32x4(s1, s3, 0x88);
    t[8 + c] = _mm512_shuffle_i32x4(s0, s2, 0xDD);
    t[12 + c] = _mm512_shuffle_i32x4(s1, s3, 0xDD);
  }
  for (int i = 0; i < 16; ++i) r[i] = t[i];
}

// One 16-column block of a column-contiguous bf16 GEMV: acc[0, 16) for the columns at w, js bytes
// apart, against coef.
struct Lane {
  float* acc;
  const float* coef;
  const uint8_t* w;
};

// B lanes over k in [0, K32) (K32 a multiple of 32), then the k tail in scalar. Each lane's
// accumulator is its own chain of FMAs in k order, so the lanes may be column blocks of one GEMV
// or the same columns of several (a chain of matmuls over consecutive k ranges).
// With a `next` offset, the 16 rows at each lane's w + next (the next k range of the same
// columns, or the next column block) are prefetched into L2 over the k steps, a line per row and
// k step (into L1 they would evict each other: the rows are a power-of-two stride apart and
// share cache sets).
template <int B>
NKI_AVX512 void gemv_colsT_lanes512(const Lane* lane, int64_t js, int64_t K, int64_t next) {
  __m512 a[B];
  for (int b = 0; b < B; ++b) a[b] = _mm512_setzero_ps();
  const int64_t K32 = K / 32 * 32;
  const __m512i hi = _mm512_set1_epi32(static_cast<int32_t>(0xFFFF0000u));
  for (int64_t k = 0; k < K32; k += 32) {
    if (next)
      for (int b = 0; b < B; ++b)
        for (int64_t r = 0; r < 16; ++r)
          _mm_prefetch(reinterpret_cast<const char*>(lane[b].w + next + r * js + k * 2), _MM_HINT_T1);
    for (int b = 0; b < B; ++b) {
      __m512i v[16];
      const uint8_t* p = lane[b].w + k * 2;
      const float* coef = lane[b].coef + k;
      for (int i = 0; i < 16; ++i) v[i] = _mm512_loadu_si512(p + i * js);
      transpose16x16_epi32(v);
      for (int t = 0; t < 16; ++t) {
        const __m512 even = _mm512_castsi512_ps(_mm512_slli_epi32(v[t], 16));
        const __m512 odd = _mm512_castsi512_ps(_mm512_and_si512(v[t], hi));
        a[b] = _mm512_fmadd_ps(_mm512_set1_ps(coef[2 * t]), even, a[b]);
        a[b] = _mm512_fmadd_ps(_mm512_set1_ps(coef[2 * t + 1]), odd, a[b]);
      }
    }
  }
  for (int b = 0; b < B; ++b) {
    float* out = lane[b].acc;
    _mm512_storeu_ps(out, a[b]);
    if (K32 == K) continue;
    for (int i = 0; i < 16; ++i) {
      float x = out[i];
      const uint8_t* p = lane[b].w + i * js;
      for (int64_t k = K32; k < K; ++k) x = std::fma(lane[b].coef[k], ld_bf16(p + k * 2), x);
      out[i] = x;
    }
  }
}

// Columns j .. j + 16 B of one GEMV. Thin matmuls over a weight read in place come in chains
// over consecutive k ranges of the same columns (a projection's 128-row chunks), so while a
// block runs, the same rows' next K values are prefetched for the next matmul of the chain.
// `next` is the byte offset from each column's weights to what the next GEMV reads of the same
// column position (by default the same rows' next K values).
template <int B>
NKI_AVX512 void gemv_colsT_block512(float* acc, const float* coef, const uint8_t* w, int64_t js,
                                    int64_t K, int64_t j, int64_t next) {
  Lane lane[B];
  for (int b = 0; b < B; ++b) lane[b] = {acc + j + b * 16, coef, w + (j + b * 16) * js};
  gemv_colsT_lanes512<B>(lane, js, K, next);
}

NKI_AVX512 void gemv_colsT_bf16_avx512(float* acc, const float* coef, const uint8_t* w,
                                       int64_t js, int64_t K, int64_t n, int64_t next) {
  int64_t j = 0;
  // One 16-column block at a time: 4-block steps spill the transposes (~1.5x slower from L1,
  // ~1.1x from DRAM on AMD Zen 4).
  if (K >= 32)
    for (; j + 16 <= n; j += 16) gemv_colsT_block512<1>(acc, coef, w, js, K, j, next);
  if (j < n) gemv_colsT_bf16_avx2(acc + j, coef, w + j * js, js, K, n - j);
}
NKI_AVX512 void gemv_colsT_bf16_avx512(float* acc, const float* coef, const uint8_t* w,
                                       int64_t js, int64_t K, int64_t n) {
  gemv_colsT_bf16_avx512(acc, coef, w, js, K, n, K * 2);
}
// A chain of GEMVs over the same columns (one layout, any bases): column block by column block
// across every member, one member at a time, so the weights of a column block are read for the
// whole chain at once (one pass over contiguous rows when the members are consecutive k ranges of
// the same rows). While a member's block runs, the same member's next column block (16 rows
// further) is prefetched, so every member's rows stream ahead of their use. One 16-column lane at
// a time: a 4-lane step needs more than the 32 registers (the transposes spill), which made it
// ~1.5x slower from L1 and ~1.3x slower from DRAM (AMD Zen 4). Each member gets exactly
// gemv_colsT_bf16_avx512.
NKI_AVX512 void gemv_chain_colsT_bf16_avx512(float* const* acc, const float* const* coef,
                                             const uint8_t* const* w, int64_t L, int64_t js,
                                             int64_t K, int64_t n, int64_t ahead) {
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const int64_t next = j + 32 <= n + ahead ? 16 * js : 0;
    for (int64_t l = 0; l < L; ++l) {
      const Lane lane{acc[l] + j, coef[l], w[l] + j * js};
      gemv_colsT_lanes512<1>(&lane, js, K, next);
    }
  }
  if (j < n)
    for (int64_t l = 0; l < L; ++l) gemv_colsT_bf16_avx2(acc[l] + j, coef[l], w[l] + j * js, js, K, n - j);
}
// AVX-512 version of gemv_multi_rows_avx2 (16 columns per pass, the 8-column and scalar tails
// by the AVX2 one): the same chain of FMAs per (row, column), so the same bits.
template <bool BF16>
NKI_AVX512 inline __m512 load16(const uint8_t* p) {
  if constexpr (BF16)
    return _mm512_castsi512_ps(_mm512_slli_epi32(
        _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16));
  else
    return _mm512_loadu_ps(reinterpret_cast<const float*>(p));
}

// V vectors of 16 columns per pass: the rows of w are often far apart (SBUF partitions, each
// its own page), so each k step uses as much of the lines it touches as the registers allow.
template <bool BF16, int R, int V>
NKI_AVX512 void gemv_multi_rows_pass512(float* acc, int64_t lda, const float* coef, int64_t ldc,
                                        const uint8_t* w, int64_t ks, int64_t K) {
  constexpr int64_t es = BF16 ? 2 : 4;
  __m512 a[R][V];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < V; ++v) a[r][v] = _mm512_setzero_ps();
  const uint8_t* p = w;
  for (int64_t k = 0; k < K; ++k, p += ks) {
    __m512 x[V];
    for (int v = 0; v < V; ++v) x[v] = load16<BF16>(p + v * 16 * es);
    for (int r = 0; r < R; ++r) {
      const __m512 c = _mm512_set1_ps(coef[r * ldc + k]);
      for (int v = 0; v < V; ++v) a[r][v] = _mm512_fmadd_ps(c, x[v], a[r][v]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < V; ++v) _mm512_storeu_ps(acc + r * lda + v * 16, a[r][v]);
}

template <bool BF16, int R>
NKI_AVX512 void gemv_multi_rows_avx512(float* acc, int64_t lda, const float* coef, int64_t ldc,
                                       const uint8_t* w, int64_t ks, int64_t K, int64_t n) {
  constexpr int64_t es = BF16 ? 2 : 4;
  constexpr int V = R <= 4 ? 4 : 2;  // R x V accumulators fit the 32 registers with the loads
  int64_t j = 0;
  for (; j + 16 * V <= n; j += 16 * V)
    gemv_multi_rows_pass512<BF16, R, V>(acc + j, lda, coef, ldc, w + j * es, ks, K);
  for (; j + 16 <= n; j += 16)
    gemv_multi_rows_pass512<BF16, R, 1>(acc + j, lda, coef, ldc, w + j * es, ks, K);
  if (j < n) gemv_multi_rows_avx2<BF16, R>(acc + j, lda, coef, ldc, w + j * es, ks, K, n - j);
}

// Rows in groups of 8, 4 and 2 through the multi-row kernel (AVX-512 or AVX2), the last one alone.
template <bool BF16, int R, bool W512>
void multi_rows(float* acc, int64_t lda, const float* coef, int64_t ldc, const uint8_t* w,
                int64_t ks, int64_t K, int64_t n) {
  if constexpr (W512)
    gemv_multi_rows_avx512<BF16, R>(acc, lda, coef, ldc, w, ks, K, n);
  else
    gemv_multi_rows_avx2<BF16, R>(acc, lda, coef, ldc, w, ks, K, n);
}
template <bool BF16, bool W512>
void gemv_rows_many(float* acc, int64_t lda, const float* coef, int64_t rows, const uint8_t* w,
                    int64_t ks, int64_t K, int64_t n) {
  int64_t r = 0;
  for (; r + 8 <= rows; r += 8)
    multi_rows<BF16, 8, W512>(acc + r * lda, lda, coef + r * K, K, w, ks, K, n);
  for (; r + 4 <= rows; r += 4)
    multi_rows<BF16, 4, W512>(acc + r * lda, lda, coef + r * K, K, w, ks, K, n);
  for (; r + 2 <= rows; r += 2)
    multi_rows<BF16, 2, W512>(acc + r * lda, lda, coef + r * K, K, w, ks, K, n);
  for (; r < rows; ++r) gemv_rows_avx2<BF16>(acc + r * lda, coef + r * K, w, ks, K, n);
}
#pragma GCC diagnostic pop

void gemv_bf16_avx512(float* acc, const float* coef, const uint8_t* w, int64_t ks, int64_t js,
                      int64_t K, int64_t n) {
  if (js != 2 && ks == 2)
    gemv_colsT_bf16_avx512(acc, coef, w, js, K, n);
  else
    gemv_bf16_avx2(acc, coef, w, ks, js, K, n);
}

#endif

struct Table {
  void (*f32)(float*, float, const float*, int64_t) = axpy_f32_portable;
  void (*bf16)(float*, float, const uint16_t*, int64_t) = axpy_bf16_portable;
  using Gemv = void (*)(float*, const float*, const uint8_t*, int64_t, int64_t, int64_t, int64_t);
  Gemv gemv_bf16 = gemv_bf16_portable;
  Gemv gemv_f32 = gemv_f32_portable;
  bool avx2 = false;
  bool avx512 = false;
  Table() {
#ifdef NKI_SIMD_AVX2
    if (kernels::simd_level() == kernels::SimdLevel::Avx2) {
      f32 = axpy_f32_avx2;
      bf16 = axpy_bf16_avx2;
      gemv_bf16 = gemv_bf16_avx2;
      gemv_f32 = gemv_f32_avx2;
      avx2 = true;
      if (cpu_has_avx512()) {
        gemv_bf16 = gemv_bf16_avx512;
        avx512 = true;
      }
    }
#endif
  }
};

const Table& table() {
  static const Table t;
  return t;
}

}  // namespace

void axpy_f32_portable(float* y, float a, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}
void axpy_bf16_portable(float* y, float a, const uint16_t* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * bf16_to_f32(x[i]);
}

// The portable GEMVs are the portable axpy loops, one k row at a time (same arithmetic).
void gemv_bf16_portable(float* acc, const float* coef, const uint8_t* w, int64_t ks, int64_t js,
                        int64_t K, int64_t n) {
  std::fill(acc, acc + n, 0.0f);
  for (int64_t k = 0; k < K; ++k) {
    const uint8_t* row = w + k * ks;
    const float a = coef[k];
    for (int64_t j = 0; j < n; ++j) acc[j] += a * ld_bf16(row + j * js);
  }
}
void gemv_f32_portable(float* acc, const float* coef, const uint8_t* w, int64_t ks, int64_t js,
                       int64_t K, int64_t n) {
  std::fill(acc, acc + n, 0.0f);
  for (int64_t k = 0; k < K; ++k) {
    const uint8_t* row = w + k * ks;
    const float a = coef[k];
    for (int64_t j = 0; j < n; ++j) acc[j] += a * ld_f32(row + j * js);
  }
}

void gemv_bf16(float* acc, const float* coef, const uint8_t* w, int64_t ks, int64_t js, int64_t K,
               int64_t n) {
  table().gemv_bf16(acc, coef, w, ks, js, K, n);
}
void gemv_f32(float* acc, const float* coef, const uint8_t* w, int64_t ks, int64_t js, int64_t K,
              int64_t n) {
  table().gemv_f32(acc, coef, w, ks, js, K, n);
}

// Column-contiguous bf16 weights with at least one 32-k step: the chain kernel reads a column
// block of every member before the next block (1 KiB rows, the Lab 2 gate/up/QKV: ~1.6x the
// GB/s per CPU second of one member at a time from DRAM; 4 KiB rows, the down projection: ~1.2x
// the 4-lane chain kernel; two threads, AMD Zen 4).
bool gemv_chain_reads_together(int64_t ks, int64_t js, int64_t K) {
#ifdef NKI_SIMD_AVX512
  (void)js;
  return table().avx512 && ks == 2 && K >= 32;
#else
  (void)ks, (void)js, (void)K;
  return false;
#endif
}

void gemv_bf16_then(float* acc, const float* coef, const uint8_t* w, int64_t js, int64_t K,
                    int64_t n, const uint8_t* next_w) {
#ifdef NKI_SIMD_AVX512
  if (table().avx512 && js != 2 && next_w)
    return gemv_colsT_bf16_avx512(acc, coef, w, js, K, n, next_w - w);
#endif
  (void)next_w;
  gemv_bf16(acc, coef, w, 2, js, K, n);
}

void gemv_chain_bf16(float* const* acc, const float* const* coef, const uint8_t* const* w,
                     int64_t L, int64_t ks, int64_t js, int64_t K, int64_t n, int64_t ahead) {
#ifdef NKI_SIMD_AVX512
  if (gemv_chain_reads_together(ks, js, K))
    return gemv_chain_colsT_bf16_avx512(acc, coef, w, L, js, K, n, ahead);
#endif
  (void)ahead;
  for (int64_t l = 0; l < L; ++l) gemv_bf16(acc[l], coef[l], w[l], ks, js, K, n);
}

namespace {
// Several coefficient rows against the same weights: the multi-row kernel reads the weights once
// per group of rows where it applies, otherwise one GEMV per row.
template <bool BF16>
void gemv_rows(float* acc, int64_t lda, const float* coef, int64_t rows, const uint8_t* w,
               int64_t ks, int64_t js, int64_t K, int64_t n) {
#ifdef NKI_SIMD_AVX2
#ifdef NKI_SIMD_AVX512
  if (table().avx512 && js == (BF16 ? 2 : 4) && rows > 1)
    return gemv_rows_many<BF16, true>(acc, lda, coef, rows, w, ks, K, n);
#endif
  if (table().avx2 && js == (BF16 ? 2 : 4) && rows > 1)
    return gemv_rows_many<BF16, false>(acc, lda, coef, rows, w, ks, K, n);
#endif
  for (int64_t r = 0; r < rows; ++r)
    (BF16 ? gemv_bf16 : gemv_f32)(acc + r * lda, coef + r * K, w, ks, js, K, n);
}
}  // namespace

void gemv_rows_bf16(float* acc, int64_t lda, const float* coef, int64_t rows, const uint8_t* w,
                    int64_t ks, int64_t js, int64_t K, int64_t n) {
  gemv_rows<true>(acc, lda, coef, rows, w, ks, js, K, n);
}
void gemv_rows_f32(float* acc, int64_t lda, const float* coef, int64_t rows, const uint8_t* w,
                   int64_t ks, int64_t js, int64_t K, int64_t n) {
  gemv_rows<false>(acc, lda, coef, rows, w, ks, js, K, n);
}

void axpy_f32(float* y, float a, const float* x, int64_t n) { table().f32(y, a, x, n); }
void axpy_bf16(float* y, float a, const uint16_t* x, int64_t n) { table().bf16(y, a, x, n); }
bool using_avx2() { return table().avx2; }
bool using_avx512() { return table().avx512; }
bool cpu_has_avx512() {
#if defined(__x86_64__) && defined(__GNUC__)
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512dq");
#else
  return false;
#endif
}

}  // namespace neuron::nki::simd
