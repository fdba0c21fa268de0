#include "runtime/stream.h"

#include <chrono>
#include <unordered_set>

#include "runtime/device_clock.h"
#include "runtime/error.h"
#include "runtime/internal.h"
#include "runtime/interrupt.h"
#include "runtime/trace.h"

namespace neuron::rt {

namespace {

thread_local Stream* tls_worker_stream = nullptr;

// How long a worker (or a host waiter) spins before it sleeps. Long enough to cover the gap
// between back-to-back launches and a short task (a warm NKI launch: ~10 us of Python between
// calls plus its task), since a futex wake-up costs ~20 us on a VM (a warm 3-instruction NKI
// call + synchronize: 66 us with 4 us of spin, 13-14 us with 30 us, benchmarks/nki_bench.py);
// short enough not to steal a core for long on a 2-core host.
constexpr int64_t kSpinNs = 30000;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#else
  std::this_thread::yield();
#endif
}

// Spins until pred() or kSpinNs elapse; reads the clock only every 32 pauses.
template <typename Pred>
bool spin_until(Pred pred) {
  int64_t deadline = 0;
  for (int i = 1;; ++i) {
    if (pred()) return true;
    cpu_relax();
    if ((i & 31) == 0) {
      const int64_t t = now_ns();
      if (deadline == 0)
        deadline = t + kSpinNs;
      else if (t >= deadline)
        return pred();
    }
  }
}

}  // namespace

namespace detail {
Stream* current_worker_stream() { return tls_worker_stream; }
}  // namespace detail

const char* intern(const std::string& s) {
  static std::mutex* mu = new std::mutex();
  static auto* strings = new std::unordered_set<std::string>();  // leaked: names outlive exit
  std::lock_guard<std::mutex> lock(*mu);
  return strings->insert(s).first->c_str();
}

Stream::Stream(int device, int64_t id, int priority)
    : device_(device), id_(id), priority_(priority) {}

Stream::~Stream() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_one();
  // The worker drains the queue before it sees stop_.
  if (worker_.joinable()) worker_.join();
}

void Stream::ensure_worker() {
  if (!worker_.joinable()) worker_ = std::thread([this] { worker_loop(); });
}

uint64_t Stream::enqueue(const char* name, TaskFn fn, double est_ns) {
  uint64_t seq;
  bool wake;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ensure_worker();
    // Placed under the lock so the estimated timeline follows queue order.
    const DeviceClock::Placed at = DeviceClock::get().launch(device_, est_ns);
    est_end_.store(at.end_ns, std::memory_order_relaxed);
    // Numbered under the lock so sequence numbers follow queue order.
    seq = launched_.load(std::memory_order_relaxed) + 1;
    const int64_t launched_at = Tracer::get().enabled() ? now_ns() : 0;
    queue_.push_back(Task{name, std::move(fn), seq, launched_at, at.start_ns, at.end_ns});
    launched_.store(seq, std::memory_order_release);
    wake = sleeping_;
  }
  if (wake) cv_.notify_one();
  return seq;
}

void Stream::launch(const char* name, TaskFn fn, double est_ns) {
  if (has_error_.load(std::memory_order_relaxed)) [[unlikely]]
    check_error();
  detail::check_not_bad_fork();
  const uint64_t seq = enqueue(name, std::move(fn), est_ns);
  if (detail::g_launch_blocking.load(std::memory_order_relaxed)) [[unlikely]] {
    // A task launching onto its own stream cannot wait for itself; it stays asynchronous.
    if (detail::current_worker_stream() != this) {
      wait_completed(seq);
      check_error();
    }
  }
}

void Stream::worker_loop() {
  tls_worker_stream = this;
  std::deque<Task> batch;
  uint64_t taken = 0;
  for (;;) {
    spin_until([&] { return launched_.load(std::memory_order_acquire) != taken; });
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (queue_.empty()) {
        if (stop_) return;
        sleeping_ = true;
        cv_.wait(lock, [&] { return !queue_.empty() || stop_; });
        sleeping_ = false;
        if (queue_.empty()) return;
      }
      // Take everything queued at once: one lock round trip per batch, not per task.
      batch.swap(queue_);
    }
    taken += batch.size();
    for (Task& t : batch) run_task(t);
    batch.clear();
  }
}

