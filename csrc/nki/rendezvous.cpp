#include "rendezvous.h"

#include <chrono>

#include "runtime/interrupt.h"

namespace neuron::nki {

namespace {
constexpr const char* kRule =
    "the cores of a logical core meet at the same rendezvous: core_barrier and sendrecv in "
    "the same order on every core";
}

CoreGroup::CoreGroup(int size, int poll_rank)
    : state_(static_cast<size_t>(std::max(1, size))),
      poll_rank_(poll_rank),
      epoch_(rt::interrupt_epoch()) {}

bool CoreGroup::can_go(int r) const {
  const Core& c = state_[static_cast<size_t>(r)];
  switch (c.st) {
    case St::Barrier:
      for (int k = 0; k < size(); ++k)
        if ((c.cores >> k & 1u) && state_[static_cast<size_t>(k)].barriers < c.barriers)
          return false;
      return true;
    case St::Recv: {
      auto it = posted_.find(Key{c.from, r, c.pipe});
      return it != posted_.end() && !it->second.taken;
    }
    case St::Sent:
      return posted_.find(Key{r, c.to, c.pipe}) == posted_.end();
    case St::Turn:
      return turn_ == c.turns * size() + r;
    default:
      return false;
  }
}

bool CoreGroup::stuck() const {
  bool waiting = false;
  for (int r = 0; r < size(); ++r) {
    const St st = state_[static_cast<size_t>(r)].st;
    if (st == St::Running) return false;
    if (st == St::Done || st == St::Failed) continue;
    waiting = true;
    if (can_go(r)) return false;
  }
  return waiting;
}

std::string CoreGroup::describe() const {
  std::string s = "deadlock: no core of the logical core can proceed (";
  for (int r = 0; r < size(); ++r) {
    const Core& c = state_[static_cast<size_t>(r)];
    if (r) s += "; ";
    s += "core " + std::to_string(r) + " ";
    const std::string at = c.site.instr + " at " + c.site.loc;
    switch (c.st) {
      case St::Barrier: {
        std::string who;
        for (int k = 0; k < size(); ++k)
          if ((c.cores >> k & 1u) && state_[static_cast<size_t>(k)].barriers < c.barriers)
            who += (who.empty() ? "" : ", ") + std::to_string(k);
        s += "waits in " + at + " (its barrier " + std::to_string(c.barriers) +
             ") for core(s) " + who;
        break;
      }
      case St::Recv:
        s += "waits in " + at + " for the tile of rank " + std::to_string(c.from) + " on pipe " +
             std::to_string(c.pipe);
        break;
      case St::Sent:
        s += "waits in " + at + " for rank " + std::to_string(c.to) +
             " to receive its tile on pipe " + std::to_string(c.pipe);
        break;
      case St::Turn:
        s += "waits in " + at + " for its turn on the process group (its collective " +
             std::to_string(c.turns + 1) + "; the cores take turns, one collective each)";
        break;
      case St::Done:
        s += "has finished its program";
        break;
      case St::Failed:
        s += "failed";
        break;
      case St::Running:
        s += "is running";
        break;
    }
  }
  return s + ")";
}

void CoreGroup::wait(std::unique_lock<std::mutex>& lock, int rank, St st, const Site& site) {
  Core& me = state_[static_cast<size_t>(rank)];
  me.st = st;
  me.site = site;
  cv_.notify_all();
  for (;;) {
    if (can_go(rank)) {
      me.st = St::Running;
      return;
    }
    if (deadlock_.empty() && failed_ < 0 && stuck()) {
      deadlock_ = describe();
      cv_.notify_all();
    }
    if (!deadlock_.empty()) throw NkiError("deadlock", site.instr, site.loc, deadlock_, kRule);
    if (failed_ >= 0)
      throw NkiError("aborted", site.instr, site.loc,
                     "core " + std::to_string(rank) + " stopped waiting: core " +
                         std::to_string(failed_) + " of the logical core failed",
                     "");
    cv_.wait_for(lock, std::chrono::milliseconds(50));
    bool stop = rt::interrupt_epoch() != epoch_;
    if (!stop && rank == poll_rank_) {
      lock.unlock();
      stop = rt::poll_interrupt();
      lock.lock();
    }
    if (stop)
      throw NkiError("interrupted", site.instr, site.loc,
                     "interrupted (Ctrl-C) while core " + std::to_string(rank) +
                         " waited for its peer; the kernel's outputs are incomplete",
                     "");
  }
}

void CoreGroup::barrier(int rank, uint32_t cores, const Site& site) {
  std::unique_lock<std::mutex> lock(mu_);
  Core& me = state_[static_cast<size_t>(rank)];
  ++me.barriers;
  me.cores = cores;
  wait(lock, rank, St::Barrier, site);
}

void CoreGroup::sendrecv(int rank, int to, int from, int64_t pipe, const detail::View& src,
                         const Site& site, const std::function<void(const Message&)>& receive) {
  std::unique_lock<std::mutex> lock(mu_);
  Core& me = state_[static_cast<size_t>(rank)];
  me.to = to;
  me.from = from;
  me.pipe = pipe;
  posted_[Key{rank, to, pipe}] = Post{Message{src, site}, false};
  wait(lock, rank, St::Recv, site);
  Post& in = posted_.at(Key{from, rank, pipe});
  in.taken = true;
  const Message m = in.m;
  lock.unlock();
  struct Release {  // the sender may go on once its tile is copied (or the copy failed)
    CoreGroup& g;
    Key k;
    std::unique_lock<std::mutex>& lock;
    ~Release() {
      if (!lock.owns_lock()) lock.lock();
      g.posted_.erase(k);
      g.cv_.notify_all();
    }
  };
  {
    Release rel{*this, Key{from, rank, pipe}, lock};
    receive(m);
  }
  wait(lock, rank, St::Sent, site);
}

void CoreGroup::take_turn(int rank, const Site& site) {
  std::unique_lock<std::mutex> lock(mu_);
  wait(lock, rank, St::Turn, site);
}

void CoreGroup::end_turn(int rank) {
  std::lock_guard<std::mutex> g(mu_);
  ++state_[static_cast<size_t>(rank)].turns;
  ++turn_;
  cv_.notify_all();
}

void CoreGroup::finish(int rank) {
  std::lock_guard<std::mutex> g(mu_);
  state_[static_cast<size_t>(rank)].st = St::Done;
  if (deadlock_.empty() && failed_ < 0 && stuck()) deadlock_ = describe();
  cv_.notify_all();
}

void CoreGroup::fail(int rank) {
  std::lock_guard<std::mutex> g(mu_);
  state_[static_cast<size_t>(rank)].st = St::Failed;
  if (failed_ < 0) failed_ = rank;
  cv_.notify_all();
}

}  // namespace neuron::nki
