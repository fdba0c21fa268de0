// Elementwise ops over lists of tensors (the _foreach_* ops and fused optimizers run them as one
// task per list): the list is cut into pieces of contiguous elements that the host pool runs in
// parallel, so a list of many small tensors costs one launch and a few large ones still use
// every thread.
#pragma once

#include <cstdint>
#include <vector>

#include "elementwise.h"
#include "tensor_ref.h"

namespace neuron::kernels {

// operands[0] is the output; unused operands have ndim 0 and data nullptr.
struct ForeachItem {
  TensorRef refs[4];
};

// out_i = op(inputs_i...) for every item; params[i] when `params` is not null, else `shared`.
// Every item's operands have the output's shape (inputs may broadcast through zero strides).
void foreach_elementwise(EwOp op, DType compute, int num_operands,
                         const std::vector<ForeachItem>& items, const EwParams& shared,
                         const std::vector<EwParams>* params = nullptr);

// Adam / AdamW over lists of contiguous tensors of one floating dtype (bf16/fp16 compute in
// fp32). step_i points to a 1-element fp32 tensor (already incremented by the caller, like
// torch.optim does); lr_ptr (fp32/fp64 1-element, optional) overrides lr; grad_scale (optional)
// divides the gradients; found_inf (optional, nonzero) skips the whole update.
struct AdamArgs {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, weight_decay = 0, eps = 1e-8;
  bool amsgrad = false, maximize = false, decoupled = false;  // decoupled: AdamW
  TensorRef lr_tensor, grad_scale, found_inf;                 // data == nullptr when absent
};
struct AdamTensors {
  TensorRef param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, step;
};
void fused_adam(const AdamArgs& args, const std::vector<AdamTensors>& list);

// SGD with momentum (fused=True path of torch.optim.SGD).
struct SgdArgs {
  double lr = 1e-3, weight_decay = 0, momentum = 0, dampening = 0;
  bool nesterov = false, maximize = false, is_first_step = false;
  TensorRef lr_tensor, grad_scale, found_inf;
};
struct SgdTensors {
  TensorRef param, grad, momentum_buffer;  // momentum_buffer.data == nullptr when momentum == 0
};
void fused_sgd(const SgdArgs& args, const std::vector<SgdTensors>& list);

}  // namespace neuron::kernels
