// Element types the device computes on, and the 16-bit float formats as plain structs so the
// kernels layer needs no torch header. Conversions round to nearest even, like ATen's.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

namespace neuron::kernels {

enum class DType : uint8_t {
  Bool,
  UInt8,
  Int8,
  Int16,
  Int32,
  Int64,
  UInt16,
  UInt32,
  UInt64,
  Float16,
  BFloat16,
  Float32,
  Float64,
  Complex64,
  Complex128,
  Float8_e4m3fn,
  Float8_e5m2,
  Undefined,
};

size_t element_size(DType t);
std::string_view dtype_name(DType t);
inline bool is_floating(DType t) {
  return t == DType::Float16 || t == DType::BFloat16 || t == DType::Float32 ||
         t == DType::Float64 || t == DType::Float8_e4m3fn || t == DType::Float8_e5m2;
}
inline bool is_complex(DType t) { return t == DType::Complex64 || t == DType::Complex128; }
inline bool is_64bit(DType t) {
  return t == DType::Int64 || t == DType::UInt64 || t == DType::Float64 || t == DType::Complex128;
}

inline uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bits_f32(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

struct bf16 {
  uint16_t x;
  bf16() = default;
  static constexpr bf16 from_bits(uint16_t b) {
    bf16 r{};
    r.x = b;
    return r;
  }
  explicit bf16(float f) {
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) {  // NaN: keep it quiet
      x = static_cast<uint16_t>((u >> 16) | 0x40);
    } else {
      u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
      x = static_cast<uint16_t>(u >> 16);
    }
  }
  operator float() const { return bits_f32(static_cast<uint32_t>(x) << 16); }
};

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

struct f16 {
  uint16_t x;
  f16() = default;
  static constexpr f16 from_bits(uint16_t b) {
    f16 r{};
    r.x = b;
    return r;
  }
  explicit f16(float f) : x(f32_to_f16(f)) {}
  operator float() const { return f16_to_f32(x); }
};

// 8-bit floats (OCP FP8): e4m3fn (no infinities, max 448) and e5m2 (IEEE-like).
float f8e4m3fn_to_f32(uint8_t v);
uint8_t f32_to_f8e4m3fn(float f);
float f8e5m2_to_f32(uint8_t v);
uint8_t f32_to_f8e5m2(float f);

struct f8e4m3fn {
  uint8_t x;
  f8e4m3fn() = default;
  explicit f8e4m3fn(float f) : x(f32_to_f8e4m3fn(f)) {}
  operator float() const { return f8e4m3fn_to_f32(x); }
};
struct f8e5m2 {
  uint8_t x;
  f8e5m2() = default;
  explicit f8e5m2(float f) : x(f32_to_f8e5m2(f)) {}
  operator float() const { return f8e5m2_to_f32(x); }
};

}  // namespace neuron::kernels
