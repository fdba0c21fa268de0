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

}  // namespace neuron::rt
