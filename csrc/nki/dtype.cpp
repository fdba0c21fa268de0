#include "dtype.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>

namespace neuron::nki {
namespace {

using kernels::bf16;
using kernels::bits_f32;
using kernels::f32_bits;

struct Info {
  std::string_view name;
  int size;
  bool is_float;
  bool packed;
};

constexpr Info kInfo[kNumDTypes] = {
    {"bool", 1, false, false},           {"int8", 1, false, false},
    {"int16", 2, false, false},          {"int32", 4, false, false},
    {"uint8", 1, false, false},          {"uint16", 2, false, false},
    {"uint32", 4, false, false},         {"float16", 2, true, false},
    {"bfloat16", 2, true, false},        {"float32", 4, true, false},
    {"tfloat32", 4, true, false},        {"float8_e4m3", 1, true, false},
    {"float8_e4m3fn", 1, true, false},   {"float8_e5m2", 1, true, false},
    {"float8_e8m0fnu", 1, true, false},  {"float8_e5m2_x4", 4, true, true},
    {"float8_e4m3fn_x4", 4, true, true}, {"float4_e2m1fn_x4", 2, true, true},
};

// Rounds a float to an integer type: round to nearest even, saturating, NaN -> 0.
template <typename I>
I saturate(float v) {
  if (std::isnan(v)) return 0;
  const double r = std::nearbyint(static_cast<double>(v));
  if (r <= static_cast<double>(std::numeric_limits<I>::min())) return std::numeric_limits<I>::min();
  if (r >= static_cast<double>(std::numeric_limits<I>::max())) return std::numeric_limits<I>::max();
  return static_cast<I>(r);
}

template <typename T>
T read(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}
template <typename T>
void write(uint8_t* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}

// Per-type element codecs. Each has float get(p) and void put(p, float).
template <DT T>
struct Codec;

#define NKI_INT_CODEC(D, C)                                                            \
  template <>                                                                          \
  struct Codec<DT::D> {                                                                \
    using S = C;                                                                       \
    static float get(const uint8_t* p) { return static_cast<float>(read<C>(p)); }      \
    static void put(uint8_t* p, float v) { write<C>(p, saturate<C>(v)); }              \
    static int64_t geti(const uint8_t* p) { return static_cast<int64_t>(read<C>(p)); } \
    static void puti(uint8_t* p, int64_t v) { write<C>(p, static_cast<C>(v)); }        \
  };
NKI_INT_CODEC(Int8, int8_t)
NKI_INT_CODEC(Int16, int16_t)
NKI_INT_CODEC(Int32, int32_t)
NKI_INT_CODEC(UInt8, uint8_t)
NKI_INT_CODEC(UInt16, uint16_t)
NKI_INT_CODEC(UInt32, uint32_t)
#undef NKI_INT_CODEC

template <>
struct Codec<DT::Bool> {
  static float get(const uint8_t* p) { return *p ? 1.0f : 0.0f; }
  static void put(uint8_t* p, float v) { *p = (v != 0.0f && !std::isnan(v)) ? 1 : 0; }
  static int64_t geti(const uint8_t* p) { return *p ? 1 : 0; }
  static void puti(uint8_t* p, int64_t v) { *p = v != 0 ? 1 : 0; }
};

#define NKI_FLOAT_CODEC(D, GET, PUT)                                           \
  template <>                                                                  \
  struct Codec<DT::D> {                                                        \
    static float get(const uint8_t* p) { return GET; }                         \
    static void put(uint8_t* p, float v) { PUT; }                              \
    static int64_t geti(const uint8_t* p) {                                    \
      return static_cast<int64_t>(saturate<int64_t>(get(p)));                  \
    }                                                                          \
    static void puti(uint8_t* p, int64_t v) { put(p, static_cast<float>(v)); } \
  };
NKI_FLOAT_CODEC(Float32, read<float>(p), write<float>(p, v))
NKI_FLOAT_CODEC(TFloat32, read<float>(p), write<float>(p, round_tf32(v)))
NKI_FLOAT_CODEC(BFloat16, static_cast<float>(read<bf16>(p)), write<bf16>(p, bf16(v)))
NKI_FLOAT_CODEC(Float16, kernels::f16_to_f32(read<uint16_t>(p)),
                write<uint16_t>(p, kernels::f32_to_f16(v)))
NKI_FLOAT_CODEC(F8E4M3, f8e4m3_to_f32(*p), *p = f32_to_f8e4m3(v))
NKI_FLOAT_CODEC(F8E4M3FN, kernels::f8e4m3fn_to_f32(*p), *p = kernels::f32_to_f8e4m3fn(v))
NKI_FLOAT_CODEC(F8E5M2, kernels::f8e5m2_to_f32(*p), *p = kernels::f32_to_f8e5m2(v))
NKI_FLOAT_CODEC(F8E8M0FNU, f8e8m0_to_f32(*p), *p = f32_to_f8e8m0(v))
#undef NKI_FLOAT_CODEC

template <DT T>
void load_f32_t(const uint8_t* src, int64_t stride, int64_t n, float* out) {
  if constexpr (T == DT::Float32 || T == DT::TFloat32) {
    if (stride == 4) {
      std::memcpy(out, src, static_cast<size_t>(n) * 4);
      return;
    }
  }
  if constexpr (T == DT::BFloat16) {
    if (stride == 2) {  // contiguous: a shift the compiler vectorises
      const auto* s = reinterpret_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, s + i, 2);
        out[i] = bits_f32(static_cast<uint32_t>(h) << 16);
      }
      return;
    }
  }
  for (int64_t i = 0; i < n; ++i) out[i] = Codec<T>::get(src + i * stride);
}