void Stream::run_task(Task& t) {
  const bool tracing = Tracer::get().enabled();
  const int64_t start = tracing ? now_ns() : 0;
  try {
    t.fn();
  } catch (...) {
    set_error(t.name, std::current_exception());
  }
  // Release what the task captured (buffers, events) before the host can see it finished.
  try {
    t.fn = nullptr;
  } catch (...) {
    set_error(t.name, std::current_exception());
  }
  if (tracing)
    Tracer::get().record(
        TraceEvent{t.name, device_, id_, start, now_ns(), t.seq, t.launch_ns, t.est_start, t.est_end});
  completed_.fetch_add(1, std::memory_order_seq_cst);
  // Pairs with the waiters_ increment in wait_completed(): either the waiter sees the new
  // count, or we see the waiter and wake it under done_mu_.
  if (waiters_.load(std::memory_order_seq_cst) > 0) {
    std::lock_guard<std::mutex> lock(done_mu_);
    done_cv_.notify_all();
  }
}

void Stream::set_error(const char* name, std::exception_ptr e) {
  std::string what;
  int kind = 0;  // 0: Error, 1: OutOfMemoryError, 2: ConfigError
  try {
    std::rethrow_exception(e);
  } catch (const OutOfMemoryError& x) {
    what = x.what();
    kind = 1;
  } catch (const ConfigError& x) {
    what = x.what();
    kind = 2;
  } catch (const std::exception& x) {
    what = x.what();
  } catch (...) {
    what = "unknown exception";
  }
  const std::string msg =
      str(name ? name : "task", " failed on neuron:", device_, " (stream ", id_, "): ", what);
  std::exception_ptr wrapped = kind == 1   ? std::make_exception_ptr(OutOfMemoryError(msg))
                               : kind == 2 ? std::make_exception_ptr(ConfigError(msg))
                                           : std::make_exception_ptr(Error(msg));
  std::lock_guard<std::mutex> lock(err_mu_);
  if (!error_) error_ = std::move(wrapped);  // the first failure is the one to report
  has_error_.store(true, std::memory_order_release);
}

void Stream::check_error() {
  if (!has_error_.load(std::memory_order_acquire)) return;
  std::exception_ptr e;
  {
    std::lock_guard<std::mutex> lock(err_mu_);
    e = std::move(error_);
    error_ = nullptr;
    has_error_.store(false, std::memory_order_release);
  }
  if (e) std::rethrow_exception(e);
}

void Stream::wait_completed(uint64_t seq) const {
  // A host wait ends on the estimated clock when the estimated device is done, even when this
  // machine already finished the work. Waits of stream workers are device-side.
  if (detail::current_worker_stream() == nullptr) {
    DeviceClock& clock = DeviceClock::get();
    clock.host_wait_begin();
    struct End {
      DeviceClock& c;
      int64_t until;
      ~End() { c.host_wait_end(until); }
    } end{clock, est_end_.load(std::memory_order_relaxed)};
    wait_completed_impl(seq);
    return;
  }
  wait_completed_impl(seq);
}

void Stream::wait_completed_impl(uint64_t seq) const {
  if (completed_.load(std::memory_order_acquire) >= seq) return;
  detail::check_not_bad_fork();
  NEURON_RT_CHECK(detail::current_worker_stream() != this, "a task on neuron:", device_,
                  " (stream ", id_,
                  ") waited for work queued behind it on its own stream; this would never finish");
  if (spin_until([&] { return completed_.load(std::memory_order_acquire) >= seq; })) return;
  auto done = [&] { return completed_.load(std::memory_order_seq_cst) >= seq; };
  waiters_.fetch_add(1, std::memory_order_seq_cst);
  struct Leave {
    std::atomic<int>& w;
    ~Leave() { w.fetch_sub(1, std::memory_order_relaxed); }
  } leave{waiters_};
  std::unique_lock<std::mutex> lock(done_mu_);
  // Wake up now and then to see whether the user pressed Ctrl-C (rt/interrupt.h).
  while (!done_cv_.wait_for(lock, std::chrono::milliseconds(50), done)) {
    lock.unlock();
    const bool interrupted = poll_interrupt();
    lock.lock();
    if (interrupted)
      throw Interrupted(str("interrupted (Ctrl-C) while waiting for neuron:", device_, " (stream ",
                            id_, "); a running NKI kernel stops and fails, other queued work "
                            "still runs"));
  }
}

void Stream::wait_for(const Stream& other, uint64_t seq) {
  if (&other == this || other.completed() >= seq) return;  // in-order or already satisfied
  const Stream* o = &other;
  enqueue("wait_for", [o, seq] { o->wait_completed(seq); });
}

void Stream::synchronize() {
  detail::check_not_bad_fork();
  wait_completed(launched());
  check_error();
}

bool Stream::query() {
  const uint64_t target = launched();
  const bool done = completed() >= target;
  check_error();
  return done;
}

}  // namespace neuron::rt
