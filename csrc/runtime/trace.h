// Timeline of device work: when enabled, every task a stream runs is recorded with its start
// and end time; the profiler and tools export it as a Chrome trace.
// Thread-safety: record() and drain() may be called from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace neuron::rt {

struct TraceEvent {
  const char* name;   // static lifetime (literal or intern())
  int device;
  int64_t stream;
  int64_t start_ns;   // steady-clock nanoseconds
  int64_t end_ns;
  uint64_t seq = 0;            // the task's number on its stream
  int64_t launch_ns = 0;       // when the host launched it (steady clock)
  int64_t est_start_ns = 0;    // estimated Trainium2 clock (device_clock.h)
  int64_t est_end_ns = 0;
};

class Tracer {
 public:
  static Tracer& get();
  void enable(bool on);
  bool enabled() const;
  void record(const TraceEvent& e);
  // Returns and clears the recorded events.
  std::vector<TraceEvent> drain();
  // Writes events as Chrome trace JSON ("traceEvents"), one pid per device, one tid per stream.
  static std::string to_chrome_json(const std::vector<TraceEvent>& events);
};

int64_t now_ns();

// The trace row (stream id) of CPU fallbacks: the host runs the op while the device waits.
inline constexpr int64_t kFallbackRow = -1;

}  // namespace neuron::rt
