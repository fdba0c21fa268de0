// Helpers shared by the native op glue: argument checks with ATen-style messages, out=
// handling, launching a kernel on the current stream of a tensor's device, and the explicit
// CPU fallback for inputs a native kernel does not cover (visible in get_fallback_ops()).
#pragma once

#include <ATen/ATen.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/Resize.h>

#include <initializer_list>
#include <string>

#include "../Common.h"
#include "../OpTracker.h"

namespace neuron::torch_glue {

// The boxed CPU fallback (Fallback.cpp): synchronizes, runs the CPU kernel, records the op.
void neuron_cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// Runs `op.overload` through the CPU fallback with the given arguments.
#define NEURON_CPU_FALLBACK(op, overload, ...)                               \
  ::at::native::call_fallback_fn<&::neuron::torch_glue::neuron_cpu_fallback, \
                                 ATEN_OP2(op, overload)>::call(__VA_ARGS__)
#define NEURON_CPU_FALLBACK0(op, ...)                                                            \
  ::at::native::call_fallback_fn<&::neuron::torch_glue::neuron_cpu_fallback, ATEN_OP(op)>::call( \
      __VA_ARGS__)

// Every defined tensor of `ts` must live on `device` (a neuron device).
inline void check_device(const char* op, const c10::Device& device,
                         std::initializer_list<const at::Tensor*> ts) {
  for (const at::Tensor* t : ts) {
    if (!t || !t->defined()) continue;
    TORCH_CHECK(t->device() == device, op,
                ": expected all tensors to be on the same device, but found at least two devices, ",
                device, " and ", t->device(), "!");
  }
}

// A tensor used as an index or auxiliary input: CPU tensors are moved to `device` (like CUDA
// kernels accept CPU index tensors); neuron tensors must already be there.
inline at::Tensor to_device(const at::Tensor& t, const c10::Device& device) {
  if (!t.defined() || t.device() == device) return t;
  if (t.device().is_cpu()) return t.to(device);
  TORCH_CHECK(false, "expected a tensor on ", device, " or the cpu, got one on ", t.device());
}

// Prepares an out= argument: checks device and dtype, resizes it like ATen (warning when a
// non-empty tensor of another shape is resized).
inline void prepare_out(const char* op, const at::Tensor& out, c10::IntArrayRef sizes,
                        at::ScalarType dtype, const c10::Device& device) {
  TORCH_CHECK(out.device() == device, op, ": expected out tensor on ", device, " but got ",
              out.device());
  TORCH_CHECK(out.scalar_type() == dtype, op, ": expected out tensor to have dtype ", dtype,
              ", but got ", out.scalar_type(), " instead");
  at::native::resize_output(out, sizes);
}

// True when `out` shares memory with `t` (then a kernel writes into a temporary first).
inline bool overlaps(const at::Tensor& out, const at::Tensor& t) {
  if (!out.defined() || !t.defined() || out.numel() == 0 || t.numel() == 0) return false;
  if (!out.storage().is_alias_of(t.storage())) return false;
  // Same storage: exact answer for dense tensors, conservative (overlap) otherwise.
  return at::get_overlap_status(out, t) != at::MemOverlapStatus::No;
}

// Launches `fn` on the current stream of `t`'s device under the static name `name`.
inline void launch_on(const at::Tensor& t, const char* name, rt::TaskFn fn) {
  launch(t.device().index(), name, std::move(fn));
}

// The dim index wrapped into [0, ndim) (ATen's maybe_wrap_dim with its error message).
inline int64_t wrap_dim(int64_t dim, int64_t ndim) { return c10::maybe_wrap_dim(dim, ndim); }

inline bool is_float_dtype(at::ScalarType t) {
  return t == at::kFloat || t == at::kDouble || t == at::kBFloat16 || t == at::kHalf;
}

}  // namespace neuron::torch_glue