template <DT T>
void store_f32_t(uint8_t* dst, int64_t stride, int64_t n, const float* in) {
  if constexpr (T == DT::Float32) {
    if (stride == 4) {
      std::memcpy(dst, in, static_cast<size_t>(n) * 4);
      return;
    }
  }
  if constexpr (T == DT::BFloat16) {
    if (stride == 2) {
      auto* d = reinterpret_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) {
        uint32_t u = f32_bits(in[i]);
        uint16_t h;
        if ((u & 0x7fffffffu) > 0x7f800000u) {
          h = static_cast<uint16_t>((u >> 16) | 0x40);
        } else {
          u += 0x7fffu + ((u >> 16) & 1u);
          h = static_cast<uint16_t>(u >> 16);
        }
        std::memcpy(d + i, &h, 2);
      }
      return;
    }
  }
  for (int64_t i = 0; i < n; ++i) Codec<T>::put(dst + i * stride, in[i]);
}

template <DT T>
void load_i64_t(const uint8_t* src, int64_t stride, int64_t n, int64_t* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = Codec<T>::geti(src + i * stride);
}
template <DT T>
void store_i64_t(uint8_t* dst, int64_t stride, int64_t n, const int64_t* in) {
  for (int64_t i = 0; i < n; ++i) Codec<T>::puti(dst + i * stride, in[i]);
}

using LoadFn = void (*)(const uint8_t*, int64_t, int64_t, float*);
using StoreFn = void (*)(uint8_t*, int64_t, int64_t, const float*);
using LoadIFn = void (*)(const uint8_t*, int64_t, int64_t, int64_t*);
using StoreIFn = void (*)(uint8_t*, int64_t, int64_t, const int64_t*);

[[noreturn]] void packed_error(DT t) {
  throw std::invalid_argument(
      std::string("nki: ") + std::string(dt_name(t)) +
      " is a packed type: engines cannot compute on it (only DMA moves it)");
}
void load_packed(const uint8_t*, int64_t, int64_t, float*) { packed_error(DT::F8E5M2x4); }
void store_packed(uint8_t*, int64_t, int64_t, const float*) { packed_error(DT::F8E5M2x4); }
void load_packed_i(const uint8_t*, int64_t, int64_t, int64_t*) { packed_error(DT::F8E5M2x4); }
void store_packed_i(uint8_t*, int64_t, int64_t, const int64_t*) { packed_error(DT::F8E5M2x4); }

#define NKI_TABLE(fn, packed)                                                                 \
  {                                                                                           \
    fn<DT::Bool>, fn<DT::Int8>, fn<DT::Int16>, fn<DT::Int32>, fn<DT::UInt8>, fn<DT::UInt16>,  \
        fn<DT::UInt32>, fn<DT::Float16>, fn<DT::BFloat16>, fn<DT::Float32>, fn<DT::TFloat32>, \
        fn<DT::F8E4M3>, fn<DT::F8E4M3FN>, fn<DT::F8E5M2>, fn<DT::F8E8M0FNU>, packed, packed,  \
        packed                                                                                \
  }

const LoadFn kLoad[kNumDTypes] = NKI_TABLE(load_f32_t, load_packed);
const StoreFn kStore[kNumDTypes] = NKI_TABLE(store_f32_t, store_packed);
const LoadIFn kLoadI[kNumDTypes] = NKI_TABLE(load_i64_t, load_packed_i);
const StoreIFn kStoreI[kNumDTypes] = NKI_TABLE(store_i64_t, store_packed_i);
#undef NKI_TABLE

// A small IEEE-like float with E exponent bits, M mantissa bits and bias B. `ieee` means the
// all-ones exponent encodes inf/nan; otherwise only the all-ones code is NaN (fn types).
template <int E, int M, int B>
float small_decode(uint8_t v, bool ieee) {
  const bool neg = v & 0x80u;
  const int exp = (v >> M) & ((1 << E) - 1);
  const int mant = v & ((1 << M) - 1);
  if (ieee && exp == (1 << E) - 1) {
    if (mant) return std::numeric_limits<float>::quiet_NaN();
    return neg ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::infinity();
  }
  const float r = exp == 0 ? std::ldexp(static_cast<float>(mant), 1 - B - M)
                           : std::ldexp(1.0f + static_cast<float>(mant) / (1 << M), exp - B);
  return neg ? -r : r;
}

