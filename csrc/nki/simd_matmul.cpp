#include "simd_matmul.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#include "kernels/simd.h"
#include "simd.h"

namespace neuron::nki::simd {

namespace {

// Element (k, x) of an operand as fp32.
inline float at(const MatmulOperand& o, int64_t k, int64_t x) {
  const uint8_t* p = o.base + k * o.row_bytes;
  if (o.bf16) {
    uint16_t h;
    std::memcpy(&h, p + 2 * x, 2);
    return std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
  }
  float f;
  std::memcpy(&f, p + 4 * x, 4);
  return f;
}

enum class Kernel { Portable, Avx2, Avx512 };

Kernel detect_kernel() {
  if (kernels::simd_level() == kernels::SimdLevel::Portable) return Kernel::Portable;
#if defined(__x86_64__) && defined(__GNUC__)
  if (cpu_has_avx512() && __builtin_cpu_supports("avx512vl")) return Kernel::Avx512;
#endif
  return kernels::simd_level() == kernels::SimdLevel::Avx2 ? Kernel::Avx2 : Kernel::Portable;
}

// The columns a panel walk visits: [n0, n1) in order, or the panels claimed from a shared
// counter (panel p is columns [p * width, min(N, (p + 1) * width))).
struct Columns {
  int64_t n0, n1, width;
  MatmulPanels* shared = nullptr;
  // The next panel [j, j + w) of at most `width` columns; false when none is left.
  bool next(int64_t& j, int64_t& w) {
    if (shared) {
      j = shared->next.fetch_add(1, std::memory_order_relaxed) * width;
    } else {
      j = n0;
      n0 += width;
    }
    if (j >= n1) return false;
    w = std::min(width, n1 - j);
    return true;
  }
};

void portable_columns(float* C, int64_t ldc, const MatmulOperand& A, const MatmulOperand& B,
                      int64_t M, int64_t K, Columns cols, bool accumulate) {
  int64_t j, w;
  while (cols.next(j, w))
    for (int64_t i = 0; i < M; ++i)
      for (int64_t x = j; x < j + w; ++x) {
        float v = 0.0f;  // the FMA chain over k from zero, then the PSUM value
        for (int64_t k = 0; k < K; ++k) v = std::fma(at(A, k, i), at(B, k, x), v);
        C[i * ldc + x] = accumulate ? v + C[i * ldc + x] : v;
      }
}

#if defined(__x86_64__) && defined(__GNUC__)
#define NKI_MM_AVX2 __attribute__((target("avx2,fma")))
#define NKI_MM_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")))

// Both micro-kernels compute an MR x (NV vectors) block of C with its accumulators in registers,
// per k: NV loads of B's packed row, MR broadcasts of A's packed column, MR * NV FMAs. The
// operands are packed first (A as [row block][K][MR], each B panel as [K][NP], widened from bf16
// on the way, zero-padded): the tiles' power-of-two row strides would otherwise map a panel onto
// a few L1 sets, and the packed A is read 16 floats per cache line instead of one row per line.
// The padding only adds products into lanes that are never stored.

// n elements of a row (bf16 or fp32) widened to fp32.
NKI_MM_AVX2 inline void widen(float* dst, const uint8_t* src, bool bf16, int64_t n) {
  int64_t x = 0;
  if (bf16) {
    const auto* h = reinterpret_cast<const uint16_t*>(src);
    for (; x + 8 <= n; x += 8) {
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(h + x));
      _mm256_storeu_ps(dst + x, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(v), 16)));
    }
    for (; x < n; ++x) dst[x] = std::bit_cast<float>(static_cast<uint32_t>(h[x]) << 16);
  } else {
    const auto* f = reinterpret_cast<const float*>(src);
    for (; x + 8 <= n; x += 8) _mm256_storeu_ps(dst + x, _mm256_loadu_ps(f + x));
    for (; x < n; ++x) dst[x] = f[x];
  }
}

// A [K, M] as [row block][K][MR] (rows past M zero), walking A's rows in order.
template <int MR>
NKI_MM_AVX2 void pack_a(float* dst, const MatmulOperand& A, int64_t M, int64_t K) {
  const int64_t full = M / MR, es = A.bf16 ? 2 : 4;
  for (int64_t k = 0; k < K; ++k) {
    const uint8_t* row = A.base + k * A.row_bytes;
    float* d = dst + k * MR;
    for (int64_t ib = 0; ib < full; ++ib, d += K * MR) widen(d, row + ib * MR * es, A.bf16, MR);
    if (const int64_t rest = M - full * MR; rest > 0) {
      widen(d, row + full * MR * es, A.bf16, rest);
      std::fill(d + rest, d + MR, 0.0f);
    }
  }
}

