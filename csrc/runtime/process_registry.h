// The registry of processes that hold neuron devices, which neuron-ls lists (PID, command,
// cores, HBM in use). Each process whose runtime starts publishes one small shared-memory file
// <dir>/<pid>: who it is and, per visible logical core, live HBM counters that its allocators
// update. The file goes away at exit; an entry left by a process that died (SIGKILL, crash)
// is recognised by pid + start time and removed by whoever lists the registry.
// Directory: NEURON_EMU_REGISTRY_DIR, default /dev/shm/neuron-emu (sticky, shared by users);
// "off" disables the registry.
// Thread-safety: the counters are atomics; list() may run concurrently with registrations.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace neuron::rt {

struct LogicalCore;

namespace registry {

// What one process holds on one logical core.
struct CoreUsage {
  int global_id = 0;       // NEURON_RT_VISIBLE_CORES numbering
  int device = 0;          // Neuron device (chip)
  bool used = false;       // memory has been allocated on it
  uint64_t reserved = 0;   // bytes of HBM held (in use + cached by the caching allocator)
  uint64_t allocated = 0;  // bytes of HBM in live tensors
};

struct ProcessEntry {
  int pid = 0;
  std::string command;          // /proc/<pid>/cmdline, space-separated
  std::string runtime_version;  // kRuntimeVersion of the registering runtime
  std::string instance_type;
  std::vector<CoreUsage> cores;  // the process's visible cores
};

constexpr const char* kRuntimeVersion = "neuron-emu";

// The registry directory (NEURON_EMU_REGISTRY_DIR or the default; empty when "off").
std::string directory();

// This process's entry, alive until the process exits. Counters are updated through
// slot(); an empty registration (the registry could not be written) ignores updates.
class Registration {
 public:
  // Publishes the entry; on failure writes one line to stderr and stays empty.
  static Registration* create(const std::string& instance_type, const std::vector<LogicalCore>& cores);
  // The counters of the process-local core `index` (neuron:<index>), or nullptr.
  uint64_t* reserved_counter(int index);
  uint64_t* allocated_counter(int index);
  uint32_t* used_flag(int index);
  // Removes the file (also done at exit by the process that created it).
  void remove();

 private:
  Registration() = default;
  struct Mapped;
  Mapped* map_ = nullptr;
  std::string path_;
  int owner_pid_ = 0;
};

// Every live entry of the registry, by pid; removes stale entries when `cleanup`.
std::vector<ProcessEntry> list(bool cleanup = true);
// Same for another directory (tests).
std::vector<ProcessEntry> list_dir(const std::string& dir, bool cleanup);

// Publishes an entry for `pid` in `dir` with the given start time (tests: fake stale entries).
bool write_entry_for_test(const std::string& dir, int pid, uint64_t start_time, const std::string& command);

// The start time of `pid` (clock ticks since boot, /proc/<pid>/stat field 22), 0 if unknown.
uint64_t process_start_time(int pid);

}  // namespace registry
}  // namespace neuron::rt
