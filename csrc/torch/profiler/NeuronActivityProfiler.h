// The last torch.profiler session of the neuron Kineto plugin, for the Python trace export
// (torch_neuronx.profiling): every task with its measured and estimated Trainium2 times and
// its launch time, and the CPU fallbacks, relative to the session start on each clock.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace neuron::torch_glue {

struct SessionEvent {
  std::string name;
  int device = 0;
  int64_t stream = 0;  // rt::kFallbackRow for a CPU fallback
  uint64_t seq = 0;
  double start_us = 0, end_us = 0;          // measured, from the session start
  double launch_us = 0;                     // host launch, from the session start
  double est_start_us = 0, est_end_us = 0;  // estimated Trainium2, from the session start
};

std::vector<SessionEvent> last_profiler_session();

}  // namespace neuron::torch_glue
