// The c10d backend of the neuron device ("neuron"). Ranks on one host exchange data through
// shared memory (rt::ShmComm, the emulated NeuronLink); ranks on different hosts through Gloo
// (TCP), hierarchically for all-reduce, all-gather and reduce-scatter (Collectives.h). Every
// collective of a group runs, in issue order, as one task on the group's stream of the
// tensors' device, after the work already queued on the caller's current stream (like NCCL's
// internal stream); point-to-point operations run on one stream per peer and direction, so
// that exchanges (batch_isend_irecv) cannot deadlock; Work::wait() makes the caller's stream
// wait for the operation.
//
// Before moving data, ranks compare a descriptor of the call (rt::CollectiveDesc) and fail
// naming the ranks whose calls differ. A rank that is gone (its process exited, its host died)
// makes the others fail within seconds naming it; the first failure makes the group unusable.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "Collectives.h"
#include "nki/device_time.h"
#include "runtime/collective_desc.h"
#include "runtime/kernel_link.h"
#include "runtime/shm_comm.h"

namespace neuron::rt {
class Stream;
}  // namespace neuron::rt

namespace neuron::torch_glue {

class GlooLink;
class Watchdog;

class ProcessGroupNeuron : public c10d::Backend {
 public:
  // Creates a Gloo process group named `tag` over the given ranks of this group (sorted; this
  // rank among them). Supplied by the Python layer: the torch wheel ships Gloo without headers.
  using GlooFactory = std::function<c10::intrusive_ptr<c10d::Backend>(const std::string& tag, const std::vector<int>& ranks)>;

  struct Options {
    std::string group_name;                       // c10d's name of the group, for messages
    std::chrono::milliseconds timeout{1800000};   // of each collective
    std::chrono::milliseconds join_timeout{60000};  // for every rank to create the group
    GlooFactory make_gloo;
  };

  // Joins the group through `store`: waits (up to join_timeout) for every rank, learns which
  // ranks share this host, maps their shared memory and connects to the other hosts.
  ProcessGroupNeuron(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, Options options);
  ~ProcessGroupNeuron() override;

  const std::string getBackendName() const override { return "neuron"; }
  void setTimeout(std::chrono::milliseconds timeout) override { timeout_ = fabric_.timeout = timeout; }
  void setSequenceNumberForGroup() override { seq_ = 0; }
  uint64_t getSequenceNumberForGroup() override { return seq_; }

  // Group ranks per host, in host order (host 0 holds rank 0).
  const std::vector<std::vector<int>>& hosts() const { return hosts_; }
  // "shm" (one host), "shm+gloo" (hierarchical) or "gloo" (an uneven number of ranks per host).
  std::string transport() const;

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs, const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_split_sizes,
                                               std::vector<int64_t>& input_split_sizes,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst_rank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src_rank, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

  // nki.collectives inside a kernel (rt::KernelLink, registered for the first neuron group of
  // the process, the world group): every rank contributes `in` (lengths may differ) and gets
  // every rank's bytes, by rank, after the ranks compared `desc` like a c10d collective's.
  // Runs on the calling thread (the kernel's), ordered with the group's other collectives.
  std::vector<std::string> kernel_all_gather(rt::CollectiveDesc desc, const std::string& in);
  void kernel_abort(const std::string& reason) noexcept { fail(reason); }

 private:
  void join(const c10::intrusive_ptr<c10d::Store>& store, const GlooFactory& make_gloo);
  void wait_for_keys(c10d::Store& store, const std::string& what, const std::vector<int>& ranks);
  rt::CollectiveDesc describe(const char* op, const std::vector<at::Tensor>& agreed, const std::string& reduce = "",
                              int root = -1);
  // Queues `body` on the group's stream of the tensors' device as collective `desc`; the
  // device-time model prices it as `kind`.
  c10::intrusive_ptr<c10d::Work> enqueue(c10d::OpType type, nki::Collective kind, const char* name, const std::vector<at::Tensor>& tensors,
                                         std::vector<at::Tensor> outputs, rt::CollectiveDesc desc,
                                         std::function<void(const std::string& what)> body);
  // Queues a point-to-point transfer on the stream of (peer, direction).
  c10::intrusive_ptr<c10d::Work> enqueue_p2p(c10d::OpType type, const char* name, at::Tensor tensor, int peer,
                                             bool sending, std::function<void()> body);
  c10::intrusive_ptr<c10d::Work> launch(c10d::OpType type, nki::Collective kind, const char* name, rt::Stream& stream,
                                        const std::vector<at::Tensor>& tensors, std::vector<at::Tensor> outputs,
                                        std::function<void()> task);
  void run_collective(const rt::CollectiveDesc& desc, const std::function<void(const std::string&)>& body);
  void validate(const rt::CollectiveDesc& desc, GlooLink& link, const std::string& what);
  rt::Stream& group_stream(c10::DeviceIndex device);
  rt::Stream& p2p_stream(c10::DeviceIndex device, int peer, bool sending);

  // Failure state of the group (first failure wins; thread-safe).
  void fail(const std::string& reason) noexcept;
  void remote_failure(int origin, const std::string& reason) noexcept;
  std::string failure() const;  // "" while healthy; also reports failures of this host's ranks
  void check_usable() const;

  bool same_host(int peer) const { return local_index_[static_cast<size_t>(peer)] >= 0; }
  int local(int peer) const { return local_index_[static_cast<size_t>(peer)]; }

  std::string group_;
  std::chrono::milliseconds timeout_;
  std::chrono::milliseconds join_timeout_;
  std::atomic<uint64_t> seq_{0};  // collectives issued (c10d's sequence number)
  std::vector<std::vector<int>> hosts_;
  std::vector<int> local_index_;  // per group rank: its rank in shm_, or -1 (reached through Gloo)

  mutable std::mutex failure_mu_;
  std::string failure_;
  std::atomic<bool> failed_{false};

  std::unique_ptr<rt::ShmComm> shm_;
  std::unique_ptr<Watchdog> watchdog_;  // only with several hosts
  Fabric fabric_;
  // Declared after the fabric (whose scratch memory Gloo may still write): destroyed first.
  std::unique_ptr<GlooLink> all_;    // every rank (several hosts)
  std::unique_ptr<GlooLink> cross_;  // this rank's counterparts on the other hosts (regular grids)

  std::mutex streams_mu_;
  std::vector<rt::Stream*> streams_;  // per device index, created on first use
  std::map<std::tuple<c10::DeviceIndex, int, bool>, rt::Stream*> p2p_streams_;
  std::mutex exchange_mu_;  // one collective at a time on the fabric (streams, kernels)
  std::shared_ptr<rt::KernelLink> kernel_link_;  // registered by this group, or null
  std::mutex graveyard_mu_;
  std::vector<at::Tensor> graveyard_;  // tensors of operations abandoned after a failure
};

}  // namespace neuron::torch_glue
