// The glue between ATen's structured ops and the neuron kernels: registration of the
// functional / in-place / out= variants of an op from one "spec" (meta + launch), the launch of
// an elementwise kernel over a built TensorIterator, and the CPU fallback for the dtypes a kernel
// does not cover (complex, unsigned 16-64 bit, ...), which keeps ATen's exact behaviour.
//
// A spec is a struct with
//   using Meta = at::meta::structured_<op>;            // or any MetaBase for non-iterator ops
//   template <class S> static bool run(S& s, const char* name, args...);
// `run` calls s.meta(args...) and launches; it returns false (before launching anything) when the
// kernels do not support the dtypes, and the wrapper then runs the op through the CPU fallback.
#pragma once

#include <ATen/ATen.h>
#include <ATen/TensorIterator.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/native/CPUFallback.h>
#include <torch/library.h>

#include <string>
#include <tuple>
#include <utility>

#include "../OpTracker.h"
#include "Structured.h"
#include "kernels/elementwise.h"
#include "runtime/stream.h"

namespace neuron::torch_glue {

// The boxed CPU fallback (Fallback.cpp).
void neuron_cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// "aten::add.Tensor" for at::_ops::add_Tensor, with static lifetime.
template <class Op>
const char* op_name() {
  static const char* const n = rt::intern(
      std::string(Op::name) + (Op::overload_name[0] ? std::string(".") + Op::overload_name : ""));
  return n;
}

// "add.Tensor" (the registration name).
template <class Op>
std::string reg_name() {
  std::string n(Op::name);
  if (n.rfind("aten::", 0) == 0) n = n.substr(6);
  if (Op::overload_name[0]) n += std::string(".") + Op::overload_name;
  return n;
}

template <class Op>
inline void track_op() {
  static OpSite site{op_name<Op>(), {0}};
  mark_executed(site);
}

// Scalar parameters of a kernel: both the floating and the integral value of each Scalar.
inline void set_param(kernels::EwParams& p, int k, const c10::Scalar& s) {
  if (s.isFloatingPoint() ||
      s.isComplex()) {  // complex ops never launch (no kernel); keep the real part
    const double d = s.isComplex() ? s.toComplexDouble().real() : s.toDouble();
    p.f[k] = d;
    p.i[k] = d != d         ? 0
             : d >= 9.2e18  ? INT64_MAX
             : d <= -9.2e18 ? INT64_MIN
                            : static_cast<int64_t>(d);
  } else if (s.isBoolean()) {
    p.f[k] = s.toBool() ? 1.0 : 0.0;
    p.i[k] = s.toBool() ? 1 : 0;
  } else {
    p.i[k] = s.toLong();
    p.f[k] = static_cast<double>(p.i[k]);
  }
}
inline kernels::EwParams params() { return {}; }
template <class... S>
kernels::EwParams params(const S&... s) {
  kernels::EwParams p;
  int k = 0;
  ((set_param(p, k++, c10::Scalar(s))), ...);
  return p;
}

// True when the kernels have `op` for `compute` and can load/store every operand's dtype.
bool ew_supported(const at::TensorIteratorBase& iter, kernels::EwOp op, at::ScalarType compute);

// Queues `op` over the iterator's operands on the current stream of the output's device.
// CPU scalar operands are read now (on the host); 64-bit operands go through the dtype
// contract. Returns false, having launched nothing, when ew_supported() is false.
bool launch_ew(const at::TensorIteratorBase& iter, const char* name, kernels::EwOp op,
               at::ScalarType compute, const kernels::EwParams& p);

// ---------------------------------------------------------------------------------------------
// Variant wrappers. Op is the at::_ops struct of the registered overload.
// ---------------------------------------------------------------------------------------------

template <class Spec, class Op, class Sig = typename Op::schema>
struct FunctionalFn;
template <class Spec, class Op, class R, class... A>
struct FunctionalFn<Spec, Op, R(A...)> {
  static R call(A... a) {
    track_op<Op>();
    Functional<typename Spec::Meta> s;
    if (!Spec::run(s, op_name<Op>(), a...))
      return at::native::call_fallback_fn<&neuron_cpu_fallback, Op>::call(a...);
    return std::move(s.outputs_[0]);
  }
};

template <class Spec, class Op, class Sig = typename Op::schema>
struct InplaceFn;
template <class Spec, class Op, class R, class Self, class... A>
struct InplaceFn<Spec, Op, R(Self, A...)> {
  static R call(Self self, A... a) {
    track_op<Op>();
    Inplace<typename Spec::Meta> s(self);
    if (!Spec::run(s, op_name<Op>(), self, a...))
      return at::native::call_fallback_fn<&neuron_cpu_fallback, Op>::call(self, a...);
    return self;
  }
};

template <class Spec, class Op, class Sig = typename Op::schema>
struct OutFn;
template <class Spec, class Op, class R, class... A>
struct OutFn<Spec, Op, R(A...)> {
  static R call(A... a) {
    track_op<Op>();
    auto args = std::forward_as_tuple(a...);
    constexpr size_t N = sizeof...(A);
    at::Tensor& out = std::get<N - 1>(args);
    Out<typename Spec::Meta> s(out);
    const bool ok = [&]<size_t... I>(std::index_sequence<I...>) {
      return Spec::run(s, op_name<Op>(), std::get<I>(args)...);
    }
    (std::make_index_sequence<N - 1>{});
    if (!ok) return at::native::call_fallback_fn<&neuron_cpu_fallback, Op>::call(a...);
    return out;
  }
};

template <template <class, class, class> class Kind, class Spec, class Op>
void reg(torch::Library& m) {
  m.impl(reg_name<Op>().c_str(), TORCH_FN((Kind<Spec, Op, typename Op::schema>::call)));
}

// The three variants of a structured op.
template <class Spec, class FnOp, class InplaceOp, class OutOp>
void reg3(torch::Library& m) {
  reg<FunctionalFn, Spec, FnOp>(m);
  reg<InplaceFn, Spec, InplaceOp>(m);
  reg<OutFn, Spec, OutOp>(m);
}

}  // namespace neuron::torch_glue
