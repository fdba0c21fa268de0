// Convolutions with 1 to 3 spatial dims, forward and backward, as im2col + GEMM (gemm.h):
// stride, padding, dilation, groups, and transposed convolution. Operands are dense row-major
// ([N, C, *spatial] activations, [Cout, Cin/groups, *kernel] weights for a convolution,
// [Cin, Cout/groups, *kernel] for a transposed one). fp32/bf16/fp16 accumulate in fp32, fp64 in
// fp64. Weight and bias gradients sum over the batch in a fixed order.
#pragma once

#include <cstdint>

#include "dtype.h"

namespace neuron::kernels {

struct ConvArgs {
  int nsp = 2;  // spatial dims (1..3)
  int64_t N = 0, Cin = 0, Cout = 0, groups = 1;
  int64_t in[3] = {1, 1, 1};   // input spatial sizes
  int64_t out[3] = {1, 1, 1};  // output spatial sizes
  int64_t k[3] = {1, 1, 1};
  int64_t stride[3] = {1, 1, 1};
  int64_t pad[3] = {0, 0, 0};
  int64_t dil[3] = {1, 1, 1};
  bool transposed = false;
  DType dtype = DType::Float32;
};

// out = conv(input, weight) + bias (bias may be null).
void conv_forward(const ConvArgs& a, const void* input, const void* weight, const void* bias,
                  void* out);

// Any of grad_input, grad_weight, grad_bias may be null (not wanted).
void conv_backward(const ConvArgs& a, const void* grad_out, const void* input, const void* weight,
                   void* grad_input, void* grad_weight, void* grad_bias);

}  // namespace neuron::kernels
