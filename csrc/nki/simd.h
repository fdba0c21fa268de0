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
// (ks = element size: a weight matrix read transposed in place) layouts have vector paths;
// the column-contiguous bf16 one has an AVX-512 version (16 columns x 32 k per step).
void gemv_bf16(float* acc, const float* coef, const uint8_t* w, int64_t ks, int64_t js, int64_t K,
               int64_t n);
void gemv_f32(float* acc, const float* coef, const uint8_t* w, int64_t ks, int64_t js, int64_t K,
              int64_t n);

// `rows` GEMVs over the same w: acc[r * lda + j] for the coefficients coef[r * K ..], each exactly
// what gemv_* computes for that row (row-contiguous w has a path that reads each element once
// for up to 8 rows).
void gemv_rows_bf16(float* acc, int64_t lda, const float* coef, int64_t rows, const uint8_t* w,
                    int64_t ks, int64_t js, int64_t K, int64_t n);
void gemv_rows_f32(float* acc, int64_t lda, const float* coef, int64_t rows, const uint8_t* w,
                   int64_t ks, int64_t js, int64_t K, int64_t n);

// gemv_bf16 over column-contiguous w (ks = 2), prefetching into L2, while it runs, the same
// columns' weights of the GEMV that runs next on this thread (`next_w`: its w, with the same
// js, K and n; nullptr: the same rows' next K values, as gemv_bf16 does). Same bits as gemv_bf16.
void gemv_bf16_then(float* acc, const float* coef, const uint8_t* w, int64_t js, int64_t K,
                    int64_t n, const uint8_t* next_w);

// A chain of L GEMVs with one layout over different weights (the matmuls of one projection over
// consecutive k ranges): for each l exactly gemv_bf16(acc[l], coef[l], w[l], ks, js, K, n), with
// the column-contiguous AVX-512 path computing a column block for every member before the next
// block (one pass over the weights' rows when the members are adjacent k ranges of them).
// `ahead`: columns after the n computed whose weights exist and may be prefetched (the next work
// item's), so its first column block is not read cold.
void gemv_chain_bf16(float* const* acc, const float* const* coef, const uint8_t* const* w,
                     int64_t L, int64_t ks, int64_t js, int64_t K, int64_t n, int64_t ahead = 0);
// Whether gemv_chain_bf16 reads the members together for this layout (otherwise it runs one
// gemv_bf16 per member, and callers may as well split the work per member).
bool gemv_chain_reads_together(int64_t ks, int64_t js, int64_t K);

// The portable versions (for tests).
void gemv_bf16_portable(float* acc, const float* coef, const uint8_t* w, int64_t ks, int64_t js,
                        int64_t K, int64_t n);
void gemv_f32_portable(float* acc, const float* coef, const uint8_t* w, int64_t ks, int64_t js,
                       int64_t K, int64_t n);
void axpy_f32_portable(float* y, float a, const float* x, int64_t n);
void axpy_bf16_portable(float* y, float a, const uint16_t* x, int64_t n);
// Whether the AVX2+FMA versions are in use, and the AVX-512 one of the column-contiguous bf16
// GEMV (on CPUs with AVX-512 F/BW/DQ, when the AVX2 versions are in use).
bool using_avx2();
bool using_avx512();
// Whether this CPU runs AVX-512 F/BW/DQ code (the one check behind every AVX-512 path of the
// NKI engine; each path also honours kernels::simd_level()).
bool cpu_has_avx512();

}  // namespace neuron::nki::simd
