// Negative log-likelihood loss over log-probabilities, forward and backward (the second half of
// cross_entropy). Input [N, C, R] (R: flattened extra dims of nll_loss2d / N-d targets), target
// [N, R] of class indices (int32, int64 or uint8), optional per-class weight [C]. Sums accumulate
// in fp64 over fixed blocks, so results do not depend on the thread count.
#pragma once

#include <cstdint>

#include "tensor_ref.h"

namespace neuron::kernels {

enum class Reduction : int { None = 0, Mean = 1, Sum = 2 };  // ATen's at::Reduction values

struct NllLossArgs {
  TensorRef input;   // [N, C, R] floating
  TensorRef target;  // [N, R] integer
  TensorRef weight;  // [C] (same dtype as input) or data == nullptr
  Reduction reduction = Reduction::Mean;
  int64_t ignore_index = -100;
  const char* op = "nll_loss";  // names the op in errors
};

// output: [N, R] for Reduction::None, else 0-d. total_weight: 0-d, the summed weight of the
// non-ignored targets (0 for Reduction::None). Throws std::out_of_range naming the op for a
// target outside [0, C) that is not ignore_index.
void nll_loss_forward(const TensorRef& output, const TensorRef& total_weight, const NllLossArgs& a);

// grad_input: [N, C, R] (fully written). grad_output: [N, R] for Reduction::None, else 0-d.
void nll_loss_backward(const TensorRef& grad_input, const TensorRef& grad_output,
                       const TensorRef& total_weight, const NllLossArgs& a);

}  // namespace neuron::kernels
