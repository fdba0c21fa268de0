// Process-wide counters of the compiler and its cache (torch.neuron.get_dynamo_metrics()),
// and the queue of warnings the Python layer forwards to `logging`.
// Thread-safety: all functions are safe from any thread.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace neuron::cc {

struct Metrics {
  int64_t graphs_compiled = 0;  // programs built by the compiler
  int64_t cache_hits_memory = 0;
  int64_t cache_hits_disk = 0;
  int64_t cache_misses = 0;
  int64_t cache_corrupted = 0;   // disk entries rejected (checksum, truncation, version)
  int64_t cache_lock_waits = 0;  // another process was compiling the same graph
  int64_t cache_writes = 0;
  int64_t executions = 0;
  double compile_seconds = 0;     // time spent in the compiler proper
  double cache_load_seconds = 0;  // reading + validating NEFFs from disk
};

Metrics metrics();
void reset_metrics();
void add_metric(const char* name, int64_t delta);
void add_seconds(const char* name, double s);

void push_warning(const std::string& msg);
std::vector<std::string> drain_warnings();

}  // namespace neuron::cc
