#include "cache.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>

#include "error.h"
#include "metrics.h"
#include "runtime/cache_file.h"
#include "runtime/env.h"

namespace neuron::cc {

namespace fs = std::filesystem;

CacheConfig CacheConfig::from_env() {
  CacheConfig c;
  if (auto d = rt::getenv_str("TORCH_NEURONX_NEFF_CACHE_DIR"); d && !d->empty()) c.dir = *d;
  if (rt::getenv_bool("TORCH_NEURONX_DISABLE_NEFF_CACHE", false) ||
      rt::getenv_bool("TORCH_NEURONX_NEFF_DISABLE_CACHE", false))
    c.disk = false;
  c.max_entries = static_cast<size_t>(
      rt::getenv_int("NEURON_COMPILATION_CACHE_MAX_ENTRIES", 0, 0, int64_t{1} << 40));
  c.max_bytes = static_cast<size_t>(
                    rt::getenv_int("NEURON_COMPILATION_CACHE_MAX_SIZE_MB", 0, 0, int64_t{1} << 30))
                << 20;
  c.lock_timeout_s =
      static_cast<double>(rt::getenv_int("TORCH_NEURONX_NEFF_CACHE_LOCK_TIMEOUT", 600, 0, 86400));
  return c;
}

NeffCache& NeffCache::instance() {
  static NeffCache* c = new NeffCache();  // never destroyed: used until process exit
  return *c;
}

std::string NeffCache::path_for(const CacheConfig& c, const std::string& key) const {
  if (!rt::is_cache_key(key))
    throw CompileError(rt::str("NEFF cache key '", key,
                               "' is not a hex digest: refusing to use it as a file name under ",
                               c.dir));
  return rt::cache_entry_path(c.dir, key, ".neff");
}

void NeffCache::clear_memory() {
  std::lock_guard<std::mutex> lock(mu_);
  rejected_.clear();
  map_.clear();
  lru_.clear();
  total_bytes_ = 0;
}

size_t NeffCache::memory_entries() {
  std::lock_guard<std::mutex> lock(mu_);
  return map_.size();
}

std::shared_ptr<const Neff> NeffCache::memory_lookup(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = map_.find(key);
  if (it == map_.end()) return nullptr;
  lru_.erase(it->second.pos);
  lru_.push_front(key);
  it->second.pos = lru_.begin();
  return it->second.neff;
}

void NeffCache::memory_insert(const CacheConfig& c, const std::string& key,
                              std::shared_ptr<const Neff> n, size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = map_.find(key);
  if (it != map_.end()) {
    total_bytes_ -= it->second.bytes;
    lru_.erase(it->second.pos);
    map_.erase(it);
  }
  lru_.push_front(key);
  map_[key] = Entry{std::move(n), bytes, lru_.begin()};
  total_bytes_ += bytes;
  while (map_.size() > 1 && ((c.max_entries && map_.size() > c.max_entries) ||
                             (c.max_bytes && total_bytes_ > c.max_bytes))) {
    const std::string victim = lru_.back();
    lru_.pop_back();
    total_bytes_ -= map_[victim].bytes;
    map_.erase(victim);
  }
}

namespace {

// Why `n` is not the NEFF a lookup asked for, or "" when it is.
std::string mismatch(const Neff& n, const std::string& key, const EntryCheck& check) {
  auto meta = [&](const char* k) {
    auto it = n.metadata.find(k);
    return it == n.metadata.end() ? std::string("<none>") : it->second;
  };
  if (meta("cache_key") != key)
    return rt::str("it holds the NEFF of cache_key ", meta("cache_key"), " (graph '",
                   meta("graph"), "')");
  if (!check.graph_hash.empty() && meta("graph_hash") != check.graph_hash)
    return rt::str("its graph hash ", meta("graph_hash"), " is not the graph's ",
                   check.graph_hash);
  if (check.target && !(n.target == *check.target))
    return rt::str("it was compiled for ", n.target.str(), ", this process runs ",
                   check.target->str());
  auto sig = [](const std::vector<IOSpec>& have, const std::vector<IOSpec>& want, bool strides) {
    if (have.size() != want.size()) return false;
    for (size_t i = 0; i < have.size(); ++i)
      if (have[i].dtype != want[i].dtype || have[i].shape != want[i].shape ||
          (strides && !want[i].strides.empty() && have[i].strides != want[i].strides))
        return false;
    return true;
  };
  if (check.inputs && !sig(n.program.inputs, *check.inputs, true))
    return "its input signature differs from the graph's";
  if (check.outputs && !sig(n.program.outputs, *check.outputs, false))
    return "its output signature differs from the graph's";
  return "";
}

}  // namespace

std::shared_ptr<const Neff> NeffCache::disk_lookup(const std::string& path,
                                                   const std::string& key,
                                                   const EntryCheck& check, size_t* bytes) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<uint8_t> data;
  std::string why;
  const rt::ReadStatus st = rt::read_file(path, &data, &why);
  if (st == rt::ReadStatus::Missing) return nullptr;
  bool is_file = st == rt::ReadStatus::Ok;
  if (is_file) {
    try {
      auto n = std::make_shared<const Neff>(read_neff(data.data(), data.size(), path));
      why = mismatch(*n, key, check);
      if (why.empty()) {
        *bytes = data.size();
        add_seconds("cache_load_seconds",
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        return n;
      }
      why = rt::str(path, ": ", why);
    } catch (const NeffError& e) {
      why = e.what();
    }
  }
  bool first;
  {
    std::lock_guard<std::mutex> lock(mu_);
    first = rejected_.insert(path).second;
  }
  if (first) {
    add_metric("cache_corrupted", 1);
    push_warning(rt::str("NEFF cache entry rejected and recompiled: ", why));
  }
  std::error_code ec;
  if (is_file) fs::remove(path, ec);
  return nullptr;
}

namespace {

// An exclusive advisory lock on a file (released by the destructor).
class FileLock {
 public:
  FileLock(const std::string& path, double timeout_s, bool* waited) {
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd_ < 0) {
      error_ = std::strerror(errno);
      return;
    }
    if (::flock(fd_, LOCK_EX | LOCK_NB) == 0) {
      locked_ = true;
      return;
    }
    *waited = true;
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    while (std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      if (::flock(fd_, LOCK_EX | LOCK_NB) == 0) {
        locked_ = true;
        return;
      }
    }
  }
  ~FileLock() {
    if (fd_ >= 0) {
      if (locked_) ::flock(fd_, LOCK_UN);
      ::close(fd_);
    }
  }
  bool locked() const { return locked_; }
  // Why the lock file could not be opened ("" when it was: then a timeout kept us out).
  const std::string& error() const { return error_; }

