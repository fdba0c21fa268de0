// The emulated NeuronLink: communication between the processes (ranks) of one host through
// shared memory. Each rank owns one segment (an anonymous memfd: nothing is named in /dev/shm,
// and the memory is freed when the last process that maps it exits, however it exits) holding
// a data slot that peers read during collectives, one mailbox per peer for point-to-point
// messages, and a header with its barrier epoch, its collective descriptors and its failure
// state. Waits use process-shared futexes, so idle ranks sleep instead of spinning.
//
// Failures are never silent and never a long hang: a wait fails at once when a peer has
// failed (abort()), within a fraction of a second when a peer process has exited, and at the
// timeout otherwise, naming the ranks waited for. Collectives publish a CollectiveDesc
// (begin()); the next barrier compares them and fails naming the ranks whose calls differ.
// After any failure the object is unusable (every later call throws the first failure).
//
// Thread-safety: one collective at a time per object (callers run collectives on one stream);
// send/recv to different peers may overlap with each other; abort() and failure() may be
// called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/collective_desc.h"

namespace neuron::rt {

class ShmComm {
 public:
  // How a peer on the same host maps this rank's segment: /proc/<pid>/fd/<fd>, checked by token.
  struct Handle {
    int64_t pid = 0;
    int32_t fd = -1;
    uint64_t token = 0;
  };

  // Creates this rank's segment. `group` and `labels` (labels[r]: the name of local rank r in
  // messages, e.g. its rank in the process group; default: r) only shape error messages.
  ShmComm(int rank, int world, size_t slot_bytes, size_t mailbox_bytes, std::string group = "",
          std::vector<int> labels = {});
  ~ShmComm();
  ShmComm(const ShmComm&) = delete;
  ShmComm& operator=(const ShmComm&) = delete;

  Handle handle() const { return {pid_, fd_, token_}; }
  // Maps every peer's segment (peers[r] from rank r's handle()), then waits for all ranks.
  // Throws Error naming the rank whose segment cannot be opened (e.g. its process has exited).
  void connect(const std::vector<Handle>& peers, std::chrono::milliseconds timeout);

  int rank() const { return rank_; }
  int world() const { return world_; }
  size_t slot_bytes() const { return slot_bytes_; }
  // The data slot of rank r: writable for r == rank(), read-only by convention for peers.
  char* slot(int r) const;

  // Starts a collective: publishes this rank's descriptor. The next barrier() checks that all
  // ranks published equal ones (collective_mismatch) and throws naming them otherwise.
  void begin(const CollectiveDesc& desc);
  // Ends the collective begun last; runs a barrier if none ran since begin() (so that the
  // descriptors are always checked, e.g. for an empty tensor).
  void end(std::chrono::milliseconds timeout);

  // All ranks reach the barrier before any leaves. `what` names the collective in errors.
  void barrier(const char* what, std::chrono::milliseconds timeout);

  // Point-to-point, FIFO per (src, dst) pair; messages larger than the mailbox are chunked.
  // The receiver checks the message's size and dtype against `desc` (numel, dtype).
  void send(int dst, const void* data, size_t bytes, const CollectiveDesc& desc, std::chrono::milliseconds timeout);
  void recv(int src, void* data, size_t bytes, const CollectiveDesc& desc, std::chrono::milliseconds timeout);

  // Marks this rank as failed with `reason` (the first reason is kept): peers waiting on it
  // fail at once naming this rank, and later calls on this object throw.
  void abort(const std::string& reason) noexcept;
  // Same, with the rank where the failure started (a failure learnt from elsewhere).
  void abort_as(int origin, const std::string& reason) noexcept;
  // The reason this rank failed, or "" while it is healthy.
  std::string failure() const;
  // The failure of this rank or, failing that, of any peer ("" while all are healthy).
  std::string any_failure() const;

 private:
  struct Segment;
  struct Mailbox;
  Segment* seg(int r) const { return segs_[static_cast<size_t>(r)]; }
  std::string label(int r) const;
  // Waits until ready() holds, sleeping on `word`; between slices checks this rank's and the
  // peers' failure flags and whether the processes of pending() (ranks waited for) are alive.
  template <typename Ready, typename Pending>
  void wait(std::atomic<uint32_t>* word, Ready ready, Pending pending, std::chrono::milliseconds timeout,
            const std::string& what);
  [[noreturn]] void fail(const std::string& reason);
  void check_usable() const;
  void check_descriptors();
  bool peer_alive(int r) const;

  const int rank_;
  const int world_;
  const size_t slot_bytes_;
  const size_t mailbox_bytes_;
  const std::string group_;
  std::vector<int> labels_;
  size_t segment_bytes_ = 0;
  int64_t pid_ = 0;
  int32_t fd_ = -1;
  uint64_t token_ = 0;
  std::vector<Segment*> segs_;
  uint32_t epoch_ = 0;        // barriers entered
  uint32_t collectives_ = 0;  // begin() calls (selects the descriptor buffer)
  bool check_pending_ = false;
  std::string pending_what_;
};

}  // namespace neuron::rt
