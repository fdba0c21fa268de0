// The physical NeuronCores of one logical core running the instances of a launch at the same
// time (LNC=2): the rendezvous of nki.isa.core_barrier and the pipe-keyed mailbox of
// nki.isa.sendrecv. A core that waits on a peer that can never come (every live core waits and
// none can proceed, or the peer finished) fails with a "deadlock" NkiError naming what each
// core waits on - it never hangs. A core that fails wakes its waiting peers, which fail too
// ("aborted"), so the launch reports the first real error.
// Thread-safety: every member may be called concurrently from the cores' threads.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "exec_internal.h"

namespace neuron::nki {

class CoreGroup {
 public:
  // `size` cores, ranks 0..size-1; `poll_rank` polls for Ctrl-C while it waits (the caller's
  // thread), -1 for none.
  explicit CoreGroup(int size, int poll_rank = 0);
  int size() const { return static_cast<int>(state_.size()); }

  // Where a core waits: its instruction and kernel source location (for error messages).
  struct Site {
    std::string instr, loc;
  };
  // The tile a core sends: its view (valid while the sender waits in sendrecv) and site.
  struct Message {
    detail::View src;
    Site site;
  };

  // Blocks until every core of `cores` (a bit mask of ranks) has reached as many barriers as
  // `rank` has with this one. Throws NkiError (deadlock, aborted, interrupted).
  void barrier(int rank, uint32_t cores, const Site& site);
  // Offers `src` to rank `to` on `pipe`, waits for the message of rank `from` on `pipe`, calls
  // `receive` with it (outside the lock: the sender is still waiting, so its view is valid) and
  // waits until `to` has taken the offered tile. The n-th sendrecv of a core pairs with the
  // n-th of its peer on the same pipe. Throws NkiError.
  void sendrecv(int rank, int to, int from, int64_t pipe, const detail::View& src,
                const Site& site, const std::function<void(const Message&)>& receive);
  // Collectives over the process group at LNC>1: the cores of this rank use its one link in
  // turns (core 0's first collective, core 1's first, core 0's second, ...; the same order on
  // every rank, so core s meets core s of the others). take_turn() blocks until it is the
  // core's turn, end_turn() passes it on. Throws NkiError (a core that never takes its turn:
  // deadlock).
  void take_turn(int rank, const Site& site);
  void end_turn(int rank);
  // The core's program ended (normally or not): peers waiting on it fail.
  void finish(int rank);
  void fail(int rank);

 private:
  enum class St { Running, Barrier, Recv, Sent, Turn, Done, Failed };
  struct Core {
    St st = St::Running;
    int64_t barriers = 0;  // barriers reached
    uint32_t cores = 0;    // St::Barrier: the cores it waits for
    int from = -1, to = -1;
    int64_t pipe = 0;
    int64_t turns = 0;  // collectives over the process group done
    Site site;
  };
  using Key = std::tuple<int, int, int64_t>;  // from, to, pipe
  struct Post {
    Message m;
    bool taken = false;  // the receiver is copying it
  };

  bool can_go(int r) const;
  bool stuck() const;
  std::string describe() const;
  void wait(std::unique_lock<std::mutex>& lock, int rank, St st, const Site& site);

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Core> state_;
  std::map<Key, Post> posted_;  // offered, not yet received
  std::string deadlock_;           // set once when no core can proceed
  int failed_ = -1;
  int64_t turn_ = 0;  // turns taken by all cores
  int poll_rank_;
  uint64_t epoch_;
};

}  // namespace neuron::nki
