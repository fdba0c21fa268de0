#include "simd_matmul.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
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

#if defined(__x86_64__) && defined(__GNUC__)
#define NKI_MM_AVX512 __attribute__((target("avx512f,avx2,fma")))

// MR rows x NV vectors of 16 columns of C, accumulators in registers; `mask` limits the last
// vector's columns. Per k: NV loads of B's row, MR broadcasts of A's column, MR * NV FMAs.
constexpr int kMR = 6;   // rows of C per register block
constexpr int kNP = 64;  // columns of C per B panel (4 vectors)

// MR rows x NV vectors of 16 columns of C, accumulators in registers, from packed operands:
// a = [K][kMR] (this row block's A columns), b = [K][kNP] (the panel's B rows). Per k: NV loads,
// MR broadcasts, MR * NV FMAs. `mask` limits the columns stored of the last vector.
template <int MR, int NV>
NKI_MM_AVX512 void block16(float* C, int64_t ldc, const float* a, const float* b, int64_t K,
                           __mmask16 mask, bool acc) {
  __m512 c[MR][NV];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) c[r][v] = _mm512_setzero_ps();
  for (int64_t k = 0; k < K; ++k, a += kMR, b += kNP) {
    __m512 bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) bv[v] = _mm512_loadu_ps(b + 16 * v);
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

// Every row block of C over one packed panel.
template <int NV>
NKI_MM_AVX512 void panel(float* C, int64_t ldc, const float* Ap, const float* Bp, int64_t M,
                         int64_t K, __mmask16 mask, bool acc) {
  int64_t i = 0;
  for (; i + kMR <= M; i += kMR, Ap += K * kMR)
    block16<kMR, NV>(C + i * ldc, ldc, Ap, Bp, K, mask, acc);
  float* c = C + i * ldc;
  switch (M - i) {
    case 5: block16<5, NV>(c, ldc, Ap, Bp, K, mask, acc); break;
    case 4: block16<4, NV>(c, ldc, Ap, Bp, K, mask, acc); break;
    case 3: block16<3, NV>(c, ldc, Ap, Bp, K, mask, acc); break;
    case 2: block16<2, NV>(c, ldc, Ap, Bp, K, mask, acc); break;
    case 1: block16<1, NV>(c, ldc, Ap, Bp, K, mask, acc); break;
    default: break;
  }
}

// Operands are packed first (A as [row block][K][kMR], each B panel as [K][kNP], zero-padded):
// the tiles' power-of-two row strides would otherwise map a panel's rows onto a few L1 sets.
// The padding only adds products into lanes that are never stored.
// Row k's columns [j, j + w) of B into dst (kNP floats, zero-padded).
NKI_MM_AVX512 void pack_b_row(float* dst, const MatmulOperand& B, int64_t k, int64_t j,
                              int64_t w) {
  const uint8_t* src = B.base + k * B.row_bytes;
  if (B.bf16) {
    const uint16_t* h = reinterpret_cast<const uint16_t*>(src) + j;
    int64_t x = 0;
    for (; x + 16 <= w; x += 16) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(h + x));
      _mm512_storeu_ps(dst + x, _mm512_castsi512_ps(
          _mm512_maskz_slli_epi32(0xffff, _mm512_maskz_cvtepu16_epi32(0xffff, v), 16)));
    }
    for (; x < w; ++x) dst[x] = std::bit_cast<float>(static_cast<uint32_t>(h[x]) << 16);
  } else {
    const float* f = reinterpret_cast<const float*>(src) + j;
    int64_t x = 0;
    for (; x + 16 <= w; x += 16) _mm512_storeu_ps(dst + x, _mm512_loadu_ps(f + x));
    for (; x < w; ++x) dst[x] = f[x];
  }
  if (w < kNP) std::memset(dst + w, 0, static_cast<size_t>(kNP - w) * 4);
}

