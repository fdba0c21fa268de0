// Where the torch glue attaches estimated Trainium2 durations to the tasks it launches (eager
// ops, transfers, compiled programs, NKI kernels, collectives). The formulas and constants
// are the cost model's (nki/device_time.h, docs/cost-model.md); this file only sizes the work.
#pragma once

#include <ATen/ATen.h>

#include <initializer_list>

#include "nki/device_time.h"
#include "runtime/stream.h"

namespace neuron::torch_glue {

// The cost model's constants for the runtime's topology (first call also sets the device
// clock's host-wake latency).
const nki::DeviceTimeParams& device_time_params();

inline double tensor_bytes(const at::Tensor& t) {
  return t.defined() ? static_cast<double>(t.numel()) * static_cast<double>(t.element_size()) : 0.0;
}

// HBM bytes an eager op moves: its operands read and results written.
inline nki::WorkCost bytes_of(std::initializer_list<const at::Tensor*> ts) {
  nki::WorkCost w;
  for (const at::Tensor* t : ts) w.hbm_bytes += tensor_bytes(*t);
  return w;
}

// Launches `fn` as an eager op that does `work` (launch overhead + roofline time).
void launch_op(c10::DeviceIndex device, const char* name, rt::TaskFn fn, const nki::WorkCost& work);
// Launches `fn` with an estimated duration computed by the caller.
void launch_est(c10::DeviceIndex device, const char* name, rt::TaskFn fn, double est_ns);

}  // namespace neuron::torch_glue
