// Ctrl-C for work that runs long on the host. A front end (the torch glue) installs a poll that
// reports whether the user asked to interrupt (Python's SIGINT flag); host threads blocked in a
// wait call it while they wait, and kernels running on the caller's thread call it between
// loop iterations. An interrupt bumps a process-wide epoch: kernels running on stream workers
// compare it with the epoch they started under and stop.
// Thread-safety: every function is safe to call from any thread.
#pragma once

#include <cstdint>

#include "runtime/error.h"

namespace neuron::rt {

// A wait or a kernel stopped because the user interrupted (Ctrl-C).
class Interrupted : public Error {
 public:
  explicit Interrupted(const std::string& msg) : Error(msg) {}
};

// Returns true when the user interrupted; must not block for long.
using InterruptPoll = bool (*)();
void set_interrupt_poll(InterruptPoll poll);

// Calls the installed poll (false when none is installed or on a stream worker, which never
// waits on the user's behalf); when it reports an interrupt, also bumps the epoch.
bool poll_interrupt();

// Stops kernels that are running now (they see a new epoch).
void request_interrupt();
uint64_t interrupt_epoch();

}  // namespace neuron::rt
