// The runtime singleton: the visible logical cores of this process, each with its HBM pool
// and streams, plus per-thread current device/stream. Initialised lazily on first use from
// the environment (see topology.h); a forked child of an initialised parent gets
// BadForkError on any use.
// Thread-safety: all members are safe from any thread; current device/stream are per thread.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "allocator.h"
#include "stream.h"
#include "topology.h"

namespace neuron::rt {

// One logical NeuronCore: `neuron:<index>`.
class Device {
 public:
  static constexpr int kPoolSize = 32;  // streams per priority in the pool

  Device(const LogicalCore& core);
  ~Device();
  int index() const { return core_.index; }
  const LogicalCore& core() const { return core_; }
  HbmAllocator& allocator() { return *allocator_; }

  Stream& default_stream() { return *streams_[0]; }
  // A stream from the pool (round-robin per priority; priority < 0 is "high").
  Stream& pool_stream(int priority);
  // A stream by id (as stored in c10::Stream); throws Error for unknown ids.
  Stream& stream(int64_t id);
  // All streams created so far (default stream first).
  std::vector<Stream*> streams();
  // Waits for all streams of this device; rethrows the first pending error.
  void synchronize();

 private:
  static constexpr int kMaxStreams = 1 + 2 * kPoolSize;
  // The allocator's sync callback: waits for every stream (errors stay pending on them).
  static void sync_streams(void* self);

  LogicalCore core_;
  // Declared before streams_ so that it outlives the tasks they drain at destruction.
  std::unique_ptr<HbmAllocator> allocator_;
  std::mutex mu_;                                          // guards streams_ and pool_ids_
  std::vector<std::unique_ptr<Stream>> streams_;           // index == id
  std::array<std::atomic<Stream*>, kMaxStreams> by_id_{};  // lock-free stream(id) lookup
  std::array<std::atomic<unsigned>, 2> next_{};            // round-robin cursors: [low, high]
  std::array<std::vector<int64_t>, 2> pool_ids_;           // ids handed out per priority class
};

class Runtime {
 public:
  // The runtime, initialised on first call. Throws ConfigError for bad environment and
  // BadForkError in a forked child whose parent had initialised the runtime.
  static Runtime& get();
  // True once get() has succeeded in this process (false in a forked child).
  static bool initialized();
  // True in a forked child of a process that had initialised the runtime.
  static bool in_bad_fork();

  const Topology& topology() const { return topo_; }
  int device_count() const { return static_cast<int>(devices_.size()); }
  // Throws Error("neuron:7 is not available: this process sees 4 logical NeuronCores ...").
  Device& device(int index);
  bool launch_blocking() const { return launch_blocking_; }
  void synchronize_all();

 private:
  Runtime();
  Topology topo_;
  std::vector<std::unique_ptr<Device>> devices_;
  bool launch_blocking_ = false;
};

// The device threads start on: under torchrun (LOCAL_RANK set) with NEURON_RT_VISIBLE_CORES
// unset, the local rank's core (on Trainium that core becomes the process's only one; here all
// cores stay addressable, so neuron:<LOCAL_RANK> names the same core); otherwise neuron:0.
int default_device();
// Per-thread current device index (default: default_device()).
int current_device();
void set_current_device(int index);
// Per-thread current stream of `device` (default: the device's default stream).
Stream& current_stream(int device);
void set_current_stream(Stream& s);

}  // namespace neuron::rt