template <int E, int M, int B>
uint8_t small_encode(float f, uint8_t max_finite, uint8_t overflow, uint8_t nan) {
  const uint8_t sign = std::signbit(f) ? 0x80u : 0u;
  if (std::isnan(f)) return static_cast<uint8_t>(sign | nan);
  const float a = std::fabs(f);
  if (std::isinf(a)) return static_cast<uint8_t>(sign | overflow);
  const float min_normal = std::ldexp(1.0f, 1 - B);
  uint32_t code;
  if (a < min_normal) {
    code = static_cast<uint32_t>(std::nearbyint(std::ldexp(a, B - 1 + M)));
  } else {
    int e;
    const float fr = std::frexp(a, &e);
    e -= 1;
    auto q = static_cast<uint32_t>(std::nearbyint(std::ldexp(fr * 2.0f - 1.0f, M)));
    if (q == (1u << M)) {
      q = 0;
      ++e;
    }
    const int be = e + B;
    if (be >= (1 << E)) return static_cast<uint8_t>(sign | overflow);
    code = (static_cast<uint32_t>(be) << M) | q;
  }
  if (code > max_finite) return static_cast<uint8_t>(sign | overflow);
  return static_cast<uint8_t>(sign | code);
}

}  // namespace

int dt_size(DT t) { return kInfo[static_cast<int>(t)].size; }
std::string_view dt_name(DT t) {
  const int i = static_cast<int>(t);
  return i >= 0 && i < kNumDTypes ? kInfo[i].name : std::string_view("invalid");
}
bool dt_is_int(DT t) { return !kInfo[static_cast<int>(t)].is_float; }
bool dt_is_packed(DT t) { return kInfo[static_cast<int>(t)].packed; }

kernels::DType to_kernel_dtype(DT t) {
  using K = kernels::DType;
  switch (t) {
    case DT::Bool:
      return K::Bool;
    case DT::Int8:
      return K::Int8;
    case DT::Int16:
      return K::Int16;
    case DT::Int32:
      return K::Int32;
    case DT::UInt8:
      return K::UInt8;
    case DT::UInt16:
      return K::UInt16;
    case DT::UInt32:
      return K::UInt32;
    case DT::Float16:
      return K::Float16;
    case DT::BFloat16:
      return K::BFloat16;
    case DT::Float32:
      return K::Float32;
    case DT::F8E4M3FN:
      return K::Float8_e4m3fn;
    case DT::F8E5M2:
      return K::Float8_e5m2;
    default:
      return K::Undefined;
  }
}

void load_f32(DT t, const uint8_t* src, int64_t stride, int64_t n, float* out) {
  kLoad[static_cast<int>(t)](src, stride, n, out);
}
void store_f32(DT t, uint8_t* dst, int64_t stride, int64_t n, const float* in) {
  kStore[static_cast<int>(t)](dst, stride, n, in);
}
void load_i64(DT t, const uint8_t* src, int64_t stride, int64_t n, int64_t* out) {
  kLoadI[static_cast<int>(t)](src, stride, n, out);
}
void store_i64(DT t, uint8_t* dst, int64_t stride, int64_t n, const int64_t* in) {
  kStoreI[static_cast<int>(t)](dst, stride, n, in);
}

float to_f32(DT t, const uint8_t* p) {
  float v;
  load_f32(t, p, dt_size(t), 1, &v);
  return v;
}
void from_f32(DT t, float v, uint8_t* p) { store_f32(t, p, dt_size(t), 1, &v); }

float f8e4m3_to_f32(uint8_t v) { return small_decode<4, 3, 7>(v, true); }
uint8_t f32_to_f8e4m3(float f) {
  // Largest finite 0x77 = 240; overflow saturates to infinity (0x78), NaN is 0x7f.
  return small_encode<4, 3, 7>(f, 0x77, 0x78, 0x7f);
}

float f8e8m0_to_f32(uint8_t v) {
  if (v == 0xff) return std::numeric_limits<float>::quiet_NaN();
  return std::ldexp(1.0f, static_cast<int>(v) - 127);
}
uint8_t f32_to_f8e8m0(float f) {
  // Unsigned power of two: the nearest one (by value) to |f|; NaN/inf and zero map to the
  // NaN code and the smallest scale respectively.
  if (std::isnan(f) || std::isinf(f)) return 0xff;
  const float a = std::fabs(f);
  if (a == 0.0f) return 0;
  int e;
  const float fr = std::frexp(a, &e);  // a = fr * 2^e, fr in [0.5, 1)
  int p = e - 1;                       // a = (2 fr) * 2^p, 2fr in [1, 2)
  if (fr * 2.0f > 1.5f) ++p;
  const int code = p + 127;
  if (code < 0) return 0;
  if (code > 254) return 254;
  return static_cast<uint8_t>(code);
}

float round_tf32(float f) {
  uint32_t u = f32_bits(f);
  if ((u & 0x7f800000u) == 0x7f800000u) return f;  // inf / nan unchanged
  u += 0xfffu + ((u >> 13) & 1u);                  // round to nearest even at bit 13
  u &= ~0x1fffu;
  return bits_f32(u);
}

}  // namespace neuron::nki
