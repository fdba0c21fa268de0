// The _foreach_* ops (the multi-tensor path of torch.optim and clip_grad_norm_) and the fused
// Adam/AdamW/SGD optimizers. A list whose tensors share one neuron device and dtype (ATen's
// "fast route" conditions) runs as ONE task over the whole list; anything else (mixed dtypes,
// type promotion, complex, mismatched shapes) takes ATen's per-tensor slow path, which calls the
// neuron per-tensor ops, so the exact ATen semantics and errors are kept.
#include <ATen/native/ForeachUtils.h>
#include <ATen/ops/_foreach_abs_native.h>
#include <ATen/ops/_foreach_acos_native.h>
#include <ATen/ops/_foreach_add_native.h>
#include <ATen/ops/_foreach_addcdiv_native.h>
#include <ATen/ops/_foreach_addcmul_native.h>
#include <ATen/ops/_foreach_asin_native.h>
#include <ATen/ops/_foreach_atan_native.h>
#include <ATen/ops/_foreach_ceil_native.h>
#include <ATen/ops/_foreach_clamp_max_native.h>
#include <ATen/ops/_foreach_clamp_min_native.h>
#include <ATen/ops/_foreach_cos_native.h>
#include <ATen/ops/_foreach_cosh_native.h>
#include <ATen/ops/_foreach_div_native.h>
#include <ATen/ops/_foreach_erf_native.h>
#include <ATen/ops/_foreach_erfc_native.h>
#include <ATen/ops/_foreach_exp_native.h>
#include <ATen/ops/_foreach_expm1_native.h>
#include <ATen/ops/_foreach_floor_native.h>
#include <ATen/ops/_foreach_frac_native.h>
#include <ATen/ops/_foreach_lerp_native.h>
#include <ATen/ops/_foreach_lgamma_native.h>
#include <ATen/ops/_foreach_log10_native.h>
#include <ATen/ops/_foreach_log1p_native.h>
#include <ATen/ops/_foreach_log2_native.h>
#include <ATen/ops/_foreach_log_native.h>
#include <ATen/ops/_foreach_maximum_native.h>
#include <ATen/ops/_foreach_minimum_native.h>
#include <ATen/ops/_foreach_mul_native.h>
#include <ATen/ops/_foreach_neg_native.h>
#include <ATen/ops/_foreach_norm_native.h>
#include <ATen/ops/_foreach_pow_native.h>
#include <ATen/ops/_foreach_reciprocal_native.h>
#include <ATen/ops/_foreach_round_native.h>
#include <ATen/ops/_foreach_rsqrt_native.h>
#include <ATen/ops/_foreach_sigmoid_native.h>
#include <ATen/ops/_foreach_sign_native.h>
#include <ATen/ops/_foreach_sin_native.h>
#include <ATen/ops/_foreach_sinh_native.h>
#include <ATen/ops/_foreach_sqrt_native.h>
#include <ATen/ops/_foreach_sub_native.h>
#include <ATen/ops/_foreach_tan_native.h>
#include <ATen/ops/_foreach_tanh_native.h>
#include <ATen/ops/_foreach_trunc_native.h>
#include <ATen/ops/_foreach_zero_native.h>

#include <cstring>
#include <vector>

#include "../Common.h"
#include "../DtypeContract.h"
#include "EwLaunch.h"
#include "kernels/copy.h"
#include "kernels/foreach.h"
#include "kernels/reduce.h"

namespace neuron::torch_glue {
namespace {

using kernels::EwOp;

// A scalar operand broadcast to every element (Scalar, ScalarList or CPU 0-dim tensor forms).
struct HostScalar {
  kernels::DType dtype;
  unsigned char bytes[8];
};

HostScalar host_scalar(const c10::Scalar& s) {
  HostScalar h{};
  if (s.isFloatingPoint() || s.isComplex()) {
    const double d = s.isComplex() ? s.toComplexDouble().real() : s.toDouble();
    h.dtype = kernels::DType::Float64;
    std::memcpy(h.bytes, &d, 8);
  } else {
    const int64_t v = s.isBoolean() ? (s.toBool() ? 1 : 0) : s.toLong();
    h.dtype = kernels::DType::Int64;
    std::memcpy(h.bytes, &v, 8);
  }
  return h;
}

// One queued list op: items plus the host scalars they read (patched in when the task runs,
// because the task object is copied into the stream queue).
struct ForeachTask {
  EwOp op;
  kernels::DType compute;
  int nops;
  kernels::EwParams shared;
  bool per_item = false;
  bool strict = false;
  const char* name;
  std::vector<kernels::EwParams> params;
  std::vector<kernels::ForeachItem> items;
  std::vector<HostScalar> scalars;
  struct Use {
    int32_t item;
    int8_t operand;
    int32_t scalar;
  };
  std::vector<Use> uses;

