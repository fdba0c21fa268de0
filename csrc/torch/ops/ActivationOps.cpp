// Activation functions and their backward ops: relu/threshold, gelu (exact and tanh), silu,
// mish, sigmoid/tanh backward, softplus, elu, leaky_relu, hardswish, hardsigmoid, hardtanh.
#include <ATen/ops/elu_backward_meta.h>
#include <ATen/ops/elu_meta.h>
#include <ATen/ops/gelu_backward_meta.h>
#include <ATen/ops/gelu_meta.h>
#include <ATen/ops/hardshrink_backward_meta.h>
#include <ATen/ops/hardshrink_meta.h>
#include <ATen/ops/hardsigmoid_backward_meta.h>
#include <ATen/ops/hardsigmoid_meta.h>
#include <ATen/ops/leaky_relu_backward_meta.h>
#include <ATen/ops/leaky_relu_meta.h>
#include <ATen/ops/logit_backward_meta.h>
#include <ATen/ops/mish_meta.h>
#include <ATen/ops/sigmoid_backward_meta.h>
#include <ATen/ops/silu_backward_meta.h>
#include <ATen/ops/silu_meta.h>
#include <ATen/ops/softplus_backward_meta.h>
#include <ATen/ops/softplus_meta.h>
#include <ATen/ops/softshrink_backward_meta.h>
#include <ATen/ops/softshrink_meta.h>
#include <ATen/ops/tanh_backward_meta.h>
#include <ATen/ops/threshold_backward_meta.h>
#include <ATen/ops/threshold_meta.h>

#include "EwLaunch.h"