// Row k's columns [j, j + w) of B, for every k, as [K][NP] (zero-padded).
template <int NP>
NKI_MM_AVX2 void pack_b(float* dst, const MatmulOperand& B, int64_t K, int64_t j, int64_t w) {
  const int64_t es = B.bf16 ? 2 : 4;
  for (int64_t k = 0; k < K; ++k, dst += NP) {
    widen(dst, B.base + k * B.row_bytes + j * es, B.bf16, w);
    if (w < NP) std::fill(dst + w, dst + NP, 0.0f);
  }
}

// -- AVX-512: 8 rows x 3 vectors of 16 columns (24 accumulators), panels of 48 columns ---------
constexpr int kMR16 = 8, kNV16 = 3, kNP16 = 16 * kNV16;

// B is read where it is (row k at b + k * bs bytes, bf16 widened in registers: a shift per
// vector, which the shuffle/shift pipes take beside the FMAs), so a panel needs no packing;
// `mask` limits the columns of the last vector, loaded with masked (non-faulting) loads.
template <bool BF16>
NKI_MM_AVX512 inline __m512 load_b16(const uint8_t* p, __mmask16 m) {
  if constexpr (BF16)
    return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(  // (maskz: GCC 12 warns otherwise)
        0xffff, _mm512_maskz_cvtepu16_epi32(0xffff, _mm256_maskz_loadu_epi16(m, p)), 16));
  else
    return _mm512_maskz_loadu_ps(m, p);
}

template <int MR, int NV, bool BF16>
NKI_MM_AVX512 void block16(float* C, int64_t ldc, const float* a, const uint8_t* b, int64_t bs,
                           int64_t K, __mmask16 mask, bool acc) {
  constexpr int64_t vb = BF16 ? 32 : 64;  // bytes per vector of B
  __m512 c[MR][NV];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) c[r][v] = _mm512_setzero_ps();
  for (int64_t k = 0; k < K; ++k, a += kMR16, b += bs) {
    __m512 bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v)
      bv[v] = load_b16<BF16>(b + vb * v, v + 1 < NV ? __mmask16(0xffff) : mask);
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const __m512 av = _mm512_set1_ps(a[r]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) c[r][v] = _mm512_fmadd_ps(av, bv[v], c[r][v]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      float* p = C + r * ldc + 16 * v;
      const __mmask16 m = v + 1 < NV ? __mmask16(0xffff) : mask;
      __m512 x = c[r][v];
      if (acc) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(m, p));
      _mm512_mask_storeu_ps(p, m, x);
    }
}

template <int NV, bool BF16>
NKI_MM_AVX512 void panel16(float* C, int64_t ldc, const float* Ap, const uint8_t* b, int64_t bs,
                           int64_t M, int64_t K, __mmask16 mask, bool acc) {
  int64_t i = 0;
  for (; i + kMR16 <= M; i += kMR16, Ap += K * kMR16)
    block16<kMR16, NV, BF16>(C + i * ldc, ldc, Ap, b, bs, K, mask, acc);
  float* c = C + i * ldc;
  switch (M - i) {
    case 7: block16<7, NV, BF16>(c, ldc, Ap, b, bs, K, mask, acc); break;
    case 6: block16<6, NV, BF16>(c, ldc, Ap, b, bs, K, mask, acc); break;
    case 5: block16<5, NV, BF16>(c, ldc, Ap, b, bs, K, mask, acc); break;
    case 4: block16<4, NV, BF16>(c, ldc, Ap, b, bs, K, mask, acc); break;
    case 3: block16<3, NV, BF16>(c, ldc, Ap, b, bs, K, mask, acc); break;
    case 2: block16<2, NV, BF16>(c, ldc, Ap, b, bs, K, mask, acc); break;
    case 1: block16<1, NV, BF16>(c, ldc, Ap, b, bs, K, mask, acc); break;
    default: break;
  }
}