  void operator()() {
    for (const Use& u : uses)
      items[static_cast<size_t>(u.item)].refs[u.operand].data =
          scalars[static_cast<size_t>(u.scalar)].bytes;
    if (strict)
      for (const auto& it : items)
        for (int k = 1; k < nops; ++k) dtype_contract::check_values(it.refs[k], name);
    kernels::foreach_elementwise(op, compute, nops, items, shared, per_item ? &params : nullptr);
    if (strict)
      for (const auto& it : items) dtype_contract::check_values(it.refs[0], name);
  }
};

// An operand of a list op.
struct Operand {
  enum Kind { List, Scalar, ScalarList, Tensor } kind;
  at::TensorList list;
  c10::Scalar scalar;
  at::ArrayRef<c10::Scalar> scalars;
  const at::Tensor* tensor = nullptr;
};
Operand list_of(at::TensorList l) { return {Operand::List, l, {}, {}, nullptr}; }
Operand scalar_of(const c10::Scalar& s) { return {Operand::Scalar, {}, s, {}, nullptr}; }
Operand scalars_of(at::ArrayRef<c10::Scalar> s) {
  return {Operand::ScalarList, {}, {}, s, nullptr};
}
Operand tensor_of(const at::Tensor& t) { return {Operand::Tensor, {}, {}, {}, &t}; }

bool float_only(EwOp op) {
  switch (op) {
    case EwOp::Add:
    case EwOp::Mul:
    case EwOp::Maximum:
    case EwOp::Minimum:
    case EwOp::Neg:
    case EwOp::Abs:
    case EwOp::Sign:
    case EwOp::Pow:
    case EwOp::PowScalar:
    case EwOp::Addcmul:
      return false;
    default:
      return true;
  }
}

// ATen's fast-route test, on neuron tensors: one device, one dtype, same sizes per position,
// no type promotion by the scalars, a kernel for the dtype.
bool fast_route(EwOp op, at::TensorList self, std::initializer_list<Operand> others) {
  if (self.empty()) return true;
  const at::Tensor& first = self[0];
  if (!is_neuron(first) || first.layout() != at::kStrided) return false;
  const at::ScalarType dt = first.scalar_type();
  if (at::isComplexType(dt) || !kernels::elementwise_supports(op, to_kernel_dtype(dt)))
    return false;
  if (float_only(op) && !at::isFloatingType(dt)) return false;
  for (const at::Tensor& t : self)
    if (!t.defined() || t.device() != first.device() || t.scalar_type() != dt ||
        t.layout() != at::kStrided)
      return false;
  for (const Operand& o : others) {
    switch (o.kind) {
      case Operand::List:
        if (o.list.size() != self.size()) return false;
        for (size_t i = 0; i < self.size(); ++i) {
          const at::Tensor& t = o.list[i];
          if (!t.defined() || t.device() != first.device() || t.scalar_type() != dt ||
              t.sizes() != self[i].sizes())
            return false;
        }
        break;
      case Operand::Scalar:
        if (o.scalar.isComplex() || at::native::result_type(first, o.scalar) != dt) return false;
        break;
      case Operand::ScalarList:
        if (o.scalars.size() != self.size()) return false;
        for (const c10::Scalar& s : o.scalars)
          if (s.isComplex() || at::native::result_type(first, s) != dt) return false;
        break;
      case Operand::Tensor:
        if (!o.tensor->defined() || o.tensor->dim() != 0 ||
            at::native::result_type(first, *o.tensor) != dt || o.tensor->is_complex())
          return false;
        if (!o.tensor->device().is_cpu() && o.tensor->device() != first.device()) return false;
        break;
    }
  }
  return true;
}

kernels::TensorRef scalar_ref(const at::Tensor& shape_of, kernels::DType dt) {
  kernels::TensorRef r;
  r.dtype = dt;
  r.ndim = static_cast<int>(shape_of.dim());
  for (int d = 0; d < r.ndim; ++d) {
    r.sizes[d] = shape_of.size(d);
    r.strides[d] = 0;
  }
  return r;
}

// Queues op over the list. `outs` are the output tensors (self for in-place).
void launch_list(const char* name, EwOp op, at::TensorList outs, at::TensorList self,
                 std::initializer_list<Operand> others, const kernels::EwParams& shared,
                 const std::vector<kernels::EwParams>* per_item = nullptr,
                 bool self_is_operand = true) {
  if (self.empty()) return;
  ForeachTask t;
  t.op = op;
  t.compute = to_kernel_dtype(self[0].scalar_type());
  t.nops = 1 + (self_is_operand ? 1 : 0) + static_cast<int>(others.size());
  t.shared = shared;
  t.name = name;
  t.strict = dtype_contract::strict();
  if (per_item) {
    t.per_item = true;
    t.params = *per_item;
  }
  dtype_contract::note(self[0].scalar_type());
  t.items.resize(self.size());
  for (size_t i = 0; i < self.size(); ++i) {
    kernels::ForeachItem& it = t.items[i];
    it.refs[0] = make_ref(outs[i]);
    int k = 1;
    if (self_is_operand) it.refs[k++] = make_ref(self[i]);
    for (const Operand& o : others) {
      switch (o.kind) {
        case Operand::List:
          it.refs[k] = make_ref(o.list[i]);
          break;
        case Operand::Scalar:
        case Operand::ScalarList: {
          const HostScalar h = host_scalar(o.kind == Operand::Scalar ? o.scalar : o.scalars[i]);
          it.refs[k] = scalar_ref(outs[i], h.dtype);
          t.scalars.push_back(h);
          t.uses.push_back({static_cast<int32_t>(i), static_cast<int8_t>(k),
                            static_cast<int32_t>(t.scalars.size() - 1)});
          break;
        }
        case Operand::Tensor:
          if (o.tensor->device().is_cpu()) {
            const HostScalar h = host_scalar(o.tensor->item());
            it.refs[k] = scalar_ref(outs[i], h.dtype);
            t.scalars.push_back(h);
            t.uses.push_back({static_cast<int32_t>(i), static_cast<int8_t>(k),
                              static_cast<int32_t>(t.scalars.size() - 1)});
          } else {
            it.refs[k] = scalar_ref(outs[i], to_kernel_dtype(o.tensor->scalar_type()));
            it.refs[k].data = o.tensor->data_ptr();
          }
          break;
      }
      ++k;
    }
  }
  launch(self[0].device().index(), name, std::move(t));
}

std::vector<at::Tensor> empty_like_list(at::TensorList self) {
  std::vector<at::Tensor> out;
  out.reserve(self.size());
  for (const at::Tensor& t : self) out.push_back(at::empty_like(t));
  return out;
}

template <class Op>
const char* nm() {
  return op_name<Op>();
}

// ---------------------------------------------------------------------------------------------
// Forms. Each takes the ATen slow kernels (functional and in-place) for the cases it does not
// run itself.
// ---------------------------------------------------------------------------------------------

// sub on bool is an error in ATen; the slow path raises it.
bool bool_list(at::TensorList l) { return !l.empty() && l[0].scalar_type() == at::kBool; }

c10::Scalar negate(const c10::Scalar& s) {
  if (s.isFloatingPoint()) return -s.toDouble();
  if (s.isBoolean()) return s;
  return -s.toLong();
}

template <class FnOp, class InOp, EwOp kOp, bool kNeg, auto Slow, auto SlowIn>
struct ListAlpha {
  static std::vector<at::Tensor> fn(at::TensorList self, at::TensorList other,
                                    const c10::Scalar& alpha) {
    track_op<FnOp>();
    if (!fast_route(kOp, self, {list_of(other), scalar_of(alpha)}) || (kNeg && bool_list(self)))
      return Slow(self, other, alpha);
    auto out = empty_like_list(self);
    launch_list(nm<FnOp>(), kOp, out, self, {list_of(other)}, params(kNeg ? negate(alpha) : alpha));
    return out;
  }
  static void inplace(at::TensorList self, at::TensorList other, const c10::Scalar& alpha) {
    track_op<InOp>();
    if (!fast_route(kOp, self, {list_of(other), scalar_of(alpha)}) || (kNeg && bool_list(self)))
      return SlowIn(self, other, alpha);
    launch_list(nm<InOp>(), kOp, self, self, {list_of(other)},
                params(kNeg ? negate(alpha) : alpha));
  }
};

template <class FnOp, class InOp, EwOp kOp, auto Slow, auto SlowIn>
struct List {
  static std::vector<at::Tensor> fn(at::TensorList self, at::TensorList other) {
    track_op<FnOp>();
    if (!fast_route(kOp, self, {list_of(other)})) return Slow(self, other);
    auto out = empty_like_list(self);
    launch_list(nm<FnOp>(), kOp, out, self, {list_of(other)}, params(1));
    return out;
  }
  static void inplace(at::TensorList self, at::TensorList other) {
    track_op<InOp>();
    if (!fast_route(kOp, self, {list_of(other)})) return SlowIn(self, other);
    launch_list(nm<InOp>(), kOp, self, self, {list_of(other)}, params(1));
  }
};

// Binary op with a scalar operand b (add/sub express the sign through alpha).
template <class FnOp, class InOp, EwOp kOp, int kAlpha, auto Slow, auto SlowIn>
struct ScalarForm {
  static std::vector<at::Tensor> fn(at::TensorList self, const c10::Scalar& s) {
    track_op<FnOp>();
    if (!fast_route(kOp, self, {scalar_of(s)}) || (kAlpha < 0 && bool_list(self)))
      return Slow(self, s);
    auto out = empty_like_list(self);
    launch_list(nm<FnOp>(), kOp, out, self, {scalar_of(s)}, params(kAlpha));
    return out;
  }
  static void inplace(at::TensorList self, const c10::Scalar& s) {
    track_op<InOp>();
    if (!fast_route(kOp, self, {scalar_of(s)}) || (kAlpha < 0 && bool_list(self)))
      return SlowIn(self, s);
    launch_list(nm<InOp>(), kOp, self, self, {scalar_of(s)}, params(kAlpha));
  }
};

template <class FnOp, class InOp, EwOp kOp, int kAlpha, auto Slow, auto SlowIn>
struct ScalarListForm {
  static std::vector<at::Tensor> fn(at::TensorList self, at::ArrayRef<c10::Scalar> s) {
    track_op<FnOp>();
    if (!fast_route(kOp, self, {scalars_of(s)}) || (kAlpha < 0 && bool_list(self)))
      return Slow(self, s);
    auto out = empty_like_list(self);
    launch_list(nm<FnOp>(), kOp, out, self, {scalars_of(s)}, params(kAlpha));
    return out;
  }
  static void inplace(at::TensorList self, at::ArrayRef<c10::Scalar> s) {
    track_op<InOp>();
    if (!fast_route(kOp, self, {scalars_of(s)}) || (kAlpha < 0 && bool_list(self)))
      return SlowIn(self, s);
    launch_list(nm<InOp>(), kOp, self, self, {scalars_of(s)}, params(kAlpha));
  }
};

// Binary op with a 0-dim tensor operand (optionally with alpha).
template <class FnOp, class InOp, EwOp kOp, auto Slow, auto SlowIn>
struct TensorFormAlpha {
  static std::vector<at::Tensor> fn(at::TensorList self, const at::Tensor& other,
                                    const c10::Scalar& alpha) {
    track_op<FnOp>();
    if (!fast_route(kOp, self, {tensor_of(other), scalar_of(alpha)}))
      return Slow(self, other, alpha);
    auto out = empty_like_list(self);
    launch_list(nm<FnOp>(), kOp, out, self, {tensor_of(other)}, params(alpha));
    return out;
  }
  static void inplace(at::TensorList self, const at::Tensor& other, const c10::Scalar& alpha) {
    track_op<InOp>();
    if (!fast_route(kOp, self, {tensor_of(other), scalar_of(alpha)}))
      return SlowIn(self, other, alpha);
    launch_list(nm<InOp>(), kOp, self, self, {tensor_of(other)}, params(alpha));
  }
};
template <class FnOp, class InOp, EwOp kOp, auto Slow, auto SlowIn>
struct TensorForm {
  static std::vector<at::Tensor> fn(at::TensorList self, const at::Tensor& other) {
    track_op<FnOp>();
    if (!fast_route(kOp, self, {tensor_of(other)})) return Slow(self, other);
    auto out = empty_like_list(self);
    launch_list(nm<FnOp>(), kOp, out, self, {tensor_of(other)}, params(1));
    return out;
  }
  static void inplace(at::TensorList self, const at::Tensor& other) {
    track_op<InOp>();
    if (!fast_route(kOp, self, {tensor_of(other)})) return SlowIn(self, other);
    launch_list(nm<InOp>(), kOp, self, self, {tensor_of(other)}, params(1));
  }
};

template <class FnOp, class InOp, EwOp kOp, auto Slow, auto SlowIn>
struct Unary {
  static std::vector<at::Tensor> fn(at::TensorList self) {
    track_op<FnOp>();
    if (!fast_route(kOp, self, {})) return Slow(self);
    auto out = empty_like_list(self);
    launch_list(nm<FnOp>(), kOp, out, self, {}, params());
    return out;
  }
  static void inplace(at::TensorList self) {
    track_op<InOp>();
    if (!fast_route(kOp, self, {})) return SlowIn(self);
    launch_list(nm<InOp>(), kOp, self, self, {}, params());
  }
};

// pow(self, scalar exponent): the unary PowScalar kernel with ATen's special exponents.
template <class FnOp, class InOp, auto Slow, auto SlowIn>
struct PowScalarForm {
  static std::vector<at::Tensor> fn(at::TensorList self, const c10::Scalar& e) {
    track_op<FnOp>();
    if (!fast_route(EwOp::PowScalar, self, {scalar_of(e)})) return Slow(self, e);
    auto out = empty_like_list(self);
    launch_list(nm<FnOp>(), EwOp::PowScalar, out, self, {}, params(e));
    return out;
  }
  static void inplace(at::TensorList self, const c10::Scalar& e) {
    track_op<InOp>();
    if (!fast_route(EwOp::PowScalar, self, {scalar_of(e)})) return SlowIn(self, e);
    launch_list(nm<InOp>(), EwOp::PowScalar, self, self, {}, params(e));
  }
};
template <class FnOp, class InOp, auto Slow, auto SlowIn>
struct PowScalarListForm {
  static std::vector<kernels::EwParams> per(at::ArrayRef<c10::Scalar> e) {
    std::vector<kernels::EwParams> p;
    for (const c10::Scalar& s : e) p.push_back(params(s));
    return p;
  }
  static std::vector<at::Tensor> fn(at::TensorList self, at::ArrayRef<c10::Scalar> e) {
    track_op<FnOp>();
    if (!fast_route(EwOp::PowScalar, self, {scalars_of(e)})) return Slow(self, e);
    auto out = empty_like_list(self);
    const auto p = per(e);
    launch_list(nm<FnOp>(), EwOp::PowScalar, out, self, {}, {}, &p);
    return out;
  }
  static void inplace(at::TensorList self, at::ArrayRef<c10::Scalar> e) {
    track_op<InOp>();
    if (!fast_route(EwOp::PowScalar, self, {scalars_of(e)})) return SlowIn(self, e);
    const auto p = per(e);
    launch_list(nm<InOp>(), EwOp::PowScalar, self, self, {}, {}, &p);
  }
};

std::vector<at::Tensor> pow_scalar_and_tensor(const c10::Scalar& base, at::TensorList exponent) {
  using Op = at::_ops::_foreach_pow_ScalarAndTensor;
  track_op<Op>();
  if (!fast_route(EwOp::Pow, exponent, {scalar_of(base)}))
    return at::native::foreach_scalar_pow_list_kernel_slow(base, exponent);
  auto out = empty_like_list(exponent);
  // out = base ** e: the Pow kernel with a broadcast scalar as its first operand.
  launch_list(nm<Op>(), EwOp::Pow, out, exponent, {scalar_of(base), list_of(exponent)}, params(),
              nullptr,
              /*self_is_operand=*/false);
  return out;
}

// lerp with a weight list (ternary), a scalar weight, or one weight per tensor.
template <class FnOp, class InOp, auto Slow, auto SlowIn>
struct LerpList {
  static std::vector<at::Tensor> fn(at::TensorList self, at::TensorList end, at::TensorList w) {
    track_op<FnOp>();
    if (!fast_route(EwOp::LerpTensor, self, {list_of(end), list_of(w)})) return Slow(self, end, w);
    auto out = empty_like_list(self);
    launch_list(nm<FnOp>(), EwOp::LerpTensor, out, self, {list_of(end), list_of(w)}, params());
    return out;
  }
  static void inplace(at::TensorList self, at::TensorList end, at::TensorList w) {
    track_op<InOp>();
    if (!fast_route(EwOp::LerpTensor, self, {list_of(end), list_of(w)}))
      return SlowIn(self, end, w);
    launch_list(nm<InOp>(), EwOp::LerpTensor, self, self, {list_of(end), list_of(w)}, params());
  }
};
template <class FnOp, class InOp, auto Slow, auto SlowIn>
struct LerpScalar {
  static std::vector<at::Tensor> fn(at::TensorList self, at::TensorList end, const c10::Scalar& w) {
    track_op<FnOp>();
    if (!fast_route(EwOp::Lerp, self, {list_of(end), scalar_of(w)})) return Slow(self, end, w);
    auto out = empty_like_list(self);
    launch_list(nm<FnOp>(), EwOp::Lerp, out, self, {list_of(end)}, params(w));
    return out;
  }
  static void inplace(at::TensorList self, at::TensorList end, const c10::Scalar& w) {
    track_op<InOp>();
    if (!fast_route(EwOp::Lerp, self, {list_of(end), scalar_of(w)})) return SlowIn(self, end, w);
    launch_list(nm<InOp>(), EwOp::Lerp, self, self, {list_of(end)}, params(w));
  }
};
template <class FnOp, class InOp, auto Slow, auto SlowIn>
struct LerpScalarList {
  static std::vector<at::Tensor> fn(at::TensorList self, at::TensorList end,
                                    at::ArrayRef<c10::Scalar> w) {
    track_op<FnOp>();
    if (!fast_route(EwOp::Lerp, self, {list_of(end), scalars_of(w)})) return Slow(self, end, w);
    auto out = empty_like_list(self);
    std::vector<kernels::EwParams> p;
    for (const c10::Scalar& s : w) p.push_back(params(s));
    launch_list(nm<FnOp>(), EwOp::Lerp, out, self, {list_of(end)}, {}, &p);
    return out;
  }
  static void inplace(at::TensorList self, at::TensorList end, at::ArrayRef<c10::Scalar> w) {
    track_op<InOp>();
    if (!fast_route(EwOp::Lerp, self, {list_of(end), scalars_of(w)})) return SlowIn(self, end, w);
    std::vector<kernels::EwParams> p;
    for (const c10::Scalar& s : w) p.push_back(params(s));
    launch_list(nm<InOp>(), EwOp::Lerp, self, self, {list_of(end)}, {}, &p);
  }
};

// addcmul / addcdiv with one value, one value per tensor, or a 1-d tensor of values.
template <class FnOp, class InOp, EwOp kOp, auto Slow, auto SlowIn>
struct PointwiseScalar {
  static std::vector<at::Tensor> fn(at::TensorList self, at::TensorList t1, at::TensorList t2,
                                    const c10::Scalar& v) {
    track_op<FnOp>();
    if (!fast_route(kOp, self, {list_of(t1), list_of(t2), scalar_of(v)}))
      return Slow(self, t1, t2, v);
    auto out = empty_like_list(self);
    launch_list(nm<FnOp>(), kOp, out, self, {list_of(t1), list_of(t2)}, params(v));
    return out;
  }
  static void inplace(at::TensorList self, at::TensorList t1, at::TensorList t2,
                      const c10::Scalar& v) {
    track_op<InOp>();
    if (!fast_route(kOp, self, {list_of(t1), list_of(t2), scalar_of(v)}))
      return SlowIn(self, t1, t2, v);
    launch_list(nm<InOp>(), kOp, self, self, {list_of(t1), list_of(t2)}, params(v));
  }
};
template <class FnOp, class InOp, EwOp kOp, auto Slow, auto SlowIn>
struct PointwiseScalarList {
  static std::vector<at::Tensor> fn(at::TensorList self, at::TensorList t1, at::TensorList t2,
                                    at::ArrayRef<c10::Scalar> v) {
    track_op<FnOp>();
    if (!fast_route(kOp, self, {list_of(t1), list_of(t2), scalars_of(v)}))
      return Slow(self, t1, t2, v);
    auto out = empty_like_list(self);
    std::vector<kernels::EwParams> p;
    for (const c10::Scalar& s : v) p.push_back(params(s));
    launch_list(nm<FnOp>(), kOp, out, self, {list_of(t1), list_of(t2)}, {}, &p);
    return out;
  }
  static void inplace(at::TensorList self, at::TensorList t1, at::TensorList t2,
                      at::ArrayRef<c10::Scalar> v) {
    track_op<InOp>();
    if (!fast_route(kOp, self, {list_of(t1), list_of(t2), scalars_of(v)}))
      return SlowIn(self, t1, t2, v);
    std::vector<kernels::EwParams> p;
    for (const c10::Scalar& s : v) p.push_back(params(s));
    launch_list(nm<InOp>(), kOp, self, self, {list_of(t1), list_of(t2)}, {}, &p);
  }
};
template <class FnOp, class InOp, EwOp kOp, auto Slow, auto SlowIn>
struct PointwiseTensor {
  // The values live in a 1-d tensor (normally on the CPU, as torch.optim passes them).
  static bool host_values(at::TensorList self, const at::Tensor& v, std::vector<c10::Scalar>& out) {
    if (v.dim() != 1 || v.numel() != static_cast<int64_t>(self.size()) || v.is_complex())
      return false;
    const at::Tensor h = v.device().is_cpu() ? v : v.cpu();
    for (int64_t i = 0; i < h.numel(); ++i) out.push_back(h[i].item());
    return true;
  }
  static std::vector<at::Tensor> fn(at::TensorList self, at::TensorList t1, at::TensorList t2,
                                    const at::Tensor& v) {
    track_op<FnOp>();
    std::vector<c10::Scalar> vals;
    if (!host_values(self, v, vals) ||
        !fast_route(kOp, self, {list_of(t1), list_of(t2), scalars_of(vals)}))
      return Slow(self, t1, t2, v);
    auto out = empty_like_list(self);
    std::vector<kernels::EwParams> p;
    for (const c10::Scalar& s : vals) p.push_back(params(s));
    launch_list(nm<FnOp>(), kOp, out, self, {list_of(t1), list_of(t2)}, {}, &p);
    return out;
  }
  static void inplace(at::TensorList self, at::TensorList t1, at::TensorList t2,
                      const at::Tensor& v) {
    track_op<InOp>();
    std::vector<c10::Scalar> vals;
    if (!host_values(self, v, vals) ||
        !fast_route(kOp, self, {list_of(t1), list_of(t2), scalars_of(vals)}))
      return SlowIn(self, t1, t2, v);
    std::vector<kernels::EwParams> p;
    for (const c10::Scalar& s : vals) p.push_back(params(s));
    launch_list(nm<InOp>(), kOp, self, self, {list_of(t1), list_of(t2)}, {}, &p);
  }
};

void zero_(at::TensorList self) {
  using Op = at::_ops::_foreach_zero_;
  track_op<Op>();
  for (const at::Tensor& t : self) {
    if (!is_neuron(t)) return at::native::foreach_tensor_zero_slow_(self);
  }
  if (self.empty()) return;
  struct Task {
    std::vector<kernels::TensorRef> refs;
    void operator()() const {
      const unsigned char zero[16] = {};
      for (const auto& r : refs)
        if (r.numel()) kernels::fill(r, zero);
    }
  } t;
  for (const at::Tensor& x : self) {
    TORCH_CHECK(x.device() == self[0].device(), "_foreach_zero_: tensors on different devices");
    t.refs.push_back(make_ref(x));
  }
  launch(self[0].device().index(), nm<Op>(), std::move(t));
}

// _foreach_norm: one 0-dim result per tensor, one task for the list.
std::vector<at::Tensor> norm(at::TensorList self, const c10::Scalar& ord,
                             std::optional<at::ScalarType> dtype) {
  using Op = at::_ops::_foreach_norm_Scalar;
  track_op<Op>();
  bool fast = !self.empty() && !ord.isComplex();
  for (const at::Tensor& t : self)
    fast = fast && is_neuron(t) && t.device() == self[0].device() &&
           t.scalar_type() == self[0].scalar_type() && at::isFloatingType(t.scalar_type());
  if (!fast) return at::native::foreach_tensor_norm_slow(self, ord, dtype);
  const at::ScalarType out_t = dtype.value_or(self[0].scalar_type());
  std::vector<at::Tensor> out;
  struct Task {
    double p;
    kernels::DType compute;
    std::vector<kernels::TensorRef> in, out;
    void operator()() const {
      kernels::ReduceParams rp;
      rp.p = p;
      for (size_t i = 0; i < in.size(); ++i) {
        kernels::TensorRef o = out[i];
        o.ndim = in[i].ndim;  // keepdim form: every dim reduced
        for (int d = 0; d < o.ndim; ++d) {
          o.sizes[d] = 1;
          o.strides[d] = 0;
        }
        kernels::reduce(kernels::ReduceOp::Norm, compute, rp, in[i], &o, 1);
      }
    }
  } t;
  t.p = ord.toDouble();
  t.compute = to_kernel_dtype(out_t);
  dtype_contract::note(self[0].scalar_type());
  for (const at::Tensor& x : self) {
    out.push_back(at::empty({}, x.options().dtype(out_t)));
    t.in.push_back(make_ref(x));
    t.out.push_back(make_ref(out.back()));
  }
  launch(self[0].device().index(), nm<Op>(), std::move(t));
  return out;
}

// ---------------------------------------------------------------------------------------------
// Fused optimizers
// ---------------------------------------------------------------------------------------------

kernels::TensorRef opt_ref(const std::optional<at::Tensor>& t, c10::Device dev, const char* what) {
  if (!t.has_value() || !t->defined()) return {};
  TORCH_CHECK(t->numel() == 1, what, " must have one element");
  TORCH_CHECK(t->device() == dev, what, " must be on ", dev, ", got ", t->device());
  return make_ref(*t);
}

bool optimizer_fast(std::initializer_list<at::TensorList> lists, at::TensorList params) {
  if (params.empty()) return true;
  const at::Tensor& p0 = params[0];
  if (!is_neuron(p0) || !at::isFloatingType(p0.scalar_type())) return false;
  for (at::TensorList l : lists) {
    for (size_t i = 0; i < l.size(); ++i) {
      const at::Tensor& t = l[i];
      if (t.device() != p0.device() || t.scalar_type() != p0.scalar_type() || !t.is_contiguous() ||
          t.sizes() != params[i].sizes())
        return false;
    }
  }
  return true;
}

template <bool kAdamW>
void fused_adam_impl(const char* name, at::TensorList params, at::TensorList grads,
                     at::TensorList exp_avgs, at::TensorList exp_avg_sqs,
                     at::TensorList max_exp_avg_sqs, at::TensorList state_steps, double lr,
                     const std::optional<at::Tensor>& lr_tensor, double beta1, double beta2,
                     double weight_decay, double eps, bool amsgrad, bool maximize,
                     const std::optional<at::Tensor>& grad_scale,
                     const std::optional<at::Tensor>& found_inf) {
  if (params.empty()) return;
  TORCH_CHECK(grads.size() == params.size() && exp_avgs.size() == params.size() &&
                  exp_avg_sqs.size() == params.size() && state_steps.size() == params.size() &&
                  (!amsgrad || max_exp_avg_sqs.size() == params.size()),
              name, ": tensor lists must have the same length");
  const c10::Device dev = params[0].device();
  kernels::AdamArgs a;
  a.lr = lr;
  a.beta1 = beta1;
  a.beta2 = beta2;
  a.weight_decay = weight_decay;
  a.eps = eps;
  a.amsgrad = amsgrad;
  a.maximize = maximize;
  a.decoupled = kAdamW;
  a.lr_tensor = opt_ref(lr_tensor, dev, "lr");
  a.grad_scale = opt_ref(grad_scale, dev, "grad_scale");
  a.found_inf = opt_ref(found_inf, dev, "found_inf");
  std::vector<kernels::AdamTensors> list(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    TORCH_CHECK(state_steps[i].numel() == 1 && state_steps[i].device() == dev, name,
                ": state_steps must be one-element tensors on ", dev);
    list[i].param = make_ref(params[i]);
    list[i].grad = make_ref(grads[i]);
    list[i].exp_avg = make_ref(exp_avgs[i]);
    list[i].exp_avg_sq = make_ref(exp_avg_sqs[i]);
    if (amsgrad) list[i].max_exp_avg_sq = make_ref(max_exp_avg_sqs[i]);
    list[i].step = make_ref(state_steps[i]);
  }
  dtype_contract::note(params[0].scalar_type());
  launch(dev.index(), name, [a, list = std::move(list)] { kernels::fused_adam(a, list); });
}

template <class Op, bool kAdamW>
void fused_adam_(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs,
                 at::TensorList exp_avg_sqs, at::TensorList max_exp_avg_sqs,
                 at::TensorList state_steps, double lr, double beta1, double beta2,
                 double weight_decay, double eps, bool amsgrad, bool maximize,
                 const std::optional<at::Tensor>& grad_scale,
                 const std::optional<at::Tensor>& found_inf) {
  track_op<Op>();
  if (!optimizer_fast(
          {params, grads, exp_avgs, exp_avg_sqs, amsgrad ? max_exp_avg_sqs : at::TensorList()},
          params))
    return at::native::call_fallback_fn<&neuron_cpu_fallback, Op>::call(
        params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, lr, beta1, beta2,
        weight_decay, eps, amsgrad, maximize, grad_scale, found_inf);
  fused_adam_impl<kAdamW>(nm<Op>(), params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs,
                          state_steps, lr, std::nullopt, beta1, beta2, weight_decay, eps, amsgrad,
                          maximize, grad_scale, found_inf);
}

template <class Op, bool kAdamW>
void fused_adam_tensor_lr_(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs,
                           at::TensorList exp_avg_sqs, at::TensorList max_exp_avg_sqs,
                           at::TensorList state_steps, const at::Tensor& lr, double beta1,
                           double beta2, double weight_decay, double eps, bool amsgrad,
                           bool maximize, const std::optional<at::Tensor>& grad_scale,
                           const std::optional<at::Tensor>& found_inf) {
  track_op<Op>();
  if (!optimizer_fast(
          {params, grads, exp_avgs, exp_avg_sqs, amsgrad ? max_exp_avg_sqs : at::TensorList()},
          params) ||
      (!lr.device().is_cpu() && !params.empty() && lr.device() != params[0].device()))
    return at::native::call_fallback_fn<&neuron_cpu_fallback, Op>::call(
        params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, lr, beta1, beta2,
        weight_decay, eps, amsgrad, maximize, grad_scale, found_inf);
  // A CPU lr is read now; a device lr is read by the task.
  const bool host_lr = lr.device().is_cpu();
  fused_adam_impl<kAdamW>(nm<Op>(), params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs,
                          state_steps, host_lr ? lr.item<double>() : 0.0,
                          host_lr ? std::nullopt : std::optional<at::Tensor>(lr), beta1, beta2,
                          weight_decay, eps, amsgrad, maximize, grad_scale, found_inf);
}

void fused_sgd_impl(const char* name, at::TensorList params, at::TensorList grads,
                    at::TensorList bufs, double weight_decay, double momentum, double lr,
                    const std::optional<at::Tensor>& lr_tensor, double dampening, bool nesterov,
                    bool maximize, bool is_first_step, const std::optional<at::Tensor>& grad_scale,
                    const std::optional<at::Tensor>& found_inf) {
  if (params.empty()) return;
  const c10::Device dev = params[0].device();
  kernels::SgdArgs a;
  a.lr = lr;
  a.weight_decay = weight_decay;
  a.momentum = momentum;
  a.dampening = dampening;
  a.nesterov = nesterov;
  a.maximize = maximize;
  a.is_first_step = is_first_step;
  a.lr_tensor = opt_ref(lr_tensor, dev, "lr");
  a.grad_scale = opt_ref(grad_scale, dev, "grad_scale");
  a.found_inf = opt_ref(found_inf, dev, "found_inf");
  std::vector<kernels::SgdTensors> list(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    list[i].param = make_ref(params[i]);
    list[i].grad = make_ref(grads[i]);
    if (momentum != 0) list[i].momentum_buffer = make_ref(bufs[i]);
  }
  dtype_contract::note(params[0].scalar_type());
  launch(dev.index(), name, [a, list = std::move(list)] { kernels::fused_sgd(a, list); });
}

void fused_sgd_(at::TensorList params, at::TensorList grads, at::TensorList bufs,
                double weight_decay, double momentum, double lr, double dampening, bool nesterov,
                bool maximize, bool is_first_step, const std::optional<at::Tensor>& grad_scale,
                const std::optional<at::Tensor>& found_inf) {
  using Op = at::_ops::_fused_sgd_;
  track_op<Op>();
  TORCH_CHECK(momentum == 0 || bufs.size() == params.size(),
              "_fused_sgd_: one momentum buffer per param expected");
  if (!optimizer_fast({params, grads, momentum != 0 ? bufs : at::TensorList()}, params))
    return at::native::call_fallback_fn<&neuron_cpu_fallback, Op>::call(
        params, grads, bufs, weight_decay, momentum, lr, dampening, nesterov, maximize,
        is_first_step, grad_scale, found_inf);
  fused_sgd_impl(nm<Op>(), params, grads, bufs, weight_decay, momentum, lr, std::nullopt, dampening,
                 nesterov, maximize, is_first_step, grad_scale, found_inf);
}

void fused_sgd_tensor_lr_(at::TensorList params, at::TensorList grads, at::TensorList bufs,
                          double weight_decay, double momentum, const at::Tensor& lr,
                          double dampening, bool nesterov, bool maximize, bool is_first_step,
                          const std::optional<at::Tensor>& grad_scale,
                          const std::optional<at::Tensor>& found_inf) {
  using Op = at::_ops::_fused_sgd__tensor_lr;
  track_op<Op>();
  TORCH_CHECK(momentum == 0 || bufs.size() == params.size(),
              "_fused_sgd_: one momentum buffer per param expected");
  if (!optimizer_fast({params, grads, momentum != 0 ? bufs : at::TensorList()}, params) ||
      lr.device().is_cpu()) {
    if (lr.device().is_cpu())
      return fused_sgd_(params, grads, bufs, weight_decay, momentum, lr.item<double>(), dampening,
                        nesterov, maximize, is_first_step, grad_scale, found_inf);
    return at::native::call_fallback_fn<&neuron_cpu_fallback, Op>::call(
        params, grads, bufs, weight_decay, momentum, lr, dampening, nesterov, maximize,
        is_first_step, grad_scale, found_inf);
  }
  fused_sgd_impl(nm<Op>(), params, grads, bufs, weight_decay, momentum, 0.0, lr, dampening,
                 nesterov, maximize, is_first_step, grad_scale, found_inf);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  namespace o = at::_ops;
  namespace n = at::native;
#define NEURON_REG2(name_fn, name_in, ...) \
  {                                        \
    using T = __VA_ARGS__;                 \
    m.impl(name_fn, TORCH_FN(T::fn));      \
    m.impl(name_in, TORCH_FN(T::inplace)); \
  }

  // add / sub
  NEURON_REG2(
      "_foreach_add.List", "_foreach_add_.List",
      ListAlpha<o::_foreach_add_List, o::_foreach_add__List, EwOp::Add, false,
                &n::foreach_tensor_add_list_kernel_slow, &n::foreach_tensor_add_list_kernel_slow_>)
  NEURON_REG2(
      "_foreach_sub.List", "_foreach_sub_.List",
      ListAlpha<o::_foreach_sub_List, o::_foreach_sub__List, EwOp::Add, true,
                &n::foreach_tensor_sub_list_kernel_slow, &n::foreach_tensor_sub_list_kernel_slow_>)
  NEURON_REG2("_foreach_add.Scalar", "_foreach_add_.Scalar",
              ScalarForm<o::_foreach_add_Scalar, o::_foreach_add__Scalar, EwOp::Add, 1,
                         &n::foreach_tensor_add_scalar_kernel_slow,
                         &n::foreach_tensor_add_scalar_kernel_slow_>)
  NEURON_REG2("_foreach_sub.Scalar", "_foreach_sub_.Scalar",
              ScalarForm<o::_foreach_sub_Scalar, o::_foreach_sub__Scalar, EwOp::Add, -1,
                         &n::foreach_tensor_sub_scalar_kernel_slow,
                         &n::foreach_tensor_sub_scalar_kernel_slow_>)
  NEURON_REG2("_foreach_add.ScalarList", "_foreach_add_.ScalarList",
              ScalarListForm<o::_foreach_add_ScalarList, o::_foreach_add__ScalarList, EwOp::Add, 1,
                             &n::foreach_tensor_add_scalarlist_kernel_slow,
                             &n::foreach_tensor_add_scalarlist_kernel_slow_>)
  NEURON_REG2("_foreach_sub.ScalarList", "_foreach_sub_.ScalarList",
              ScalarListForm<o::_foreach_sub_ScalarList, o::_foreach_sub__ScalarList, EwOp::Add, -1,
                             &n::foreach_tensor_sub_scalarlist_kernel_slow,
                             &n::foreach_tensor_sub_scalarlist_kernel_slow_>)
  NEURON_REG2("_foreach_add.Tensor", "_foreach_add_.Tensor",
              TensorFormAlpha<o::_foreach_add_Tensor, o::_foreach_add__Tensor, EwOp::Add,
                              &n::foreach_tensor_add_tensor_kernel_slow,
                              &n::foreach_tensor_add_tensor_kernel_slow_>)
  // mul / div
  NEURON_REG2(
      "_foreach_mul.List", "_foreach_mul_.List",
      List<o::_foreach_mul_List, o::_foreach_mul__List, EwOp::Mul,
           &n::foreach_tensor_mul_list_kernel_slow, &n::foreach_tensor_mul_list_kernel_slow_>)
  NEURON_REG2(
      "_foreach_div.List", "_foreach_div_.List",
      List<o::_foreach_div_List, o::_foreach_div__List, EwOp::Div,
           &n::foreach_tensor_div_list_kernel_slow, &n::foreach_tensor_div_list_kernel_slow_>)
  NEURON_REG2("_foreach_mul.Scalar", "_foreach_mul_.Scalar",
              ScalarForm<o::_foreach_mul_Scalar, o::_foreach_mul__Scalar, EwOp::Mul, 1,
                         &n::foreach_tensor_mul_scalar_kernel_slow,
                         &n::foreach_tensor_mul_scalar_kernel_slow_>)
  NEURON_REG2("_foreach_div.Scalar", "_foreach_div_.Scalar",
              ScalarForm<o::_foreach_div_Scalar, o::_foreach_div__Scalar, EwOp::Div, 1,
                         &n::foreach_tensor_div_scalar_kernel_slow,
                         &n::foreach_tensor_div_scalar_kernel_slow_>)
  NEURON_REG2("_foreach_mul.ScalarList", "_foreach_mul_.ScalarList",
              ScalarListForm<o::_foreach_mul_ScalarList, o::_foreach_mul__ScalarList, EwOp::Mul, 1,
                             &n::foreach_tensor_mul_scalarlist_kernel_slow,
                             &n::foreach_tensor_mul_scalarlist_kernel_slow_>)
  NEURON_REG2("_foreach_div.ScalarList", "_foreach_div_.ScalarList",
              ScalarListForm<o::_foreach_div_ScalarList, o::_foreach_div__ScalarList, EwOp::Div, 1,
                             &n::foreach_tensor_div_scalarlist_kernel_slow,
                             &n::foreach_tensor_div_scalarlist_kernel_slow_>)
  NEURON_REG2("_foreach_mul.Tensor", "_foreach_mul_.Tensor",
              TensorForm<o::_foreach_mul_Tensor, o::_foreach_mul__Tensor, EwOp::Mul,
                         &n::foreach_tensor_mul_tensor_kernel_slow,
                         &n::foreach_tensor_mul_tensor_kernel_slow_>)
  NEURON_REG2("_foreach_div.Tensor", "_foreach_div_.Tensor",
              TensorForm<o::_foreach_div_Tensor, o::_foreach_div__Tensor, EwOp::Div,
                         &n::foreach_tensor_div_tensor_kernel_slow,
                         &n::foreach_tensor_div_tensor_kernel_slow_>)
  // maximum / minimum / clamp
  NEURON_REG2("_foreach_maximum.List", "_foreach_maximum_.List",
              List<o::_foreach_maximum_List, o::_foreach_maximum__List, EwOp::Maximum,
                   &n::foreach_tensor_clamp_min_list_kernel_slow,
                   &n::foreach_tensor_clamp_min_list_kernel_slow_>)
  NEURON_REG2("_foreach_minimum.List", "_foreach_minimum_.List",
              List<o::_foreach_minimum_List, o::_foreach_minimum__List, EwOp::Minimum,
                   &n::foreach_tensor_clamp_max_list_kernel_slow,
                   &n::foreach_tensor_clamp_max_list_kernel_slow_>)
  NEURON_REG2("_foreach_clamp_min.List", "_foreach_clamp_min_.List",
              List<o::_foreach_clamp_min_List, o::_foreach_clamp_min__List, EwOp::Maximum,
                   &n::foreach_tensor_clamp_min_list_kernel_slow,
                   &n::foreach_tensor_clamp_min_list_kernel_slow_>)
  NEURON_REG2("_foreach_clamp_max.List", "_foreach_clamp_max_.List",
              List<o::_foreach_clamp_max_List, o::_foreach_clamp_max__List, EwOp::Minimum,
                   &n::foreach_tensor_clamp_max_list_kernel_slow,
                   &n::foreach_tensor_clamp_max_list_kernel_slow_>)
  NEURON_REG2("_foreach_maximum.Scalar", "_foreach_maximum_.Scalar",
              ScalarForm<o::_foreach_maximum_Scalar, o::_foreach_maximum__Scalar, EwOp::Maximum, 1,
                         &n::foreach_tensor_clamp_min_scalar_kernel_slow,
                         &n::foreach_tensor_clamp_min_scalar_kernel_slow_>)
  NEURON_REG2("_foreach_minimum.Scalar", "_foreach_minimum_.Scalar",
              ScalarForm<o::_foreach_minimum_Scalar, o::_foreach_minimum__Scalar, EwOp::Minimum, 1,
                         &n::foreach_tensor_clamp_max_scalar_kernel_slow,
                         &n::foreach_tensor_clamp_max_scalar_kernel_slow_>)
  NEURON_REG2("_foreach_clamp_min.Scalar", "_foreach_clamp_min_.Scalar",
              ScalarForm<o::_foreach_clamp_min_Scalar, o::_foreach_clamp_min__Scalar, EwOp::Maximum,
                         1, &n::foreach_tensor_clamp_min_scalar_kernel_slow,
                         &n::foreach_tensor_clamp_min_scalar_kernel_slow_>)
  NEURON_REG2("_foreach_clamp_max.Scalar", "_foreach_clamp_max_.Scalar",
              ScalarForm<o::_foreach_clamp_max_Scalar, o::_foreach_clamp_max__Scalar, EwOp::Minimum,
                         1, &n::foreach_tensor_clamp_max_scalar_kernel_slow,
                         &n::foreach_tensor_clamp_max_scalar_kernel_slow_>)
  NEURON_REG2("_foreach_maximum.ScalarList", "_foreach_maximum_.ScalarList",
              ScalarListForm<o::_foreach_maximum_ScalarList, o::_foreach_maximum__ScalarList,
                             EwOp::Maximum, 1, &n::foreach_tensor_clamp_min_scalarlist_kernel_slow,
                             &n::foreach_tensor_clamp_min_scalarlist_kernel_slow_>)
  NEURON_REG2("_foreach_minimum.ScalarList", "_foreach_minimum_.ScalarList",
              ScalarListForm<o::_foreach_minimum_ScalarList, o::_foreach_minimum__ScalarList,
                             EwOp::Minimum, 1, &n::foreach_tensor_clamp_max_scalarlist_kernel_slow,
                             &n::foreach_tensor_clamp_max_scalarlist_kernel_slow_>)
  NEURON_REG2("_foreach_clamp_min.ScalarList", "_foreach_clamp_min_.ScalarList",
              ScalarListForm<o::_foreach_clamp_min_ScalarList, o::_foreach_clamp_min__ScalarList,
                             EwOp::Maximum, 1, &n::foreach_tensor_clamp_min_scalarlist_kernel_slow,
                             &n::foreach_tensor_clamp_min_scalarlist_kernel_slow_>)
  NEURON_REG2("_foreach_clamp_max.ScalarList", "_foreach_clamp_max_.ScalarList",
              ScalarListForm<o::_foreach_clamp_max_ScalarList, o::_foreach_clamp_max__ScalarList,
                             EwOp::Minimum, 1, &n::foreach_tensor_clamp_max_scalarlist_kernel_slow,
                             &n::foreach_tensor_clamp_max_scalarlist_kernel_slow_>)
  // pow
  NEURON_REG2(
      "_foreach_pow.List", "_foreach_pow_.List",
      List<o::_foreach_pow_List, o::_foreach_pow__List, EwOp::Pow,
           &n::foreach_tensor_pow_list_kernel_slow, &n::foreach_tensor_pow_list_kernel_slow_>)
  NEURON_REG2("_foreach_pow.Scalar", "_foreach_pow_.Scalar",
              PowScalarForm<o::_foreach_pow_Scalar, o::_foreach_pow__Scalar,
                            &n::foreach_tensor_pow_scalar_kernel_slow,
                            &n::foreach_tensor_pow_scalar_kernel_slow_>)
  NEURON_REG2("_foreach_pow.ScalarList", "_foreach_pow_.ScalarList",
              PowScalarListForm<o::_foreach_pow_ScalarList, o::_foreach_pow__ScalarList,
                                &n::foreach_tensor_pow_scalarlist_kernel_slow,
                                &n::foreach_tensor_pow_scalarlist_kernel_slow_>)
  m.impl("_foreach_pow.ScalarAndTensor", TORCH_FN(pow_scalar_and_tensor));
  // lerp, addcmul, addcdiv
  NEURON_REG2("_foreach_lerp.List", "_foreach_lerp_.List",
              LerpList<o::_foreach_lerp_List, o::_foreach_lerp__List,
                       &n::foreach_tensor_ternary_lerp_slow, &n::foreach_tensor_ternary_lerp_slow_>)
  NEURON_REG2("_foreach_lerp.Scalar", "_foreach_lerp_.Scalar",
              LerpScalar<o::_foreach_lerp_Scalar, o::_foreach_lerp__Scalar,
                         &n::foreach_tensor_lerp_list_kernel_slow,
                         &n::foreach_tensor_lerp_list_kernel_slow_>)
  NEURON_REG2("_foreach_lerp.ScalarList", "_foreach_lerp_.ScalarList",
              LerpScalarList<o::_foreach_lerp_ScalarList, o::_foreach_lerp__ScalarList,
                             &n::foreach_tensor_lerp_scalarlist_kernel_slow,
                             &n::foreach_tensor_lerp_scalarlist_kernel_slow_>)
#define NEURON_POINTWISE(name, Op)                                                                 \
  NEURON_REG2("_foreach_" #name ".Scalar", "_foreach_" #name "_.Scalar",                           \
              PointwiseScalar<o::_foreach_##name##_Scalar, o::_foreach_##name##__Scalar, EwOp::Op, \
                              &n::foreach_tensor_##name##_scalar_slow,                             \
                              &n::foreach_tensor_##name##_scalar_slow_>)                           \
  NEURON_REG2(                                                                                     \
      "_foreach_" #name ".ScalarList", "_foreach_" #name "_.ScalarList",                           \
      PointwiseScalarList<o::_foreach_##name##_ScalarList, o::_foreach_##name##__ScalarList,       \
                          EwOp::Op, &n::foreach_tensor_##name##_scalarlist_slow,                   \
                          &n::foreach_tensor_##name##_scalarlist_slow_>)                           \
  NEURON_REG2("_foreach_" #name ".Tensor", "_foreach_" #name "_.Tensor",                           \
              PointwiseTensor<o::_foreach_##name##_Tensor, o::_foreach_##name##__Tensor, EwOp::Op, \
                              &n::foreach_tensor_##name##_tensor_slow,                             \
                              &n::foreach_tensor_##name##_tensor_slow_>)
  NEURON_POINTWISE(addcmul, Addcmul)
  NEURON_POINTWISE(addcdiv, Addcdiv)
#undef NEURON_POINTWISE
  // unary
#define NEURON_UNARY(name, Op)                                           \
  NEURON_REG2("_foreach_" #name, "_foreach_" #name "_",                  \
              Unary<o::_foreach_##name, o::_foreach_##name##_, EwOp::Op, \
                    &n::foreach_tensor_##name##_slow, &n::foreach_tensor_##name##_slow_>)
  NEURON_UNARY(abs, Abs)
  NEURON_UNARY(acos, Acos)
  NEURON_UNARY(asin, Asin)
  NEURON_UNARY(atan, Atan)
  NEURON_UNARY(ceil, Ceil)
  NEURON_UNARY(cos, Cos)
  NEURON_UNARY(cosh, Cosh)
  NEURON_UNARY(erf, Erf)
  NEURON_UNARY(erfc, Erfc)
  NEURON_UNARY(exp, Exp)
  NEURON_UNARY(expm1, Expm1)
  NEURON_UNARY(floor, Floor)
  NEURON_UNARY(frac, Frac)
  NEURON_UNARY(lgamma, Lgamma)
  NEURON_UNARY(log, Log)
  NEURON_UNARY(log10, Log10)
  NEURON_UNARY(log1p, Log1p)
  NEURON_UNARY(log2, Log2)
  NEURON_UNARY(neg, Neg)
  NEURON_UNARY(reciprocal, Reciprocal)
  NEURON_UNARY(round, Round)
  NEURON_UNARY(rsqrt, Rsqrt)
  NEURON_UNARY(sigmoid, Sigmoid)
  NEURON_UNARY(sign, Sign)
  NEURON_UNARY(sin, Sin)
  NEURON_UNARY(sinh, Sinh)
  NEURON_UNARY(sqrt, Sqrt)
  NEURON_UNARY(tan, Tan)
  NEURON_UNARY(tanh, Tanh)
  NEURON_UNARY(trunc, Trunc)
#undef NEURON_UNARY
#undef NEURON_REG2
  m.impl("_foreach_zero_", TORCH_FN(zero_));
  m.impl("_foreach_norm.Scalar", TORCH_FN(norm));
  m.impl("_fused_adam_", TORCH_FN((fused_adam_<o::_fused_adam_, false>)));
  m.impl("_fused_adamw_", TORCH_FN((fused_adam_<o::_fused_adamw_, true>)));
  m.impl("_fused_adam_.tensor_lr",
         TORCH_FN((fused_adam_tensor_lr_<o::_fused_adam__tensor_lr, false>)));
  m.impl("_fused_adamw_.tensor_lr",
         TORCH_FN((fused_adam_tensor_lr_<o::_fused_adamw__tensor_lr, true>)));
  m.impl("_fused_sgd_", TORCH_FN(fused_sgd_));
  m.impl("_fused_sgd_.tensor_lr", TORCH_FN(fused_sgd_tensor_lr_));
}

}  // namespace neuron::torch_glue
