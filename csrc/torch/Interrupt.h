// Ctrl-C while the host waits for a neuron device or runs an NKI kernel: the runtime's
// interrupt poll (runtime/interrupt.h) backed by Python's signal handling, and the way the
// KeyboardInterrupt it took from Python is raised again once the C++ code has unwound.
#pragma once

#include <string>

namespace neuron::torch_glue {

// Installs the poll (called once when torch_neuronx._C loads).
void install_interrupt_poll();

// Sets the pending Python error to the interrupt the poll took from Python (a KeyboardInterrupt
// carrying `what`, or the exception a user's SIGINT handler raised). Needs the GIL.
void set_interrupt_error(const std::string& what);

// Acquires the GIL, sets that error and throws pybind11::error_already_set.
[[noreturn]] void raise_interrupt(const std::string& what);

}  // namespace neuron::torch_glue
