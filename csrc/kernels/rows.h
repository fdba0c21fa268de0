// Vectorised conversion of contiguous rows between a storage dtype and fp32, the compute type of
// the normalisation, softmax, attention and GEMV kernels for every floating dtype but fp64.
#pragma once

#include <cstdint>

#include "dtype.h"

namespace neuron::kernels {

// dst[i] = float(src[i]) for a floating (or integer) `t`.
void row_to_f32(const void* src, DType t, float* dst, int64_t n);
// dst[i] = t(src[i]) (round to nearest even for 16-bit floats).
void row_from_f32(const float* src, void* dst, DType t, int64_t n);
// Strided variants (strides in elements of `t`).
void strided_to_f32(const void* src, DType t, int64_t stride, float* dst, int64_t n);
void strided_from_f32(const float* src, void* dst, DType t, int64_t stride, int64_t n);

}  // namespace neuron::kernels