 private:
  std::string error_;
  int fd_ = -1;
  bool locked_ = false;
};

}  // namespace

std::shared_ptr<const Neff> NeffCache::get(const std::string& key,
                                           const std::function<Neff()>& compile,
                                           CacheSource* source, std::string* path_out,
                                           const EntryCheck& check) {
  const CacheConfig cfg = CacheConfig::from_env();
  const std::string path = path_for(cfg, key);  // validates the key before any file is named
  if (auto n = memory_lookup(key)) {
    add_metric("cache_hits_memory", 1);
    if (source) *source = CacheSource::Memory;
    return n;
  }
  // One compile per key per process even when threads race.
  std::shared_ptr<std::mutex> kmu;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto& slot = key_mu_[key];
    if (!slot) slot = std::make_shared<std::mutex>();
    kmu = slot;
  }
  std::lock_guard<std::mutex> klock(*kmu);
  if (auto n = memory_lookup(key)) {
    add_metric("cache_hits_memory", 1);
    if (source) *source = CacheSource::Memory;
    return n;
  }
  if (path_out) *path_out = cfg.disk ? path : "";
  auto compile_and_store = [&](bool write) -> std::shared_ptr<const Neff> {
    add_metric("cache_misses", 1);
    const auto t0 = std::chrono::steady_clock::now();
    Neff n = compile();
    n.metadata["cache_key"] = key;
    const std::vector<uint8_t> bytes = write_neff(n);
    add_seconds("compile_seconds",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    add_metric("graphs_compiled", 1);
    if (write) {
      std::string why;
      if (rt::write_file_atomic(path, bytes.data(), bytes.size(), &why)) {
        add_metric("cache_writes", 1);
      } else {
        push_warning(rt::str("could not write the NEFF cache entry ", path, ": ", why));
        if (path_out) path_out->clear();
      }
    }
    auto sp = std::make_shared<const Neff>(std::move(n));
    memory_insert(cfg, key, sp, bytes.size());
    if (source) *source = CacheSource::Compiled;
    return sp;
  };
  if (!cfg.disk) return compile_and_store(false);
  size_t bytes = 0;
  if (auto n = disk_lookup(path, key, check, &bytes)) {
    add_metric("cache_hits_disk", 1);
    memory_insert(cfg, key, n, bytes);
    if (source) *source = CacheSource::Disk;
    return n;
  }
  std::error_code ec;
  fs::create_directories(cfg.dir + "/.locks", ec);
  if (ec) {
    push_warning(rt::str("NEFF cache directory ", cfg.dir, " is not usable (", ec.message(),
                         "); caching in memory only"));
    return compile_and_store(false);
  }
  bool waited = false;
  FileLock lock(cfg.dir + "/.locks/" + key + ".lock", cfg.lock_timeout_s, &waited);
  if (waited) add_metric("cache_lock_waits", 1);
  if (!lock.locked())
    push_warning(lock.error().empty()
                     ? rt::str("could not lock the NEFF cache entry for ", key, " within ",
                               cfg.lock_timeout_s, " s; compiling anyway")
                     : rt::str("could not open the NEFF cache lock file for ", key, " in ",
                               cfg.dir, "/.locks (", lock.error(), "); compiling anyway"));
  if (auto n = disk_lookup(path, key, check, &bytes)) {  // compiled by the process we waited for
    add_metric("cache_hits_disk", 1);
    memory_insert(cfg, key, n, bytes);
    if (source) *source = CacheSource::Disk;
    return n;
  }
  return compile_and_store(true);
}

}  // namespace neuron::cc
