// Element conversion between two strided runs of memory, the building block kernels use to
// load operands of any dtype into a contiguous compute buffer and to store results into an
// output of any dtype. The AVX2 clones cover the hot pairs (bf16/fp16 <-> fp32, copies).
#pragma once

#include <cstdint>

#include "dtype.h"

namespace neuron::kernels {

// dst[i * dst_stride] = convert(src[i * src_stride]) for i in [0, n); strides in bytes
// (a zero source stride broadcasts one value).
using ConvertFn = void (*)(void* dst, int64_t dst_stride, const void* src, int64_t src_stride,
                           int64_t n);

// The converter for a dtype pair at the current simd_level(); nullptr for complex or undefined
// dtypes. Conversions follow kernels::convert (ATen's rules).
ConvertFn find_convert(DType to, DType from);

// Runs of a storage dtype to and from fp32, the compute type of the normalisation, softmax,
// attention and GEMV kernels for every floating dtype but fp64 (strides in elements of `t`;
// 16-bit floats round to nearest even). Throw std::invalid_argument for complex dtypes.
void strided_to_f32(const void* src, DType t, int64_t stride, float* dst, int64_t n);
void strided_from_f32(const float* src, void* dst, DType t, int64_t stride, int64_t n);
inline void row_to_f32(const void* src, DType t, float* dst, int64_t n) {
  strided_to_f32(src, t, 1, dst, n);
}
inline void row_from_f32(const float* src, void* dst, DType t, int64_t n) {
  strided_from_f32(src, dst, t, 1, n);
}

}  // namespace neuron::kernels
