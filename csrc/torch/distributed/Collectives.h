// The collective algorithms of the neuron backend on raw bytes, for any number of hosts.
// Within a host the ranks move data through shared memory (rt::ShmComm, the emulated
// NeuronLink); between hosts each rank exchanges with its counterparts (same local rank) on
// the other hosts through Gloo (GlooLink). On one host the inter-host stage is skipped and the
// algorithms are the shared-memory ones.
//
//   all_reduce:     reduce-scatter within the host -> all-reduce of this rank's shard across
//                   hosts (all-to-all, reduce, all-gather) -> all-gather within the host
//   reduce_scatter: reduce within the host of the blocks of this rank's counterparts -> all-to-all
//                   across hosts -> reduce
//   all_gather:     all-gather across hosts into this rank's shared slot -> read every slot
//
// Partial results of 16-bit floats stay in fp32 between the steps (rounded once), and all the
// arithmetic is kernels::collective_reduce_step, so results match the one-host ones.
// Not thread-safe: one collective at a time per Fabric (the group's stream).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/collective_reduce.h"
#include "kernels/dtype.h"
#include "runtime/shm_comm.h"

namespace neuron::torch_glue {

class GlooLink;

// Where the ranks of a process group are and how they reach each other.
struct Fabric {
  rt::ShmComm* shm = nullptr;  // the ranks of this host (local ranks)
  GlooLink* cross = nullptr;   // this rank's counterparts on the other hosts; null on one host
  int hosts = 1;               // every host has shm->world() ranks
  int host = 0;                // this rank's host = its rank in `cross`
  std::vector<std::vector<int>> ranks;  // ranks[h][l]: group rank of local rank l on host h
  std::chrono::milliseconds timeout{0};
  std::vector<char> scratch;  // staging of the inter-host stage, reused

  int size() const { return hosts * shm->world(); }
  char* scratch_bytes(size_t n);
};

// out = op over every rank's `in` (n elements of `dtype`); out may equal in; a null out
// computes without storing (reduce on the ranks that are not its root).
void all_reduce(Fabric& f, const char* in, char* out, int64_t n, kernels::DType dtype, kernels::CollectiveOp op,
                const std::string& what);
// out (m elements) = op over every rank's block for this rank; blocks[g]: the block for group
// rank g (m elements each).
void reduce_scatter(Fabric& f, const std::vector<const char*>& blocks, char* out, int64_t m, kernels::DType dtype,
                    kernels::CollectiveOp op, const std::string& what);
// outs[g] = group rank g's `in` (bytes each); null entries are not stored (gather).
void all_gather(Fabric& f, const char* in, size_t bytes, const std::vector<char*>& outs, const std::string& what);

// Within one host only (Fabric::hosts == 1): broadcast, scatter, personalised all-to-all.
void shm_broadcast(rt::ShmComm& c, char* buf, size_t bytes, int root, const char* what, std::chrono::milliseconds to);
void shm_scatter(rt::ShmComm& c, const std::vector<const char*>& ins, char* out, size_t bytes, int root,
                 const char* what, std::chrono::milliseconds to);
// send[q] = (ptr, bytes) goes to rank q, recv[p] = (ptr, bytes) comes from rank p.
void shm_all_to_all(rt::ShmComm& c, const std::vector<std::pair<const char*, size_t>>& send,
                    const std::vector<std::pair<char*, size_t>>& recv, const char* what, std::chrono::milliseconds to);

}  // namespace neuron::torch_glue