template <bool BF16>
NKI_MM_AVX512 void panel16_any(float* C, int64_t ldc, const float* Ap, const uint8_t* b,
                               int64_t bs, int64_t M, int64_t K, int64_t w, bool acc) {
  const int nv = static_cast<int>((w + 15) / 16);
  const int tail = static_cast<int>(w - 16 * (nv - 1));
  const __mmask16 mask = static_cast<__mmask16>((1u << tail) - 1u);
  switch (nv) {
    case 1: panel16<1, BF16>(C, ldc, Ap, b, bs, M, K, mask, acc); break;
    case 2: panel16<2, BF16>(C, ldc, Ap, b, bs, M, K, mask, acc); break;
    default: panel16<3, BF16>(C, ldc, Ap, b, bs, M, K, mask, acc); break;
  }
}

// Whether K rows `row_bytes` apart fall into so few L1 sets (64 sets of 64-byte lines, 4 KiB
// per way) that a panel's rows evict each other between row blocks: power-of-two strides, as an
// HBM tensor read in place has (SBUF partitions are padded by a line, so they spread over all).
bool aliases_in_l1(int64_t row_bytes) {
  if (row_bytes % 64 != 0) return false;
  const int64_t s = (row_bytes / 64) % 64;
  return s == 0 || 64 / std::gcd<int64_t>(s, 64) < 16;
}

NKI_MM_AVX512 void avx512_columns(float* C, int64_t ldc, const MatmulOperand& A,
                                  const MatmulOperand& B, int64_t M, int64_t K, Columns cols,
                                  bool acc) {
  thread_local std::vector<float> abuf, bbuf;
  const int64_t blocks = (M + kMR16 - 1) / kMR16;
  abuf.resize(static_cast<size_t>(blocks * K * kMR16));
  float* Ap = abuf.data();
  const bool pack = aliases_in_l1(B.row_bytes);  // then each panel is packed first
  if (pack) bbuf.resize(static_cast<size_t>(K * kNP16));
  bool packed = false;  // A is packed once a panel is claimed
  int64_t j, w;
  while (cols.next(j, w)) {
    if (!packed) pack_a<kMR16>(Ap, A, M, K);
    packed = true;
    if (pack) {
      pack_b<kNP16>(bbuf.data(), B, K, j, w);
      panel16_any<false>(C + j, ldc, Ap, reinterpret_cast<const uint8_t*>(bbuf.data()),
                         kNP16 * 4, M, K, w, acc);
    } else if (B.bf16)
      panel16_any<true>(C + j, ldc, Ap, B.base + 2 * j, B.row_bytes, M, K, w, acc);
    else
      panel16_any<false>(C + j, ldc, Ap, B.base + 4 * j, B.row_bytes, M, K, w, acc);
  }
}

// -- AVX2: 4 rows x 3 vectors of 8 columns (12 accumulators of the 16 registers), panels of 24 --
constexpr int kMR8 = 4, kNV8 = 3, kNP8 = 8 * kNV8;

// `tail` (1..8) limits the columns of the last vector.
template <int MR, int NV>
NKI_MM_AVX2 void block8(float* C, int64_t ldc, const float* a, const float* b, int64_t K,
                        int tail, bool acc) {
  __m256 c[MR][NV];
#pragma GCC unroll 4
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) c[r][v] = _mm256_setzero_ps();
  for (int64_t k = 0; k < K; ++k, a += kMR8, b += kNP8) {
    __m256 bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) bv[v] = _mm256_loadu_ps(b + 8 * v);
#pragma GCC unroll 4
    for (int r = 0; r < MR; ++r) {
      const __m256 av = _mm256_broadcast_ss(a + r);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) c[r][v] = _mm256_fmadd_ps(av, bv[v], c[r][v]);
    }
  }
  alignas(32) static const int32_t lanes[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
  const __m256i m = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(lanes + 8 - tail));
#pragma GCC unroll 4
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      float* p = C + r * ldc + 8 * v;
      __m256 x = c[r][v];
      if (v + 1 < NV || tail == 8) {
        if (acc) x = _mm256_add_ps(x, _mm256_loadu_ps(p));
        _mm256_storeu_ps(p, x);
      } else {
        if (acc) x = _mm256_add_ps(x, _mm256_maskload_ps(p, m));
        _mm256_maskstore_ps(p, m, x);
      }
    }
}

