#include "runtime/allocator.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "runtime/error.h"
#include "runtime/internal.h"
#include "runtime/interrupt.h"
#include "runtime/stream.h"

namespace neuron::rt {

namespace {

constexpr size_t kKiB = 1024;
constexpr size_t kMiB = 1024 * kKiB;
constexpr uint64_t kGiB = 1024ull * kMiB;

// Size classes. Small blocks (<= 1 MiB) come from the C heap in 512 B steps; large blocks are
// 2 MiB multiples mapped with mmap, so their pages are committed on first touch and go back
// to the OS on empty_cache().
constexpr size_t kSmallLimit = 1 * kMiB;
constexpr size_t kSmallGranule = 512;
constexpr size_t kLargeGranule = 2 * kMiB;
constexpr size_t kAlignment = 64;

bool done(Stream* s, uint64_t seq) { return s == nullptr || s->completed() >= seq; }

}  // namespace

void Stat::add(int64_t n) {
  current += n;
  peak = std::max(peak, current);
  allocated += n;
}

void Stat::sub(int64_t n) {
  current -= n;
  freed += n;
}

std::string format_bytes(uint64_t bytes) {
  char buf[64];
  if (bytes >= kGiB) {
    std::snprintf(buf, sizeof(buf), "%.2f GiB",
                  static_cast<double>(bytes) / static_cast<double>(kGiB));
  } else if (bytes >= kMiB) {
    std::snprintf(buf, sizeof(buf), "%.2f MiB",
                  static_cast<double>(bytes) / static_cast<double>(kMiB));
  } else if (bytes >= kKiB) {
    std::snprintf(buf, sizeof(buf), "%.2f KiB",
                  static_cast<double>(bytes) / static_cast<double>(kKiB));
  } else {
    std::snprintf(buf, sizeof(buf), "%llu B", static_cast<unsigned long long>(bytes));
  }
  return buf;
}

HbmAllocator::HbmAllocator(int device, uint64_t capacity_bytes)
    : device_(device), capacity_(capacity_bytes) {}

HbmAllocator::~HbmAllocator() {
  // The owner is gone, so every segment goes back, including ones clients still hold.
  for (auto& [ptr, b] : live_) host_free(ptr, b.size);
  for (auto& p : pending_) host_free(p.block.ptr, p.block.size);
  for (auto& [ptr, c] : cached_) host_free(ptr, c.size);
}

size_t HbmAllocator::round_size(size_t bytes) {
  const size_t g = bytes <= kSmallLimit ? kSmallGranule : kLargeGranule;
  return (bytes + g - 1) / g * g;
}

// A cached block serves a request if it is not much bigger: at most 2x for small requests,
// at most max(2 MiB, 1/8 of the request) extra for large ones. Blocks are never split, so a
// looser rule would let one big free block be pinned by a small tensor.
size_t HbmAllocator::max_reuse_size(size_t rounded) {
  if (rounded <= kSmallLimit) return 2 * rounded;
  return rounded + std::max(kLargeGranule, rounded / 8);
}

void* HbmAllocator::host_alloc(size_t size) {
  if (size <= kSmallLimit) return std::aligned_alloc(kAlignment, size);  // size is a 512 multiple
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
#ifdef MADV_HUGEPAGE
  // Tensors this large are streamed through; huge pages cut TLB misses (a hint only).
  madvise(p, size, MADV_HUGEPAGE);
#endif
  return p;
}

void HbmAllocator::host_free(void* ptr, size_t size) {
  if (size <= kSmallLimit)
    std::free(ptr);
  else
    munmap(ptr, size);
}

void* HbmAllocator::make_live_locked(void* ptr, size_t size, size_t bytes, Stream* stream) {
  Block b;
  b.ptr = ptr;
  b.size = size;
  b.requested = bytes;
  b.stream = stream;
  live_.emplace(ptr, std::move(b));
  stats_.allocation.add(1);
  stats_.active.add(1);
  stats_.allocated_bytes.add(static_cast<int64_t>(size));
  stats_.active_bytes.add(static_cast<int64_t>(size));
  stats_.requested_bytes.add(static_cast<int64_t>(bytes));
  return ptr;
}

void HbmAllocator::cache_block_locked(void* ptr, size_t size, Stream* stream, uint64_t free_seq) {
  cached_.emplace(ptr, Cached{size, stream, free_seq});
  try {
    cache_[stream].emplace(size, ptr);
  } catch (...) {
    cached_.erase(ptr);
    throw;
  }
  stats_.active.sub(1);
  stats_.active_bytes.sub(static_cast<int64_t>(size));
}

void HbmAllocator::process_pending_locked() {
  for (size_t i = 0; i < pending_.size();) {
    Pending& p = pending_[i];
    const bool ready = std::all_of(p.waits.begin(), p.waits.end(),
                                   [](const auto& w) { return done(w.first, w.second); });
    if (!ready) {
      ++i;
      continue;
    }
    cache_block_locked(p.block.ptr, p.block.size, p.block.stream, p.free_seq);
    if (i + 1 != pending_.size()) pending_[i] = std::move(pending_.back());
    pending_.pop_back();
  }
}

size_t HbmAllocator::release_cached_locked() {
  size_t in_use = 0;
  for (auto sit = cache_.begin(); sit != cache_.end();) {
    auto& by_size = sit->second;
    for (auto it = by_size.begin(); it != by_size.end();) {
      auto cit = cached_.find(it->second);
      if (!done(cit->second.stream, cit->second.free_seq)) {
        ++in_use;
        ++it;
        continue;
      }
      host_free(it->second, it->first);
      stats_.segment.sub(1);
      stats_.reserved_bytes.sub(static_cast<int64_t>(it->first));
      cached_.erase(cit);
      it = by_size.erase(it);
    }
    sit = by_size.empty() ? cache_.erase(sit) : std::next(sit);
  }
  return in_use;
}

void* HbmAllocator::try_allocate_locked(size_t rounded, size_t bytes, Stream* stream,
                                        bool* host_failed) {
  if (!pending_.empty()) process_pending_locked();

  // Reuse needs no synchronization: earlier work on the same stream runs before later work.
  auto sit = cache_.find(stream);
  if (sit != cache_.end()) {
    auto& by_size = sit->second;
    auto it = by_size.lower_bound(rounded);
    if (it != by_size.end() && it->first <= max_reuse_size(rounded)) {
      void* ptr = it->second;
      const size_t size = it->first;
      make_live_locked(ptr, size, bytes, stream);
      by_size.erase(it);
      cached_.erase(ptr);
      // It was counted inactive while cached; make_live_locked counted it active again.
      return ptr;
    }
  }

  if (static_cast<uint64_t>(stats_.reserved_bytes.current) + rounded > capacity_) return nullptr;
  void* ptr = host_alloc(rounded);
  if (ptr == nullptr) {
    *host_failed = true;
    return nullptr;
  }
  try {
    make_live_locked(ptr, rounded, bytes, stream);
  } catch (...) {
    host_free(ptr, rounded);
    throw;
  }
  stats_.segment.add(1);
  stats_.reserved_bytes.add(static_cast<int64_t>(rounded));
  return ptr;
}

std::string HbmAllocator::oom_message_locked(size_t bytes, bool host_failed) const {
  const uint64_t reserved = static_cast<uint64_t>(stats_.reserved_bytes.current);
  const uint64_t free_bytes = reserved < capacity_ ? capacity_ - reserved : 0;
  return str(
      "neuron:", device_, " out of HBM memory: tried to allocate ", format_bytes(bytes), "; ",
      format_bytes(static_cast<uint64_t>(stats_.allocated_bytes.current)), " of ",
      format_bytes(capacity_), " allocated, ", format_bytes(reserved),
      " reserved by the caching allocator, ", format_bytes(free_bytes), " free",
      host_failed ? ", but the host could not provide the memory (HBM is emulated in host RAM)"
                  : "",
      ". Free tensors or call torch.neuron.empty_cache(); the capacity per logical core is set by "
      "the instance profile (NEURON_EMU_HBM_GB overrides it).");
}

void* HbmAllocator::allocate(size_t bytes, Stream* stream) {
  if (bytes == 0) return nullptr;
  detail::check_not_bad_fork();
  std::unique_lock<std::mutex> lock(mu_);
  bool host_failed = false;
  if (bytes <= capacity_) {
    const size_t rounded = round_size(bytes);
    if (void* p = try_allocate_locked(rounded, bytes, stream, &host_failed)) return p;

    if (!cached_.empty() || !pending_.empty()) {
      // Flush the cache and retry. Cached blocks may still be in use by queued work, so the
      // device is synchronized first -- without our lock, since finishing that work may free
      // memory here. A stream worker must not wait for the device (it might wait for itself);
      // it releases only blocks whose work has already finished.
      auto* fn = sync_fn_;
      void* ctx = sync_ctx_;
      if (fn != nullptr && detail::current_worker_stream() == nullptr) {
        lock.unlock();
        try {
          fn(ctx);
        } catch (const Interrupted&) {
          throw;  // Ctrl-C: the device did not finish, the cached blocks may still be in use
        } catch (...) {
          // Task errors stay pending on their streams and surface at the next synchronize.
        }
        lock.lock();
      }
      ++stats_.num_alloc_retries;
      process_pending_locked();
      release_cached_locked();
      host_failed = false;
      if (void* p = try_allocate_locked(rounded, bytes, stream, &host_failed)) return p;
    }
  }
  ++stats_.num_ooms;
  throw OutOfMemoryError(oom_message_locked(bytes, host_failed));
}

void HbmAllocator::free(void* ptr) {
  if (ptr == nullptr) return;
  // Checked before locking: in a bad-fork child the mutex may be held by a vanished thread.
  if (detail::g_in_bad_fork.load(std::memory_order_relaxed)) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(ptr);
  NEURON_RT_CHECK(it != live_.end(), "neuron:", device_, ": free of pointer ", ptr,
                  " that this allocator did not allocate or that was already freed");
  Block b = std::move(it->second);
  live_.erase(it);
  stats_.allocation.sub(1);
  stats_.allocated_bytes.sub(static_cast<int64_t>(b.size));
  stats_.requested_bytes.sub(static_cast<int64_t>(b.requested));
  const uint64_t free_seq = b.stream ? b.stream->launched() : 0;
  try {
    if (b.extra_streams.empty()) {
      cache_block_locked(b.ptr, b.size, b.stream, free_seq);
      return;
    }
    Pending p;
    p.free_seq = free_seq;
    for (Stream* s : b.extra_streams) p.waits.emplace_back(s, s->launched());
    p.block = std::move(b);
    pending_.push_back(std::move(p));
  } catch (...) {
    // Out of memory for bookkeeping. Queued work may still use the block, so it cannot go
    // back to the host: leak it (it stays counted as reserved and active).
  }
}

void HbmAllocator::record_stream(void* ptr, Stream* stream) {
  if (ptr == nullptr || stream == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(ptr);
  NEURON_RT_CHECK(it != live_.end(), "neuron:", device_, ": record_stream on pointer ", ptr,
                  " that is not a live allocation of this device");
  Block& b = it->second;
  if (stream != b.stream &&
      std::find(b.extra_streams.begin(), b.extra_streams.end(), stream) == b.extra_streams.end()) {
    b.extra_streams.push_back(stream);
  }
}

void HbmAllocator::empty_cache() {
  detail::check_not_bad_fork();
  std::unique_lock<std::mutex> lock(mu_);
  process_pending_locked();
  if (release_cached_locked() == 0) return;
  auto* fn = sync_fn_;
  void* ctx = sync_ctx_;
  if (fn == nullptr || detail::current_worker_stream() != nullptr) return;
  lock.unlock();
  try {
    fn(ctx);
  } catch (const Interrupted&) {
    throw;  // Ctrl-C: the device did not finish, the cached blocks may still be in use
  } catch (...) {
    // Left pending on the streams; raised at their next synchronize.
  }
  lock.lock();
  process_pending_locked();
  release_cached_locked();
}

MemoryStats HbmAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void HbmAllocator::reset_peak_stats() {
  std::lock_guard<std::mutex> lock(mu_);
  for (Stat* s : {&stats_.allocation, &stats_.segment, &stats_.active, &stats_.allocated_bytes,
                  &stats_.reserved_bytes, &stats_.active_bytes, &stats_.requested_bytes}) {
    s->reset_peak();
  }
}

void HbmAllocator::reset_accumulated_stats() {
  std::lock_guard<std::mutex> lock(mu_);
  for (Stat* s : {&stats_.allocation, &stats_.segment, &stats_.active, &stats_.allocated_bytes,
                  &stats_.reserved_bytes, &stats_.active_bytes, &stats_.requested_bytes}) {
    s->reset_accumulated();
  }
  stats_.num_alloc_retries = 0;
  stats_.num_ooms = 0;
}

bool HbmAllocator::owns(const void* ptr) const {
  if (ptr == nullptr) return false;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.upper_bound(const_cast<void*>(ptr));
  if (it == live_.begin()) return false;
  --it;
  const char* base = static_cast<const char*>(it->first);
  return static_cast<const char*>(ptr) < base + it->second.size;
}

void HbmAllocator::set_sync_callback(void (*fn)(void* ctx), void* ctx) {
  std::lock_guard<std::mutex> lock(mu_);
  sync_fn_ = fn;
  sync_ctx_ = ctx;
}

}  // namespace neuron::rt
