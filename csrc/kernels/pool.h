// 2-d pooling over dense [planes, H, W] inputs (planes = N * C), forward and backward: max
// pooling with indices (flat h * W + w, NaN propagates), average pooling (ATen's divisor rules for
// padding, ceil_mode and divisor_override) and adaptive average pooling. fp32/bf16/fp16 compute
// in fp32, fp64 in fp64. Backward kernels write the whole grad_input.
#pragma once

#include <cstdint>

#include "dtype.h"

namespace neuron::kernels {

struct Pool2dArgs {
  int64_t planes = 0, H = 0, W = 0, OH = 0, OW = 0;
  int64_t kH = 1, kW = 1, sH = 1, sW = 1, pH = 0, pW = 0, dH = 1, dW = 1;
  DType dtype = DType::Float32;
};

void max_pool2d_forward(const Pool2dArgs& a, const void* in, void* out, int64_t* indices);
void max_pool2d_backward(const Pool2dArgs& a, const void* grad_out, const int64_t* indices,
                         void* grad_in);

// divisor_override == 0: none (ATen rejects an explicit 0; negative divisors are allowed).
void avg_pool2d_forward(const Pool2dArgs& a, bool count_include_pad, int64_t divisor_override,
                        const void* in, void* out);
void avg_pool2d_backward(const Pool2dArgs& a, bool count_include_pad, int64_t divisor_override,
                         const void* grad_out, void* grad_in);

// Uses planes, H, W, OH, OW and dtype of `a`.
void adaptive_avg_pool2d_forward(const Pool2dArgs& a, const void* in, void* out);
void adaptive_avg_pool2d_backward(const Pool2dArgs& a, const void* grad_out, void* grad_in);

}  // namespace neuron::kernels
