// Binary and ternary elementwise ops: arithmetic, pow, comparison, logical, bitwise, min/max,
// lerp, addcmul/addcdiv, where and clamp. Shapes, broadcasting, type promotion and argument
// checks come from ATen's structured meta functions (see EwLaunch.h); the compute is
// kernels::elementwise on the device stream.
#include <ATen/ScalarOps.h>
#include <ATen/ops/add_meta.h>
#include <ATen/ops/addcdiv_meta.h>
#include <ATen/ops/addcmul_meta.h>
#include <ATen/ops/atan2_meta.h>
#include <ATen/ops/bitwise_and_meta.h>
#include <ATen/ops/bitwise_left_shift_meta.h>
#include <ATen/ops/bitwise_or_meta.h>
#include <ATen/ops/bitwise_right_shift_meta.h>
#include <ATen/ops/bitwise_xor_meta.h>
#include <ATen/ops/clamp_max_meta.h>
#include <ATen/ops/clamp_meta.h>
#include <ATen/ops/clamp_min_meta.h>
#include <ATen/ops/copysign_meta.h>
#include <ATen/ops/div_meta.h>
#include <ATen/ops/eq_meta.h>
#include <ATen/ops/fmax_meta.h>
#include <ATen/ops/fmin_meta.h>
#include <ATen/ops/fmod_meta.h>
#include <ATen/ops/gcd_meta.h>
#include <ATen/ops/ge_meta.h>
#include <ATen/ops/gt_meta.h>
#include <ATen/ops/heaviside_meta.h>
#include <ATen/ops/hypot_meta.h>
#include <ATen/ops/lcm_meta.h>
#include <ATen/ops/le_meta.h>
#include <ATen/ops/lerp_meta.h>
#include <ATen/ops/logaddexp2_meta.h>
#include <ATen/ops/logaddexp_meta.h>
#include <ATen/ops/lt_meta.h>
#include <ATen/ops/maximum_meta.h>
#include <ATen/ops/minimum_meta.h>
#include <ATen/ops/mul_meta.h>
#include <ATen/ops/ne_meta.h>
#include <ATen/ops/nextafter_meta.h>
#include <ATen/ops/pow_meta.h>
#include <ATen/ops/remainder_meta.h>
#include <ATen/ops/special_xlog1py_meta.h>
#include <ATen/ops/sub_meta.h>
#include <ATen/ops/xlogy_meta.h>

#include <cmath>
#include <limits>

#include "../Common.h"
#include "EwLaunch.h"