template <int NV>
NKI_MM_AVX2 void panel8(float* C, int64_t ldc, const float* Ap, const float* Bp, int64_t M,
                        int64_t K, int tail, bool acc) {
  int64_t i = 0;
  for (; i + kMR8 <= M; i += kMR8, Ap += K * kMR8)
    block8<kMR8, NV>(C + i * ldc, ldc, Ap, Bp, K, tail, acc);
  float* c = C + i * ldc;
  switch (M - i) {
    case 3: block8<3, NV>(c, ldc, Ap, Bp, K, tail, acc); break;
    case 2: block8<2, NV>(c, ldc, Ap, Bp, K, tail, acc); break;
    case 1: block8<1, NV>(c, ldc, Ap, Bp, K, tail, acc); break;
    default: break;
  }
}

NKI_MM_AVX2 void avx2_columns(float* C, int64_t ldc, const MatmulOperand& A,
                              const MatmulOperand& B, int64_t M, int64_t K, Columns cols,
                              bool acc) {
  thread_local std::vector<float> abuf, bbuf;
  const int64_t blocks = (M + kMR8 - 1) / kMR8;
  abuf.resize(static_cast<size_t>(blocks * K * kMR8));
  bbuf.resize(static_cast<size_t>(K * kNP8));
  float *Ap = abuf.data(), *Bp = bbuf.data();
  bool packed = false;
  int64_t j, w;
  while (cols.next(j, w)) {
    if (!packed) pack_a<kMR8>(Ap, A, M, K);
    packed = true;
    pack_b<kNP8>(Bp, B, K, j, w);
    const int nv = static_cast<int>((w + 7) / 8);
    const int tail = static_cast<int>(w - 8 * (nv - 1));
    switch (nv) {
      case 1: panel8<1>(C + j, ldc, Ap, Bp, M, K, tail, acc); break;
      case 2: panel8<2>(C + j, ldc, Ap, Bp, M, K, tail, acc); break;
      default: panel8<3>(C + j, ldc, Ap, Bp, M, K, tail, acc); break;
    }
  }
}
#endif

Kernel kernel() { return detect_kernel(); }

int64_t panel_columns(Kernel k) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (k == Kernel::Avx512) return kNP16;
  if (k == Kernel::Avx2) return kNP8;
#endif
  (void)k;
  return 48;
}

void run(Kernel k, float* C, int64_t ldc, const MatmulOperand& A, const MatmulOperand& B,
         int64_t M, int64_t K, Columns cols, bool acc) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (k == Kernel::Avx512) return avx512_columns(C, ldc, A, B, M, K, cols, acc);
  if (k == Kernel::Avx2) return avx2_columns(C, ldc, A, B, M, K, cols, acc);
#endif
  portable_columns(C, ldc, A, B, M, K, cols, acc);
}

}  // namespace

void matmul_f32_portable(float* C, int64_t ldc, const MatmulOperand& A, const MatmulOperand& B,
                         int64_t M, int64_t K, int64_t n0, int64_t n1, bool accumulate) {
  run(Kernel::Portable, C, ldc, A, B, M, K, {n0, n1, std::max<int64_t>(1, n1 - n0)}, accumulate);
}

void matmul_f32_avx2(float* C, int64_t ldc, const MatmulOperand& A, const MatmulOperand& B,
                     int64_t M, int64_t K, int64_t n0, int64_t n1, bool accumulate) {
  run(Kernel::Avx2, C, ldc, A, B, M, K, {n0, n1, panel_columns(Kernel::Avx2)}, accumulate);
}

void matmul_f32(float* C, int64_t ldc, const MatmulOperand& A, const MatmulOperand& B, int64_t M,
                int64_t K, int64_t n0, int64_t n1, bool accumulate) {
  const Kernel k = kernel();
  run(k, C, ldc, A, B, M, K, {n0, n1, panel_columns(k)}, accumulate);
}

void matmul_f32_shared(float* C, int64_t ldc, const MatmulOperand& A, const MatmulOperand& B,
                       int64_t M, int64_t K, int64_t N, bool accumulate, MatmulPanels& panels) {
  const Kernel k = kernel();
  run(k, C, ldc, A, B, M, K, {0, N, panel_columns(k), &panels}, accumulate);
}

int64_t matmul_panel_columns() { return panel_columns(kernel()); }

const char* matmul_kernel() {
  switch (kernel()) {
    case Kernel::Avx512: return "avx512";
    case Kernel::Avx2: return "avx2";
    default: return "portable";
  }
}

bool matmul_uses_micro_kernel() { return kernel() != Kernel::Portable; }

}  // namespace neuron::nki::simd
