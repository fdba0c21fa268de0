#include "metrics.h"

#include <cstring>
#include <mutex>

namespace neuron::cc {

namespace {
std::mutex g_mu;
Metrics g_metrics;
std::vector<std::string> g_warnings;
}  // namespace

Metrics metrics() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_metrics;
}

void reset_metrics() {
  std::lock_guard<std::mutex> lock(g_mu);
  g_metrics = Metrics{};
}

void add_metric(const char* name, int64_t delta) {
  std::lock_guard<std::mutex> lock(g_mu);
  Metrics& m = g_metrics;
  if (!std::strcmp(name, "graphs_compiled"))
    m.graphs_compiled += delta;
  else if (!std::strcmp(name, "cache_hits_memory"))
    m.cache_hits_memory += delta;
  else if (!std::strcmp(name, "cache_hits_disk"))
    m.cache_hits_disk += delta;
  else if (!std::strcmp(name, "cache_misses"))
    m.cache_misses += delta;
  else if (!std::strcmp(name, "cache_corrupted"))
    m.cache_corrupted += delta;
  else if (!std::strcmp(name, "cache_lock_waits"))
    m.cache_lock_waits += delta;
  else if (!std::strcmp(name, "cache_writes"))
    m.cache_writes += delta;
  else if (!std::strcmp(name, "executions"))
    m.executions += delta;
}

void add_seconds(const char* name, double s) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!std::strcmp(name, "compile_seconds"))
    g_metrics.compile_seconds += s;
  else if (!std::strcmp(name, "cache_load_seconds"))
    g_metrics.cache_load_seconds += s;
}

void push_warning(const std::string& msg) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_warnings.size() < 1000) g_warnings.push_back(msg);
}

std::vector<std::string> drain_warnings() {
  std::lock_guard<std::mutex> lock(g_mu);
  std::vector<std::string> w;
  w.swap(g_warnings);
  return w;
}

}  // namespace neuron::cc
