// Unary elementwise ops: sign/abs/neg, roots, exponentials and logarithms, trigonometric and
// hyperbolic functions, erf family, rounding, predicates (isnan, signbit, ...) and nan_to_num.
#include <ATen/ops/acos_meta.h>
#include <ATen/ops/acosh_meta.h>
#include <ATen/ops/asin_meta.h>
#include <ATen/ops/asinh_meta.h>
#include <ATen/ops/atan_meta.h>
#include <ATen/ops/atanh_meta.h>
#include <ATen/ops/bitwise_not_meta.h>
#include <ATen/ops/ceil_meta.h>
#include <ATen/ops/cos_meta.h>
#include <ATen/ops/cosh_meta.h>
#include <ATen/ops/erf_meta.h>
#include <ATen/ops/erfc_meta.h>
#include <ATen/ops/erfinv_meta.h>
#include <ATen/ops/exp2_meta.h>
#include <ATen/ops/exp_meta.h>
#include <ATen/ops/expm1_meta.h>
#include <ATen/ops/floor_meta.h>
#include <ATen/ops/frac_meta.h>
#include <ATen/ops/isneginf_meta.h>
#include <ATen/ops/isposinf_meta.h>
#include <ATen/ops/lgamma_meta.h>
#include <ATen/ops/log10_meta.h>
#include <ATen/ops/log1p_meta.h>
#include <ATen/ops/log2_meta.h>
#include <ATen/ops/log_meta.h>
#include <ATen/ops/neg_meta.h>
#include <ATen/ops/reciprocal_meta.h>
#include <ATen/ops/round_meta.h>
#include <ATen/ops/rsqrt_meta.h>
#include <ATen/ops/sgn_meta.h>
#include <ATen/ops/sigmoid_meta.h>
#include <ATen/ops/sign_meta.h>
#include <ATen/ops/signbit_meta.h>
#include <ATen/ops/sin_meta.h>
#include <ATen/ops/sinc_meta.h>
#include <ATen/ops/sinh_meta.h>
#include <ATen/ops/sqrt_meta.h>
#include <ATen/ops/tan_meta.h>
#include <ATen/ops/tanh_meta.h>
#include <ATen/ops/trunc_meta.h>

#include <limits>

#include "EwLaunch.h"

