#include "rows.h"

#include <cstring>
#include <stdexcept>
#include <string>

#include "simd.h"
#include "dispatch.h"
#include "simd_avx2.h"

namespace neuron::kernels {
namespace {

template <typename T>
NEURON_AVX2 void to_f32_avx2(const T* s, float* d, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) avx2::store8(d + i, avx2::load8(s + i));
  for (; i < n; ++i) d[i] = static_cast<float>(s[i]);
}

template <typename T>
NEURON_AVX2 void from_f32_avx2(const float* s, T* d, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) avx2::store8(d + i, avx2::load8(s + i));
  for (; i < n; ++i) d[i] = T(s[i]);
}

[[noreturn]] void bad(DType t) {
  throw std::invalid_argument("row conversion: unsupported dtype " + std::string(dtype_name(t)));
}

}  // namespace

void row_to_f32(const void* src, DType t, float* dst, int64_t n) {
  if (t == DType::Float32) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
    return;
  }
  if (simd_level() == SimdLevel::Avx2) {
    if (t == DType::BFloat16) return to_f32_avx2(static_cast<const bf16*>(src), dst, n);
    if (t == DType::Float16) return to_f32_avx2(static_cast<const f16*>(src), dst, n);
  }
  dispatch_all(t, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (is_complex_v<T>) {
      bad(t);
    } else {
      const T* s = static_cast<const T*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = convert<float>(s[i]);
    }
  });
}

void row_from_f32(const float* src, void* dst, DType t, int64_t n) {
  if (t == DType::Float32) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
    return;
  }
  if (simd_level() == SimdLevel::Avx2) {
    if (t == DType::BFloat16) return from_f32_avx2(src, static_cast<bf16*>(dst), n);
    if (t == DType::Float16) return from_f32_avx2(src, static_cast<f16*>(dst), n);
  }
  dispatch_all(t, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (is_complex_v<T>) {
      bad(t);
    } else {
      T* d = static_cast<T*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = convert<T>(src[i]);
    }
  });
}

void strided_to_f32(const void* src, DType t, int64_t stride, float* dst, int64_t n) {
  if (stride == 1) return row_to_f32(src, t, dst, n);
  dispatch_all(t, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (is_complex_v<T>) {
      bad(t);
    } else {
      const T* s = static_cast<const T*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = convert<float>(s[i * stride]);
    }
  });
}

void strided_from_f32(const float* src, void* dst, DType t, int64_t stride, int64_t n) {
  if (stride == 1) return row_from_f32(src, dst, t, n);
  dispatch_all(t, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (is_complex_v<T>) {
      bad(t);
    } else {
      T* d = static_cast<T*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i * stride] = convert<T>(src[i]);
    }
  });
}

}  // namespace neuron::kernels
