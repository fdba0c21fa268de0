// What one rank is about to do in a collective (op, dtype, shape, sequence number, ...). Ranks
// exchange these before moving data, so that mismatched calls fail with a message naming the
// ranks and what differs instead of returning garbage. It is also the one place where each
// collective's op, bytes and ranks are known (cost estimates, traces). Plain data; no locking.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace neuron::rt {

struct CollectiveDesc {
  uint64_t seq = 0;             // the group's collective number on this rank (1, 2, ...)
  std::string op;               // "all_reduce", "broadcast", ...
  std::string dtype;            // "float32", ...
  std::string reduce;           // "sum", ... or empty
  int32_t root = -1;            // root rank, or -1
  std::vector<int64_t> shape;   // the shape every rank must agree on (first tensor)
  uint64_t numel = 0;           // elements every rank must agree on (all tensors)
  uint32_t tensors = 0;         // number of tensors every rank must agree on
  uint64_t bytes = 0;           // bytes this rank contributes (local only: not encoded or compared)
  // all_to_all only: bytes this rank sends to / receives from each rank (compared pairwise).
  std::vector<uint64_t> send_bytes, recv_bytes;

  // "all_reduce #3 (float32[2, 3], sum)".
  std::string text() const;

  // Fixed little-endian binary form, for shared memory and sockets.
  size_t encoded_size() const;
  void encode(char* out) const;
  // Throws Error when `in` is not a descriptor (truncated or corrupted).
  static CollectiveDesc decode(const char* in, size_t n);
  // The largest encoded_size() of a descriptor in a group of `world` ranks.
  static size_t max_encoded_size(int world);
};

// Empty when every descriptor agrees; otherwise a message naming the ranks (labels[i] is the
// name of descs[i]'s rank) and what differs. `group` names the process group.
std::string collective_mismatch(const std::vector<CollectiveDesc>& descs, const std::vector<int>& labels,
                                const std::string& group);

}  // namespace neuron::rt
