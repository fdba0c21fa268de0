// The c10 allocators of the neuron device: device memory from each logical core's HBM pool,
// and pinned host memory for asynchronous copies.
#pragma once

#include <c10/core/Allocator.h>

#include <cstdint>

namespace neuron::torch_glue {

c10::Allocator* device_allocator();
c10::Allocator* host_allocator();
bool is_pinned_ptr(const void* p);

}  // namespace neuron::torch_glue

namespace neuron::rt {
class Stream;
}

namespace neuron::torch_glue {

// Keeps the pinned block containing `p` alive until `stream` has completed task `seq`.
void record_pinned_use(const void* p, rt::Stream& stream, uint64_t seq);

}  // namespace neuron::torch_glue
