// The 8 x 8 transpose of 16-bit lanes in SSE2 registers, shared by the DMA transposes
// (exec_dma.cpp) and the in-place transposed GEMV (simd.cpp).
#pragma once

#ifdef __SSE2__
#include <emmintrin.h>

namespace neuron::nki::simd {

// r[i] holds 8 elements of row i; o[j] receives element j of every row.
inline void transpose8x8_epi16(const __m128i r[8], __m128i o[8]) {
  const __m128i a0 = _mm_unpacklo_epi16(r[0], r[1]), a1 = _mm_unpackhi_epi16(r[0], r[1]);
  const __m128i a2 = _mm_unpacklo_epi16(r[2], r[3]), a3 = _mm_unpackhi_epi16(r[2], r[3]);
  const __m128i a4 = _mm_unpacklo_epi16(r[4], r[5]), a5 = _mm_unpackhi_epi16(r[4], r[5]);
  const __m128i a6 = _mm_unpacklo_epi16(r[6], r[7]), a7 = _mm_unpackhi_epi16(r[6], r[7]);
  const __m128i b0 = _mm_unpacklo_epi32(a0, a2), b1 = _mm_unpackhi_epi32(a0, a2);
  const __m128i b2 = _mm_unpacklo_epi32(a1, a3), b3 = _mm_unpackhi_epi32(a1, a3);
  const __m128i b4 = _mm_unpacklo_epi32(a4, a6), b5 = _mm_unpackhi_epi32(a4, a6);
  const __m128i b6 = _mm_unpacklo_epi32(a5, a7), b7 = _mm_unpackhi_epi32(a5, a7);
  o[0] = _mm_unpacklo_epi64(b0, b4);
  o[1] = _mm_unpackhi_epi64(b0, b4);
  o[2] = _mm_unpacklo_epi64(b1, b5);
  o[3] = _mm_unpackhi_epi64(b1, b5);
  o[4] = _mm_unpacklo_epi64(b2, b6);
  o[5] = _mm_unpackhi_epi64(b2, b6);
  o[6] = _mm_unpacklo_epi64(b3, b7);
  o[7] = _mm_unpackhi_epi64(b3, b7);
}

}  // namespace neuron::nki::simd
#endif