namespace neuron::torch_glue {
namespace {

using kernels::EwOp;

c10::Scalar negate(const c10::Scalar& s) {
  if (s.isComplex()) return -s.toComplexDouble();
  if (s.isFloatingPoint()) return -s.toDouble();
  if (s.isBoolean()) return s;  // sub on bool is rejected by the meta function
  return -s.toLong();
}

// A binary op with no scalar parameters, computed in the common dtype.
template <class M, EwOp kOp>
struct BinarySpec {
  using Meta = M;
  template <class S>
  static bool run(S& s, const char* name, const at::Tensor& a, const at::Tensor& b) {
    s.meta(a, b);
    return launch_ew(s, name, kOp, s.common_dtype(), params());
  }
};
// The Scalar overload of a comparison: ATen wraps the scalar into a CPU tensor.
template <class M, EwOp kOp>
struct CompareScalarSpec {
  using Meta = M;
  template <class S>
  static bool run(S& s, const char* name, const at::Tensor& a, const c10::Scalar& b) {
    s.meta(a, b);
    return launch_ew(s, name, kOp, s.common_dtype(), params());
  }
};

struct AddSpec {
  using Meta = at::meta::structured_add_Tensor;
  template <class S>
  static bool run(S& s, const char* name, const at::Tensor& a, const at::Tensor& b,
                  const c10::Scalar& alpha) {
    s.meta(a, b, alpha);
    return launch_ew(s, name, EwOp::Add, s.common_dtype(), params(alpha));
  }
};

struct SubSpec {
  using Meta = at::meta::structured_sub_Tensor;
  template <class S>
  static bool run(S& s, const char* name, const at::Tensor& a, const at::Tensor& b,
                  const c10::Scalar& alpha) {
    s.meta(a, b, alpha);
    return launch_ew(s, name, EwOp::Add, s.common_dtype(), params(negate(alpha)));
  }
};

struct DivModeSpec {
  using Meta = at::meta::structured_div_Tensor_mode;
  template <class S>
  static bool run(S& s, const char* name, const at::Tensor& a, const at::Tensor& b,
                  std::optional<c10::string_view> mode) {
    s.meta(a, b, mode);
    EwOp op = EwOp::Div;
    if (mode.has_value()) {
      if (*mode == "trunc") {
        op = EwOp::DivTrunc;
      } else if (*mode == "floor") {
        op = EwOp::DivFloor;
      } else {
        TORCH_CHECK(false,
                    "div expected rounding_mode to be one of None, 'trunc', or 'floor' but found '",
                    *mode, "'");
      }
    }
    kernels::EwParams p;
    const at::ScalarType c = s.common_dtype();
    if (op == EwOp::DivTrunc) p.i[3] = c == at::kBFloat16 ? 1 : c == at::kHalf ? 2 : 0;
    return launch_ew(s, name, op, c, p);
  }
};

// pow(Tensor, Scalar): exponent 0 fills ones and 1 copies, like ATen.
struct PowTensorScalarSpec {
  using Meta = at::meta::structured_pow_Tensor_Scalar;
  template <class S>
  static bool run(S& s, const char* name, const at::Tensor& base, const c10::Scalar& exp) {
    s.meta(base, exp);
    const at::Tensor& out = s.maybe_get_output(0);
    if (exp.isComplex() || base.is_complex()) return false;
    if (exp.equal(0.0) || exp.equal(false)) {
      out.fill_(1);
      return true;
    }
    if (exp.equal(1.0) || exp.equal(true)) {
      out.copy_(base);
      return true;
    }
    return launch_ew(s, name, EwOp::PowScalar, s.common_dtype(), params(exp));
  }
};

// pow(Scalar, Tensor): not an iterator meta; the base becomes a CPU scalar operand.
struct PowScalarSpec {
  using Meta = at::meta::structured_pow_Scalar;
  template <class S>
  static bool run(S& s, const char* name, const c10::Scalar& base, const at::Tensor& exp) {
    s.meta(base, exp);
    if (base.isComplex() || exp.is_complex()) return false;
    const at::Tensor& out = s.maybe_get_output(0);
    if (base.equal(1.0)) {
      out.fill_(1);
      return true;
    }
    at::pow_out(const_cast<at::Tensor&>(out), at::native::wrapped_scalar_tensor(base), exp);
    return true;
  }
};

struct LerpScalarSpec {
  using Meta = at::meta::structured_lerp_Scalar;
  template <class S>
  static bool run(S& s, const char* name, const at::Tensor& a, const at::Tensor& end,
                  const c10::Scalar& w) {
    s.meta(a, end, w);
    return launch_ew(s, name, EwOp::Lerp, s.common_dtype(), params(w));
  }
};

struct LerpTensorSpec {
  using Meta = at::meta::structured_lerp_Tensor;
  template <class S>
  static bool run(S& s, const char* name, const at::Tensor& a, const at::Tensor& end,
                  const at::Tensor& w) {
    s.meta(a, end, w);
    return launch_ew(s, name, EwOp::LerpTensor, s.common_dtype(), params());
  }
};

template <class M, EwOp kOp>
struct AddcSpec {
  using Meta = M;
  template <class S>
  static bool run(S& s, const char* name, const at::Tensor& a, const at::Tensor& t1,
                  const at::Tensor& t2, const c10::Scalar& value) {
    s.meta(a, t1, t2, value);
    return launch_ew(s, name, kOp, s.common_dtype(), params(value));
  }
};

bool is_nan_scalar(const c10::Scalar& s) { return s.isFloatingPoint() && std::isnan(s.toDouble()); }

struct ClampSpec {
  using Meta = at::meta::structured_clamp;
  template <class S>
  static bool run(S& s, const char* name, const at::Tensor& self,
                  const std::optional<c10::Scalar>& min, const std::optional<c10::Scalar>& max) {
    s.meta(self, min.has_value() ? at::OptionalScalarRef(&min.value()) : at::OptionalScalarRef(),
           max.has_value() ? at::OptionalScalarRef(&max.value()) : at::OptionalScalarRef());
    if ((min && min->isComplex()) || (max && max->isComplex())) return false;
    if (min && max && (is_nan_scalar(*min) || is_nan_scalar(*max))) {
      if (!ew_supported(s, EwOp::Clamp, s.common_dtype())) return false;
      s.maybe_get_output(0).fill_(std::numeric_limits<double>::quiet_NaN());
      return true;
    }
    kernels::EwParams p;
    if (min) set_param(p, 0, *min);
    if (max) set_param(p, 1, *max);
    p.i[2] = min.has_value();
    p.i[3] = max.has_value();
    return launch_ew(s, name, EwOp::Clamp, s.common_dtype(), p);
  }
};

template <class M, bool kIsMin>
struct ClampOneSpec {
  using Meta = M;
  template <class S>
  static bool run(S& s, const char* name, const at::Tensor& self, const c10::Scalar& bound) {
    s.meta(self, bound);
    if (bound.isComplex()) return false;
    if (is_nan_scalar(bound)) {
      if (!ew_supported(s, EwOp::Clamp, s.common_dtype())) return false;
      s.maybe_get_output(0).fill_(bound);
      return true;
    }
    kernels::EwParams p;
    set_param(p, kIsMin ? 0 : 1, bound);
    p.i[2] = kIsMin;
    p.i[3] = !kIsMin;
    return launch_ew(s, name, EwOp::Clamp, s.common_dtype(), p);
  }
};

struct ClampTensorSpec {
  using Meta = at::meta::structured_clamp_Tensor;
  template <class S>
  static bool run(S& s, const char* name, const at::Tensor& self,
                  const std::optional<at::Tensor>& min, const std::optional<at::Tensor>& max) {
    const bool has_min = min.has_value() && min->defined();
    const bool has_max = max.has_value() && max->defined();
    s.meta(self, has_min ? at::OptionalTensorRef(*min) : at::OptionalTensorRef(),
           has_max ? at::OptionalTensorRef(*max) : at::OptionalTensorRef());
    const EwOp op = has_min && has_max ? EwOp::ClampTensor
                    : has_min          ? EwOp::Maximum
                                       : EwOp::Minimum;
    return launch_ew(s, name, op, s.common_dtype(), params());
  }
};

// ---------------------------------------------------------------------------------------------
// Non-structured ops: the iterator is built here the way ATen's CPU kernel builds it.
// ---------------------------------------------------------------------------------------------

// Runs `op` over an iterator built by `make(out)` (an undefined `out` is allocated by the
// iterator). Returns false, having launched nothing, when the kernels lack the dtypes.
template <class Make>
bool run_iter(at::Tensor& out, const char* name, EwOp op,
              at::ScalarType (*compute)(const at::TensorIteratorBase&), Make make,
              const kernels::EwParams& p) {
  at::TensorIterator iter = make(out);
  if (!launch_ew(iter, name, op, compute(iter), p)) return false;
  if (!out.defined()) out = iter.output();
  return true;
}

template <class Op, class... A>
decltype(auto) fallback(A&&... a) {
  return at::native::call_fallback_fn<&neuron_cpu_fallback, Op>::call(std::forward<A>(a)...);
}

at::ScalarType common(const at::TensorIteratorBase& it) { return it.common_dtype(); }
at::ScalarType as_bool(const at::TensorIteratorBase&) { return at::kBool; }

at::Tensor floor_divide(const at::Tensor& self, const at::Tensor& other) {
  using Op = at::_ops::floor_divide;
  track_op<Op>();
  at::Tensor out;
  if (!run_iter(
          out, op_name<Op>(), EwOp::DivFloor, common,
          [&](at::Tensor& o) { return at::TensorIterator::binary_op(o, self, other); }, params()))
    return fallback<Op>(self, other);
  return out;
}
at::Tensor& floor_divide_out(const at::Tensor& self, const at::Tensor& other, at::Tensor& out) {
  using Op = at::_ops::floor_divide_out;
  track_op<Op>();
  if (!run_iter(
          out, op_name<Op>(), EwOp::DivFloor, common,
          [&](at::Tensor& o) { return at::TensorIterator::binary_op(o, self, other); }, params()))
    return fallback<Op>(self, other, out);
  return out;
}
at::Tensor& floor_divide_(at::Tensor& self, const at::Tensor& other) {
  using Op = at::_ops::floor_divide__Tensor;
  track_op<Op>();
  if (!run_iter(
          self, op_name<Op>(), EwOp::DivFloor, common,
          [&](at::Tensor& o) { return at::TensorIterator::binary_op(o, o, other); }, params()))
    return fallback<Op>(self, other);
  return self;
}

// rsub(self, other, alpha) = other - alpha * self.
at::Tensor rsub_tensor(const at::Tensor& self, const at::Tensor& other, const c10::Scalar& alpha) {
  track_op<at::_ops::rsub_Tensor>();
  return at::sub(other, self, alpha);
}

at::Tensor remainder_scalar_tensor(const c10::Scalar& self, const at::Tensor& other) {
  track_op<at::_ops::remainder_Scalar_Tensor>();
  return at::remainder(at::native::wrapped_scalar_tensor(self), other);
}

template <class Op, EwOp kOp>
at::Tensor& logical_out(const at::Tensor& self, const at::Tensor& other, at::Tensor& out) {
  track_op<Op>();
  if (!run_iter(
          out, op_name<Op>(), kOp, as_bool,
          [&](at::Tensor& o) { return at::TensorIterator::comparison_op(o, self, other); },
          params()))
    return fallback<Op>(self, other, out);
  return out;
}

at::Tensor& logical_not_out(const at::Tensor& self, at::Tensor& out) {
  using Op = at::_ops::logical_not_out;
  track_op<Op>();
  if (!run_iter(
          out, op_name<Op>(), EwOp::LogicalNot, as_bool,
          [&](at::Tensor& o) {
            return at::TensorIteratorConfig()
                .check_all_same_dtype(false)
                .add_output(o)
                .add_const_input(self)
                .build();
          },
          params()))
    return fallback<Op>(self, out);
  return out;
}

// __lshift__ / __rshift__ and their in-place forms (the legacy operator overloads).
template <class Op, EwOp kOp, class Other>
at::Tensor shift(const at::Tensor& self, const Other& other) {
  track_op<Op>();
  at::Tensor out;
  const at::Tensor b = [&] {
    if constexpr (std::is_same_v<Other, at::Tensor>) {
      return other;
    } else {
      return at::native::wrapped_scalar_tensor(other);
    }
  }();
  if (!run_iter(
          out, op_name<Op>(), kOp, common,
          [&](at::Tensor& o) { return at::TensorIterator::binary_op(o, self, b); }, params()))
    return fallback<Op>(self, other);
  return out;
}
template <class Op, EwOp kOp, class Other>
at::Tensor& ishift(at::Tensor& self, const Other& other) {
  track_op<Op>();
  const at::Tensor b = [&] {
    if constexpr (std::is_same_v<Other, at::Tensor>) {
      return other;
    } else {
      return at::native::wrapped_scalar_tensor(other);
    }
  }();
  if (!run_iter(
          self, op_name<Op>(), kOp, common,
          [&](at::Tensor& o) { return at::TensorIterator::binary_op(o, o, b); }, params()))
    return fallback<Op>(self, other);
  return self;
}

// where(cond, a, b): the output has the promoted dtype of a and b; the kernel converts the
// inputs on load, so no promoted copies are made. CPU scalars are read on the host.
at::Tensor& where_out(const at::Tensor& cond, const at::Tensor& self, const at::Tensor& other,
                      at::Tensor& out) {
  track_op<at::_ops::where_self_out>();
  const at::ScalarType rt = at::native::result_type(self, other);
  TORCH_CHECK(out.scalar_type() == rt, "Expected out type to be ", rt, " but got ",
              out.scalar_type());
  at::Tensor c = cond;
  if (c.scalar_type() == at::kByte) {
    TORCH_WARN_ONCE(
        "where received a uint8 condition tensor. This behavior is deprecated and will be removed "
        "in "
        "a future version of PyTorch. Use a boolean condition instead.");
    c = c.to(at::kBool);
  }
  TORCH_CHECK(c.scalar_type() == at::kBool,
              "where expected condition to be a boolean tensor, but got a tensor with dtype ",
              c.scalar_type());
  // CPU operands other than 0-dim scalars are a device mismatch (the iterator reports it).
  at::TensorIterator iter = at::TensorIteratorConfig()
                                .check_all_same_dtype(false)
                                .allow_cpu_scalars(true)
                                .add_output(out)
                                .add_const_input(c)
                                .add_const_input(self)
                                .add_const_input(other)
                                .build();
  if (!launch_ew(iter, op_name<at::_ops::where_self_out>(), EwOp::Where, rt, params()))
    return at::native::call_fallback_fn<&neuron_cpu_fallback, at::_ops::where_self_out>::call(
        cond, self, other, out);
  return out;
}

at::Tensor where_self(const at::Tensor& cond, const at::Tensor& self, const at::Tensor& other) {
  track_op<at::_ops::where_self>();
  const at::ScalarType rt = at::native::result_type(self, other);
  // The result lives where the non-scalar operands live.
  const at::Tensor& like = is_neuron(self) ? self : is_neuron(other) ? other : cond;
  at::Tensor out = at::empty({0}, like.options().dtype(rt));
  where_out(cond, self, other, out);
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  namespace o = at::_ops;
  namespace mt = at::meta;
  reg3<AddSpec, o::add_Tensor, o::add__Tensor, o::add_out>(m);
  reg3<SubSpec, o::sub_Tensor, o::sub__Tensor, o::sub_out>(m);
  reg3<BinarySpec<mt::structured_mul_Tensor, EwOp::Mul>, o::mul_Tensor, o::mul__Tensor, o::mul_out>(
      m);
  reg3<BinarySpec<mt::structured_div_Tensor, EwOp::Div>, o::div_Tensor, o::div__Tensor, o::div_out>(
      m);
  reg3<DivModeSpec, o::div_Tensor_mode, o::div__Tensor_mode, o::div_out_mode>(m);
  reg3<BinarySpec<mt::structured_remainder_Tensor, EwOp::Remainder>, o::remainder_Tensor,
       o::remainder__Tensor, o::remainder_Tensor_out>(m);
  reg3<BinarySpec<mt::structured_fmod_Tensor, EwOp::Fmod>, o::fmod_Tensor, o::fmod__Tensor,
       o::fmod_Tensor_out>(m);
  reg3<BinarySpec<mt::structured_pow_Tensor_Tensor, EwOp::Pow>, o::pow_Tensor_Tensor,
       o::pow__Tensor, o::pow_Tensor_Tensor_out>(m);
  reg3<PowTensorScalarSpec, o::pow_Tensor_Scalar, o::pow__Scalar, o::pow_Tensor_Scalar_out>(m);
  reg<FunctionalFn, PowScalarSpec, o::pow_Scalar>(m);
  reg<OutFn, PowScalarSpec, o::pow_Scalar_out>(m);
  reg3<BinarySpec<mt::structured_atan2, EwOp::Atan2>, o::atan2, o::atan2_, o::atan2_out>(m);
  reg3<BinarySpec<mt::structured_hypot, EwOp::Hypot>, o::hypot, o::hypot_, o::hypot_out>(m);
  reg3<BinarySpec<mt::structured_copysign_Tensor, EwOp::Copysign>, o::copysign_Tensor,
       o::copysign__Tensor, o::copysign_out>(m);
  reg<FunctionalFn, BinarySpec<mt::structured_maximum, EwOp::Maximum>, o::maximum>(m);
  reg<OutFn, BinarySpec<mt::structured_maximum, EwOp::Maximum>, o::maximum_out>(m);
  reg<FunctionalFn, BinarySpec<mt::structured_minimum, EwOp::Minimum>, o::minimum>(m);
  reg<OutFn, BinarySpec<mt::structured_minimum, EwOp::Minimum>, o::minimum_out>(m);
  reg<FunctionalFn, BinarySpec<mt::structured_fmax, EwOp::Fmax>, o::fmax>(m);
  reg<OutFn, BinarySpec<mt::structured_fmax, EwOp::Fmax>, o::fmax_out>(m);
  reg<FunctionalFn, BinarySpec<mt::structured_fmin, EwOp::Fmin>, o::fmin>(m);
  reg<OutFn, BinarySpec<mt::structured_fmin, EwOp::Fmin>, o::fmin_out>(m);

#define NEURON_CMP(name, Op)                                                                      \
  reg3<BinarySpec<mt::structured_##name##_Tensor, EwOp::Op>, o::name##_Tensor, o::name##__Tensor, \
       o::name##_Tensor_out>(m);                                                                  \
  reg3<CompareScalarSpec<mt::structured_##name##_Scalar, EwOp::Op>, o::name##_Scalar,             \
       o::name##__Scalar, o::name##_Scalar_out>(m);
  NEURON_CMP(eq, Eq)
  NEURON_CMP(ne, Ne)
  NEURON_CMP(lt, Lt)
  NEURON_CMP(le, Le)
  NEURON_CMP(gt, Gt)
  NEURON_CMP(ge, Ge)
#undef NEURON_CMP

  reg3<BinarySpec<mt::structured_bitwise_and_Tensor, EwOp::BitAnd>, o::bitwise_and_Tensor,
       o::bitwise_and__Tensor, o::bitwise_and_Tensor_out>(m);
  reg3<BinarySpec<mt::structured_bitwise_or_Tensor, EwOp::BitOr>, o::bitwise_or_Tensor,
       o::bitwise_or__Tensor, o::bitwise_or_Tensor_out>(m);
  reg3<BinarySpec<mt::structured_bitwise_xor_Tensor, EwOp::BitXor>, o::bitwise_xor_Tensor,
       o::bitwise_xor__Tensor, o::bitwise_xor_Tensor_out>(m);
  reg3<BinarySpec<mt::structured_bitwise_left_shift_Tensor, EwOp::Shl>,
       o::bitwise_left_shift_Tensor, o::bitwise_left_shift__Tensor,
       o::bitwise_left_shift_Tensor_out>(m);
  reg3<BinarySpec<mt::structured_bitwise_right_shift_Tensor, EwOp::Shr>,
       o::bitwise_right_shift_Tensor, o::bitwise_right_shift__Tensor,
       o::bitwise_right_shift_Tensor_out>(m);
  m.impl("__lshift__.Tensor", TORCH_FN((shift<o::__lshift___Tensor, EwOp::Shl, at::Tensor>)));
  m.impl("__lshift__.Scalar", TORCH_FN((shift<o::__lshift___Scalar, EwOp::Shl, c10::Scalar>)));
  m.impl("__rshift__.Tensor", TORCH_FN((shift<o::__rshift___Tensor, EwOp::Shr, at::Tensor>)));
  m.impl("__rshift__.Scalar", TORCH_FN((shift<o::__rshift___Scalar, EwOp::Shr, c10::Scalar>)));
  m.impl("__ilshift__.Tensor", TORCH_FN((ishift<o::__ilshift___Tensor, EwOp::Shl, at::Tensor>)));
  m.impl("__ilshift__.Scalar", TORCH_FN((ishift<o::__ilshift___Scalar, EwOp::Shl, c10::Scalar>)));
  m.impl("__irshift__.Tensor", TORCH_FN((ishift<o::__irshift___Tensor, EwOp::Shr, at::Tensor>)));
  m.impl("__irshift__.Scalar", TORCH_FN((ishift<o::__irshift___Scalar, EwOp::Shr, c10::Scalar>)));

  m.impl("logical_and.out", TORCH_FN((logical_out<o::logical_and_out, EwOp::LogicalAnd>)));
  m.impl("logical_or.out", TORCH_FN((logical_out<o::logical_or_out, EwOp::LogicalOr>)));
  m.impl("logical_xor.out", TORCH_FN((logical_out<o::logical_xor_out, EwOp::LogicalXor>)));
  m.impl("logical_not.out", TORCH_FN(logical_not_out));

  m.impl("floor_divide", TORCH_FN(floor_divide));
  m.impl("floor_divide.out", TORCH_FN(floor_divide_out));
  m.impl("floor_divide_.Tensor", TORCH_FN(floor_divide_));
  m.impl("remainder.Scalar_Tensor", TORCH_FN(remainder_scalar_tensor));
  m.impl("rsub.Tensor", TORCH_FN(rsub_tensor));
  reg3<BinarySpec<mt::structured_xlogy_Tensor, EwOp::Xlogy>, o::xlogy_Tensor, o::xlogy__Tensor,
       o::xlogy_OutTensor>(m);
  reg<FunctionalFn, BinarySpec<mt::structured_special_xlog1py, EwOp::Xlog1py>, o::special_xlog1py>(
      m);
  reg<OutFn, BinarySpec<mt::structured_special_xlog1py, EwOp::Xlog1py>, o::special_xlog1py_out>(m);
  reg3<BinarySpec<mt::structured_heaviside, EwOp::Heaviside>, o::heaviside, o::heaviside_,
       o::heaviside_out>(m);
  reg<FunctionalFn, BinarySpec<mt::structured_logaddexp, EwOp::Logaddexp>, o::logaddexp>(m);
  reg<OutFn, BinarySpec<mt::structured_logaddexp, EwOp::Logaddexp>, o::logaddexp_out>(m);
  reg<FunctionalFn, BinarySpec<mt::structured_logaddexp2, EwOp::Logaddexp2>, o::logaddexp2>(m);
  reg<OutFn, BinarySpec<mt::structured_logaddexp2, EwOp::Logaddexp2>, o::logaddexp2_out>(m);
  reg3<BinarySpec<mt::structured_nextafter, EwOp::Nextafter>, o::nextafter, o::nextafter_,
       o::nextafter_out>(m);
  reg3<BinarySpec<mt::structured_gcd, EwOp::Gcd>, o::gcd, o::gcd_, o::gcd_out>(m);
  reg3<BinarySpec<mt::structured_lcm, EwOp::Lcm>, o::lcm, o::lcm_, o::lcm_out>(m);

  reg3<LerpScalarSpec, o::lerp_Scalar, o::lerp__Scalar, o::lerp_Scalar_out>(m);
  reg3<LerpTensorSpec, o::lerp_Tensor, o::lerp__Tensor, o::lerp_Tensor_out>(m);
  reg3<AddcSpec<mt::structured_addcmul, EwOp::Addcmul>, o::addcmul, o::addcmul_, o::addcmul_out>(m);
  reg3<AddcSpec<mt::structured_addcdiv, EwOp::Addcdiv>, o::addcdiv, o::addcdiv_, o::addcdiv_out>(m);
  m.impl("where.self", TORCH_FN(where_self));
  m.impl("where.self_out", TORCH_FN(where_out));

  reg3<ClampSpec, o::clamp, o::clamp_, o::clamp_out>(m);
  reg3<ClampTensorSpec, o::clamp_Tensor, o::clamp__Tensor, o::clamp_Tensor_out>(m);
  reg3<ClampOneSpec<mt::structured_clamp_min, true>, o::clamp_min, o::clamp_min_, o::clamp_min_out>(
      m);
  reg3<ClampOneSpec<mt::structured_clamp_max, false>, o::clamp_max, o::clamp_max_,
       o::clamp_max_out>(m);
  reg3<BinarySpec<mt::structured_clamp_min_Tensor, EwOp::Maximum>, o::clamp_min_Tensor,
       o::clamp_min__Tensor, o::clamp_min_Tensor_out>(m);
  reg3<BinarySpec<mt::structured_clamp_max_Tensor, EwOp::Minimum>, o::clamp_max_Tensor,
       o::clamp_max__Tensor, o::clamp_max_Tensor_out>(m);
}

}  // namespace neuron::torch_glue
