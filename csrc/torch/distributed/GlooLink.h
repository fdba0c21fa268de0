// Transfers between hosts for the neuron backend: byte-level operations of a Gloo process
// group (the TCP engine in the torch wheel) run directly on the memory they are given (device
// memory is host memory owned by the runtime, so Gloo reads and writes it in place). Every
// wait gives up early when the neuron group has failed elsewhere, and a Gloo error names the
// ranks that are gone (from the watchdog's heartbeats) instead of a socket address.
// Thread-safety: operations may be issued from several threads (collectives from the group's
// stream, point-to-point from the per-peer streams).
#pragma once

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <chrono>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

namespace neuron::torch_glue {

class Watchdog;

class GlooLink {
 public:
  // `members[i]`: the neuron group rank of the Gloo group's rank i. `failure()` returns the
  // neuron group's failure ("" while healthy); `where` (" on rank 3 of group 'x'") follows the
  // operation's name in error messages.
  GlooLink(c10::intrusive_ptr<c10d::Backend> gloo, std::vector<int> members, std::string where, Watchdog* watchdog,
           std::function<std::string()> failure, std::chrono::milliseconds timeout);

  int rank() const { return rank_; }
  int size() const { return static_cast<int>(members_.size()); }
  const std::vector<int>& members() const { return members_; }

  // out[i * bytes .. (i + 1) * bytes) = member i's `in`.
  void all_gather(const void* in, size_t bytes, void* out, const std::string& what);
  // Member i receives send[i] bytes (consecutive in `in`); recv[j] bytes arrive from member j
  // (consecutive in `out`).
  void all_to_all(const void* in, const std::vector<size_t>& send, void* out, const std::vector<size_t>& recv,
                  const std::string& what);
  void broadcast(void* buf, size_t bytes, int root, const std::string& what);
  // Root: ins[i] goes to member i. Everyone: `out` receives its part.
  void scatter(const std::vector<const void*>& ins, void* out, size_t bytes, int root, const std::string& what);
  void send(const void* data, size_t bytes, int dst, int tag, const std::string& what);
  void recv(void* data, size_t bytes, int src, int tag, const std::string& what);
  void barrier(const std::string& what);

 private:
  // Waits for `work`; `keep` are the views Gloo uses (kept alive if the wait is abandoned).
  void run(const c10::intrusive_ptr<c10d::Work>& work, std::vector<at::Tensor> keep, const std::string& what);

  c10::intrusive_ptr<c10d::Backend> gloo_;
  std::vector<int> members_;
  std::string where_;
  int rank_ = 0;
  Watchdog* watchdog_;
  std::function<std::string()> failure_;
  std::chrono::milliseconds timeout_;
  std::mutex abandoned_mu_;
  std::vector<std::pair<c10::intrusive_ptr<c10d::Work>, std::vector<at::Tensor>>> abandoned_;
};

}  // namespace neuron::torch_glue
