#include "EwLaunch.h"

#include <cstring>

#include "../Common.h"
#include "../DeviceTime.h"
#include "../DtypeContract.h"
#include "kernels/dispatch.h"

namespace neuron::torch_glue {

namespace {

// A TensorRef with few dims: what the iterator produces after coalescing, small enough that a
// queued task stays a few hundred bytes (the std::function copy is on the launch path).
constexpr int kInlineDims = 6;
struct SmallRef {
  void* data = nullptr;
  kernels::DType dtype = kernels::DType::Undefined;
  int64_t sizes[kInlineDims];
  int64_t strides[kInlineDims];
};

// Everything a queued elementwise task needs, by value (no at::Tensor: see Common.h).
struct EwTask {
  kernels::EwOp op;
  kernels::DType compute;
  int8_t n = 0;
  int8_t ndim = 0;
  uint8_t scalar_mask = 0;  // operands read on the host (CPU scalars), stored in `scalars`
  bool strict = false;
  const char* name;
  kernels::EwParams p;
  SmallRef refs[4];
  alignas(16) unsigned char scalars[4][16];

  void operator()() {
    kernels::TensorRef full[4];
    for (int i = 0; i < n; ++i) {
      kernels::TensorRef& r = full[i];
      r.data = (scalar_mask & (1u << i)) ? scalars[i] : refs[i].data;
      r.dtype = refs[i].dtype;
      r.ndim = ndim;
      for (int d = 0; d < ndim; ++d) {
        r.sizes[d] = refs[i].sizes[d];
        r.strides[d] = refs[i].strides[d];
      }
    }
    if (strict) {
      for (int i = 1; i < n; ++i) dtype_contract::check_values(full[i], name);
    }
    kernels::elementwise(op, compute, p, full, n);
    if (strict) dtype_contract::check_values(full[0], name);
  }
};

// The same for iterators with more dims than SmallRef holds (rare after coalescing).
struct WideEwTask {
  kernels::EwOp op;
  kernels::DType compute;
  int8_t n = 0;
  uint8_t scalar_mask = 0;
  bool strict = false;
  const char* name;
  kernels::EwParams p;
  kernels::TensorRef refs[4];
  alignas(16) unsigned char scalars[4][16];

  void operator()() {
    for (int i = 0; i < n; ++i)
      if (scalar_mask & (1u << i)) refs[i].data = scalars[i];
    if (strict) {
      for (int i = 1; i < n; ++i) dtype_contract::check_values(refs[i], name);
    }
    kernels::elementwise(op, compute, p, refs, n);
    if (strict) dtype_contract::check_values(refs[0], name);
  }
};

bool loadable(at::ScalarType t) {
  const kernels::DType d = to_kernel_dtype(t);
  return d != kernels::DType::Undefined && !kernels::is_complex(d);
}

}  // namespace

bool ew_supported(const at::TensorIteratorBase& iter, kernels::EwOp op, at::ScalarType compute) {
  if (!kernels::elementwise_supports(op, to_kernel_dtype(compute))) return false;
  const int nt = iter.ntensors();
  if (nt > 4 || nt != kernels::ew_arity(op) + 1) return false;
  for (int i = 0; i < nt; ++i)
    if (!loadable(iter.dtype(i))) return false;
  return true;
}

bool launch_ew(const at::TensorIteratorBase& iter, const char* name, kernels::EwOp op,
               at::ScalarType compute, const kernels::EwParams& p) {
  if (!ew_supported(iter, op, compute)) return false;
  if (iter.numel() == 0) return true;
  const int nt = iter.ntensors();
  const int ndim = iter.ndim();
  TORCH_CHECK(ndim <= kernels::kMaxDims, name, ": more than ", kernels::kMaxDims, " dimensions");
  const c10::IntArrayRef shape = iter.shape();
  // TensorIterator orders dims fastest first; TensorRef outermost first.
  auto fill = [&](auto& t, auto& ref_of) {
    t.op = op;
    t.compute = to_kernel_dtype(compute);
    t.n = static_cast<int8_t>(nt);
    t.name = name;
    t.p = p;
    t.strict = dtype_contract::strict();
    for (int i = 0; i < nt; ++i) {
      auto& r = ref_of(t, i);
      const at::ScalarType st = iter.dtype(i);
      r.dtype = to_kernel_dtype(st);
      const int64_t es = static_cast<int64_t>(c10::elementSize(st));
      const c10::IntArrayRef strides = iter.strides(i);
      const bool host = iter.is_cpu_scalar(i);
      for (int d = 0; d < ndim; ++d) {
        r.sizes[ndim - 1 - d] = shape[d];
        r.strides[ndim - 1 - d] = host ? 0 : strides[d] / es;
      }
      if (host) {
        std::memcpy(t.scalars[i], iter.data_ptr(i), static_cast<size_t>(es));
        t.scalar_mask |= static_cast<uint8_t>(1u << i);
      } else {
        r.data = iter.data_ptr(i);
        dtype_contract::note(st);
      }
    }
  };
  const c10::DeviceIndex device = iter.device(0).index();
  nki::WorkCost work;
  for (int i = 0; i < nt; ++i)
    if (!iter.is_cpu_scalar(i))
      work.hbm_bytes += static_cast<double>(iter.numel()) *
                        static_cast<double>(c10::elementSize(iter.dtype(i)));
  if (ndim <= kInlineDims) {
    EwTask t;
    t.ndim = static_cast<int8_t>(ndim);
    auto ref_of = [](EwTask& x, int i) -> SmallRef& { return x.refs[i]; };
    fill(t, ref_of);
    launch_op(device, name, std::move(t), work);
  } else {
    WideEwTask t;
    auto ref_of = [ndim](WideEwTask& x, int i) -> kernels::TensorRef& {
      x.refs[i].ndim = ndim;
      return x.refs[i];
    };
    fill(t, ref_of);
    launch_op(device, name, std::move(t), work);
  }
  return true;
}

}  // namespace neuron::torch_glue
