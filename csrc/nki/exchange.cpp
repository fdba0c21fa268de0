#include "exchange.h"

#include "error.h"

namespace neuron::nki {

namespace {
std::string shard(int r) { return "shard " + std::to_string(r); }
}  // namespace

Exchange::Exchange(int ranks) : state_(static_cast<size_t>(ranks)) {}

void Exchange::send(int from, int to, int pipe, Message m) {
  {
    std::lock_guard<std::mutex> g(mu_);
    box_[{from, to, pipe}].push_back(std::move(m));
  }
  cv_.notify_all();
}

bool Exchange::ready(int r) const {
  const Rank& s = state_[static_cast<size_t>(r)];
  switch (s.st) {
    case St::Recv: {
      auto it = box_.find({s.peer, r, s.pipe});
      return it != box_.end() && !it->second.empty();
    }
    case St::Barrier: {
      auto count = [&](int q) {
        auto it = arrived_.find({q, s.cores});
        return it == arrived_.end() ? int64_t{0} : it->second;
      };
      const int64_t mine = count(r);
      for (int q = 0; q < ranks(); ++q)
        if ((s.cores >> q & 1u) && count(q) < mine) return false;
      return true;
    }
    default:
      return true;
  }
}

std::string Exchange::stuck(int self) const {
  const Rank& me = state_[static_cast<size_t>(self)];
  auto gone = [&](int q) {
    const St st = state_[static_cast<size_t>(q)].st;
    return st == St::Done || st == St::Failed;
  };
  auto ended = [&](int q) {
    return state_[static_cast<size_t>(q)].st == St::Failed ? " failed" : " finished";
  };
  auto waits_for = [&](int r) {
    const Rank& s = state_[static_cast<size_t>(r)];
    if (s.st == St::Recv)
      return shard(r) + " waits at " + s.what + " to receive from " + shard(s.peer) + " (pipe " +
             std::to_string(s.pipe) + ")";
    std::string set;
    for (int q = 0; q < ranks(); ++q)
      if (s.cores >> q & 1u) set += (set.empty() ? "" : ", ") + std::to_string(q);
    return shard(r) + " waits at " + s.what + " for cores (" + set + ")";
  };
  if (me.st == St::Recv && gone(me.peer))
    return waits_for(self) + ", but " + shard(me.peer) + ended(me.peer) +
           " without sending to it";
  if (me.st == St::Barrier)
    for (int q = 0; q < ranks(); ++q)
      if ((me.cores >> q & 1u) && gone(q)) {
        auto it = arrived_.find({q, me.cores});
        auto mine = arrived_.find({self, me.cores});
        if ((it == arrived_.end() ? 0 : it->second) < mine->second)
          return waits_for(self) + ", but " + shard(q) + ended(q) + " without reaching it";
      }
  // Every program still running is waiting, and none of the waits is satisfied: a deadlock.
  std::string all;
  for (int r = 0; r < ranks(); ++r) {
    const St st = state_[static_cast<size_t>(r)].st;
    if (st == St::Running || ((st == St::Recv || st == St::Barrier) && ready(r))) return "";
    if (st == St::Recv || st == St::Barrier) all += (all.empty() ? "" : "; ") + waits_for(r);
  }
  return "deadlock: " + all;
}

void Exchange::wait(std::unique_lock<std::mutex>& lk, int self, const std::string& instr,
                    const std::string& loc) {
  while (!ready(self)) {
    std::string why = stuck(self);
    if (!why.empty()) {
      state_[static_cast<size_t>(self)].st = St::Failed;
      cv_.notify_all();
      throw NkiError("deadlock", instr, loc, why,
                     "every sendrecv needs a matching sendrecv on its partner and every "
                     "core_barrier one on each of its cores");
    }
    cv_.wait(lk);
  }
  state_[static_cast<size_t>(self)].st = St::Running;
}

Message Exchange::recv(int self, int from, int pipe, const std::string& instr,
                       const std::string& loc) {
  std::unique_lock<std::mutex> lk(mu_);
  Rank& me = state_[static_cast<size_t>(self)];
  me.st = St::Recv;
  me.peer = from;
  me.pipe = pipe;
  me.what = instr + " at " + loc;
  cv_.notify_all();  // another waiter may now see that everyone waits
  wait(lk, self, instr, loc);
  auto& q = box_[{from, self, pipe}];
  Message m = std::move(q.front());
  q.pop_front();
  return m;
}

void Exchange::barrier(int self, uint32_t cores, const std::string& instr,
                       const std::string& loc) {
  std::unique_lock<std::mutex> lk(mu_);
  ++arrived_[{self, cores}];
  Rank& me = state_[static_cast<size_t>(self)];
  me.st = St::Barrier;
  me.cores = cores;
  me.what = instr + " at " + loc;
  cv_.notify_all();
  wait(lk, self, instr, loc);
}

void Exchange::finish(int self, bool failed) {
  {
    std::lock_guard<std::mutex> g(mu_);
    state_[static_cast<size_t>(self)].st = failed ? St::Failed : St::Done;
  }
  cv_.notify_all();
}

}  // namespace neuron::nki
