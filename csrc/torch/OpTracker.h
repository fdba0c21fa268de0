// Which aten ops ran on the neuron device, and which of them fell back to the CPU. Names are
// "aten::argmax.out" style (overload included). Lists keep first-seen order, no duplicates.
// Thread-safety: all functions are safe from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

namespace neuron::torch_glue {

struct OpSite {
  const char* name;
  std::atomic<uint64_t> seen_generation{0};
};

extern std::atomic<uint64_t> g_op_tracking_generation;
void mark_executed_slow(OpSite& site, uint64_t generation);

// Cheap on the hot path: one relaxed load and compare per call.
inline void mark_executed(OpSite& site) {
  const uint64_t g = g_op_tracking_generation.load(std::memory_order_relaxed);
  if (site.seen_generation.load(std::memory_order_relaxed) != g) mark_executed_slow(site, g);
}

void record_fallback(const std::string& name);
std::vector<std::string> executed_ops();
std::vector<std::string> fallback_ops();
void clear_op_tracking();

}  // namespace neuron::torch_glue

// Records that the native kernel `name` ran (call at the top of each native kernel).
#define NEURON_TRACK_OP(name)                                       \
  do {                                                              \
    static ::neuron::torch_glue::OpSite neuron_op_site_{name, {0}}; \
    ::neuron::torch_glue::mark_executed(neuron_op_site_);           \
  } while (0)
