// The NEFF cache: an in-memory LRU in front of a disk directory shared by processes
// (TORCH_NEURONX_NEFF_CACHE_DIR, default /tmp/neff_cache). Entries are named by their cache
// key (a hash of IR + compiler version + flags + target profile). Writes are atomic
// (temporary file + rename); processes compiling the same key serialize on a file lock so the
// graph is compiled once; a truncated or corrupted entry fails its checksum, is reported and
// recompiled.
// Thread-safety: all members are safe from any thread.
#pragma once

#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
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

class NeffCache {
 public:
  static NeffCache& instance();

  // The NEFF for `key`: from memory, else from disk, else `compile()` (written to disk).
  std::shared_ptr<const Neff> get(const std::string& key, const std::function<Neff()>& compile,
                                  CacheSource* source, std::string* path = nullptr);
  std::string path_for(const CacheConfig& c, const std::string& key) const;
  void clear_memory();
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
  std::shared_ptr<const Neff> disk_lookup(const std::string& path, size_t* bytes);

  std::mutex mu_;
  std::list<std::string> lru_;  // most recent first
  std::unordered_map<std::string, Entry> map_;
  size_t total_bytes_ = 0;
  std::map<std::string, std::shared_ptr<std::mutex>> key_mu_;
};

}  // namespace neuron::cc
