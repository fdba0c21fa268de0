#include "runtime/thread_pool.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace neuron::rt {

namespace {

thread_local bool tls_in_region = false;

struct RegionGuard {
  bool prev = tls_in_region;
  RegionGuard() { tls_in_region = true; }
  ~RegionGuard() { tls_in_region = prev; }
};

// One parallel_for call. Chunks are claimed through `next`, so the caller alone can finish the
// job: helpers only speed it up, and concurrent callers can never wait on each other.
struct Job {
  const std::function<void(int64_t, int64_t)>* fn = nullptr;
  int64_t begin = 0, end = 0, chunk = 1;
  int num_chunks = 0;
  std::atomic<int> next{0};
  std::atomic<int> remaining{0};
  std::atomic<bool> failed{false};
  std::mutex err_mu;
  std::exception_ptr error;

  bool has_unclaimed() const { return next.load(std::memory_order_relaxed) < num_chunks; }

  void run_chunks() {
    for (;;) {
      const int i = next.fetch_add(1, std::memory_order_relaxed);
      if (i >= num_chunks) return;
      // After a failure the remaining chunks are skipped; the caller rethrows.
      if (!failed.load(std::memory_order_relaxed)) {
        const int64_t b = begin + static_cast<int64_t>(i) * chunk;
        const int64_t e = std::min(end, b + chunk);
        try {
          (*fn)(b, e);
        } catch (...) {
          std::lock_guard<std::mutex> lock(err_mu);
          if (!error) error = std::current_exception();
          failed.store(true, std::memory_order_relaxed);
        }
      }
      if (remaining.fetch_sub(1, std::memory_order_acq_rel) == 1) remaining.notify_all();
    }
  }
};

class Pool {
 public:
  explicit Pool(int helpers) : helpers_(helpers) {}

  void submit(const std::shared_ptr<Job>& job) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (threads_.empty()) {
        for (int i = 0; i < helpers_; ++i) threads_.emplace_back([this] { helper_loop(); });
      }
      jobs_.push_back(job);
    }
    cv_.notify_all();
  }

  void remove(const std::shared_ptr<Job>& job) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = std::find(jobs_.begin(), jobs_.end(), job);
    if (it != jobs_.end()) jobs_.erase(it);
  }

 private:
  void helper_loop() {
    tls_in_region = true;  // everything a helper runs is inside a parallel region
    for (;;) {
      std::shared_ptr<Job> job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] {
          for (const auto& j : jobs_) {
            if (j->has_unclaimed()) {
              job = j;
              return true;
            }
          }
          return false;
        });
      }
      job->run_chunks();  // `job` keeps the Job alive even after its caller returned
    }
  }

  const int helpers_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> jobs_;
  std::vector<std::thread> threads_;
};

int detect_threads() {
  cpu_set_t set;
  CPU_ZERO(&set);
  // The affinity mask, not the machine size: containers and taskset often grant fewer cores.
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

std::atomic<Pool*> g_pool{nullptr};

// Pools are leaked: helpers block forever on the condition variable and must not see it
// destroyed at exit. A forked child gets a fresh pool because the parent's helpers are gone.
Pool& pool() {
  static std::once_flag once;
  std::call_once(once, [] {
    g_pool.store(new Pool(num_threads() - 1));
    pthread_atfork(nullptr, nullptr, [] { g_pool.store(new Pool(num_threads() - 1)); });
  });
  return *g_pool.load(std::memory_order_acquire);
}

}  // namespace

int num_threads() {
  static const int n = detect_threads();
  return n;
}

bool in_parallel_region() { return tls_in_region; }

