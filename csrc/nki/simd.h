// Vector kernels of the executor's hot paths, compiled for AVX2+FMA and chosen at run time
// (a portable version runs elsewhere; tests compare the two).
#pragma once

#include <cstdint>

namespace neuron::nki::simd {

// y[i] += a * x[i] for fp32 x.
void axpy_f32(float* y, float a, const float* x, int64_t n);
// y[i] += a * x[i] for bf16 x (raw 16-bit patterns).
void axpy_bf16(float* y, float a, const uint16_t* x, int64_t n);

// acc[j] = sum over k = 0..K-1, in order, of coef[k] * w(k, j) for j < n, where w(k, j) is the
// element at w + k * ks + j * js bytes (bf16 raw patterns or fp32): the arithmetic of K axpy
// calls into a zeroed acc (one fp32 multiply-add per term, FMA where the axpy uses it), with
// the accumulators in registers. Row-contiguous (js = element size) and column-contiguous
// (ks = element size: a weight matrix read transposed in place) layouts have vector paths.
void gemv_bf16(float* acc, const float* coef, const uint8_t* w, int64_t ks, int64_t js, int64_t K,
               int64_t n);
void gemv_f32(float* acc, const float* coef, const uint8_t* w, int64_t ks, int64_t js, int64_t K,
              int64_t n);

// The portable versions (for tests).
void gemv_bf16_portable(float* acc, const float* coef, const uint8_t* w, int64_t ks, int64_t js,
                        int64_t K, int64_t n);
void gemv_f32_portable(float* acc, const float* coef, const uint8_t* w, int64_t ks, int64_t js,
                       int64_t K, int64_t n);
void axpy_f32_portable(float* y, float a, const float* x, int64_t n);
void axpy_bf16_portable(float* y, float a, const uint16_t* x, int64_t n);
// Whether the AVX2+FMA versions are in use.
bool using_avx2();

}  // namespace neuron::nki::simd
