#include "dtype.h"

#include <cmath>

namespace neuron::kernels {

size_t element_size(DType t) {
  switch (t) {
    case DType::Bool:
    case DType::UInt8:
    case DType::Int8:
    case DType::Float8_e4m3fn:
    case DType::Float8_e5m2:
      return 1;
    case DType::Int16:
    case DType::UInt16:
    case DType::Float16:
    case DType::BFloat16:
      return 2;
    case DType::Int32:
    case DType::UInt32:
    case DType::Float32:
      return 4;
    case DType::Int64:
    case DType::UInt64:
    case DType::Float64:
    case DType::Complex64:
      return 8;
    case DType::Complex128:
      return 16;
    case DType::Undefined:
      break;
  }
  return 0;
}

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::Bool: return "bool";
    case DType::UInt8: return "uint8";
    case DType::Int8: return "int8";
    case DType::Int16: return "int16";
    case DType::Int32: return "int32";
    case DType::Int64: return "int64";
    case DType::UInt16: return "uint16";
    case DType::UInt32: return "uint32";
    case DType::UInt64: return "uint64";
    case DType::Float16: return "float16";
    case DType::BFloat16: return "bfloat16";
    case DType::Float32: return "float32";
    case DType::Float64: return "float64";
    case DType::Complex64: return "complex64";
    case DType::Complex128: return "complex128";
    case DType::Float8_e4m3fn: return "float8_e4m3fn";
    case DType::Float8_e5m2: return "float8_e5m2";
    case DType::Undefined: break;
  }
  return "undefined";
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    const float v = static_cast<float>(mant) * (1.0f / 16777216.0f);  // mant * 2^-24
    return sign ? -v : v;
  }
  if (exp == 31) return bits_f32(sign | 0x7f800000u | (mant << 13));
  return bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
}

uint16_t f32_to_f16(float f) {
  const uint32_t x = f32_bits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t a = x & 0x7fffffffu;
  if (a >= 0x7f800000u) {  // inf / nan
    return static_cast<uint16_t>(sign | 0x7c00u | (a > 0x7f800000u ? (0x200u | ((a >> 13) & 0x3ffu)) : 0u));
  }
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to inf
  if (a < 0x38800000u) {  // below the smallest normal half (2^-14): subnormal or zero
    const auto q = static_cast<uint32_t>(std::nearbyint(bits_f32(a) * 16777216.0f));
    return static_cast<uint16_t>(sign | q);
  }
  const uint32_t mant = a & 0x7fffffu;
  const uint32_t exp = (a >> 23) - 127u + 15u;
  uint32_t h = (exp << 10) | (mant >> 13);
  const uint32_t rest = mant & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

namespace {

// Generic OCP small float with E exponent bits and M mantissa bits.
template <int E, int M, int Bias>
float small_to_f32(uint8_t v) {
  const bool neg = v & 0x80u;
  const int exp = (v >> M) & ((1 << E) - 1);
  const int mant = v & ((1 << M) - 1);
  float r;
  if (exp == 0) {
    r = std::ldexp(static_cast<float>(mant), 1 - Bias - M);
  } else {
    r = std::ldexp(1.0f + static_cast<float>(mant) / (1 << M), exp - Bias);
  }
  return neg ? -r : r;
}

template <int E, int M, int Bias>
uint8_t f32_to_small(float f, uint8_t max_code, uint8_t overflow_code, uint8_t nan_code) {
  const uint8_t sign = std::signbit(f) ? 0x80u : 0u;
  if (std::isnan(f)) return static_cast<uint8_t>(sign | nan_code);
  const float a = std::fabs(f);
  const float min_normal = std::ldexp(1.0f, 1 - Bias);
  uint32_t code;
  if (a < min_normal) {
    code = static_cast<uint32_t>(std::nearbyint(std::ldexp(a, Bias - 1 + M)));
  } else {
    int e;
    const float fr = std::frexp(a, &e);  // a = fr * 2^e, fr in [0.5, 1)
    e -= 1;                              // a = (2*fr) * 2^e
    float m = fr * 2.0f - 1.0f;
    auto q = static_cast<uint32_t>(std::nearbyint(std::ldexp(m, M)));
    if (q == (1u << M)) {
      q = 0;
      ++e;
    }
    const int be = e + Bias;
    if (be >= (1 << E)) return static_cast<uint8_t>(sign | overflow_code);
    code = (static_cast<uint32_t>(be) << M) | q;
  }
  if (code > max_code) return static_cast<uint8_t>(sign | overflow_code);
  return static_cast<uint8_t>(sign | code);
}

}  // namespace

float f8e4m3fn_to_f32(uint8_t v) {
  if ((v & 0x7fu) == 0x7fu) return std::nanf("");
  return small_to_f32<4, 3, 7>(v);
}
uint8_t f32_to_f8e4m3fn(float f) {
  // Largest finite is 0x7e (448); anything that rounds above it becomes NaN (no infinities).
  return f32_to_small<4, 3, 7>(f, 0x7e, 0x7f, 0x7f);
}
float f8e5m2_to_f32(uint8_t v) {
  const int exp = (v >> 2) & 0x1f;
  if (exp == 31) {
    if (v & 0x3u) return std::nanf("");
    return (v & 0x80u) ? -INFINITY : INFINITY;
  }
  return small_to_f32<5, 2, 15>(v);
}
uint8_t f32_to_f8e5m2(float f) {
  if (std::isinf(f)) return f > 0 ? 0x7c : 0xfc;
  return f32_to_small<5, 2, 15>(f, 0x7b, 0x7c, 0x7f);
}

}  // namespace neuron::kernels