void parallel_for(int64_t begin, int64_t end, int64_t grain,
                  const std::function<void(int64_t, int64_t)>& fn) {
  if (begin >= end) return;
  const int64_t n = end - begin;
  grain = std::max<int64_t>(grain, 1);
  const int64_t max_chunks = n / grain + (n % grain != 0);
  int64_t chunks = std::min<int64_t>(num_threads(), max_chunks);
  if (chunks <= 1 || tls_in_region) {
    RegionGuard guard;
    fn(begin, end);
    return;
  }
  auto job = std::make_shared<Job>();
  job->fn = &fn;
  job->begin = begin;
  job->end = end;
  job->chunk = n / chunks + (n % chunks != 0);
  job->num_chunks = static_cast<int>(n / job->chunk + (n % job->chunk != 0));
  job->remaining.store(job->num_chunks, std::memory_order_relaxed);

  Pool& p = pool();
  p.submit(job);
  {
    RegionGuard guard;
    job->run_chunks();
  }
  p.remove(job);
  for (int r = job->remaining.load(std::memory_order_acquire); r != 0;
       r = job->remaining.load(std::memory_order_acquire)) {
    job->remaining.wait(r, std::memory_order_acquire);
  }
  if (job->error) std::rethrow_exception(job->error);
}

namespace {

// Threads for run_concurrently, kept between calls (creating a thread costs tens of
// microseconds, as much as a small kernel). Each runs one part at a time, as a parallel region.
// Guarded by its mutex; leaked like the pool; a forked child starts with no threads.
class Gang {
 public:
  struct Worker {
    std::mutex mu;
    std::condition_variable cv;
    const std::function<void()>* task = nullptr;
    bool done = false;
  };

  static Gang& get() {
    static std::once_flag once;
    std::call_once(once, [] {
      g_gang.store(new Gang());
      pthread_atfork(nullptr, nullptr, [] { g_gang.store(new Gang()); });
    });
    return *g_gang.load(std::memory_order_acquire);
  }

  Worker* take() {
    {
      std::lock_guard<std::mutex> g(mu_);
      if (!idle_.empty()) {
        Worker* w = idle_.back();
        idle_.pop_back();
        return w;
      }
    }
    auto* w = new Worker();
    std::thread([w] { loop(w); }).detach();
    return w;
  }
  void give(Worker* w) {
    std::lock_guard<std::mutex> g(mu_);
    idle_.push_back(w);
  }

  static void run(Worker* w, const std::function<void()>* task) {
    {
      std::lock_guard<std::mutex> g(w->mu);
      w->task = task;
      w->done = false;
    }
    w->cv.notify_all();
  }
  static void wait(Worker* w) {
    std::unique_lock<std::mutex> l(w->mu);
    w->cv.wait(l, [w] { return w->done; });
  }

 private:
  static void loop(Worker* w) {
    tls_in_region = true;
    for (;;) {
      std::unique_lock<std::mutex> l(w->mu);
      w->cv.wait(l, [w] { return w->task != nullptr; });
      const std::function<void()>* t = w->task;
      l.unlock();
      (*t)();  // never throws: run_concurrently's parts catch everything
      l.lock();
      w->task = nullptr;
      w->done = true;
      w->cv.notify_all();
    }
  }

  static inline std::atomic<Gang*> g_gang{nullptr};
  std::mutex mu_;
  std::vector<Worker*> idle_;
};

}  // namespace

void run_concurrently(int n, const std::function<void(int)>& fn) {
  if (n <= 0) return;
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
  auto part = [&](int i) {
    RegionGuard guard;
    try {
      fn(i);
    } catch (...) {
      errors[static_cast<size_t>(i)] = std::current_exception();
    }
  };
  Gang& gang = Gang::get();
  std::vector<std::function<void()>> tasks;
  std::vector<Gang::Worker*> workers;
  tasks.reserve(static_cast<size_t>(n - 1));
  workers.reserve(static_cast<size_t>(n - 1));
  for (int i = 1; i < n; ++i) tasks.emplace_back([&part, i] { part(i); });
  for (int i = 1; i < n; ++i) {
    workers.push_back(gang.take());
    Gang::run(workers.back(), &tasks[static_cast<size_t>(i - 1)]);
  }
  part(0);
  for (Gang::Worker* w : workers) {
    Gang::wait(w);
    gang.give(w);
  }
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace neuron::rt