// Operands are packed first (A as [row block][K][kMR], each B panel as [K][kNP], zero-padded,
// bf16 widened on the way): the tiles' power-of-two row strides would otherwise map a panel's
// rows onto a few L1 sets. The padding only adds products into lanes that are never stored.
NKI_MM_AVX512 void matmul_avx512(float* C, int64_t ldc, const MatmulOperand& A,
                                 const MatmulOperand& B, int64_t M, int64_t K, int64_t n0,
                                 int64_t n1, bool acc) {
  thread_local std::vector<float> abuf, bbuf;
  const int64_t blocks = (M + kMR - 1) / kMR;
  abuf.resize(static_cast<size_t>(blocks * K * kMR));
  bbuf.resize(static_cast<size_t>(K * kNP));
  float* Ap = abuf.data();
  for (int64_t ib = 0; ib < blocks; ++ib) {
    const int64_t i0 = ib * kMR, rows = std::min<int64_t>(kMR, M - i0);
    float* dst = Ap + ib * K * kMR;
    if (rows < kMR) std::memset(dst, 0, static_cast<size_t>(K * kMR) * 4);
    for (int64_t k = 0; k < K; ++k) {
      const uint8_t* src = A.base + k * A.row_bytes;
      if (A.bf16) {
        const uint16_t* h = reinterpret_cast<const uint16_t*>(src) + i0;
        for (int64_t r = 0; r < rows; ++r)
          dst[k * kMR + r] = std::bit_cast<float>(static_cast<uint32_t>(h[r]) << 16);
      } else {  // no library call per 24 bytes
        const float* f = reinterpret_cast<const float*>(src) + i0;
        for (int64_t r = 0; r < rows; ++r) dst[k * kMR + r] = f[r];
      }
    }
  }
  float* Bp = bbuf.data();
  for (int64_t j = n0; j < n1; j += kNP) {
    const int64_t w = std::min<int64_t>(kNP, n1 - j);
    for (int64_t k = 0; k < K; ++k) pack_b_row(Bp + k * kNP, B, k, j, w);
    const int nv = static_cast<int>((w + 15) / 16);
    const int tail = static_cast<int>(w - 16 * (nv - 1));
    const __mmask16 mask = static_cast<__mmask16>((1u << tail) - 1u);
    switch (nv) {
      case 1: panel<1>(C + j, ldc, Ap, Bp, M, K, mask, acc); break;
      case 2: panel<2>(C + j, ldc, Ap, Bp, M, K, mask, acc); break;
      case 3: panel<3>(C + j, ldc, Ap, Bp, M, K, mask, acc); break;
      default: panel<4>(C + j, ldc, Ap, Bp, M, K, mask, acc); break;
    }
  }
}
#endif

bool detect_avx512() {
  return kernels::simd_level() != kernels::SimdLevel::Portable && cpu_has_avx512();
}

}  // namespace

void matmul_f32_portable(float* C, int64_t ldc, const MatmulOperand& A, const MatmulOperand& B,
                         int64_t M, int64_t K, int64_t n0, int64_t n1, bool accumulate) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = n0; j < n1; ++j) {
      float v = 0.0f;  // the FMA chain over k from zero, then the PSUM value
      for (int64_t k = 0; k < K; ++k) v = std::fma(at(A, k, i), at(B, k, j), v);
      C[i * ldc + j] = accumulate ? v + C[i * ldc + j] : v;
    }
}

bool matmul_uses_avx512() { return detect_avx512(); }

void matmul_f32(float* C, int64_t ldc, const MatmulOperand& A, const MatmulOperand& B, int64_t M,
                int64_t K, int64_t n0, int64_t n1, bool accumulate) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (detect_avx512()) {
    matmul_avx512(C, ldc, A, B, M, K, n0, n1, accumulate);
    return;
  }
#endif
  matmul_f32_portable(C, ldc, A, B, M, K, n0, n1, accumulate);
}

}  // namespace neuron::nki::simd
