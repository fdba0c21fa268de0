// Normalisation layers, forward and backward: layer norm and RMS norm over the last N elements
// of M rows, and batch norm over the channels of [N, C, S] inputs. Floating dtypes compute in
// fp32 (fp64 for double); parameters and statistics may have their own floating dtype (mixed
// bf16 activations with fp32 parameters). Reductions over rows (weight/bias gradients, batch
// statistics) sum fixed blocks in a fixed order, so results do not depend on the thread count.
#pragma once

#include "simd.h"
#include "tensor_ref.h"

namespace neuron::kernels {

// input/out: [M, N] (any strides). weight/bias: [N] or data == nullptr. mean/rstd: [M] or
// data == nullptr (layer norm); rstd: [M] (RMS norm).
void layer_norm_forward(const TensorRef& out, const TensorRef& mean, const TensorRef& rstd,
                        const TensorRef& input, const TensorRef& weight, const TensorRef& bias,
                        double eps, SimdLevel isa = simd_level());
// Any of grad_input/grad_weight/grad_bias may have data == nullptr (not wanted).
void layer_norm_backward(const TensorRef& grad_input, const TensorRef& grad_weight,
                         const TensorRef& grad_bias, const TensorRef& grad_out,
                         const TensorRef& input, const TensorRef& mean, const TensorRef& rstd,
                         const TensorRef& weight, SimdLevel isa = simd_level());

void rms_norm_forward(const TensorRef& out, const TensorRef& rstd, const TensorRef& input,
                      const TensorRef& weight, double eps, SimdLevel isa = simd_level());
void rms_norm_backward(const TensorRef& grad_input, const TensorRef& grad_weight,
                       const TensorRef& grad_out, const TensorRef& input, const TensorRef& rstd,
                       const TensorRef& weight, SimdLevel isa = simd_level());

// Batch norm over input [N, C, S]. Training: normalises with the batch statistics, writes
// save_mean/save_invstd [C] and updates running_mean/running_var [C] (when given) with
// `momentum` (unbiased variance). Evaluation: normalises with the running statistics.
struct BatchNormArgs {
  TensorRef input, weight, bias, running_mean, running_var;
  bool training = true;
  double momentum = 0.1, eps = 1e-5;
};
void batch_norm_forward(const TensorRef& out, const TensorRef& save_mean,
                        const TensorRef& save_invstd, const BatchNormArgs& a);
// save_mean/save_invstd come from the training forward (unused in evaluation mode, where the
// running statistics are used).
void batch_norm_backward(const TensorRef& grad_input, const TensorRef& grad_weight,
                         const TensorRef& grad_bias, const TensorRef& grad_out,
                         const TensorRef& save_mean, const TensorRef& save_invstd,
                         const BatchNormArgs& a);

}  // namespace neuron::kernels
