// Autocast (AMP) for the neuron device: `torch.autocast("neuron", dtype=torch.bfloat16)` casts
// like CUDA autocast. The op lists and cast policies are ATen's own (autocast_mode.h), so they
// follow the installed PyTorch: matmul/linear/conv/attention run in the autocast dtype, numerically
// sensitive ops (softmax, norms, losses, exp/log/pow, reductions) in fp32, and multi-input ops
// like addcmul/atan2 at the widest input dtype. Ops without a policy pass through.
#include <ATen/autocast_mode.h>
#include <torch/library.h>

namespace neuron::torch_glue {
namespace {

// Like CUDA: binary_cross_entropy is unsafe in lower precision; ATen raises this error.
at::Tensor binary_cross_entropy_banned(const at::Tensor&, const at::Tensor&,
                                       const std::optional<at::Tensor>&, int64_t) {
  TORCH_CHECK(
      false,
      "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast.\n"
      "Many models use a sigmoid layer right before the binary cross entropy layer.\n"
      "In this case, combine the two layers using "
      "torch.nn.functional.binary_cross_entropy_with_logits\n"
      "or torch.nn.BCEWithLogitsLoss.  binary_cross_entropy_with_logits and BCEWithLogits are\n"
      "safe to autocast.");
}

}  // namespace

// ATen's signature lists name these types unqualified.
using at::IntArrayRef;
using at::Scalar;
using at::ScalarType;
using at::Tensor;

TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) { m.fallback(torch::CppFunction::makeFallthrough()); }

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
#define NEURON_AUTOCAST_LOWER(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
  AT_FORALL_LOWER_PRECISION_FP(NEURON_AUTOCAST_LOWER)
#undef NEURON_AUTOCAST_LOWER
#define NEURON_AUTOCAST_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
  AT_FORALL_FP32(NEURON_AUTOCAST_FP32)
#undef NEURON_AUTOCAST_FP32
#define NEURON_AUTOCAST_FP32_OPT(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
  AT_FORALL_FP32_SET_OPT_DTYPE(NEURON_AUTOCAST_FP32_OPT)
#undef NEURON_AUTOCAST_FP32_OPT
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)
#define NEURON_AUTOCAST_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)
  AT_FORALL_PROMOTE(NEURON_AUTOCAST_PROMOTE)
#undef NEURON_AUTOCAST_PROMOTE
  m.impl("binary_cross_entropy", TORCH_FN(binary_cross_entropy_banned));
}

}  // namespace neuron::torch_glue
