#include "runtime/runtime.h"

#include <pthread.h>

#include "runtime/env.h"
#include "runtime/error.h"
#include "runtime/internal.h"

namespace neuron::rt {

namespace detail {
std::atomic<bool> g_launch_blocking{false};
std::atomic<bool> g_in_bad_fork{false};
const char* const kBadForkMessage =
    "Cannot re-initialize Neuron runtime in forked subprocess. To use Neuron with "
    "multiprocessing, you must use the 'spawn' start method";
}  // namespace detail

namespace {

std::atomic<Runtime*> g_runtime{nullptr};
std::mutex g_init_mu;
std::once_flag g_atfork_once;

// Held across fork() so the child never inherits it locked by a thread that is not there.
void atfork_prepare() { g_init_mu.lock(); }
void atfork_parent() { g_init_mu.unlock(); }
void atfork_child() {
  g_init_mu.unlock();
  // The parent's stream workers do not exist in the child: the old runtime is leaked, never
  // destroyed (its destructors would join threads that are gone).
  if (g_runtime.load(std::memory_order_relaxed) != nullptr) {
    g_runtime.store(nullptr, std::memory_order_relaxed);
    detail::g_in_bad_fork.store(true, std::memory_order_relaxed);
  }
}

thread_local int tls_device = -1;  // -1: default_device()
thread_local std::vector<Stream*> tls_streams;  // by device index; nullptr = default stream

}  // namespace

// ---- Device -------------------------------------------------------------------------------

Device::Device(const LogicalCore& core)
    : core_(core), allocator_(std::make_unique<HbmAllocator>(core.index, core.hbm_capacity)) {
  streams_.push_back(std::make_unique<Stream>(core.index, 0, 0));
  by_id_[0].store(streams_[0].get(), std::memory_order_release);
  allocator_->set_sync_callback(&Device::sync_streams, this);
}

Device::~Device() {
  // Streams drain (and join) before the allocator goes; they must not call back into us.
  allocator_->set_sync_callback(nullptr, nullptr);
}

void Device::sync_streams(void* self) {
  for (Stream* s : static_cast<Device*>(self)->streams()) s->wait_completed(s->launched());
}

Stream& Device::pool_stream(int priority) {
  const int cls = priority < 0 ? 1 : 0;
  const size_t slot = next_[cls].fetch_add(1, std::memory_order_relaxed) % kPoolSize;
  std::lock_guard<std::mutex> lock(mu_);
  auto& ids = pool_ids_[cls];
  while (ids.size() <= slot) {
    const int64_t id = static_cast<int64_t>(streams_.size());
    streams_.push_back(std::make_unique<Stream>(core_.index, id, cls == 1 ? -1 : 0));
    by_id_[id].store(streams_.back().get(), std::memory_order_release);
    ids.push_back(id);
  }
  return *streams_[ids[slot]];
}

Stream& Device::stream(int64_t id) {
  if (id >= 0 && id < kMaxStreams) {
    if (Stream* s = by_id_[id].load(std::memory_order_acquire)) return *s;
  }
  size_t n;
  {
    std::lock_guard<std::mutex> lock(mu_);
    n = streams_.size();
  }
  throw Error(str("neuron:", core_.index, " has no stream ", id, "; streams 0-", n - 1,
                  " exist (0 is the default stream, pool streams are created on first use)"));
}

std::vector<Stream*> Device::streams() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Stream*> out;
  out.reserve(streams_.size());
  for (auto& s : streams_) out.push_back(s.get());
  return out;
}

void Device::synchronize() {
  detail::check_not_bad_fork();
  const auto all = streams();
  for (Stream* s : all) s->wait_completed(s->launched());
  // Raise the first error only; errors of other streams stay for their next synchronize.
  for (Stream* s : all) s->check_error();
}

// ---- Runtime ------------------------------------------------------------------------------

Runtime::Runtime() : topo_(Topology::from_env(read_topology_env())) {
  launch_blocking_ = getenv_bool("NEURON_LAUNCH_BLOCKING", false);
  devices_.reserve(topo_.visible.size());
  for (const LogicalCore& c : topo_.visible) devices_.push_back(std::make_unique<Device>(c));
  detail::g_launch_blocking.store(launch_blocking_, std::memory_order_relaxed);
}

Runtime& Runtime::get() {
  if (Runtime* r = g_runtime.load(std::memory_order_acquire)) [[likely]]
    return *r;
  detail::check_not_bad_fork();
  std::call_once(g_atfork_once,
                 [] { pthread_atfork(atfork_prepare, atfork_parent, atfork_child); });
  std::lock_guard<std::mutex> lock(g_init_mu);
  if (Runtime* r = g_runtime.load(std::memory_order_acquire)) return *r;
  // A bad environment throws here and leaves nothing behind, so the next call reads the
  // (possibly fixed) environment again. The runtime is never destroyed: tensors freed during
  // interpreter shutdown still need their allocator.
  Runtime* r = new Runtime();
  g_runtime.store(r, std::memory_order_release);
  return *r;
}

bool Runtime::initialized() { return g_runtime.load(std::memory_order_acquire) != nullptr; }

bool Runtime::in_bad_fork() { return detail::g_in_bad_fork.load(std::memory_order_relaxed); }

Device& Runtime::device(int index) {
  const int n = device_count();
  if (index >= 0 && index < n) [[likely]]
    return *devices_[index];
  throw Error(str("neuron:", index, " is not available: this process sees ", n,
                  " logical NeuronCore", n == 1 ? "" : "s", " (neuron:0",
                  n > 1 ? str("-neuron:", n - 1) : std::string(),
                  "); NEURON_RT_VISIBLE_CORES and NEURON_RT_NUM_CORES select them"));
}

void Runtime::synchronize_all() {
  for (auto& d : devices_) {
    for (Stream* s : d->streams()) s->wait_completed(s->launched());
  }
  for (auto& d : devices_) d->synchronize();
}

// ---- Per-thread current device and stream -------------------------------------------------

int default_device() {
  static const bool torchrun = getenv_str("LOCAL_RANK").has_value() && !getenv_str("NEURON_RT_VISIBLE_CORES").has_value();
  if (!torchrun) return 0;
  static const int local = [] {
    const int64_t l = getenv_int("LOCAL_RANK", 0, 0, INT32_MAX);
    return l < Runtime::get().device_count() ? static_cast<int>(l) : 0;
  }();
  return local;
}

int current_device() {
  if (tls_device >= 0) [[likely]]
    return tls_device;
  return default_device();
}

void set_current_device(int index) {
  Runtime::get().device(index);  // validates the index
  tls_device = index;
}

Stream& current_stream(int device) {
  detail::check_not_bad_fork();  // cached pointers would lead into the parent's runtime
  if (device >= 0 && static_cast<size_t>(device) < tls_streams.size()) {
    if (Stream* s = tls_streams[device]) return *s;
  }
  return Runtime::get().device(device).default_stream();
}

void set_current_stream(Stream& s) {
  const int d = s.device();
  NEURON_RT_CHECK(d >= 0, "set_current_stream: stream has no valid device (", d, ")");
  if (tls_streams.size() <= static_cast<size_t>(d)) tls_streams.resize(d + 1, nullptr);
  tls_streams[d] = &s;
}

}  // namespace neuron::rt
