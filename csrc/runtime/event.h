// Events mark a point in a stream. They support host queries and waits, device-side waits
// from other streams, and elapsed time between two timing events.
// Thread-safety: record/block/query/synchronize may be called from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

namespace neuron::rt {

class Stream;

class Event {
 public:
  explicit Event(bool enable_timing = false);
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  // Marks the current end of `s`. Re-recording moves the mark.
  void record(Stream& s);
  // Makes `s` wait (device-side) until this event has completed. No-op if never recorded.
  void block(Stream& s) const;
  // True if never recorded or the marked work has finished.
  bool query() const;
  // Host wait until the marked work has finished.
  void synchronize() const;
  // Milliseconds from this event to `end`; both must be timing events, recorded and complete.
  // Throws Error otherwise.
  double elapsed_ms(const Event& end) const;

  bool recorded() const;
  bool timing() const { return timing_; }
  int device() const;

 private:
  struct State;
  const bool timing_;
  std::shared_ptr<State> state_;
};

}  // namespace neuron::rt
