// Device allocator: a thin c10::DeviceAllocator over rt::HbmAllocator. The deleter cannot carry
// the device in its context (the context is the pointer), so there is one deleter function per
// device index, generated at compile time.
#include "NeuronAllocator.h"

#include <c10/core/CachingDeviceAllocator.h>

#include <array>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <map>
#include <utility>
#include <vector>

#include "Common.h"

namespace neuron::torch_glue {
namespace {

constexpr int kMaxDevices = 128;  // trn2.48xlarge with LNC 1

template <int D>
void delete_on_device(void* ptr) {
  if (ptr == nullptr || rt::Runtime::in_bad_fork()) return;  // inherited memory: leak it
  rt::Runtime::get().device(D).allocator().free(ptr);
}

template <size_t... I>
constexpr std::array<c10::DeleterFnPtr, sizeof...(I)> make_deleters(std::index_sequence<I...>) {
  return {&delete_on_device<static_cast<int>(I)>...};
}
constexpr auto kDeleters = make_deleters(std::make_index_sequence<kMaxDevices>{});

void fill_stat(c10::CachingDeviceAllocator::StatArray& out, const rt::Stat& s) {
  auto& a = out[static_cast<size_t>(c10::CachingDeviceAllocator::StatType::AGGREGATE)];
  a.current = s.current;
  a.peak = s.peak;
  a.allocated = s.allocated;
  a.freed = s.freed;
}

class NeuronDeviceAllocator final : public c10::DeviceAllocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    const int d = rt::current_device();
    TORCH_CHECK(d < kMaxDevices, "neuron: device index ", d, " exceeds ", kMaxDevices);
    rt::Device& dev = rt_device(static_cast<c10::DeviceIndex>(d));
    void* p = nullptr;
    if (nbytes > 0) {
      p = translate_errors([&] { return dev.allocator().allocate(nbytes, &rt::current_stream(d)); });
    }
    return {p, p, kDeleters[static_cast<size_t>(d)],
            c10::Device(kNeuron, static_cast<c10::DeviceIndex>(d))};
  }

  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    // Storage-level copies (e.g. Storage.clone) must be ordered with queued work.
    if (count == 0) return;
    const int d = rt::current_device();
    launch(static_cast<c10::DeviceIndex>(d), "neuron::copy_data",
           [dest, src, count] { std::memcpy(dest, src, count); });
  }

  bool initialized() override { return rt::Runtime::initialized(); }

  void emptyCache(c10::MempoolId_t) override {
    if (!rt::Runtime::initialized()) return;
    translate_errors([] {
      auto& runtime = rt::Runtime::get();
      for (int i = 0; i < runtime.device_count(); ++i) {
        runtime.device(i).synchronize();
        runtime.device(i).allocator().empty_cache();
      }
    });
  }

  void recordStream(const c10::DataPtr& ptr, c10::Stream stream) override {
    if (!ptr.get()) return;
    translate_errors([&] {
      rt::Device& dev = rt::Runtime::get().device(ptr.device().index());
      dev.allocator().record_stream(ptr.get(), &dev.stream(stream.id()));
    });
  }

  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    c10::CachingDeviceAllocator::DeviceStats out;
    const rt::MemoryStats s = rt_device(device).allocator().stats();
    fill_stat(out.allocation, s.allocation);
    fill_stat(out.segment, s.segment);
    fill_stat(out.active, s.active);
    fill_stat(out.allocated_bytes, s.allocated_bytes);
    fill_stat(out.reserved_bytes, s.reserved_bytes);
    fill_stat(out.active_bytes, s.active_bytes);
    fill_stat(out.requested_bytes, s.requested_bytes);
    out.num_alloc_retries = s.num_alloc_retries;
    out.num_ooms = s.num_ooms;
    return out;
  }

  void resetAccumulatedStats(c10::DeviceIndex device) override {
    rt_device(device).allocator().reset_accumulated_stats();
  }
  void resetPeakStats(c10::DeviceIndex device) override {
    rt_device(device).allocator().reset_peak_stats();
  }
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    auto& alloc = rt_device(device).allocator();
    const uint64_t total = alloc.capacity();
    const auto reserved = static_cast<uint64_t>(alloc.stats().reserved_bytes.current);
    return {static_cast<size_t>(total > reserved ? total - reserved : 0), static_cast<size_t>(total)};
  }
};

NeuronDeviceAllocator g_device_allocator;

// Pinned host memory: page-aligned host allocations remembered so is_pinned() can answer
// (also for pointers inside a block). Asynchronous host<->device copies use only these; a
// pinned block freed while such a copy is still queued is released once the copy has run.
class NeuronHostAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    void* p = nullptr;
    if (nbytes > 0) {
      TORCH_CHECK(posix_memalign(&p, 4096, nbytes) == 0, "neuron: pinned host allocation of ",
                  nbytes, " bytes failed");
      std::lock_guard<std::mutex> g(mu_);
      release_finished_locked();
      live_[static_cast<char*>(p)] = Block{nbytes, {}};
    }
    return {p, p, &NeuronHostAllocator::release, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &NeuronHostAllocator::release; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
  bool contains(const void* p) {
    std::lock_guard<std::mutex> g(mu_);
    return find_locked(p) != live_.end();
  }
  void record_use(const void* p, rt::Stream& stream, uint64_t seq) {
    std::lock_guard<std::mutex> g(mu_);
    auto it = find_locked(p);
    if (it != live_.end()) it->second.uses.emplace_back(&stream, seq);
  }
  void release_block(void* p) {
    std::lock_guard<std::mutex> g(mu_);
    auto it = live_.find(static_cast<char*>(p));
    if (it == live_.end()) return;
    Block b = std::move(it->second);
    live_.erase(it);
    if (finished(b)) {
      std::free(p);
    } else {
      deferred_.emplace_back(p, std::move(b));
    }
    release_finished_locked();
  }

 private:
  struct Block {
    size_t size;
    std::vector<std::pair<rt::Stream*, uint64_t>> uses;
  };
  static bool finished(const Block& b) {
    for (const auto& [stream, seq] : b.uses)
      if (stream->completed() < seq) return false;
    return true;
  }
  void release_finished_locked() {
    for (size_t i = 0; i < deferred_.size();) {
      if (finished(deferred_[i].second)) {
        std::free(deferred_[i].first);
        deferred_[i] = std::move(deferred_.back());
        deferred_.pop_back();
      } else {
        ++i;
      }
    }
  }
  std::map<char*, Block>::iterator find_locked(const void* p) {
    char* c = static_cast<char*>(const_cast<void*>(p));
    auto it = live_.upper_bound(c);
    if (it == live_.begin()) return live_.end();
    --it;
    return (c < it->first + it->second.size) ? it : live_.end();
  }
  static void release(void* p);
  std::mutex mu_;
  std::map<char*, Block> live_;
  std::vector<std::pair<void*, Block>> deferred_;
};

NeuronHostAllocator g_host_allocator;

void NeuronHostAllocator::release(void* p) {
  if (p) g_host_allocator.release_block(p);
}

}  // namespace

c10::Allocator* device_allocator() { return &g_device_allocator; }
c10::Allocator* host_allocator() { return &g_host_allocator; }

bool is_pinned_ptr(const void* p) { return p != nullptr && g_host_allocator.contains(p); }

void record_pinned_use(const void* p, rt::Stream& stream, uint64_t seq) {
  g_host_allocator.record_use(p, stream, seq);
}

REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &g_device_allocator)

}  // namespace neuron::torch_glue
