#include "runtime/event.h"

#include <mutex>

#include "runtime/error.h"
#include "runtime/internal.h"
#include "runtime/stream.h"
#include "runtime/trace.h"

namespace neuron::rt {

// The mark: a stream and the sequence number of the last task before it. Timing events also
// own a timestamp written by a marker task when the stream reaches the mark. Each record()
// gets a fresh timestamp cell, so a marker from an earlier record cannot overwrite it.
struct Event::State {
  mutable std::mutex mu;
  Stream* stream = nullptr;
  uint64_t seq = 0;
  std::shared_ptr<std::atomic<int64_t>> stamp;

  struct Snapshot {
    Stream* stream;
    uint64_t seq;
    std::shared_ptr<std::atomic<int64_t>> stamp;
  };
  Snapshot snapshot() const {
    std::lock_guard<std::mutex> lock(mu);
    return {stream, seq, stamp};
  }
};

Event::Event(bool enable_timing) : timing_(enable_timing), state_(std::make_shared<State>()) {}

Event::~Event() = default;

void Event::record(Stream& s) {
  detail::check_not_bad_fork();
  if (!timing_) {
    const uint64_t seq = s.launched();
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->stream = &s;
    state_->seq = seq;
    return;
  }
  auto stamp = std::make_shared<std::atomic<int64_t>>(-1);
  const uint64_t seq =
      s.enqueue("event_record", [stamp] { stamp->store(now_ns(), std::memory_order_release); });
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->stream = &s;
  state_->seq = seq;
  state_->stamp = std::move(stamp);
}

void Event::block(Stream& s) const {
  auto snap = state_->snapshot();
  if (snap.stream != nullptr) s.wait_for(*snap.stream, snap.seq);
}

bool Event::query() const {
  auto snap = state_->snapshot();
  return snap.stream == nullptr || snap.stream->completed() >= snap.seq;
}

void Event::synchronize() const {
  auto snap = state_->snapshot();
  if (snap.stream != nullptr) snap.stream->wait_completed(snap.seq);
}

double Event::elapsed_ms(const Event& end) const {
  NEURON_RT_CHECK(timing_ && end.timing_,
                  "elapsed_ms needs two events created with enable_timing=True (the ",
                  timing_ ? "end" : "start", " event was created without timing)");
  auto a = state_->snapshot();
  auto b = end.state_->snapshot();
  NEURON_RT_CHECK(a.stream && b.stream, "elapsed_ms: the ", a.stream ? "end" : "start",
                  " event was never recorded; call record() on both events first");
  // Completion first: the marker writes its stamp before the stream counts it as completed.
  const bool done0 = a.stream->completed() >= a.seq;
  const bool done1 = b.stream->completed() >= b.seq;
  NEURON_RT_CHECK(done0 && done1, "elapsed_ms: the ", done0 ? "end" : "start",
                  " event has not completed yet; call synchronize() on it first");
  const int64_t t0 = a.stamp->load(std::memory_order_acquire);
  const int64_t t1 = b.stamp->load(std::memory_order_acquire);
  return static_cast<double>(t1 - t0) / 1e6;
}

bool Event::recorded() const { return state_->snapshot().stream != nullptr; }

int Event::device() const {
  auto snap = state_->snapshot();
  return snap.stream ? snap.stream->device() : -1;
}

}  // namespace neuron::rt
