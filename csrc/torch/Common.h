// Shared helpers of the torch glue: runtime access for a tensor's device, conversion of
// at::Tensor to the kernels' TensorRef, and the error-translation wrapper.
#pragma once

#include <ATen/ATen.h>
#include <c10/core/Device.h>

#include "kernels/tensor_ref.h"
#include "python/Interrupt.h"
#include "runtime/error.h"
#include "runtime/interrupt.h"
#include "runtime/runtime.h"

namespace neuron::torch_glue {

constexpr c10::DeviceType kNeuron = c10::DeviceType::PrivateUse1;

inline bool is_neuron(const at::Tensor& t) { return t.defined() && t.device().type() == kNeuron; }

// The runtime device of a neuron tensor / device index (-1 means current).
rt::Device& rt_device(c10::DeviceIndex index);
inline rt::Device& rt_device(const at::Tensor& t) { return rt_device(t.device().index()); }
// The current stream of a device (what ops launch on).
rt::Stream& current_stream(c10::DeviceIndex index);

kernels::DType to_kernel_dtype(at::ScalarType t);
// The TensorRef of a tensor (data pointer already offset by storage_offset).
kernels::TensorRef make_ref(const at::Tensor& t);

// Runs `fn`, turning runtime errors into the matching c10 errors (OOM stays an OOM, Ctrl-C a
// KeyboardInterrupt).
template <typename F>
decltype(auto) translate_errors(F&& fn) {
  try {
    return fn();
  } catch (const rt::Interrupted& e) {
    pyglue::raise_interrupt(e.what());  // Ctrl-C: KeyboardInterrupt
  } catch (const rt::OutOfMemoryError& e) {
    TORCH_CHECK_WITH(OutOfMemoryError, false, e.what());
  } catch (const rt::Error& e) {
    TORCH_CHECK(false, e.what());
  }
}

// Launches `fn` on the current stream of `device`, named `name` (static lifetime).
void launch(c10::DeviceIndex device, const char* name, rt::TaskFn fn);

}  // namespace neuron::torch_glue
