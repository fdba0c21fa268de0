#include "OpTracker.h"

#include <mutex>
#include <unordered_set>

namespace neuron::torch_glue {

std::atomic<uint64_t> g_op_tracking_generation{1};

namespace {
struct OrderedSet {
  std::vector<std::string> order;
  std::unordered_set<std::string> seen;
  void add(const std::string& s) {
    if (seen.insert(s).second) order.push_back(s);
  }
  void clear() {
    order.clear();
    seen.clear();
  }
};
std::mutex g_mu;
OrderedSet g_executed;
OrderedSet g_fallback;
}  // namespace

void mark_executed_slow(OpSite& site, uint64_t generation) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_executed.add(site.name);
  site.seen_generation.store(generation, std::memory_order_relaxed);
}

void record_fallback(const std::string& name) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_fallback.add(name);
  g_executed.add(name);
}

std::vector<std::string> executed_ops() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_executed.order;
}

std::vector<std::string> fallback_ops() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_fallback.order;
}

void clear_op_tracking() {
  std::lock_guard<std::mutex> lock(g_mu);
  g_executed.clear();
  g_fallback.clear();
  g_op_tracking_generation.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace neuron::torch_glue
