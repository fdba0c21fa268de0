// The NEFF cache: an in-memory LRU in front of a disk directory shared by processes
// (TORCH_NEURONX_NEFF_CACHE_DIR, default /tmp/neff_cache). Entries are named by their cache
// key (a hex hash of IR + compiler version + flags + target profile; see driver.h). Writes are
// atomic (runtime/cache_file.h); processes compiling the same key serialize on a file lock so
// the graph is compiled once. A disk entry is used only when it is whole (checksum) and is the
// NEFF of this key: its embedded cache_key, and when the caller knows them its graph hash,
// target and I/O signature, must match. Anything else (truncated, damaged, another graph's
// NEFF under this name, a directory in the way) is counted once as `cache_corrupted`, reported
// and recompiled.
// Thread-safety: all members are safe from any thread.
#pragma once

#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>

#include "neff.h"

namespace neuron::cc {

struct CacheConfig {
  std::string dir = "/tmp/neff_cache";
  bool disk = true;
  size_t max_entries = 0;  // 0: unbounded (the real stack's default)
  size_t max_bytes = 0;
  double lock_timeout_s = 600;
  // TORCH_NEURONX_NEFF_CACHE_DIR, TORCH_NEURONX_DISABLE_NEFF_CACHE (or
  // TORCH_NEURONX_NEFF_DISABLE_CACHE), NEURON_COMPILATION_CACHE_MAX_ENTRIES,
  // NEURON_COMPILATION_CACHE_MAX_SIZE_MB, TORCH_NEURONX_NEFF_CACHE_LOCK_TIMEOUT.
  static CacheConfig from_env();
};

enum class CacheSource { Memory, Disk, Compiled };

// What a disk entry must match besides its embedded key (empty / null: not checked).
struct EntryCheck {
  std::string graph_hash;
  const TargetProfile* target = nullptr;
  const std::vector<IOSpec>* inputs = nullptr;  // dtype, shape, strides
  const std::vector<IOSpec>* outputs = nullptr;  // dtype, shape
};

class NeffCache {
 public:
  static NeffCache& instance();

  // The NEFF for `key`: from memory, else from disk, else `compile()` (written to disk, with
  // metadata cache_key = key). Throws CompileError when `key` is not a hex cache key.
  std::shared_ptr<const Neff> get(const std::string& key, const std::function<Neff()>& compile,
                                  CacheSource* source, std::string* path = nullptr,
                                  const EntryCheck& check = {});
  // Throws CompileError when `key` is not a hex cache key.
  std::string path_for(const CacheConfig& c, const std::string& key) const;
  void clear_memory();  // also forgets which entries were reported
  size_t memory_entries();

 private:
  struct Entry {
    std::shared_ptr<const Neff> neff;
    size_t bytes = 0;
    std::list<std::string>::iterator pos;
  };
  std::shared_ptr<const Neff> memory_lookup(const std::string& key);
  void memory_insert(const CacheConfig& c, const std::string& key, std::shared_ptr<const Neff> n,
                     size_t bytes);
  // The valid entry at `path`, or null. A rejected entry is reported and counted once per
  // process (however often it is looked at) and removed when it is a file.
  std::shared_ptr<const Neff> disk_lookup(const std::string& path, const std::string& key,
                                          const EntryCheck& check, size_t* bytes);

  std::mutex mu_;
  std::list<std::string> lru_;  // most recent first
  std::unordered_map<std::string, Entry> map_;
  size_t total_bytes_ = 0;
  std::map<std::string, std::shared_ptr<std::mutex>> key_mu_;
  std::set<std::string> rejected_;  // entry paths already reported
};

}  // namespace neuron::cc
