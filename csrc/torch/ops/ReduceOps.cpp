// Reductions and scans: sum, mean, prod, max/min (full, dim with indices), amax/amin,
// argmax/argmin, any/all, var/std (+ _mean), vector norms, logsumexp, nansum, cumsum/cumprod.
// Output shapes and dtypes come from ATen's structured meta functions where ATen has them; the
// compute is kernels::reduce / kernels::scan on the device stream.
#include <ATen/WrapDimUtils.h>
#include <ATen/native/ReduceOpsUtils.h>
#include <ATen/ops/all_meta.h>
#include <ATen/ops/amax_meta.h>
#include <ATen/ops/amin_meta.h>
#include <ATen/ops/aminmax_meta.h>
#include <ATen/ops/any_meta.h>
#include <ATen/ops/argmax_meta.h>
#include <ATen/ops/argmin_meta.h>
#include <ATen/ops/cumprod_meta.h>
#include <ATen/ops/cumsum_meta.h>
#include <ATen/ops/linalg_vector_norm_meta.h>
#include <ATen/ops/max_meta.h>
#include <ATen/ops/mean_meta.h>
#include <ATen/ops/min_meta.h>
#include <ATen/ops/norm_meta.h>
#include <ATen/ops/prod_meta.h>
#include <ATen/ops/sum_meta.h>

#include <bitset>

#include "../Common.h"
#include "../DtypeContract.h"
#include "../RealStackFallback.h"
#include "EwLaunch.h"
#include "kernels/reduce.h"

