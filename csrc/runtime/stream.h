// In-order execution queues ("streams") of one logical core. Each stream owns a worker thread
// that runs launched tasks in order. An exception thrown by a task is captured with the task's
// name and rethrown by the next synchronize()/query()/launch() on that stream.
// Thread-safety: every member is safe to call from any thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace neuron::rt {

using TaskFn = std::function<void()>;

// Returns a pointer with static lifetime equal to `s` (same pointer for equal strings).
const char* intern(const std::string& s);

class Stream {
 public:
  // `id` is unique within its device; 0 is the device's default stream.
  Stream(int device, int64_t id, int priority);
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  int device() const { return device_; }
  int64_t id() const { return id_; }
  int priority() const { return priority_; }

  // Enqueues `fn`. `name` (static lifetime: a literal or intern()) names the work in errors
  // and traces. First rethrows (and clears) a pending error of this stream. In
  // launch-blocking mode, waits for the task and rethrows its error immediately.
  // `est_ns` is the task's estimated Trainium2 duration (device_clock.h; 0: no device time).
  void launch(const char* name, TaskFn fn, double est_ns = 0);

  // Waits until every task launched so far has finished; rethrows (and clears) a pending error.
  void synchronize();
  // True when every task launched so far has finished; rethrows a pending error.
  bool query();

  // Sequence numbers: the n-th launched task has number n (starting at 1).
  uint64_t launched() const { return launched_.load(std::memory_order_acquire); }
  uint64_t completed() const { return completed_.load(std::memory_order_acquire); }
  // Host-side wait until task `seq` has finished (no error rethrow).
  void wait_completed(uint64_t seq) const;
  // Device-side wait: work launched on this stream after this call starts only once
  // `other` has completed task `seq`.
  void wait_for(const Stream& other, uint64_t seq);

  // Rethrows and clears the pending error, if any.
  void check_error();

 private:
  friend class Event;  // records markers without raising this stream's pending error

  struct Task {
    const char* name;
    TaskFn fn;
    uint64_t seq = 0;
    int64_t launch_ns = 0;               // host launch time when tracing
    int64_t est_start = 0, est_end = 0;  // on the estimated Trainium2 clock
  };
  // Queues `fn` and returns its sequence number; never throws a pending task error.
  uint64_t enqueue(const char* name, TaskFn fn, double est_ns = 0);
  void wait_completed_impl(uint64_t seq) const;
  void worker_loop();
  void ensure_worker();  // called with mu_ held
  void run_task(Task& t);
  void set_error(const char* name, std::exception_ptr e);

  const int device_;
  const int64_t id_;
  const int priority_;
  std::mutex mu_;  // guards queue_, sleeping_, stop_, worker_
  std::condition_variable cv_;
  std::deque<Task> queue_;
  bool sleeping_ = false;
  bool stop_ = false;
  std::thread worker_;
  std::atomic<uint64_t> launched_{0};
  std::atomic<int64_t> est_end_{0};  // estimated end of the last launched task
  alignas(64) std::atomic<uint64_t> completed_{0};  // own cache line: written by the worker
  // Host waiters block on done_cv_; the worker takes done_mu_ only while waiters_ > 0, so a
  // completed task costs one atomic load when nobody waits.
  mutable std::mutex done_mu_;
  mutable std::condition_variable done_cv_;
  mutable std::atomic<int> waiters_{0};
  std::atomic<bool> has_error_{false};  // lets launch() skip err_mu_ in the common case
  std::mutex err_mu_;
  std::exception_ptr error_;
};

}  // namespace neuron::rt
