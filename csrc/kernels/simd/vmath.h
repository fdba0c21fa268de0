// Single-precision transcendental functions written so that the scalar code here and the AVX2
// code in vec_avx2.h run the same algorithm (same range reduction, same polynomial, same
// special-value handling): the portable path and the vectorized path agree to within the
// rounding of a fused multiply-add. Accuracy against the correctly rounded result, measured
// over the float range: exp 1.3 ulp, log 0.8 ulp, tanh 1.4 ulp, erf 2.6 ulp.
// The polynomial coefficients are our own least-squares fits (Lawson-weighted toward minimax
// relative error) of the reduced functions named next to each table.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace neuron::kernels::vm {

namespace coef {
// e^r = 1 + r + r^2 * P(r), r in [-ln2/2, ln2/2]
inline constexpr float kExp[] = {0.5f,           0.166666672f,   0.0416664667f,
                                 0.00833335333f, 0.00139336078f, 0.000198628783f};
// log(1+f) = f - f^2/2 + f^3 * Q(f), f in [sqrt(1/2)-1, sqrt(2)-1]
inline constexpr float kLog[] = {0.333333313f,  -0.249999896f, 0.200007126f,
                                 -0.166684717f, 0.142497703f,  -0.124111667f,
                                 0.116632022f,  -0.115710065f, 0.0714502186f};
// tanh(x) = x + x^3 * T(x^2), |x| < 0.625
inline constexpr float kTanh[] = {-0.333333343f, 0.133333206f,   -0.0539621003f,
                                  0.021786632f,  -0.0083911391f, 0.00233790488f};
// erf(x) = x * A(x^2), |x| < 1
inline constexpr float kErfSmall[] = {1.12837911f,    -0.37612626f,   0.112835869f,
                                      -0.0268538855f, 0.00518846791f, -0.000801142189f,
                                      7.8579098e-05f};
// erfc(x) = exp(-x^2) * B(1/x), 1 <= x <= 4
inline constexpr float kErfcLarge[] = {3.24158063e-05f, 0.563587904f, 0.0041848789f, -0.291187584f,
                                       -0.0496033877f,  0.856461704f, -1.46034575f,  1.36089146f,
                                       -0.77052325f,    0.249909952f, -0.0358247198f};

// erf(x) = x * P(x^2) / Q(x^2) on |x| <= 4: a cheaper erf for GELU (see gelu_erf), within
// 7 ulp of erf (absolute error < 4e-7).
inline constexpr float kErfRatP[] = {1.12837911f,    0.207168579f,    0.051530797f,
                                     0.00399229163f, 0.000147317012f, -1.94220593e-06f,
                                     1.91061869e-08f};
inline constexpr float kErfRatQ[] = {1.0f, 0.516929626f, 0.11798878f, 0.0149617642f,
                                     0.00102149067f};

inline constexpr float kLog2e = 1.44269504088896341f;
inline constexpr float kLn2Hi = 0.693359375f;  // few mantissa bits: n * kLn2Hi is exact
inline constexpr float kLn2Lo = -2.12194440e-4f;
inline constexpr float kExpMin = -104.0f;  // below: exp underflows to 0
inline constexpr float kExpMax = 88.8f;    // above: exp overflows to inf
inline constexpr float kSqrtHalf = 0.707106781186547524f;
inline constexpr float kTanhSmall = 0.625f;
inline constexpr float kErfOne = 3.92f;            // erf(x) rounds to 1 beyond this
inline constexpr float kRoundMagic = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
}  // namespace coef

inline uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

template <size_t N>
inline float horner(float x, const float (&c)[N]) {
  float r = c[N - 1];
  for (size_t k = N - 1; k-- > 0;) r = r * x + c[k];
  return r;
}

// 2^n for n in [-126, 127] built from the exponent bits.
inline float pow2i(int32_t n) { return from_bits(static_cast<uint32_t>(n + 127) << 23); }

