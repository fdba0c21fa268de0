// The meeting point of the programs of one multi-core launch (LNC=2: the physical NeuronCores of
// a logical core run their programs at the same time, each on its own SBUF/PSUM, and talk through
// nisa.sendrecv and nisa.core_barrier). Messages are buffered per (sender, receiver, pipe), so a
// symmetric exchange never blocks on the send; a receive or barrier waits for its partner. A
// wait that can never be satisfied - every program still running is waiting, or the partner has
// finished or failed - throws instead of hanging, naming both programs and their instructions.
// Thread-safety: every member may be called concurrently by the programs' threads.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "dtype.h"

namespace neuron::nki {

// The elements of one sendrecv source in flat order, in the source's dtype.
struct Message {
  DT dtype = DT::Float32;
  int64_t numel = 0;
  std::vector<uint8_t> data;
  std::vector<uint8_t> def;  // definedness per byte (checking mode), else empty
  std::string what;          // the sending instruction and its kernel line
};

class Exchange {
 public:
  explicit Exchange(int ranks);
  int ranks() const { return static_cast<int>(state_.size()); }

  // Posts `m` from rank `from` to rank `to` on `pipe` (never blocks).
  void send(int from, int to, int pipe, Message m);
  // Waits for the next message from `from` to `self` on `pipe`. `instr` and `loc` name the
  // waiting instruction. Throws NkiError ("deadlock") when it can never arrive.
  Message recv(int self, int from, int pipe, const std::string& instr, const std::string& loc);
  // Waits until every rank in `cores` (bit r = rank r) has reached as many barriers on that set
  // as `self` has, this one included. Throws NkiError ("deadlock") when one never will.
  void barrier(int self, uint32_t cores, const std::string& instr, const std::string& loc);
  // Rank `self` stopped: it ended (failed = false) or threw (failed = true).
  void finish(int self, bool failed);

 private:
  enum class St { Running, Recv, Barrier, Done, Failed };
  struct Rank {
    St st = St::Running;
    int peer = -1, pipe = 0;  // Recv: the sender waited for
    uint32_t cores = 0;       // Barrier: the set waited on
    std::string what;         // the waiting instruction
  };
  bool ready(int r) const;  // whether rank r's wait is satisfied (locked)
  std::string stuck(int self) const;  // why self can never proceed, or "" (locked)
  void wait(std::unique_lock<std::mutex>& lk, int self, const std::string& instr,
            const std::string& loc);

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Rank> state_;
  std::map<std::tuple<int, int, int>, std::deque<Message>> box_;  // (from, to, pipe)
  std::map<std::pair<int, uint32_t>, int64_t> arrived_;          // (rank, core set) -> count
};

}  // namespace neuron::nki
