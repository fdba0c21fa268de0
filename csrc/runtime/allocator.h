// Caching allocator for one logical core's HBM pool (backed by host memory). Blocks are cached
// per stream after free and reused by later allocations on the same stream without a sync,
// because a stream runs in order. A block used on other streams (record_stream) returns to
// the cache only once those streams have passed the point of the free.
// Thread-safety: all members are safe to call from any thread (one mutex per allocator).
// Never calls Python; safe to call from tensor destructors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

namespace neuron::rt {

class Stream;

struct Stat {
  int64_t current = 0;
  int64_t peak = 0;
  int64_t allocated = 0;  // accumulated increments
  int64_t freed = 0;      // accumulated decrements
  void add(int64_t n);
  void sub(int64_t n);
  void reset_peak() { peak = current; }
  void reset_accumulated() { allocated = freed = 0; }
};

struct MemoryStats {
  Stat allocation;       // count of live client allocations
  Stat segment;          // count of host segments backing the pool
  Stat active;           // count of blocks in use or waiting on other streams
  Stat allocated_bytes;  // bytes of live client allocations (rounded block sizes)
  Stat reserved_bytes;   // bytes of all segments (in use + cached)
  Stat active_bytes;     // bytes of active blocks
  Stat requested_bytes;  // bytes requested by clients (unrounded)
  int64_t num_alloc_retries = 0;  // cache flushes needed to satisfy an allocation
  int64_t num_ooms = 0;
};

class HbmAllocator {
 public:
  // `device` is the process-local core index used in messages ("neuron:1").
  HbmAllocator(int device, uint64_t capacity_bytes);
  ~HbmAllocator();
  HbmAllocator(const HbmAllocator&) = delete;
  HbmAllocator& operator=(const HbmAllocator&) = delete;

  // Returns 64-byte aligned memory of at least `bytes` for use on `stream`; 0 bytes returns
  // nullptr. When the pool is full, flushes the cache (after synchronizing the device's
  // streams via the sync callback) and retries; then throws OutOfMemoryError:
  //   "neuron:1 out of HBM memory: tried to allocate 2.00 GiB; 23.10 GiB of 24.00 GiB
  //    allocated, 23.50 GiB reserved by the caching allocator, 0.50 GiB free. ..."
  void* allocate(size_t bytes, Stream* stream);
  // Returns a block from allocate(). Unknown pointers throw Error. In a forked child of a
  // process whose runtime had started, this is a silent no-op (inherited tensors die there).
  void free(void* ptr);
  // Marks that `ptr` is also used by work on `stream`.
  void record_stream(void* ptr, Stream* stream);
  // Releases every cached (free) block back to the host. Blocks still used by queued work
  // are released after synchronizing the device through the sync callback.
  void empty_cache();

  MemoryStats stats() const;
  void reset_peak_stats();
  void reset_accumulated_stats();
  uint64_t capacity() const { return capacity_; }
  // True if `ptr` points into a live block of this allocator.
  bool owns(const void* ptr) const;

  // Called (without the allocator lock held) before a cache flush; the device installs a
  // function that synchronizes all its streams.
  void set_sync_callback(void (*fn)(void* ctx), void* ctx);

  // Mirrors the reserved and allocated byte counts into `reserved` / `allocated` and sets
  // `*used` at the first allocation (the process registry's shared counters, read by
  // neuron-ls). Any pointer may be null.
  void set_usage_mirror(uint64_t* reserved, uint64_t* allocated, uint32_t* used);

 private:
  struct Block {
    void* ptr = nullptr;
    size_t size = 0;        // rounded size (the segment size)
    size_t requested = 0;
    Stream* stream = nullptr;
    std::vector<Stream*> extra_streams;  // other streams that use it (record_stream)
  };
  // A freed block that other streams may still be using: it waits until each listed stream
  // has completed the task that was its last one at the time of the free.
  struct Pending {
    Block block;
    uint64_t free_seq = 0;  // block.stream->launched() at the free
    std::vector<std::pair<Stream*, uint64_t>> waits;
  };
  // A free block kept for reuse on `stream`. Work launched on `stream` before the free may
  // still use it, so it goes back to the host only once `stream` has completed `free_seq`.
  struct Cached {
    size_t size = 0;
    Stream* stream = nullptr;
    uint64_t free_seq = 0;
  };
  void* try_allocate_locked(size_t rounded, size_t bytes, Stream* stream, bool* host_failed);
  void* make_live_locked(void* ptr, size_t size, size_t bytes, Stream* stream);
  void cache_block_locked(void* ptr, size_t size, Stream* stream, uint64_t free_seq);
  void process_pending_locked();
  // Returns to the host every cached block whose last use has completed; returns how many
  // cached blocks are still in use by queued work.
  size_t release_cached_locked();
  std::string oom_message_locked(size_t bytes, bool host_failed) const;
  static size_t round_size(size_t bytes);
  static size_t max_reuse_size(size_t rounded);
  static void* host_alloc(size_t size);
  static void host_free(void* ptr, size_t size);
  void publish_usage_locked();

  const int device_;
  const uint64_t capacity_;
  mutable std::mutex mu_;
  std::map<void*, Block> live_;                     // allocated to clients, by address
  std::vector<Pending> pending_;                    // freed, waiting on other streams
  std::map<Stream*, std::multimap<size_t, void*>> cache_;  // free blocks by stream, by size
  std::unordered_map<void*, Cached> cached_;
  MemoryStats stats_;
  void (*sync_fn_)(void*) = nullptr;
  void* sync_ctx_ = nullptr;
  uint64_t* mirror_reserved_ = nullptr;
  uint64_t* mirror_allocated_ = nullptr;
  uint32_t* mirror_used_ = nullptr;
};

// Formats a byte count as "2.00 GiB" / "512.00 MiB" / "12.00 KiB" / "100 B".
std::string format_bytes(uint64_t bytes);

}  // namespace neuron::rt
