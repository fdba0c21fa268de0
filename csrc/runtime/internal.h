// Process-wide state shared between the runtime's translation units. Not part of the public
// API: only csrc/runtime/*.cpp (and the runtime's own tests) include it.
#pragma once

#include <atomic>

#include "runtime/error.h"

namespace neuron::rt {
class Stream;
}

namespace neuron::rt::detail {

// NEURON_LAUNCH_BLOCKING as read by Runtime(). Streams read this flag instead of calling
// Runtime::get(), because streams are created while the runtime itself is being built.
extern std::atomic<bool> g_launch_blocking;

// True in a forked child of a process whose runtime had been initialised. Checked before any
// lock is taken: a lock may have been held by a parent thread that does not exist here.
extern std::atomic<bool> g_in_bad_fork;

// Message of the BadForkError raised on any device use in such a child.
extern const char* const kBadForkMessage;

// Throws BadForkError if this process is a bad-fork child.
inline void check_not_bad_fork() {
  if (g_in_bad_fork.load(std::memory_order_relaxed)) [[unlikely]]
    throw BadForkError(kBadForkMessage);
}

// The stream whose worker thread is the calling thread, or nullptr on any other thread.
// Blocking on device work from inside a task could wait for that very task.
Stream* current_worker_stream();

}  // namespace neuron::rt::detail
