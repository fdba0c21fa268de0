// The estimated Trainium2 clock: every stream task carries an estimated device duration (from
// the cost model, docs/cost-model.md), and this clock places it on an estimated timeline per
// logical core, as the asynchronous runtime would run it: a task starts when its core is free
// and the host has launched it; the host advances by the CPU time its threads really spend
// between launches (Python, dispatch) - not by wall time, which the emulated device work
// running on the same cores would inflate, and not while it waits for this machine to finish
// device work - and a host wait ends when the estimated core is done.
// What it returns are estimates of a model, not measurements.
// Thread-safety: every member is safe from any thread (one mutex).
#pragma once

#include <cstdint>
#include <mutex>
#include <vector>

namespace neuron::rt {

struct ClockParams {
  // Host-side latency of a wait that finds the device busy (the completion notification).
  // Set by the torch glue from the cost model's constants; 0 until then.
  double host_wake_ns = 0;
};

// A reading of the clock. `est_host_ns` and `real_ns` are the estimated host time and the
// steady clock at the same instant, so readings can be subtracted.
struct ClockReading {
  int64_t est_host_ns = 0;
  int64_t real_ns = 0;
  int64_t device_free_ns = 0;  // latest estimated end of work launched on any core
  double device_busy_ns = 0;   // summed estimated durations of every launched task
  int64_t tasks = 0;
  int64_t host_waits = 0;      // waits that found the estimated device busy
};

class DeviceClock {
 public:
  static DeviceClock& get();

  void set_params(const ClockParams& p);
  ClockParams params() const;

  // Places a task of `est_ns` launched now on `device`; returns its estimated start and end.
  struct Placed {
    int64_t start_ns, end_ns;
  };
  Placed launch(int device, double est_ns);

  // A host wait (synchronize, a copy to host, an event wait) for work on `device` that ends
  // at estimated time `until_ns` (device < 0 or until_ns < 0: everything launched so far).
  // Time between begin and end does not count as host time. Waits from stream workers are
  // device-side and not host waits: callers skip them.
  void host_wait_begin();
  void host_wait_end(int64_t until_ns);
  // Host time from the model rather than from this machine (the host op of a CPU fallback,
  // whose real time is excluded by a host_wait_begin/end around it).
  void host_add(double ns);

  ClockReading read();
  // Forgets the timeline (tests): the estimated host clock restarts at the real clock.
  void reset();

 private:
  DeviceClock();
  void advance_locked();  // the calling thread's CPU time since its last event
  void rebase_locked();   // the calling thread's time so far does not count

  mutable std::mutex mu_;
  ClockParams params_;
  int64_t est_host_ = 0;
  uint64_t epoch_ = 1;  // bumped by reset(): threads restart their CPU-time baseline
  int waiting_ = 0;
  std::vector<int64_t> free_;  // per device: estimated end of its last task
  int64_t device_free_ = 0;
  double busy_ = 0;
  int64_t tasks_ = 0;
  int64_t waits_ = 0;
};

}  // namespace neuron::rt
