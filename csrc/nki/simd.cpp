#include "simd.h"

#include <bit>
#include <cstring>

#include "kernels/simd.h"

namespace neuron::nki::simd {

namespace {

inline float bf16_to_f32(uint16_t h) {
  return std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
}

#if defined(__x86_64__) && defined(__GNUC__)
#define NKI_SIMD_AVX2 1
// The same loops as the portable versions; the target attribute lets -O3 vectorise them with
// 256-bit FMAs.
__attribute__((target("avx2,fma"))) void axpy_f32_avx2(float* __restrict y, float a,
                                                       const float* __restrict x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}
__attribute__((target("avx2,fma"))) void axpy_bf16_avx2(float* __restrict y, float a,
                                                        const uint16_t* __restrict x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * bf16_to_f32(x[i]);
}
#endif

struct Table {
  void (*f32)(float*, float, const float*, int64_t) = axpy_f32_portable;
  void (*bf16)(float*, float, const uint16_t*, int64_t) = axpy_bf16_portable;
  bool avx2 = false;
  Table() {
#ifdef NKI_SIMD_AVX2
    if (kernels::simd_level() == kernels::SimdLevel::Avx2) {
      f32 = axpy_f32_avx2;
      bf16 = axpy_bf16_avx2;
      avx2 = true;
    }
#endif
  }
};

const Table& table() {
  static const Table t;
  return t;
}

}  // namespace

void axpy_f32_portable(float* y, float a, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}
void axpy_bf16_portable(float* y, float a, const uint16_t* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * bf16_to_f32(x[i]);
}

void axpy_f32(float* y, float a, const float* x, int64_t n) { table().f32(y, a, x, n); }
void axpy_bf16(float* y, float a, const uint16_t* x, int64_t n) { table().bf16(y, a, x, n); }
bool using_avx2() { return table().avx2; }

}  // namespace neuron::nki::simd
