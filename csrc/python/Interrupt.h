// Ctrl-C while the host waits for a neuron device or runs an NKI kernel: the runtime's
// interrupt poll (runtime/interrupt.h) backed by Python's signal handling, and the way the
// KeyboardInterrupt it took from Python is raised again once the C++ code has unwound. One copy
// in libneuron_py, shared by nki._nki_native and torch_neuronx._C: the exception the poll took
// is kept per thread here, whichever extension raises it again.
#pragma once

#include <string>

namespace neuron::pyglue {

// Installs the poll (called when nki._nki_native or torch_neuronx._C loads; idempotent).
void install_interrupt_poll();

// Sets the pending Python error to the interrupt the poll took from Python (a KeyboardInterrupt
// carrying `what`, or the exception a user's SIGINT handler raised). Needs the GIL.
void set_interrupt_error(const std::string& what);

// Acquires the GIL, sets that error and throws pybind11::error_already_set.
[[noreturn]] void raise_interrupt(const std::string& what);

}  // namespace neuron::pyglue
