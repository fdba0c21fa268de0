// Softmax and log-softmax along one dimension, forward and backward, for any strides. Floating
// dtypes compute in fp32 (fp64 for double inputs); the output dtype may differ from the input's
// (ATen's half_to_float).
#pragma once

#include "simd.h"
#include "tensor_ref.h"

namespace neuron::kernels {

// out = softmax(in) or log_softmax(in) along `dim`. Same shapes; out may be in.
void softmax_forward(const TensorRef& out, const TensorRef& in, int dim, bool log,
                     SimdLevel isa = simd_level());

// grad_in = d softmax given grad_out and the forward's output:
//   softmax:     grad_in = out * (grad_out - sum(grad_out * out))
//   log_softmax: grad_in = grad_out - exp(out) * sum(grad_out)
void softmax_backward(const TensorRef& grad_in, const TensorRef& grad_out, const TensorRef& out,
                      int dim, bool log, SimdLevel isa = simd_level());

}  // namespace neuron::kernels
