// Vector kernels of the executor's hot paths, compiled for AVX2+FMA and chosen at run time
// (a portable version runs elsewhere; tests compare the two).
#pragma once

#include <cstdint>

namespace neuron::nki::simd {

// y[i] += a * x[i] for fp32 x.
void axpy_f32(float* y, float a, const float* x, int64_t n);
// y[i] += a * x[i] for bf16 x (raw 16-bit patterns).
void axpy_bf16(float* y, float a, const uint16_t* x, int64_t n);

// The portable versions (for tests).
void axpy_f32_portable(float* y, float a, const float* x, int64_t n);
void axpy_bf16_portable(float* y, float a, const uint16_t* x, int64_t n);
// Whether the AVX2+FMA versions are in use.
bool using_avx2();

}  // namespace neuron::nki::simd
