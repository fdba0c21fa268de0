// Eight-lane fp32 vectors for the AVX2 clones of the kernels: arithmetic, masks, 16-bit float
// loads/stores and the vector versions of vmath.h (same algorithms, fused multiply-adds).
// Everything here is compiled for avx2+fma+f16c through a target pragma and lives in
// namespace neuron::kernels::avx2; only call it after simd_level() returned Avx2.
// Code that uses these types must itself sit between NEURON_AVX2_BEGIN and NEURON_AVX2_END, or
// be a function marked NEURON_AVX2. This is the one SIMD layer of the tree: kernels, the
// compiler's VM loops and the NKI executor use it, chosen at run time by simd_level().
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/dtype.h"
#include "kernels/simd.h"
#include "kernels/simd/vmath.h"

#if NEURON_KERNELS_X86
#include <immintrin.h>

#if defined(__clang__)
#define NEURON_AVX2_BEGIN                                                            \
  _Pragma(                                                                           \
      "clang attribute push(__attribute__((target(\"avx2,fma,f16c\"))), apply_to = " \
      "function)")
#define NEURON_AVX2_END _Pragma("clang attribute pop")
#else
#define NEURON_AVX2_BEGIN _Pragma("GCC push_options") _Pragma("GCC target(\"avx2,fma,f16c\")")
#define NEURON_AVX2_END _Pragma("GCC pop_options")
#endif
// One function compiled for the AVX2 target (may call everything below).
#define NEURON_AVX2 __attribute__((target("avx2,fma,f16c")))

