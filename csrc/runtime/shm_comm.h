// The emulated NeuronLink: communication between the processes (ranks) of one host through
// POSIX shared memory. Each rank owns one segment holding a data slot that peers read during
// collectives, and one mailbox per peer for point-to-point messages. A barrier in rank 0's
// segment orders the phases of a collective; waits use process-shared futexes, so idle ranks
// sleep instead of spinning. Thread-safety: one collective at a time per object (callers run
// collectives on one stream); send/recv to different peers may overlap.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace neuron::rt {

class ShmComm {
 public:
  // Creates this rank's segment "/<prefix>_<rank>" (prefix must be unique per group, e.g. a
  // random id agreed through the c10d store). Peers are opened by connect().
  ShmComm(const std::string& prefix, int rank, int world, size_t slot_bytes, size_t mailbox_bytes);
  ~ShmComm();
  ShmComm(const ShmComm&) = delete;
  ShmComm& operator=(const ShmComm&) = delete;

  // Opens every peer's segment; call after all ranks have constructed theirs.
  void connect(std::chrono::milliseconds timeout);

  int rank() const { return rank_; }
  int world() const { return world_; }
  size_t slot_bytes() const { return slot_bytes_; }
  // The data slot of rank r: writable for r == rank(), read-only by convention for peers.
  char* slot(int r) const;

  // All ranks reach the barrier before any leaves. Throws Error naming `what` and the ranks
  // still missing when `timeout` passes.
  void barrier(const char* what, std::chrono::milliseconds timeout);

  // Point-to-point, FIFO per (src, dst) pair; messages larger than the mailbox are chunked.
  void send(int dst, const void* data, size_t bytes, std::chrono::milliseconds timeout);
  void recv(int src, void* data, size_t bytes, std::chrono::milliseconds timeout);

 private:
  struct Segment;
  Segment* seg(int r) const { return segs_[static_cast<size_t>(r)]; }
  const std::string prefix_;
  const int rank_;
  const int world_;
  const size_t slot_bytes_;
  const size_t mailbox_bytes_;
  size_t segment_bytes_;
  std::vector<Segment*> segs_;
  bool unlinked_ = false;
};

}  // namespace neuron::rt
