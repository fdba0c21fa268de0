#include "runtime/interrupt.h"

#include <atomic>

#include "runtime/internal.h"

namespace neuron::rt {

namespace {
std::atomic<InterruptPoll> g_poll{nullptr};
std::atomic<uint64_t> g_epoch{0};
}  // namespace

void set_interrupt_poll(InterruptPoll poll) { g_poll.store(poll, std::memory_order_release); }

bool poll_interrupt() {
  const InterruptPoll poll = g_poll.load(std::memory_order_acquire);
  if (!poll || detail::current_worker_stream() != nullptr) return false;
  if (!poll()) return false;
  request_interrupt();
  return true;
}

void request_interrupt() { g_epoch.fetch_add(1, std::memory_order_acq_rel); }

uint64_t interrupt_epoch() { return g_epoch.load(std::memory_order_acquire); }

}  // namespace neuron::rt