NEURON_AVX2_BEGIN
namespace neuron::kernels::avx2 {

struct Vec8f {
  __m256 v;
  Vec8f() = default;
  Vec8f(__m256 x) : v(x) {}
  Vec8f(float f) : v(_mm256_set1_ps(f)) {}
  static Vec8f load(const float* p) { return _mm256_loadu_ps(p); }
  void store(float* p) const { _mm256_storeu_ps(p, v); }
};

inline Vec8f operator+(Vec8f a, Vec8f b) { return _mm256_add_ps(a.v, b.v); }
inline Vec8f operator-(Vec8f a, Vec8f b) { return _mm256_sub_ps(a.v, b.v); }
inline Vec8f operator*(Vec8f a, Vec8f b) { return _mm256_mul_ps(a.v, b.v); }
inline Vec8f operator/(Vec8f a, Vec8f b) { return _mm256_div_ps(a.v, b.v); }
inline Vec8f operator-(Vec8f a) { return _mm256_xor_ps(a.v, _mm256_set1_ps(-0.0f)); }
inline Vec8f operator&(Vec8f a, Vec8f b) { return _mm256_and_ps(a.v, b.v); }
inline Vec8f operator|(Vec8f a, Vec8f b) { return _mm256_or_ps(a.v, b.v); }
// Comparisons give lane masks (all bits set where true). Ordered: false when a lane is NaN.
inline Vec8f operator<(Vec8f a, Vec8f b) { return _mm256_cmp_ps(a.v, b.v, _CMP_LT_OQ); }
inline Vec8f operator<=(Vec8f a, Vec8f b) { return _mm256_cmp_ps(a.v, b.v, _CMP_LE_OQ); }
inline Vec8f operator>(Vec8f a, Vec8f b) { return _mm256_cmp_ps(a.v, b.v, _CMP_GT_OQ); }
inline Vec8f operator>=(Vec8f a, Vec8f b) { return _mm256_cmp_ps(a.v, b.v, _CMP_GE_OQ); }
inline Vec8f operator==(Vec8f a, Vec8f b) { return _mm256_cmp_ps(a.v, b.v, _CMP_EQ_OQ); }
inline Vec8f isnan(Vec8f a) { return _mm256_cmp_ps(a.v, a.v, _CMP_UNORD_Q); }

// mask ? a : b
inline Vec8f select(Vec8f mask, Vec8f a, Vec8f b) { return _mm256_blendv_ps(b.v, a.v, mask.v); }
inline Vec8f fmadd(Vec8f a, Vec8f b, Vec8f c) { return _mm256_fmadd_ps(a.v, b.v, c.v); }    // a*b+c
inline Vec8f fnmadd(Vec8f a, Vec8f b, Vec8f c) { return _mm256_fnmadd_ps(a.v, b.v, c.v); }  // c-a*b
inline Vec8f fmsub(Vec8f a, Vec8f b, Vec8f c) { return _mm256_fmsub_ps(a.v, b.v, c.v); }    // a*b-c
inline Vec8f abs(Vec8f a) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), a.v); }
inline Vec8f copysign(Vec8f mag, Vec8f sign) {
  const __m256 s = _mm256_set1_ps(-0.0f);
  return _mm256_or_ps(_mm256_andnot_ps(s, mag.v), _mm256_and_ps(s, sign.v));
}
// std::max/std::min semantics: (a < b) ? b : a, so a NaN in `a` is kept and one in `b` is not.
inline Vec8f std_max(Vec8f a, Vec8f b) { return select(a < b, b, a); }
inline Vec8f std_min(Vec8f a, Vec8f b) { return select(b < a, b, a); }
// NaN-propagating maximum/minimum (torch.maximum/minimum).
inline Vec8f nan_max(Vec8f a, Vec8f b) {
  const Vec8f m = _mm256_max_ps(a.v, b.v);
  return select(isnan(a) | isnan(b), a + b, m);
}
inline Vec8f nan_min(Vec8f a, Vec8f b) {
  const Vec8f m = _mm256_min_ps(a.v, b.v);
  return select(isnan(a) | isnan(b), a + b, m);
}
inline Vec8f round_even(Vec8f a) {
  return _mm256_round_ps(a.v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
inline Vec8f floor(Vec8f a) {
  return _mm256_round_ps(a.v, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
}
inline Vec8f ceil(Vec8f a) {
  return _mm256_round_ps(a.v, _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC);
}
inline Vec8f trunc(Vec8f a) { return _mm256_round_ps(a.v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC); }
inline Vec8f sqrt(Vec8f a) { return _mm256_sqrt_ps(a.v); }

inline float hsum(Vec8f a) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(a.v), _mm256_extractf128_ps(a.v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
// Largest lane (_mm256_max_ps semantics: a NaN lane may or may not win; callers that care
// check for NaN separately).
inline float hmax(Vec8f a) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(a.v), _mm256_extractf128_ps(a.v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Row tails: the first n (0..8) lanes. Loads leave the other lanes 0 and read nothing past
// p[n - 1]; stores write only the first n floats. Kernels run a row's tail through the same
// vector body as the rest, so every element of a row is computed by the same instructions
// wherever a row is split.
inline __m256i lane_mask(int64_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
inline Vec8f load_first(const float* p, int64_t n) {
  return _mm256_maskload_ps(p, lane_mask(n));
}
inline void store_first(float* p, Vec8f v, int64_t n) {
  _mm256_maskstore_ps(p, lane_mask(n), v.v);
}
inline Vec8f first_lanes(int64_t n) { return _mm256_castsi256_ps(lane_mask(n)); }

// 16-bit floats: bf16 widens by a shift; narrowing rounds to nearest even and keeps NaN quiet,
// exactly like the scalar bf16 struct. fp16 uses the F16C instructions.
inline Vec8f load_bf16(const uint16_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
inline __m128i narrow_bf16(Vec8f a) {
  const __m256i u = _mm256_castps_si256(a.v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  __m256i r = _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb);
  r = _mm256_srli_epi32(r, 16);
  const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
  const __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                            _mm256_set1_epi32(0x7f800000));
  r = _mm256_blendv_epi8(r, quiet, is_nan);
  return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}
inline void store_bf16(uint16_t* p, Vec8f a) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), narrow_bf16(a));
}
inline Vec8f load_f16(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline void store_f16(uint16_t* p, Vec8f a) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p),
                   _mm256_cvtps_ph(a.v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
// Eight elements of a storage dtype as fp32 and back, by element type (for templated kernels).
inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const bf16* p) { return load_bf16(reinterpret_cast<const uint16_t*>(p)).v; }
inline __m256 load8(const f16* p) { return load_f16(reinterpret_cast<const uint16_t*>(p)).v; }
inline void store8(float* p, __m256 v) { _mm256_storeu_ps(p, v); }
inline void store8(bf16* p, __m256 v) { store_bf16(reinterpret_cast<uint16_t*>(p), v); }
inline void store8(f16* p, __m256 v) { store_f16(reinterpret_cast<uint16_t*>(p), v); }

template <size_t N>
inline Vec8f horner(Vec8f x, const float (&c)[N]) {
  Vec8f r(c[N - 1]);
  for (size_t k = N - 1; k-- > 0;) r = fmadd(r, x, Vec8f(c[k]));
  return r;
}

inline Vec8f pow2i(__m256i n) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n, _mm256_set1_epi32(127)), 23));
}

// Vector versions of vmath.h; see there for the algorithms.
inline Vec8f exp(Vec8f x0) {
  namespace c = vm::coef;
  const Vec8f x =
      _mm256_min_ps(_mm256_max_ps(x0.v, _mm256_set1_ps(c::kExpMin)), _mm256_set1_ps(c::kExpMax));
  const Vec8f n = round_even(x * Vec8f(c::kLog2e));
  Vec8f r = fnmadd(n, Vec8f(c::kLn2Hi), x);
  r = fnmadd(n, Vec8f(c::kLn2Lo), r);
  Vec8f p = horner(r, c::kExp);
  p = fmadd(r * r, p, Vec8f(1.0f) + r);
  const __m256i ni = _mm256_cvtps_epi32(n.v);
  const __m256i n1 = _mm256_srai_epi32(ni, 1);
  const Vec8f y = p * pow2i(n1) * pow2i(_mm256_sub_epi32(ni, n1));
  return select(isnan(x0), x0, y);
}