namespace neuron::torch_glue {
namespace {

using kernels::ReduceOp;
using DimMask = std::bitset<64>;

DimMask dim_mask(const at::Tensor& self, at::OptionalIntArrayRef dims) {
  const int64_t nd = self.dim();
  if (!dims.has_value() || dims->empty()) {
    DimMask m;
    for (int64_t d = 0; d < nd; ++d) m.set(static_cast<size_t>(d));
    return m;
  }
  return at::dim_list_to_bitset(*dims, nd);
}

DimMask one_dim(const at::Tensor& self, int64_t dim) {
  DimMask m;
  if (self.dim() > 0) m.set(static_cast<size_t>(at::maybe_wrap_dim(dim, self.dim())));
  return m;
}

bool loadable(at::ScalarType t) {
  const kernels::DType d = to_kernel_dtype(t);
  return d != kernels::DType::Undefined && !kernels::is_complex(d);
}

// The output as a TensorRef with the input's rank: reduced dims that the meta function dropped
// (keepdim=false) come back with size 1.
kernels::TensorRef keepdim_ref(const at::Tensor& out, const at::Tensor& self, const DimMask& mask) {
  kernels::TensorRef r = make_ref(out);
  if (out.dim() == self.dim()) return r;
  kernels::TensorRef k = r;
  k.ndim = static_cast<int>(self.dim());
  int src = 0;
  for (int d = 0; d < k.ndim; ++d) {
    if (mask.test(static_cast<size_t>(d))) {
      k.sizes[d] = 1;
      k.strides[d] = 0;
    } else {
      k.sizes[d] = r.sizes[src];
      k.strides[d] = r.strides[src];
      ++src;
    }
  }
  TORCH_INTERNAL_ASSERT(src == r.ndim, "reduction output rank mismatch");
  return k;
}

struct ReduceTask {
  ReduceOp op;
  kernels::DType compute;
  kernels::ReduceParams p;
  int nouts;
  bool strict;
  const char* name;
  kernels::TensorRef in;
  kernels::TensorRef outs[2];
  void operator()() const {
    if (strict) dtype_contract::check_values(in, name);
    kernels::reduce(op, compute, p, in, outs, nouts);
    if (strict)
      for (int k = 0; k < nouts; ++k) dtype_contract::check_values(outs[k], name);
  }
};

// Queues the reduction; false (nothing launched) when the kernels lack a dtype.
bool launch_reduce(const char* name, ReduceOp op, at::ScalarType compute,
                   const kernels::ReduceParams& p, const at::Tensor& self,
                   std::initializer_list<std::reference_wrapper<const at::Tensor>> outs,
                   const DimMask& mask) {
  if (!kernels::reduce_supports(op, to_kernel_dtype(compute)) || !loadable(self.scalar_type()))
    return false;
  for (const at::Tensor& o : outs)
    if (!loadable(o.scalar_type())) return false;
  TORCH_CHECK(is_neuron(self), name, ": expected a neuron tensor, got one on ", self.device());
  ReduceTask t;
  t.op = op;
  t.compute = to_kernel_dtype(compute);
  t.p = p;
  t.nouts = static_cast<int>(outs.size());
  t.strict = dtype_contract::strict();
  t.name = name;
  dtype_contract::note(self.scalar_type());
  int k = 0;
  for (const at::Tensor& o : outs) {
    TORCH_CHECK(o.device() == self.device(), name, ": expected the output on ", self.device(),
                ", got ", o.device());
    dtype_contract::note(o.scalar_type());
    t.outs[k++] = keepdim_ref(o, self, mask);
  }
  for (const at::Tensor& o : outs)
    if (o.numel() == 0) return true;
  t.in = make_ref(self);
  launch(self.device().index(), name, t);
  return true;
}

int64_t reduced_numel(const at::Tensor& self, const DimMask& mask) {
  int64_t n = 1;
  for (int64_t d = 0; d < self.dim(); ++d)
    if (mask.test(static_cast<size_t>(d))) n *= self.size(d);
  return n;
}

void check_nonempty(const char* fn, const at::Tensor& self, const DimMask& mask) {
  if (self.numel() == 0) {
    // Only an empty output may come from an empty input: reducing a zero-size dim has no identity.
    for (int64_t d = 0; d < self.dim(); ++d)
      TORCH_CHECK(!(mask.test(static_cast<size_t>(d)) && self.size(d) == 0), fn,
                  "(): Expected reduction dim ", d, " to have non-zero size.");
  }
}

// ---------------------------------------------------------------------------------------------
// Structured reductions
// ---------------------------------------------------------------------------------------------

template <class M, ReduceOp kOp>
struct SumLikeSpec {  // sum / mean over an optional dim list with an optional dtype
  using Meta = M;
  template <class S>
  static bool run(S& s, const char* name, const at::Tensor& self, at::OptionalIntArrayRef dim,
                  bool keepdim, std::optional<at::ScalarType> dtype) {
    s.meta(self, dim, keepdim, dtype);
    const at::Tensor& out = s.maybe_get_output(0);
    return launch_reduce(name, kOp, out.scalar_type(), {}, self, {out}, dim_mask(self, dim));
  }
};

struct ProdDimSpec {
  using Meta = at::meta::structured_prod_dim_int;
  template <class S>
  static bool run(S& s, const char* name, const at::Tensor& self, int64_t dim, bool keepdim,
                  std::optional<at::ScalarType> dtype) {
    s.meta(self, dim, keepdim, dtype);
    const at::Tensor& out = s.maybe_get_output(0);
    return launch_reduce(name, ReduceOp::Prod, out.scalar_type(), {}, self, {out},
                         one_dim(self, dim));
  }
};

template <class M, ReduceOp kOp>
struct AmaxSpec {
  using Meta = M;
  template <class S>
  static bool run(S& s, const char* name, const at::Tensor& self, at::IntArrayRef dim,
                  bool keepdim) {
    s.meta(self, dim, keepdim);
    const at::Tensor& out = s.maybe_get_output(0);
    const DimMask mask = dim_mask(self, dim);
    check_nonempty(kOp == ReduceOp::Max ? "amax" : "amin", self, mask);
    return launch_reduce(name, kOp, self.scalar_type(), {}, self, {out}, mask);
  }
};

template <class M, ReduceOp kOp>
struct ArgSpec {
  using Meta = M;
  template <class S>
  static bool run(S& s, const char* name, const at::Tensor& self, std::optional<int64_t> dim,
                  bool keepdim) {
    s.meta(self, dim, keepdim);
    const at::Tensor& out = s.maybe_get_output(0);
    const DimMask mask = dim.has_value() ? one_dim(self, *dim) : dim_mask(self, std::nullopt);
    TORCH_CHECK(self.numel() > 0 || dim.has_value(), kOp == ReduceOp::ArgMax ? "argmax" : "argmin",
                "(): Expected reduction dim to be specified for input.numel() == 0.");
    check_nonempty(kOp == ReduceOp::ArgMax ? "argmax" : "argmin", self, mask);
    return launch_reduce(name, kOp, self.scalar_type(), {}, self, {out}, mask);
  }
};

template <class M, ReduceOp kOp>
struct AnyDimSpec {
  using Meta = M;
  template <class S>
  static bool run(S& s, const char* name, const at::Tensor& self, int64_t dim, bool keepdim) {
    s.meta(self, dim, keepdim);
    return launch_reduce(name, kOp, at::kBool, {}, self, {s.maybe_get_output(0)},
                         one_dim(self, dim));
  }
};
template <class M, ReduceOp kOp>
struct AnyDimsSpec {
  using Meta = M;
  template <class S>
  static bool run(S& s, const char* name, const at::Tensor& self, at::OptionalIntArrayRef dim,
                  bool keepdim) {
    s.meta(self, dim, keepdim);
    return launch_reduce(name, kOp, at::kBool, {}, self, {s.maybe_get_output(0)},
                         dim_mask(self, dim));
  }
};
template <class M, ReduceOp kOp>
struct AnyAllSpec {
  using Meta = M;
  template <class S>
  static bool run(S& s, const char* name, const at::Tensor& self) {
    s.meta(self);
    return launch_reduce(name, kOp, at::kBool, {}, self, {s.maybe_get_output(0)},
                         dim_mask(self, std::nullopt));
  }
};

struct VectorNormSpec {
  using Meta = at::meta::structured_linalg_vector_norm;
  template <class S>
  static bool run(S& s, const char* name, const at::Tensor& self, const c10::Scalar& ord,
                  at::OptionalIntArrayRef dim, bool keepdim, std::optional<at::ScalarType> dtype) {
    s.meta(self, ord, dim, keepdim, dtype);
    if (self.is_complex() || ord.isComplex()) return false;
    const at::Tensor& out = s.maybe_get_output(0);
    kernels::ReduceParams p;
    p.p = ord.toDouble();
    return launch_reduce(name, ReduceOp::Norm, out.scalar_type(), p, self, {out},
                         dim_mask(self, dim));
  }
};

template <class M, bool kWithDtype>
struct NormSpec {
  using Meta = M;
  template <class S, class... D>
  static bool run(S& s, const char* name, const at::Tensor& self,
                  const std::optional<c10::Scalar>& p, at::IntArrayRef dim, bool keepdim,
                  D... dtype) {
    s.meta(self, p.has_value() ? at::OptionalScalarRef(&p.value()) : at::OptionalScalarRef(), dim,
           keepdim, dtype...);
    if (self.is_complex() || (p && p->isComplex())) return false;
    const at::Tensor& out = s.maybe_get_output(0);
    kernels::ReduceParams rp;
    rp.p = p.has_value() ? p->toDouble() : 2.0;
    return launch_reduce(name, ReduceOp::Norm, out.scalar_type(), rp, self, {out},
                         dim_mask(self, dim));
  }
};

template <class M, kernels::ScanOp kOp>
struct ScanSpec {
  using Meta = M;
  template <class S>
  static bool run(S& s, const char* name, const at::Tensor& self, int64_t dim,
                  std::optional<at::ScalarType> dtype) {
    s.meta(self, dim, dtype);
    const at::Tensor& out = s.maybe_get_output(0);
    if (!loadable(self.scalar_type()) || !loadable(out.scalar_type()) ||
        !kernels::scan_supports(to_kernel_dtype(out.scalar_type())))
      return false;
    if (out.numel() == 0) return true;
    dtype_contract::note(self.scalar_type());
    dtype_contract::note(out.scalar_type());
    const int d = self.dim() == 0 ? 0 : static_cast<int>(at::maybe_wrap_dim(dim, self.dim()));
    struct Task {
      kernels::ScanOp op;
      kernels::DType compute;
      int dim;
      bool strict;
      const char* name;
      kernels::TensorRef in, out;
      void operator()() const {
        if (strict) dtype_contract::check_values(in, name);
        kernels::scan(op, compute, in, out, dim);
        if (strict) dtype_contract::check_values(out, name);
      }
    } t{kOp,
        to_kernel_dtype(out.scalar_type()),
        d,
        dtype_contract::strict(),
        name,
        make_ref(self),
        make_ref(out)};
    // In-place on an input that overlaps the output is safe: each line reads an element before
    // writing it, in order.
    launch(self.device().index(), name, t);
    return true;
  }
};

// ---------------------------------------------------------------------------------------------
// Non-structured reductions
// ---------------------------------------------------------------------------------------------

template <class Op, class... A>
decltype(auto) fallback(A&&... a) {
  return at::native::call_fallback_fn<&neuron_cpu_fallback, Op>::call(std::forward<A>(a)...);
}

// The output shape of reducing `mask` dims of `self`.
std::vector<int64_t> reduced_shape(const at::Tensor& self, const DimMask& mask, bool keepdim) {
  std::vector<int64_t> shape;
  for (int64_t d = 0; d < self.dim(); ++d) {
    if (!mask.test(static_cast<size_t>(d))) {
      shape.push_back(self.size(d));
    } else if (keepdim) {
      shape.push_back(1);
    }
  }
  return shape;
}

template <class Op, ReduceOp kOp>
at::Tensor max_all(const at::Tensor& self) {
  track_op<Op>();
  TORCH_CHECK(self.numel() > 0, kOp == ReduceOp::Max ? "max" : "min",
              "(): Expected reduction dim to be specified for input.numel() == 0. Specify the "
              "reduction dim with "
              "the 'dim' argument.");
  at::Tensor out = at::empty({}, self.options());
  if (!launch_reduce(op_name<Op>(), kOp, self.scalar_type(), {}, self, {out},
                     dim_mask(self, std::nullopt)))
    return fallback<Op>(self);
  return out;
}

template <class Op, ReduceOp kOp>
at::Tensor& max_all_out(const at::Tensor& self, at::Tensor& out) {
  track_op<Op>();
  TORCH_CHECK(self.numel() > 0, kOp == ReduceOp::Max ? "max" : "min",
              "(): Expected reduction dim to be specified for input.numel() == 0. Specify the "
              "reduction dim with "
              "the 'dim' argument.");
  TORCH_CHECK(out.scalar_type() == self.scalar_type(), "Expected out tensor to have dtype ",
              self.scalar_type(), ", but got ", out.scalar_type(), " instead");
  at::native::resize_output(out, {});
  if (!launch_reduce(op_name<Op>(), kOp, self.scalar_type(), {}, self, {out},
                     dim_mask(self, std::nullopt)))
    return fallback<Op>(self, out);
  return out;
}

// max.dim / min.dim: values and indices.
template <class M, ReduceOp kOp, class FnOp, class OutOp>
struct MaxDim {
  static std::tuple<at::Tensor, at::Tensor> functional(const at::Tensor& self, int64_t dim,
                                                       bool keepdim) {
    track_op<FnOp>();
    Functional<M, 2> s;
    s.meta(self, dim, keepdim);
    const DimMask mask = one_dim(self, dim);
    check_nonempty(kOp == ReduceOp::MaxWithIndex ? "max" : "min", self, mask);
    if (!launch_reduce(op_name<FnOp>(), kOp, self.scalar_type(), {}, self,
                       {s.outputs_[0], s.outputs_[1]}, mask))
      return fallback<FnOp>(self, dim, keepdim);
    return {std::move(s.outputs_[0]), std::move(s.outputs_[1])};
  }
  static std::tuple<at::Tensor&, at::Tensor&> out(const at::Tensor& self, int64_t dim, bool keepdim,
                                                  at::Tensor& values, at::Tensor& indices) {
    track_op<OutOp>();
    Out<M, 2> s(values, indices);
    s.meta(self, dim, keepdim);
    const DimMask mask = one_dim(self, dim);
    check_nonempty(kOp == ReduceOp::MaxWithIndex ? "max" : "min", self, mask);
    if (!launch_reduce(op_name<OutOp>(), kOp, self.scalar_type(), {}, self, {values, indices},
                       mask))
      return fallback<OutOp>(self, dim, keepdim, values, indices);
    return {values, indices};
  }
};

at::Tensor prod_all(const at::Tensor& self, std::optional<at::ScalarType> dtype) {
  using Op = at::_ops::prod;
  track_op<Op>();
  const at::ScalarType t = at::native::get_dtype_from_self(self, dtype, true);
  at::Tensor out = at::empty({}, self.options().dtype(t));
  if (!launch_reduce(op_name<Op>(), ReduceOp::Prod, t, {}, self, {out},
                     dim_mask(self, std::nullopt)))
    return fallback<Op>(self, dtype);
  return out;
}

// var / std and their _mean forms (ATen's std_var_out rules: floating dtypes only).
struct VarArgs {
  DimMask mask;
  double correction;
  std::vector<int64_t> shape;
};
VarArgs var_args(const char* fname, const at::Tensor& self, at::OptionalIntArrayRef dim,
                 const std::optional<c10::Scalar>& correction, bool keepdim) {
  TORCH_CHECK(at::isFloatingType(self.scalar_type()) || at::isComplexType(self.scalar_type()),
              fname, " only supports floating point and complex dtypes");
  VarArgs a{dim_mask(self, dim), correction.has_value() ? correction->toDouble() : 1.0, {}};
  a.shape = reduced_shape(self, a.mask, keepdim);
  const int64_t n = reduced_numel(self, a.mask);
  if (self.numel() > 0 && static_cast<double>(n) - a.correction <= 0)
    TORCH_WARN(fname,
               "(): degrees of freedom is <= 0. Correction should be strictly less than the "
               "reduction factor "
               "(input numel divided by output numel).");
  return a;
}

template <class Op, bool kStd>
at::Tensor var_fn(const at::Tensor& self, at::OptionalIntArrayRef dim,
                  const std::optional<c10::Scalar>& correction, bool keepdim) {
  track_op<Op>();
  const VarArgs a = var_args(kStd ? "std" : "var", self, dim, correction, keepdim);
  if (self.is_complex()) return fallback<Op>(self, dim, correction, keepdim);
  at::Tensor out = at::empty(a.shape, self.options());
  kernels::ReduceParams p;
  p.correction = a.correction;
  p.take_sqrt = kStd;
  if (!launch_reduce(op_name<Op>(), ReduceOp::Var, self.scalar_type(), p, self, {out}, a.mask))
    return fallback<Op>(self, dim, correction, keepdim);
  return out;
}

template <class Op, bool kStd>
at::Tensor& var_out(const at::Tensor& self, at::OptionalIntArrayRef dim,
                    const std::optional<c10::Scalar>& correction, bool keepdim, at::Tensor& out) {
  track_op<Op>();
  const VarArgs a = var_args(kStd ? "std" : "var", self, dim, correction, keepdim);
  if (self.is_complex()) return fallback<Op>(self, dim, correction, keepdim, out);
  TORCH_CHECK(out.scalar_type() == self.scalar_type(), kStd ? "std" : "var",
              "(): Expected out tensor to have dtype ", self.scalar_type(), ", but got ",
              out.scalar_type());
  at::native::resize_output(out, a.shape);
  kernels::ReduceParams p;
  p.correction = a.correction;
  p.take_sqrt = kStd;
  if (!launch_reduce(op_name<Op>(), ReduceOp::Var, self.scalar_type(), p, self, {out}, a.mask))
    return fallback<Op>(self, dim, correction, keepdim, out);
  return out;
}

template <class Op, bool kStd>
std::tuple<at::Tensor, at::Tensor> var_mean_fn(const at::Tensor& self, at::OptionalIntArrayRef dim,
                                               const std::optional<c10::Scalar>& correction,
                                               bool keepdim) {
  track_op<Op>();
  const VarArgs a = var_args(kStd ? "std_mean" : "var_mean", self, dim, correction, keepdim);
  if (self.is_complex()) return fallback<Op>(self, dim, correction, keepdim);
  at::Tensor v = at::empty(a.shape, self.options());
  at::Tensor m = at::empty(a.shape, self.options());
  kernels::ReduceParams p;
  p.correction = a.correction;
  p.take_sqrt = kStd;
  if (!launch_reduce(op_name<Op>(), ReduceOp::VarMean, self.scalar_type(), p, self, {v, m}, a.mask))
    return fallback<Op>(self, dim, correction, keepdim);
  return {v, m};
}

at::ScalarType logsumexp_dtype(const at::Tensor& self) {
  return at::isIntegralType(self.scalar_type(), /*includeBool=*/true)
             ? at::typeMetaToScalarType(at::get_default_dtype())
             : self.scalar_type();
}

at::Tensor& logsumexp_out(const at::Tensor& self, at::IntArrayRef dim, bool keepdim,
                          at::Tensor& out) {
  using Op = at::_ops::logsumexp_out;
  track_op<Op>();
  TORCH_CHECK(
      at::isFloatingType(out.scalar_type()),
      "logsumexp(): Expected floating point type for result tensor, but got: ", out.scalar_type());
  const DimMask mask = dim_mask(self, dim);
  at::native::resize_output(out, reduced_shape(self, mask, keepdim));
  if (!launch_reduce(op_name<Op>(), ReduceOp::LogSumExp, out.scalar_type(), {}, self, {out}, mask))
    return fallback<Op>(self, dim, keepdim, out);
  return out;
}

at::Tensor logsumexp(const at::Tensor& self, at::IntArrayRef dim, bool keepdim) {
  using Op = at::_ops::logsumexp;
  track_op<Op>();
  at::Tensor out = at::empty({0}, self.options().dtype(logsumexp_dtype(self)));
  const DimMask mask = dim_mask(self, dim);
  at::native::resize_output(out, reduced_shape(self, mask, keepdim));
  if (!launch_reduce(op_name<Op>(), ReduceOp::LogSumExp, out.scalar_type(), {}, self, {out}, mask))
    return fallback<Op>(self, dim, keepdim);
  return out;
}

at::Tensor& nansum_out(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                       std::optional<at::ScalarType> dtype, at::Tensor& out) {
  using Op = at::_ops::nansum_out;
  track_op<Op>();
  if (c10::isIntegralType(self.scalar_type(), true))
    return at::sum_out(out, self, dim, keepdim, dtype);
  TORCH_CHECK(!c10::isComplexType(self.scalar_type()), "nansum does not support complex inputs");
  const at::ScalarType t = at::native::get_dtype_from_result(out, dtype);
  const DimMask mask = dim_mask(self, dim);
  at::native::resize_output(out, reduced_shape(self, mask, keepdim));
  if (!launch_reduce(op_name<Op>(), ReduceOp::NanSum, t, {}, self, {out}, mask))
    return fallback<Op>(self, dim, keepdim, dtype, out);
  return out;
}

at::Tensor nansum(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                  std::optional<at::ScalarType> dtype) {
  track_op<at::_ops::nansum>();
  const at::ScalarType t = at::native::get_dtype_from_self(self, dtype, true);
  at::Tensor out = at::empty({0}, self.options().dtype(t));
  return nansum_out(self, dim, keepdim, dtype, out);
}

// aminmax: two reductions of the same input.
template <class S>
bool aminmax_run(S& s, const char* name, const at::Tensor& self, std::optional<int64_t> dim,
                 bool keepdim) {
  s.meta(self, dim, keepdim);
  const DimMask mask = dim.has_value() ? one_dim(self, *dim) : dim_mask(self, std::nullopt);
  check_nonempty("aminmax", self, mask);
  const at::Tensor& mn = s.maybe_get_output(0);
  const at::Tensor& mx = s.maybe_get_output(1);
  if (!launch_reduce(name, ReduceOp::Min, self.scalar_type(), {}, self, {mn}, mask)) return false;
  launch_reduce(name, ReduceOp::Max, self.scalar_type(), {}, self, {mx}, mask);
  return true;
}
std::tuple<at::Tensor, at::Tensor> aminmax(const at::Tensor& self, std::optional<int64_t> dim,
                                           bool keepdim) {
  using Op = at::_ops::aminmax;
  track_op<Op>();
  Functional<at::meta::structured_aminmax, 2> s;
  if (!aminmax_run(s, op_name<Op>(), self, dim, keepdim)) return fallback<Op>(self, dim, keepdim);
  return {std::move(s.outputs_[0]), std::move(s.outputs_[1])};
}
std::tuple<at::Tensor&, at::Tensor&> aminmax_out(const at::Tensor& self, std::optional<int64_t> dim,
                                                 bool keepdim, at::Tensor& mn, at::Tensor& mx) {
  using Op = at::_ops::aminmax_out;
  track_op<Op>();
  Out<at::meta::structured_aminmax, 2> s(mn, mx);
  if (!aminmax_run(s, op_name<Op>(), self, dim, keepdim))
    return fallback<Op>(self, dim, keepdim, mn, mx);
  return {mn, mx};
}

// count_nonzero: the p = 0 vector norm, stored as int64.
at::Tensor count_nonzero(const at::Tensor& self, at::IntArrayRef dim) {
  using Op = at::_ops::count_nonzero_dim_IntList;
  track_op<Op>();
  const DimMask mask = dim_mask(self, dim);
  at::Tensor out = at::empty(reduced_shape(self, mask, false), self.options().dtype(at::kLong));
  kernels::ReduceParams p;
  p.p = 0;
  if (self.is_complex() ||
      !launch_reduce(op_name<Op>(), ReduceOp::Norm,
                     at::isFloatingType(self.scalar_type()) ? self.scalar_type() : at::kDouble, p,
                     self, {out}, mask))
    return fallback<Op>(self, dim);
  return out;
}

// equal: same sizes and every element equal (reads the answer back, like every backend).
bool equal(const at::Tensor& self, const at::Tensor& other) {
  using Op = at::_ops::equal;
  track_op<Op>();
  TORCH_CHECK(self.device() == other.device(),
              "Cannot compare two tensors on different devices. Got: ", self.device(), " and ",
              other.device());
  if (self.sizes() != other.sizes()) return false;
  if (self.numel() == 0) return true;
  if (self.is_complex() || other.is_complex()) return fallback<Op>(self, other);
  return at::eq(self, other).all().item<bool>();
}

// trace: the sum of the main diagonal (a strided view).
at::Tensor trace(const at::Tensor& self) {
  using Op = at::_ops::trace;
  track_op<Op>();
  TORCH_CHECK(self.dim() == 2, "trace: expected a matrix, but got tensor with dim ", self.dim());
  if (self.is_complex()) return fallback<Op>(self);
  return self.diagonal().sum();
}

}  // namespace

// argmax: on real Trainium an eager argmax runs as 'aten::argmax.out' through the CPU fallback;
// that is mirrored unless NEURON_EMU_FALLBACK_MODEL=native (RealStackFallback.h).
using ArgmaxSpec = ArgSpec<at::meta::structured_argmax, kernels::ReduceOp::ArgMax>;
namespace o = at::_ops;

at::Tensor& argmax_out_fn(const at::Tensor& self, std::optional<int64_t> dim, bool keepdim,
                          at::Tensor& out) {
  if (mirror_real_stack_fallback())
    return at::native::call_fallback_fn<&neuron_cpu_fallback, o::argmax_out>::call(self, dim, keepdim,
                                                                                    out);
  return OutFn<ArgmaxSpec, o::argmax_out>::call(self, dim, keepdim, out);
}

at::Tensor argmax_fn(const at::Tensor& self, std::optional<int64_t> dim, bool keepdim) {
  if (mirror_real_stack_fallback()) {
    at::Tensor out = at::empty({0}, self.options().dtype(at::kLong));
    return o::argmax_out::call(self, dim, keepdim, out);
  }
  return FunctionalFn<ArgmaxSpec, o::argmax>::call(self, dim, keepdim);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  namespace o = at::_ops;
  namespace mt = at::meta;
  reg<FunctionalFn, SumLikeSpec<mt::structured_sum_dim_IntList, ReduceOp::Sum>, o::sum_dim_IntList>(
      m);
  reg<OutFn, SumLikeSpec<mt::structured_sum_dim_IntList, ReduceOp::Sum>, o::sum_IntList_out>(m);
  reg<FunctionalFn, SumLikeSpec<mt::structured_mean_dim, ReduceOp::Mean>, o::mean_dim>(m);
  reg<OutFn, SumLikeSpec<mt::structured_mean_dim, ReduceOp::Mean>, o::mean_out>(m);
  reg<FunctionalFn, ProdDimSpec, o::prod_dim_int>(m);
  reg<OutFn, ProdDimSpec, o::prod_int_out>(m);
  m.impl("prod", TORCH_FN(prod_all));
  reg<FunctionalFn, AmaxSpec<mt::structured_amax, ReduceOp::Max>, o::amax>(m);
  reg<OutFn, AmaxSpec<mt::structured_amax, ReduceOp::Max>, o::amax_out>(m);
  reg<FunctionalFn, AmaxSpec<mt::structured_amin, ReduceOp::Min>, o::amin>(m);
  reg<OutFn, AmaxSpec<mt::structured_amin, ReduceOp::Min>, o::amin_out>(m);
  m.impl("argmax", TORCH_FN(argmax_fn));
  m.impl("argmax.out", TORCH_FN(argmax_out_fn));
  reg<FunctionalFn, ArgSpec<mt::structured_argmin, ReduceOp::ArgMin>, o::argmin>(m);
  reg<OutFn, ArgSpec<mt::structured_argmin, ReduceOp::ArgMin>, o::argmin_out>(m);
  m.impl("max", TORCH_FN((max_all<o::max, ReduceOp::Max>)));
  m.impl("min", TORCH_FN((max_all<o::min, ReduceOp::Min>)));
  m.impl("max.unary_out", TORCH_FN((max_all_out<o::max_unary_out, ReduceOp::Max>)));
  m.impl("min.unary_out", TORCH_FN((max_all_out<o::min_unary_out, ReduceOp::Min>)));
  using MaxD = MaxDim<mt::structured_max_dim, ReduceOp::MaxWithIndex, o::max_dim, o::max_dim_max>;
  using MinD = MaxDim<mt::structured_min_dim, ReduceOp::MinWithIndex, o::min_dim, o::min_dim_min>;
  m.impl("max.dim", TORCH_FN(MaxD::functional));
  m.impl("max.dim_max", TORCH_FN(MaxD::out));
  m.impl("min.dim", TORCH_FN(MinD::functional));
  m.impl("min.dim_min", TORCH_FN(MinD::out));
  reg<FunctionalFn, AnyDimSpec<mt::structured_any_dim, ReduceOp::Any>, o::any_dim>(m);
  reg<OutFn, AnyDimSpec<mt::structured_any_dim, ReduceOp::Any>, o::any_out>(m);
  reg<FunctionalFn, AnyDimsSpec<mt::structured_any_dims, ReduceOp::Any>, o::any_dims>(m);
  reg<OutFn, AnyDimsSpec<mt::structured_any_dims, ReduceOp::Any>, o::any_dims_out>(m);
  reg<FunctionalFn, AnyAllSpec<mt::structured_any, ReduceOp::Any>, o::any>(m);
  reg<OutFn, AnyAllSpec<mt::structured_any, ReduceOp::Any>, o::any_all_out>(m);
  reg<FunctionalFn, AnyDimSpec<mt::structured_all_dim, ReduceOp::All>, o::all_dim>(m);
  reg<OutFn, AnyDimSpec<mt::structured_all_dim, ReduceOp::All>, o::all_out>(m);
  reg<FunctionalFn, AnyDimsSpec<mt::structured_all_dims, ReduceOp::All>, o::all_dims>(m);
  reg<OutFn, AnyDimsSpec<mt::structured_all_dims, ReduceOp::All>, o::all_dims_out>(m);
  reg<FunctionalFn, AnyAllSpec<mt::structured_all, ReduceOp::All>, o::all>(m);
  reg<OutFn, AnyAllSpec<mt::structured_all, ReduceOp::All>, o::all_all_out>(m);
  reg<FunctionalFn, VectorNormSpec, o::linalg_vector_norm>(m);
  reg<OutFn, VectorNormSpec, o::linalg_vector_norm_out>(m);
  reg<FunctionalFn, NormSpec<mt::structured_norm_ScalarOpt_dim, false>, o::norm_ScalarOpt_dim>(m);
  reg<OutFn, NormSpec<mt::structured_norm_ScalarOpt_dim, false>, o::norm_out>(m);
  reg<FunctionalFn, NormSpec<mt::structured_norm_ScalarOpt_dim_dtype, true>,
      o::norm_ScalarOpt_dim_dtype>(m);
  reg<OutFn, NormSpec<mt::structured_norm_ScalarOpt_dim_dtype, true>, o::norm_dtype_out>(m);
  reg3<ScanSpec<mt::structured_cumsum, kernels::ScanOp::CumSum>, o::cumsum, o::cumsum_,
       o::cumsum_out>(m);
  reg3<ScanSpec<mt::structured_cumprod, kernels::ScanOp::CumProd>, o::cumprod, o::cumprod_,
       o::cumprod_out>(m);
  m.impl("var.correction", TORCH_FN((var_fn<o::var_correction, false>)));
  m.impl("var.correction_out", TORCH_FN((var_out<o::var_correction_out, false>)));
  m.impl("std.correction", TORCH_FN((var_fn<o::std_correction, true>)));
  m.impl("std.correction_out", TORCH_FN((var_out<o::std_correction_out, true>)));
  m.impl("var_mean.correction", TORCH_FN((var_mean_fn<o::var_mean_correction, false>)));
  m.impl("std_mean.correction", TORCH_FN((var_mean_fn<o::std_mean_correction, true>)));
  m.impl("logsumexp", TORCH_FN(logsumexp));
  m.impl("logsumexp.out", TORCH_FN(logsumexp_out));
  m.impl("nansum", TORCH_FN(nansum));
  m.impl("aminmax", TORCH_FN(aminmax));
  m.impl("aminmax.out", TORCH_FN(aminmax_out));
  m.impl("count_nonzero.dim_IntList", TORCH_FN(count_nonzero));
  m.impl("equal", TORCH_FN(equal));
  m.impl("trace", TORCH_FN(trace));
  m.impl("nansum.out", TORCH_FN(nansum_out));
}

}  // namespace neuron::torch_glue
