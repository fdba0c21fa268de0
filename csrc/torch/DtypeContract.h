// The 64-bit dtype contract of the real device: Trainium has no int64/float64, so torch-neuronx
// casts them to 32 bits. neuron-emu computes 64-bit values exactly but keeps the contract
// visible: the first time an int64 (float64) tensor reaches a neuron kernel or the CPU
// fallback, the Python logger `torch_neuronx.python_ops.dtype_autocast` warns once per dtype,
// and with NEURON_EMU_STRICT_DTYPES=1 a value that 32 bits cannot hold raises an error naming
// the op (int64: outside [-2^31, 2^31-1]; float64: finite with |v| > FLT_MAX, or nonzero with
// |v| < FLT_MIN, where fp32 overflows or loses precision beyond its own rounding).
// Thread-safety: all functions are safe from any thread; the warning takes the GIL only the
// first time per dtype and never on a stream worker.
#pragma once

#include <ATen/ATen.h>

#include <atomic>

#include "kernels/tensor_ref.h"

namespace neuron::torch_glue::dtype_contract {

inline bool is_64bit(at::ScalarType t) { return t == at::kLong || t == at::kDouble; }

namespace detail {
extern std::atomic<bool> g_warned_int64;
extern std::atomic<bool> g_warned_float64;
void warn_slow(at::ScalarType t);
}  // namespace detail

// Call for every neuron tensor operand of a kernel: one relaxed load unless it is the first
// 64-bit tensor of its dtype.
inline void note(at::ScalarType t) {
  if (t == at::kLong) [[unlikely]] {
    if (!detail::g_warned_int64.load(std::memory_order_relaxed)) detail::warn_slow(t);
  } else if (t == at::kDouble) [[unlikely]] {
    if (!detail::g_warned_float64.load(std::memory_order_relaxed)) detail::warn_slow(t);
  }
}

// True when NEURON_EMU_STRICT_DTYPES=1 (read once).
bool strict();

// Strict mode: throws std::range_error naming `op` when a 64-bit element of `ref` does not fit
// its 32-bit counterpart. Runs on any thread (used inside queued tasks); no-op for other dtypes.
void check_values(const kernels::TensorRef& ref, const char* op);

// Strict mode on host tensors (the CPU fallback): same check, raised as a c10::Error.
void check_host_tensor(const at::Tensor& t, const char* op);

}  // namespace neuron::torch_glue::dtype_contract