namespace neuron::torch_glue {
namespace {

using kernels::EwOp;

// Ops built with build_borrowing_unary_float_op compute in the promoted (floating) dtype.
template <class M, EwOp kOp>
struct FloatUnarySpec {
  using Meta = M;
  template <class S>
  static bool run(S& s, const char* name, const at::Tensor& self) {
    s.meta(self);
    return launch_ew(s, name, kOp, s.common_dtype(), params());
  }
};

// Ops built with build_borrowing_unary_op compute in the tensor's own dtype.
template <class M, EwOp kOp>
struct SameUnarySpec {
  using Meta = M;
  template <class S>
  static bool run(S& s, const char* name, const at::Tensor& self) {
    s.meta(self);
    return launch_ew(s, name, kOp, s.dtype(0), params());
  }
};

// Rounding: integral tensors are already integers, so the result is a copy (like ATen).
template <class M, EwOp kOp>
struct RoundingSpec {
  using Meta = M;
  template <class S>
  static bool run(S& s, const char* name, const at::Tensor& self) {
    s.meta(self);
    if (c10::isIntegralType(self.scalar_type(), /*includeBool=*/false)) {
      const at::Tensor& out = s.maybe_get_output(0);
      if (!out.is_same(self)) out.copy_(self);
      return true;
    }
    return launch_ew(s, name, kOp, s.dtype(0), params());
  }
};

struct RoundDecimalsSpec {
  using Meta = at::meta::structured_round_decimals;
  template <class S>
  static bool run(S& s, const char* name, const at::Tensor& self, int64_t decimals) {
    s.meta(self, decimals);
    if (c10::isIntegralType(self.scalar_type(), /*includeBool=*/false)) {
      if (decimals != 0) return false;  // the CPU kernel decides (it rejects this)
      const at::Tensor& out = s.maybe_get_output(0);
      if (!out.is_same(self)) out.copy_(self);
      return true;
    }
    if (decimals == 0) return launch_ew(s, name, EwOp::Round, s.dtype(0), params());
    kernels::EwParams p;
    p.i[0] = decimals;
    return launch_ew(s, name, EwOp::RoundDecimals, s.dtype(0), p);
  }
};

// Predicates with a bool output computed from the input's dtype.
template <class M, EwOp kOp>
struct PredicateSpec {
  using Meta = M;
  template <class S>
  static bool run(S& s, const char* name, const at::Tensor& self) {
    s.meta(self);
    return launch_ew(s, name, kOp, s.input_dtype(0), params());
  }
};

at::Tensor& abs_out(const at::Tensor& self, at::Tensor& out) {
  track_op<at::_ops::abs_out>();
  if (self.is_complex() || out.is_complex())
    return at::native::call_fallback_fn<&neuron_cpu_fallback, at::_ops::abs_out>::call(self, out);
  at::TensorIterator iter = at::TensorIterator::unary_op(out, self);
  if (!launch_ew(iter, op_name<at::_ops::abs_out>(), EwOp::Abs, iter.dtype(0), params()))
    return at::native::call_fallback_fn<&neuron_cpu_fallback, at::_ops::abs_out>::call(self, out);
  return out;
}

at::Tensor isnan(const at::Tensor& self) {
  track_op<at::_ops::isnan>();
  if (self.is_complex())
    return at::native::call_fallback_fn<&neuron_cpu_fallback, at::_ops::isnan>::call(self);
  at::Tensor out;
  at::TensorIterator iter = at::TensorIteratorConfig()
                                .check_all_same_dtype(false)
                                .declare_static_dtype_and_device(at::kBool, self.device())
                                .add_output(out)
                                .add_const_input(self)
                                .build();
  if (!launch_ew(iter, op_name<at::_ops::isnan>(), EwOp::IsNan, self.scalar_type(), params()))
    return at::native::call_fallback_fn<&neuron_cpu_fallback, at::_ops::isnan>::call(self);
  return iter.output();
}

double nan_to_num_default(at::ScalarType t, bool pos) {
  switch (t) {
    case at::kHalf:
      return pos ? 65504.0 : -65504.0;
    case at::kBFloat16:
      return pos ? static_cast<double>(std::numeric_limits<c10::BFloat16>::max())
                 : static_cast<double>(std::numeric_limits<c10::BFloat16>::lowest());
    case at::kFloat:
      return pos ? std::numeric_limits<float>::max() : std::numeric_limits<float>::lowest();
    default:
      return pos ? std::numeric_limits<double>::max() : std::numeric_limits<double>::lowest();
  }
}

at::Tensor& nan_to_num_out(const at::Tensor& self, std::optional<double> nan,
                           std::optional<double> posinf, std::optional<double> neginf,
                           at::Tensor& out) {
  track_op<at::_ops::nan_to_num_out>();
  TORCH_CHECK(self.scalar_type() == out.scalar_type(),
              "nan_to_num: dtype of out: ", out.scalar_type(),
              " should be same as input: ", self.scalar_type());
  if (c10::isIntegralType(self.scalar_type(), /*includeBool=*/true)) {
    at::native::resize_output(out, self.sizes());
    out.copy_(self);
    return out;
  }
  auto fallback = [&]() -> at::Tensor& {
    return at::native::call_fallback_fn<&neuron_cpu_fallback, at::_ops::nan_to_num_out>::call(
        self, nan, posinf, neginf, out);
  };
  if (self.is_complex()) return fallback();
  at::TensorIterator iter = at::TensorIterator::unary_op(out, self);
  kernels::EwParams p;
  const at::ScalarType t = self.scalar_type();
  p.f[0] = nan.value_or(0.0);
  p.f[1] = posinf.has_value() ? *posinf : nan_to_num_default(t, true);
  p.f[2] = neginf.has_value() ? *neginf : nan_to_num_default(t, false);
  if (!launch_ew(iter, op_name<at::_ops::nan_to_num_out>(), EwOp::NanToNum, t, p))
    return fallback();
  return out;
}

// angle of real numbers (complex inputs take the CPU fallback); integers promote to float.
template <class Op>
at::Tensor& angle_into(const at::Tensor& self, at::Tensor& out, bool functional) {
  at::TensorIterator iter = at::TensorIterator::unary_float_op(out, self);
  if (!launch_ew(iter, op_name<Op>(), EwOp::Angle, iter.common_dtype(), params())) {
    if (functional) {
      out = at::native::call_fallback_fn<&neuron_cpu_fallback, at::_ops::angle>::call(self);
      return out;
    }
    return at::native::call_fallback_fn<&neuron_cpu_fallback, at::_ops::angle_out>::call(self, out);
  }
  if (functional) out = iter.output();
  return out;
}
at::Tensor angle(const at::Tensor& self) {
  track_op<at::_ops::angle>();
  at::Tensor out;
  if (self.is_complex())
    return at::native::call_fallback_fn<&neuron_cpu_fallback, at::_ops::angle>::call(self);
  return angle_into<at::_ops::angle>(self, out, true);
}
at::Tensor& angle_out(const at::Tensor& self, at::Tensor& out) {
  track_op<at::_ops::angle_out>();
  if (self.is_complex())
    return at::native::call_fallback_fn<&neuron_cpu_fallback, at::_ops::angle_out>::call(self, out);
  return angle_into<at::_ops::angle_out>(self, out, false);
}

// logit(x, eps): clamp to [eps, 1 - eps] when eps is given, then log(x / (1 - x)).
kernels::EwParams logit_params(std::optional<double> eps) {
  kernels::EwParams p;
  p.f[0] = eps.value_or(0.0);
  p.i[1] = eps.has_value() && *eps >= 0;
  return p;
}
template <class Op>
bool logit_into(const at::Tensor& self, std::optional<double> eps, at::Tensor& out) {
  at::TensorIterator iter = at::TensorIterator::unary_float_op(out, self);
  if (!launch_ew(iter, op_name<Op>(), EwOp::Logit, iter.common_dtype(), logit_params(eps)))
    return false;
  if (!out.defined()) out = iter.output();
  return true;
}
at::Tensor logit(const at::Tensor& self, std::optional<double> eps) {
  using Op = at::_ops::logit;
  track_op<Op>();
  at::Tensor out;
  if (!logit_into<Op>(self, eps, out))
    return at::native::call_fallback_fn<&neuron_cpu_fallback, Op>::call(self, eps);
  return out;
}
at::Tensor& logit_(at::Tensor& self, std::optional<double> eps) {
  using Op = at::_ops::logit_;
  track_op<Op>();
  if (!logit_into<Op>(self, eps, self))
    return at::native::call_fallback_fn<&neuron_cpu_fallback, Op>::call(self, eps);
  return self;
}
at::Tensor& logit_out(const at::Tensor& self, std::optional<double> eps, at::Tensor& out) {
  using Op = at::_ops::logit_out;
  track_op<Op>();
  if (!logit_into<Op>(self, eps, out))
    return at::native::call_fallback_fn<&neuron_cpu_fallback, Op>::call(self, eps, out);
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  namespace o = at::_ops;
  namespace mt = at::meta;
#define NEURON_FLOAT_UNARY(name, Op) \
  reg3<FloatUnarySpec<mt::structured_##name, EwOp::Op>, o::name, o::name##_, o::name##_out>(m);
  NEURON_FLOAT_UNARY(sqrt, Sqrt)
  NEURON_FLOAT_UNARY(rsqrt, Rsqrt)
  NEURON_FLOAT_UNARY(reciprocal, Reciprocal)
  NEURON_FLOAT_UNARY(exp, Exp)
  NEURON_FLOAT_UNARY(exp2, Exp2)
  NEURON_FLOAT_UNARY(expm1, Expm1)
  NEURON_FLOAT_UNARY(log, Log)
  NEURON_FLOAT_UNARY(log2, Log2)
  NEURON_FLOAT_UNARY(log10, Log10)
  NEURON_FLOAT_UNARY(log1p, Log1p)
  NEURON_FLOAT_UNARY(sin, Sin)
  NEURON_FLOAT_UNARY(cos, Cos)
  NEURON_FLOAT_UNARY(tan, Tan)
  NEURON_FLOAT_UNARY(asin, Asin)
  NEURON_FLOAT_UNARY(acos, Acos)
  NEURON_FLOAT_UNARY(atan, Atan)
  NEURON_FLOAT_UNARY(sinh, Sinh)
  NEURON_FLOAT_UNARY(cosh, Cosh)
  NEURON_FLOAT_UNARY(tanh, Tanh)
  NEURON_FLOAT_UNARY(asinh, Asinh)
  NEURON_FLOAT_UNARY(acosh, Acosh)
  NEURON_FLOAT_UNARY(atanh, Atanh)
  NEURON_FLOAT_UNARY(erf, Erf)
  NEURON_FLOAT_UNARY(erfc, Erfc)
  NEURON_FLOAT_UNARY(erfinv, Erfinv)
  NEURON_FLOAT_UNARY(lgamma, Lgamma)
  NEURON_FLOAT_UNARY(sigmoid, Sigmoid)
#undef NEURON_FLOAT_UNARY
  reg3<SameUnarySpec<mt::structured_neg, EwOp::Neg>, o::neg, o::neg_, o::neg_out>(m);
  reg3<SameUnarySpec<mt::structured_sign, EwOp::Sign>, o::sign, o::sign_, o::sign_out>(m);
  reg3<SameUnarySpec<mt::structured_sgn, EwOp::Sign>, o::sgn, o::sgn_, o::sgn_out>(m);
  reg3<SameUnarySpec<mt::structured_bitwise_not, EwOp::BitNot>, o::bitwise_not, o::bitwise_not_,
       o::bitwise_not_out>(m);
  reg3<SameUnarySpec<mt::structured_frac, EwOp::Frac>, o::frac, o::frac_, o::frac_out>(m);
  reg3<RoundingSpec<mt::structured_floor, EwOp::Floor>, o::floor, o::floor_, o::floor_out>(m);
  reg3<RoundingSpec<mt::structured_ceil, EwOp::Ceil>, o::ceil, o::ceil_, o::ceil_out>(m);
  reg3<RoundingSpec<mt::structured_trunc, EwOp::Trunc>, o::trunc, o::trunc_, o::trunc_out>(m);
  reg3<RoundingSpec<mt::structured_round, EwOp::Round>, o::round, o::round_, o::round_out>(m);
  reg3<RoundDecimalsSpec, o::round_decimals, o::round__decimals, o::round_decimals_out>(m);
  reg<FunctionalFn, PredicateSpec<mt::structured_signbit, EwOp::Signbit>, o::signbit>(m);
  reg<OutFn, PredicateSpec<mt::structured_signbit, EwOp::Signbit>, o::signbit_out>(m);
  reg<FunctionalFn, PredicateSpec<mt::structured_isposinf, EwOp::IsPosInf>, o::isposinf>(m);
  reg<OutFn, PredicateSpec<mt::structured_isposinf, EwOp::IsPosInf>, o::isposinf_out>(m);
  reg<FunctionalFn, PredicateSpec<mt::structured_isneginf, EwOp::IsNegInf>, o::isneginf>(m);
  reg<OutFn, PredicateSpec<mt::structured_isneginf, EwOp::IsNegInf>, o::isneginf_out>(m);
  m.impl("abs.out", TORCH_FN(abs_out));
  reg3<FloatUnarySpec<mt::structured_sinc, EwOp::Sinc>, o::sinc, o::sinc_, o::sinc_out>(m);
  m.impl("angle", TORCH_FN(angle));
  m.impl("angle.out", TORCH_FN(angle_out));
  m.impl("logit", TORCH_FN(logit));
  m.impl("logit_", TORCH_FN(logit_));
  m.impl("logit.out", TORCH_FN(logit_out));
  m.impl("isnan", TORCH_FN(isnan));
  m.impl("nan_to_num.out", TORCH_FN(nan_to_num_out));
}

}  // namespace neuron::torch_glue
