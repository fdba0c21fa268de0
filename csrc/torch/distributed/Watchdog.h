// Liveness across hosts for one process group, through its c10d store: every rank bumps a
// heartbeat counter twice a second, and a rank whose collective fails publishes the reason
// once for the whole group. Ranks on other hosts learn of a failure within a second (instead
// of waiting for their collective's timeout), and a rank that stops beating can be named.
// Thread-safety: all members may be called from any thread.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace neuron::torch_glue {

class Watchdog {
 public:
  // `on_failure(origin, reason)` runs on the watchdog's thread when another rank published a
  // failure (at most once).
  Watchdog(c10::intrusive_ptr<c10d::Store> store, int rank, std::function<void(int, const std::string&)> on_failure);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // Publishes this rank's failure for the group; the first published failure is the one kept.
  void publish_failure(const std::string& reason);
  // The ranks of `ranks` whose heartbeat does not advance within `grace` (they have exited,
  // hang without their process, or lost the network). Empty when the store is unreachable.
  std::vector<int> silent(const std::vector<int>& ranks, std::chrono::milliseconds grace);

 private:
  void loop();
  bool beat_count(int rank, int64_t* count);

  c10::intrusive_ptr<c10d::Store> store_;
  const int rank_;
  std::function<void(int, const std::string&)> on_failure_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::atomic<bool> store_lost_{false};
  std::atomic<bool> failure_seen_{false};
  std::thread thread_;
};

}  // namespace neuron::torch_glue