namespace neuron::torch_glue {
namespace {

using kernels::EwOp;

template <class M, EwOp kOp>
struct UnarySpec {
  using Meta = M;
  template <class S>
  static bool run(S& s, const char* name, const at::Tensor& self) {
    s.meta(self);
    return launch_ew(s, name, kOp, s.dtype(0), params());
  }
};

template <class M, EwOp kOp>
struct BackwardSpec {
  using Meta = M;
  template <class S>
  static bool run(S& s, const char* name, const at::Tensor& grad, const at::Tensor& x) {
    s.meta(grad, x);
    return launch_ew(s, name, kOp, s.common_dtype(), params());
  }
};

bool tanh_approximation(c10::string_view approximate) {
  if (approximate == "none") return false;
  if (approximate == "tanh") return true;
  TORCH_CHECK(false, "approximate argument must be either none or tanh.");
}

struct GeluSpec {
  using Meta = at::meta::structured_gelu;
  template <class S>
  static bool run(S& s, const char* name, const at::Tensor& self, c10::string_view approximate) {
    s.meta(self, approximate);
    const EwOp op = tanh_approximation(approximate) ? EwOp::GeluTanh : EwOp::Gelu;
    return launch_ew(s, name, op, s.dtype(0), params());
  }
};

struct GeluBackwardSpec {
  using Meta = at::meta::structured_gelu_backward;
  template <class S>
  static bool run(S& s, const char* name, const at::Tensor& grad, const at::Tensor& self,
                  c10::string_view approximate) {
    s.meta(grad, self, approximate);
    const EwOp op = tanh_approximation(approximate) ? EwOp::GeluTanhBackward : EwOp::GeluBackward;
    return launch_ew(s, name, op, s.common_dtype(), params());
  }
};

struct ThresholdSpec {
  using Meta = at::meta::structured_threshold;
  template <class S>
  static bool run(S& s, const char* name, const at::Tensor& self, const c10::Scalar& th,
                  const c10::Scalar& value) {
    s.meta(self, th, value);
    return launch_ew(s, name, EwOp::Threshold, s.common_dtype(), params(th, value));
  }
};

struct ThresholdBackwardSpec {
  using Meta = at::meta::structured_threshold_backward;
  template <class S>
  static bool run(S& s, const char* name, const at::Tensor& grad, const at::Tensor& self,
                  const c10::Scalar& th) {
    s.meta(grad, self, th);
    return launch_ew(s, name, EwOp::Threshold, s.common_dtype(), params(th, 0));
  }
};

struct SoftplusSpec {
  using Meta = at::meta::structured_softplus;
  template <class S>
  static bool run(S& s, const char* name, const at::Tensor& self, const c10::Scalar& beta,
                  const c10::Scalar& th) {
    s.meta(self, beta, th);
    return launch_ew(s, name, EwOp::Softplus, s.dtype(0), params(beta, th));
  }
};

struct SoftplusBackwardSpec {
  using Meta = at::meta::structured_softplus_backward;
  template <class S>
  static bool run(S& s, const char* name, const at::Tensor& grad, const at::Tensor& self,
                  const c10::Scalar& beta, const c10::Scalar& th) {
    s.meta(grad, self, beta, th);
    return launch_ew(s, name, EwOp::SoftplusBackward, s.common_dtype(), params(beta, th));
  }
};

// ELU's coefficients, multiplied in the precision ATen multiplies them in.
kernels::EwParams elu_params(at::ScalarType compute, const c10::Scalar& alpha,
                             const c10::Scalar& scale, const c10::Scalar& input_scale,
                             bool is_result) {
  kernels::EwParams p;
  if (compute == at::kDouble) {
    p.f[0] = alpha.toDouble() * scale.toDouble();
    p.f[1] = scale.toDouble();
    p.f[2] = input_scale.toDouble();
  } else {
    p.f[0] = static_cast<double>(alpha.toFloat() * scale.toFloat());
    p.f[1] = static_cast<double>(scale.toFloat());
    p.f[2] = static_cast<double>(input_scale.toFloat());
  }
  p.i[3] = is_result;
  return p;
}

struct EluSpec {
  using Meta = at::meta::structured_elu;
  template <class S>
  static bool run(S& s, const char* name, const at::Tensor& self, const c10::Scalar& alpha,
                  const c10::Scalar& scale, const c10::Scalar& input_scale) {
    s.meta(self, alpha, scale, input_scale);
    const at::ScalarType c = s.dtype(0);
    return launch_ew(s, name, EwOp::Elu, c, elu_params(c, alpha, scale, input_scale, false));
  }
};

struct EluBackwardSpec {
  using Meta = at::meta::structured_elu_backward;
  template <class S>
  static bool run(S& s, const char* name, const at::Tensor& grad, const c10::Scalar& alpha,
                  const c10::Scalar& scale, const c10::Scalar& input_scale, bool is_result,
                  const at::Tensor& self_or_result) {
    s.meta(grad, alpha, scale, input_scale, is_result, self_or_result);
    const at::ScalarType c = s.common_dtype();
    return launch_ew(s, name, EwOp::EluBackward, c,
                     elu_params(c, alpha, scale, input_scale, is_result));
  }
};

struct LeakyReluSpec {
  using Meta = at::meta::structured_leaky_relu;
  template <class S>
  static bool run(S& s, const char* name, const at::Tensor& self, const c10::Scalar& slope) {
    s.meta(self, slope);
    return launch_ew(s, name, EwOp::LeakyRelu, s.dtype(0), params(slope));
  }
};

struct LeakyReluBackwardSpec {
  using Meta = at::meta::structured_leaky_relu_backward;
  template <class S>
  static bool run(S& s, const char* name, const at::Tensor& grad, const at::Tensor& self_or_result,
                  const c10::Scalar& slope, bool is_result) {
    s.meta(grad, self_or_result, slope, is_result);
    return launch_ew(s, name, EwOp::LeakyReluBackward, s.common_dtype(), params(slope));
  }
};

template <class M, EwOp kOp>
struct ShrinkSpec {
  using Meta = M;
  template <class S>
  static bool run(S& s, const char* name, const at::Tensor& self, const c10::Scalar& lambd) {
    s.meta(self, lambd);
    return launch_ew(s, name, kOp, s.dtype(0), params(lambd));
  }
};

template <class M>
struct ShrinkBackwardSpec {
  using Meta = M;
  template <class S>
  static bool run(S& s, const char* name, const at::Tensor& grad, const at::Tensor& self,
                  const c10::Scalar& lambd) {
    s.meta(grad, self, lambd);
    return launch_ew(s, name, EwOp::ShrinkBackward, s.common_dtype(), params(lambd));
  }
};

struct LogitBackwardSpec {
  using Meta = at::meta::structured_logit_backward;
  template <class S>
  static bool run(S& s, const char* name, const at::Tensor& grad, const at::Tensor& self,
                  std::optional<double> eps) {
    s.meta(grad, self, eps);
    kernels::EwParams p;
    p.f[0] = eps.value_or(0.0);
    p.i[1] = eps.has_value() && *eps >= 0;
    return launch_ew(s, name, EwOp::LogitBackward, s.common_dtype(), p);
  }
};

// Non-structured ops, built like ATen's CPU kernels.
template <class Op>
at::Tensor& fallback_or(bool launched, at::Tensor& out, auto&&... args) {
  if (!launched) return at::native::call_fallback_fn<&neuron_cpu_fallback, Op>::call(args...);
  return out;
}

at::Tensor relu(const at::Tensor& self) {
  track_op<at::_ops::relu>();
  TORCH_CHECK(self.scalar_type() != at::kBool, "Boolean inputs not supported for relu");
  at::Tensor out;
  at::TensorIterator iter = at::TensorIterator::unary_op(out, self);
  if (!launch_ew(iter, op_name<at::_ops::relu>(), EwOp::Relu, iter.dtype(0), params()))
    return at::native::call_fallback_fn<&neuron_cpu_fallback, at::_ops::relu>::call(self);
  return iter.output();
}

at::Tensor& relu_(at::Tensor& self) {
  track_op<at::_ops::relu_>();
  TORCH_CHECK(self.scalar_type() != at::kBool, "Boolean inputs not supported for relu");
  at::TensorIterator iter = at::TensorIterator::unary_op(self, self);
  return fallback_or<at::_ops::relu_>(
      launch_ew(iter, op_name<at::_ops::relu_>(), EwOp::Relu, iter.dtype(0), params()), self, self);
}

at::Tensor& hardswish_out(const at::Tensor& self, at::Tensor& out) {
  track_op<at::_ops::hardswish_out>();
  at::TensorIterator iter = at::TensorIterator::unary_op(out, self);
  return fallback_or<at::_ops::hardswish_out>(
      launch_ew(iter, op_name<at::_ops::hardswish_out>(), EwOp::Hardswish, iter.dtype(0), params()),
      out, self, out);
}

at::Tensor hardswish(const at::Tensor& self) {
  track_op<at::_ops::hardswish>();
  at::Tensor out;
  at::TensorIterator iter = at::TensorIterator::unary_op(out, self);
  if (!launch_ew(iter, op_name<at::_ops::hardswish>(), EwOp::Hardswish, iter.dtype(0), params()))
    return at::native::call_fallback_fn<&neuron_cpu_fallback, at::_ops::hardswish>::call(self);
  return iter.output();
}

at::Tensor& hardswish_(at::Tensor& self) {
  track_op<at::_ops::hardswish_>();
  at::TensorIterator iter = at::TensorIterator::unary_op(self, self);
  return fallback_or<at::_ops::hardswish_>(
      launch_ew(iter, op_name<at::_ops::hardswish_>(), EwOp::Hardswish, iter.dtype(0), params()),
      self, self);
}

template <class Op, EwOp kOp>
at::Tensor grad_binary(const at::Tensor& grad, const at::Tensor& self) {
  track_op<Op>();
  at::Tensor out;
  at::TensorIterator iter = at::TensorIterator::borrowing_binary_op(out, grad, self);
  if (!launch_ew(iter, op_name<Op>(), kOp, iter.common_dtype(), params()))
    return at::native::call_fallback_fn<&neuron_cpu_fallback, Op>::call(grad, self);
  return iter.output();
}

at::Tensor hardtanh_backward(const at::Tensor& grad, const at::Tensor& self, const c10::Scalar& min,
                             const c10::Scalar& max) {
  track_op<at::_ops::hardtanh_backward>();
  at::Tensor out;
  at::TensorIterator iter = at::TensorIterator::borrowing_binary_op(out, grad, self);
  if (!launch_ew(iter, op_name<at::_ops::hardtanh_backward>(), EwOp::HardtanhBackward,
                 iter.common_dtype(), params(min, max)))
    return at::native::call_fallback_fn<&neuron_cpu_fallback, at::_ops::hardtanh_backward>::call(
        grad, self, min, max);
  return iter.output();
}

at::Tensor& hardtanh_backward_out(const at::Tensor& grad, const at::Tensor& self,
                                  const c10::Scalar& min, const c10::Scalar& max,
                                  at::Tensor& grad_input) {
  track_op<at::_ops::hardtanh_backward_grad_input>();
  at::TensorIterator iter = at::TensorIterator::borrowing_binary_op(grad_input, grad, self);
  return fallback_or<at::_ops::hardtanh_backward_grad_input>(
      launch_ew(iter, op_name<at::_ops::hardtanh_backward_grad_input>(), EwOp::HardtanhBackward,
                iter.common_dtype(), params(min, max)),
      grad_input, grad, self, min, max, grad_input);
}

// hardtanh is clamp, with ATen's legacy rule that integral tensors take integral bounds.
at::Tensor& hardtanh_out(const at::Tensor& self, const c10::Scalar& min, const c10::Scalar& max,
                         at::Tensor& out) {
  track_op<at::_ops::hardtanh_out>();
  TORCH_CHECK(self.scalar_type() != at::kBool, "Bool inputs not supported for hardtanh");
  c10::Scalar lo = min, hi = max;
  if (c10::isIntegralType(self.scalar_type(), /*includeBool=*/false)) {
    lo = min.toLong();
    hi = max.toLong();
    TORCH_CHECK(self.scalar_type() != at::kByte || (lo.toLong() >= 0 && hi.toLong() >= 0),
                "cannot do hardtanh on an unsigned type with negative limits");
  }
  return at::clamp_out(out, self, lo, hi);
}

at::Tensor hardtanh(const at::Tensor& self, const c10::Scalar& min, const c10::Scalar& max) {
  track_op<at::_ops::hardtanh>();
  at::Tensor out = at::empty_like(self);
  hardtanh_out(self, min, max, out);
  return out;
}

at::Tensor& hardtanh_(at::Tensor& self, const c10::Scalar& min, const c10::Scalar& max) {
  track_op<at::_ops::hardtanh_>();
  return hardtanh_out(self, min, max, self);
}

// log_sigmoid_forward returns (output, buffer = exp(-|x|)); the backward reads the buffer.
template <class Op>
bool log_sigmoid_into(const at::Tensor& self, at::Tensor& out, at::Tensor& buffer) {
  at::TensorIterator a = at::TensorIterator::unary_op(out, self);
  if (!ew_supported(a, EwOp::LogSigmoid, a.dtype(0))) return false;
  at::TensorIterator b = at::TensorIterator::unary_op(buffer, self);
  launch_ew(a, op_name<Op>(), EwOp::LogSigmoid, a.dtype(0), params());
  launch_ew(b, op_name<Op>(), EwOp::ExpNegAbs, b.dtype(0), params());
  if (!out.defined()) out = a.output();
  if (!buffer.defined()) buffer = b.output();
  return true;
}
std::tuple<at::Tensor, at::Tensor> log_sigmoid_forward(const at::Tensor& self) {
  using Op = at::_ops::log_sigmoid_forward;
  track_op<Op>();
  at::Tensor out, buffer;
  if (!log_sigmoid_into<Op>(self, out, buffer))
    return at::native::call_fallback_fn<&neuron_cpu_fallback, Op>::call(self);
  return {out, buffer};
}
std::tuple<at::Tensor&, at::Tensor&> log_sigmoid_forward_out(const at::Tensor& self,
                                                             at::Tensor& out, at::Tensor& buffer) {
  using Op = at::_ops::log_sigmoid_forward_output;
  track_op<Op>();
  if (!log_sigmoid_into<Op>(self, out, buffer))
    return at::native::call_fallback_fn<&neuron_cpu_fallback, Op>::call(self, out, buffer);
  return {out, buffer};
}
template <class Op>
bool log_sigmoid_backward_into(const at::Tensor& grad, const at::Tensor& self,
                               const at::Tensor& buffer, at::Tensor& out) {
  at::TensorIterator iter = at::TensorIteratorConfig()
                                .add_output(out)
                                .add_const_input(self)
                                .add_const_input(buffer)
                                .add_const_input(grad)
                                .build();
  if (!launch_ew(iter, op_name<Op>(), EwOp::LogSigmoidBackward, iter.common_dtype(), params()))
    return false;
  if (!out.defined()) out = iter.output();
  return true;
}
at::Tensor log_sigmoid_backward(const at::Tensor& grad, const at::Tensor& self,
                                const at::Tensor& buffer) {
  using Op = at::_ops::log_sigmoid_backward;
  track_op<Op>();
  at::Tensor out;
  if (!log_sigmoid_backward_into<Op>(grad, self, buffer, out))
    return at::native::call_fallback_fn<&neuron_cpu_fallback, Op>::call(grad, self, buffer);
  return out;
}
at::Tensor& log_sigmoid_backward_out(const at::Tensor& grad, const at::Tensor& self,
                                     const at::Tensor& buffer, at::Tensor& out) {
  using Op = at::_ops::log_sigmoid_backward_grad_input;
  track_op<Op>();
  if (!log_sigmoid_backward_into<Op>(grad, self, buffer, out))
    return at::native::call_fallback_fn<&neuron_cpu_fallback, Op>::call(grad, self, buffer, out);
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  namespace o = at::_ops;
  namespace mt = at::meta;
  m.impl("relu", TORCH_FN(relu));
  m.impl("relu_", TORCH_FN(relu_));
  reg3<ThresholdSpec, o::threshold, o::threshold_, o::threshold_out>(m);
  reg<FunctionalFn, ThresholdBackwardSpec, o::threshold_backward>(m);
  reg<OutFn, ThresholdBackwardSpec, o::threshold_backward_grad_input>(m);
  reg3<GeluSpec, o::gelu, o::gelu_, o::gelu_out>(m);
  reg<FunctionalFn, GeluBackwardSpec, o::gelu_backward>(m);
  reg<OutFn, GeluBackwardSpec, o::gelu_backward_grad_input>(m);
  reg3<UnarySpec<mt::structured_silu, EwOp::Silu>, o::silu, o::silu_, o::silu_out>(m);
  reg<FunctionalFn, BackwardSpec<mt::structured_silu_backward, EwOp::SiluBackward>,
      o::silu_backward>(m);
  reg<OutFn, BackwardSpec<mt::structured_silu_backward, EwOp::SiluBackward>,
      o::silu_backward_grad_input>(m);
  reg3<UnarySpec<mt::structured_mish, EwOp::Mish>, o::mish, o::mish_, o::mish_out>(m);
  m.impl("mish_backward", TORCH_FN((grad_binary<o::mish_backward, EwOp::MishBackward>)));
  reg<FunctionalFn, BackwardSpec<mt::structured_sigmoid_backward, EwOp::SigmoidBackward>,
      o::sigmoid_backward>(m);
  reg<OutFn, BackwardSpec<mt::structured_sigmoid_backward, EwOp::SigmoidBackward>,
      o::sigmoid_backward_grad_input>(m);
  reg<FunctionalFn, BackwardSpec<mt::structured_tanh_backward, EwOp::TanhBackward>,
      o::tanh_backward>(m);
  reg<OutFn, BackwardSpec<mt::structured_tanh_backward, EwOp::TanhBackward>,
      o::tanh_backward_grad_input>(m);
  reg<FunctionalFn, SoftplusSpec, o::softplus>(m);
  reg<OutFn, SoftplusSpec, o::softplus_out>(m);
  reg<FunctionalFn, SoftplusBackwardSpec, o::softplus_backward>(m);
  reg<OutFn, SoftplusBackwardSpec, o::softplus_backward_grad_input>(m);
  reg3<EluSpec, o::elu, o::elu_, o::elu_out>(m);
  reg<FunctionalFn, EluBackwardSpec, o::elu_backward>(m);
  reg<OutFn, EluBackwardSpec, o::elu_backward_grad_input>(m);
  reg3<LeakyReluSpec, o::leaky_relu, o::leaky_relu_, o::leaky_relu_out>(m);
  reg<FunctionalFn, LeakyReluBackwardSpec, o::leaky_relu_backward>(m);
  reg<OutFn, LeakyReluBackwardSpec, o::leaky_relu_backward_grad_input>(m);
  reg3<UnarySpec<mt::structured_hardsigmoid, EwOp::Hardsigmoid>, o::hardsigmoid, o::hardsigmoid_,
       o::hardsigmoid_out>(m);
  reg<FunctionalFn, BackwardSpec<mt::structured_hardsigmoid_backward, EwOp::HardsigmoidBackward>,
      o::hardsigmoid_backward>(m);
  reg<OutFn, BackwardSpec<mt::structured_hardsigmoid_backward, EwOp::HardsigmoidBackward>,
      o::hardsigmoid_backward_grad_input>(m);
  m.impl("hardswish", TORCH_FN(hardswish));
  m.impl("hardswish_", TORCH_FN(hardswish_));
  m.impl("hardswish.out", TORCH_FN(hardswish_out));
  m.impl("hardswish_backward",
         TORCH_FN((grad_binary<o::hardswish_backward, EwOp::HardswishBackward>)));
  reg<FunctionalFn, ShrinkSpec<mt::structured_hardshrink, EwOp::Hardshrink>, o::hardshrink>(m);
  reg<OutFn, ShrinkSpec<mt::structured_hardshrink, EwOp::Hardshrink>, o::hardshrink_out>(m);
  reg<FunctionalFn, ShrinkSpec<mt::structured_softshrink, EwOp::Softshrink>, o::softshrink>(m);
  reg<OutFn, ShrinkSpec<mt::structured_softshrink, EwOp::Softshrink>, o::softshrink_out>(m);
  reg<FunctionalFn, ShrinkBackwardSpec<mt::structured_hardshrink_backward>, o::hardshrink_backward>(
      m);
  reg<OutFn, ShrinkBackwardSpec<mt::structured_hardshrink_backward>,
      o::hardshrink_backward_grad_input>(m);
  reg<FunctionalFn, ShrinkBackwardSpec<mt::structured_softshrink_backward>, o::softshrink_backward>(
      m);
  reg<OutFn, ShrinkBackwardSpec<mt::structured_softshrink_backward>,
      o::softshrink_backward_grad_input>(m);
  reg<FunctionalFn, LogitBackwardSpec, o::logit_backward>(m);
  reg<OutFn, LogitBackwardSpec, o::logit_backward_grad_input>(m);
  m.impl("log_sigmoid_forward", TORCH_FN(log_sigmoid_forward));
  m.impl("log_sigmoid_forward.output", TORCH_FN(log_sigmoid_forward_out));
  m.impl("log_sigmoid_backward", TORCH_FN(log_sigmoid_backward));
  m.impl("log_sigmoid_backward.grad_input", TORCH_FN(log_sigmoid_backward_out));
  m.impl("hardtanh", TORCH_FN(hardtanh));
  m.impl("hardtanh_", TORCH_FN(hardtanh_));
  m.impl("hardtanh.out", TORCH_FN(hardtanh_out));
  m.impl("hardtanh_backward", TORCH_FN(hardtanh_backward));
  m.impl("hardtanh_backward.grad_input", TORCH_FN(hardtanh_backward_out));
}

}  // namespace neuron::torch_glue