inline Vec8f expm1(Vec8f x) {
  const Vec8f small = fmadd(x * x, horner(x, vm::coef::kExp), x);
  const Vec8f big = exp(x) - Vec8f(1.0f);
  return select(abs(x) <= Vec8f(0.5f * vm::coef::kLn2Hi), small, big);
}

inline Vec8f log(Vec8f x0) {
  namespace c = vm::coef;
  const Vec8f tiny = x0 < Vec8f(std::numeric_limits<float>::min());
  const Vec8f x = select(tiny, x0 * Vec8f(8388608.0f), x0);
  const Vec8f scale = select(tiny, Vec8f(-23.0f), Vec8f(0.0f));
  const __m256i u = _mm256_castps_si256(x.v);
  Vec8f e = Vec8f(_mm256_cvtepi32_ps(
                _mm256_sub_epi32(_mm256_srli_epi32(u, 23), _mm256_set1_epi32(126)))) +
            scale;
  Vec8f m = _mm256_castsi256_ps(_mm256_or_si256(_mm256_and_si256(u, _mm256_set1_epi32(0x007fffff)),
                                                _mm256_set1_epi32(0x3f000000)));
  const Vec8f lo = m < Vec8f(c::kSqrtHalf);
  m = select(lo, m + m, m);
  e = select(lo, e - Vec8f(1.0f), e);
  const Vec8f f = m - Vec8f(1.0f);
  const Vec8f z = f * f;
  const Vec8f y = f * z * horner(f, c::kLog);
  Vec8f r = fmadd(e, Vec8f(c::kLn2Lo), y);
  r = fnmadd(Vec8f(0.5f), z, r);
  r = r + f;
  r = fmadd(e, Vec8f(c::kLn2Hi), r);
  const float inf = std::numeric_limits<float>::infinity();
  r = select(x0 == Vec8f(inf), Vec8f(inf), r);
  r = select(x0 == Vec8f(0.0f), Vec8f(-inf), r);
  // negative inputs and NaN: not (x > 0) and not zero
  const Vec8f bad = _mm256_cmp_ps(x0.v, _mm256_setzero_ps(), _CMP_NGE_UQ) | isnan(x0);
  return select(bad, Vec8f(std::numeric_limits<float>::quiet_NaN()), r);
}

inline Vec8f log1p(Vec8f x) {
  const Vec8f u = Vec8f(1.0f) + x;
  const Vec8f r = log(u) * (x / (u - Vec8f(1.0f)));
  const float inf = std::numeric_limits<float>::infinity();
  return select(u == Vec8f(1.0f), x, select(u == Vec8f(inf), u, r));
}

inline Vec8f tanh(Vec8f x) {
  const Vec8f a = abs(x);
  const Vec8f z = x * x;
  const Vec8f small = fmadd(x * z, horner(z, vm::coef::kTanh), x);
  const Vec8f e = exp(a + a);
  const Vec8f big = copysign(Vec8f(1.0f) - Vec8f(2.0f) / (e + Vec8f(1.0f)), x);
  return select(a < Vec8f(vm::coef::kTanhSmall), small, big);
}

inline Vec8f erf(Vec8f x) {
  namespace c = vm::coef;
  const Vec8f a = abs(x);
  const Vec8f small = x * horner(x * x, c::kErfSmall);
  const Vec8f t = Vec8f(1.0f) / a;
  const Vec8f b = horner(t, c::kErfcLarge);
  const Vec8f hi = a * a;
  const Vec8f lo = fmsub(a, a, hi);
  Vec8f ex = exp(-hi);
  ex = fnmadd(ex, lo, ex);
  Vec8f big = fnmadd(ex, b, Vec8f(1.0f));
  big = select(a > Vec8f(c::kErfOne), Vec8f(1.0f), big);
  big = copysign(big, x);
  return select(a < Vec8f(1.0f), small, big);
}

inline Vec8f sigmoid(Vec8f x) { return Vec8f(1.0f) / (Vec8f(1.0f) + exp(-x)); }

// vm::gelu_erf for 8 lanes: the accurate erf only when some lane needs it.
inline Vec8f gelu_erf(Vec8f x) {
  const Vec8f z = x * x;
  const Vec8f r = x * horner(z, vm::coef::kErfRatP) / horner(z, vm::coef::kErfRatQ);
  const Vec8f tail = _mm256_cmp_ps(abs(x).v, _mm256_set1_ps(2.5f), _CMP_NLE_UQ);  // > 2.5 or NaN
  if (_mm256_movemask_ps(tail.v) == 0) return r;
  return select(tail, erf(x), r);
}

}  // namespace neuron::kernels::avx2
NEURON_AVX2_END

#endif  // NEURON_KERNELS_X86