// Exponential with the reduction e^x = 2^n * e^r, the polynomial above for e^r, and 2^n
// applied in two halves so that results in the subnormal range are still produced.
inline float exp(float x) {
  if (x != x) return x;
  x = std::fmin(std::fmax(x, coef::kExpMin), coef::kExpMax);
  const float n = (x * coef::kLog2e + coef::kRoundMagic) - coef::kRoundMagic;
  float r = x - n * coef::kLn2Hi;
  r = r - n * coef::kLn2Lo;
  float p = horner(r, coef::kExp);
  p = 1.0f + r + r * r * p;
  const int32_t ni = static_cast<int32_t>(n);
  const int32_t n1 = ni >> 1;
  return p * pow2i(n1) * pow2i(ni - n1);
}

// e^x - 1: the reduced polynomial directly near zero (no cancellation), exp(x) - 1 elsewhere.
inline float expm1(float x) {
  if (std::fabs(x) <= 0.5f * coef::kLn2Hi) return x + x * x * horner(x, coef::kExp);
  return exp(x) - 1.0f;
}

// Natural logarithm: x = 2^e * m with m in [sqrt(1/2), sqrt(2)), log(m) by the polynomial.
inline float log(float x) {
  if (!(x > 0.0f)) {
    if (x == 0.0f) return -std::numeric_limits<float>::infinity();
    return std::numeric_limits<float>::quiet_NaN();  // negative or NaN
  }
  if (x == std::numeric_limits<float>::infinity()) return x;
  float scale = 0.0f;
  if (x < std::numeric_limits<float>::min()) {  // subnormal: renormalize first
    x *= 8388608.0f;                            // 2^23
    scale = -23.0f;
  }
  const uint32_t u = bits(x);
  float e = static_cast<float>(static_cast<int32_t>(u >> 23) - 126) + scale;
  float m = from_bits((u & 0x007fffffu) | 0x3f000000u);  // [0.5, 1)
  if (m < coef::kSqrtHalf) {
    m = m + m;
    e -= 1.0f;
  }
  const float f = m - 1.0f;
  const float z = f * f;
  const float y = f * z * horner(f, coef::kLog);
  float r = y + e * coef::kLn2Lo;
  r = r - 0.5f * z;
  r = r + f;
  return r + e * coef::kLn2Hi;
}

// log(1 + x): log(u) with u = 1 + x rounded, corrected by the rounding error of u.
inline float log1p(float x) {
  const float u = 1.0f + x;
  if (u == 1.0f) return x;
  if (u == std::numeric_limits<float>::infinity()) return u;
  return log(u) * (x / (u - 1.0f));
}

inline float tanh(float x) {
  const float a = std::fabs(x);
  if (a < coef::kTanhSmall) {
    const float z = x * x;
    return x + x * z * horner(z, coef::kTanh);
  }
  const float e = exp(a + a);
  return std::copysign(1.0f - 2.0f / (e + 1.0f), x);
}

inline float erf(float x) {
  const float a = std::fabs(x);
  if (a < 1.0f) return x * horner(x * x, coef::kErfSmall);
  if (a > coef::kErfOne) return std::copysign(1.0f, x);  // NaN falls through to the end
  const float t = 1.0f / a;
  const float b = horner(t, coef::kErfcLarge);
  const float hi = a * a;
  const float lo = static_cast<float>(static_cast<double>(a) * a - hi);  // a*a - hi exactly
  float ex = exp(-hi);
  ex = ex - ex * lo;  // exp(-(hi + lo)) to first order in lo
  return std::copysign(1.0f - ex * b, x);
}

inline float sigmoid(float x) { return 1.0f / (1.0f + exp(-x)); }

// GELU's erf: the rational form (coef::kErfRatP, absolute error < 4e-7) for |x| <= 2.5, where
// GELU's result is dominated by 0.5 * (1 + erf) >= 0.0002; the accurate erf beyond, where 1 + erf
// is tiny and an absolute error would show as a large relative one.
inline float gelu_erf(float x) {
  if (!(std::fabs(x) <= 2.5f)) return erf(x);  // NaN included
  const float z = x * x;
  return x * horner(z, coef::kErfRatP) / horner(z, coef::kErfRatQ);
}

}  // namespace neuron::kernels::vm
