#include "convert.h"

#include <cstring>
#include <stdexcept>
#include <string>

#include "dispatch.h"
#include "simd.h"
#include "simd/vec_avx2.h"

namespace neuron::kernels {

namespace {

template <typename To, typename From>
void convert_run(void* dst, int64_t ds, const void* src, int64_t ss, int64_t n) {
  char* d = static_cast<char*>(dst);
  const char* s = static_cast<const char*>(src);
  if (ds == static_cast<int64_t>(sizeof(To)) && ss == static_cast<int64_t>(sizeof(From))) {
    To* dd = reinterpret_cast<To*>(d);
    const From* sp = reinterpret_cast<const From*>(s);
    if constexpr (std::is_same_v<To, From>) {
      std::memcpy(dd, sp, static_cast<size_t>(n) * sizeof(To));
    } else {
      for (int64_t i = 0; i < n; ++i) dd[i] = convert<To>(sp[i]);
    }
    return;
  }
  if (ss == 0) {
    From v;
    std::memcpy(&v, s, sizeof(From));
    const To o = convert<To>(v);
    if (ds == static_cast<int64_t>(sizeof(To))) {
      To* dd = reinterpret_cast<To*>(d);
      for (int64_t i = 0; i < n; ++i) dd[i] = o;
    } else {
      for (int64_t i = 0; i < n; ++i) std::memcpy(d + i * ds, &o, sizeof(To));
    }
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    From v;
    std::memcpy(&v, s + i * ss, sizeof(From));
    const To o = convert<To>(v);
    std::memcpy(d + i * ds, &o, sizeof(To));
  }
}

template <typename T>
constexpr bool kConvertible = !is_complex_v<T>;

ConvertFn find_portable(DType to, DType from) {
  return dispatch_all(to, [&](auto t) -> ConvertFn {
    using To = decltype(t);
    return dispatch_all(from, [&](auto f) -> ConvertFn {
      using From = decltype(f);
      if constexpr (kConvertible<To> && kConvertible<From>) {
        return &convert_run<To, From>;
      } else {
        return nullptr;
      }
    });
  });
}

}  // namespace

#if NEURON_KERNELS_X86
NEURON_AVX2_BEGIN
namespace avx2 {
namespace {

bool contiguous(int64_t ds, int64_t ss, int64_t to_size, int64_t from_size) {
  return ds == to_size && ss == from_size;
}

void f32_from_bf16(void* dst, int64_t ds, const void* src, int64_t ss, int64_t n) {
  if (!contiguous(ds, ss, 4, 2)) return convert_run<float, bf16>(dst, ds, src, ss, n);
  float* d = static_cast<float*>(dst);
  const uint16_t* s = static_cast<const uint16_t*>(src);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) load_bf16(s + i).store(d + i);
  for (; i < n; ++i) d[i] = vm::from_bits(static_cast<uint32_t>(s[i]) << 16);
}

void bf16_from_f32(void* dst, int64_t ds, const void* src, int64_t ss, int64_t n) {
  if (!contiguous(ds, ss, 2, 4)) return convert_run<bf16, float>(dst, ds, src, ss, n);
  uint16_t* d = static_cast<uint16_t*>(dst);
  const float* s = static_cast<const float*>(src);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) store_bf16(d + i, Vec8f::load(s + i));
  for (; i < n; ++i) d[i] = bf16(s[i]).x;
}

void f32_from_f16(void* dst, int64_t ds, const void* src, int64_t ss, int64_t n) {
  if (!contiguous(ds, ss, 4, 2)) return convert_run<float, f16>(dst, ds, src, ss, n);
  float* d = static_cast<float*>(dst);
  const uint16_t* s = static_cast<const uint16_t*>(src);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) load_f16(s + i).store(d + i);
  for (; i < n; ++i) d[i] = _cvtsh_ss(s[i]);
}

void f16_from_f32(void* dst, int64_t ds, const void* src, int64_t ss, int64_t n) {
  if (!contiguous(ds, ss, 2, 4)) return convert_run<f16, float>(dst, ds, src, ss, n);
  uint16_t* d = static_cast<uint16_t*>(dst);
  const float* s = static_cast<const float*>(src);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) store_f16(d + i, Vec8f::load(s + i));
  for (; i < n; ++i) d[i] = static_cast<uint16_t>(_cvtss_sh(s[i], _MM_FROUND_TO_NEAREST_INT));
}

}  // namespace

ConvertFn find(DType to, DType from) {
  if (to == DType::Float32 && from == DType::BFloat16) return &f32_from_bf16;
  if (to == DType::BFloat16 && from == DType::Float32) return &bf16_from_f32;
  if (to == DType::Float32 && from == DType::Float16) return &f32_from_f16;
  if (to == DType::Float16 && from == DType::Float32) return &f16_from_f32;
  return nullptr;
}

}  // namespace avx2
NEURON_AVX2_END
#endif

ConvertFn find_convert(DType to, DType from) {
  if (to == DType::Undefined || from == DType::Undefined) return nullptr;
#if NEURON_KERNELS_X86
  if (simd_level() == SimdLevel::Avx2) {
    if (ConvertFn f = avx2::find(to, from)) return f;
  }
#endif
  return find_portable(to, from);
}

namespace {
ConvertFn f32_converter(DType to, DType from) {
  ConvertFn f = find_convert(to, from);
  if (!f)
    throw std::invalid_argument(std::string("fp32 row conversion: unsupported dtype ") +
                                std::string(dtype_name(to == DType::Float32 ? from : to)));
  return f;
}
}  // namespace

void strided_to_f32(const void* src, DType t, int64_t stride, float* dst, int64_t n) {
  f32_converter(DType::Float32, t)(dst, 4, src, stride * static_cast<int64_t>(element_size(t)),
                                   n);
}

void strided_from_f32(const float* src, void* dst, DType t, int64_t stride, int64_t n) {
  f32_converter(t, DType::Float32)(dst, stride * static_cast<int64_t>(element_size(t)), src, 4,
                                   n);
}

}  // namespace neuron::kernels
