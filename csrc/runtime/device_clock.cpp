#include "runtime/device_clock.h"

#include <time.h>

#include <algorithm>
#include <cmath>

#include "runtime/trace.h"

namespace neuron::rt {

namespace {

int64_t thread_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

struct ThreadBase {
  uint64_t epoch = 0;
  int64_t cpu = 0;
};
thread_local ThreadBase t_base;

}  // namespace

DeviceClock& DeviceClock::get() {
  static DeviceClock* c = new DeviceClock();  // leaked: stream workers may use it at exit
  return *c;
}

DeviceClock::DeviceClock() { reset(); }

void DeviceClock::set_params(const ClockParams& p) {
  std::lock_guard<std::mutex> lock(mu_);
  params_ = p;
}

ClockParams DeviceClock::params() const {
  std::lock_guard<std::mutex> lock(mu_);
  return params_;
}

void DeviceClock::advance_locked() {
  const int64_t cpu = thread_cpu_ns();
  if (t_base.epoch != epoch_) t_base = ThreadBase{epoch_, cpu};
  if (waiting_ == 0) est_host_ += cpu - t_base.cpu;
  t_base.cpu = cpu;
}

void DeviceClock::rebase_locked() { t_base = ThreadBase{epoch_, thread_cpu_ns()}; }

DeviceClock::Placed DeviceClock::launch(int device, double est_ns) {
  const int64_t dur = est_ns > 0 ? static_cast<int64_t>(std::llround(est_ns)) : 0;
  std::lock_guard<std::mutex> lock(mu_);
  advance_locked();
  const size_t d = device < 0 ? 0 : static_cast<size_t>(device);
  if (free_.size() <= d) free_.resize(d + 1, 0);
  const int64_t start = std::max(free_[d], est_host_);
  free_[d] = start + dur;
  device_free_ = std::max(device_free_, free_[d]);
  busy_ += static_cast<double>(dur);
  ++tasks_;
  return Placed{start, start + dur};
}

void DeviceClock::host_wait_begin() {
  std::lock_guard<std::mutex> lock(mu_);
  advance_locked();
  ++waiting_;
}

void DeviceClock::host_wait_end(int64_t until_ns) {
  std::lock_guard<std::mutex> lock(mu_);
  if (waiting_ > 0) --waiting_;
  rebase_locked();  // the wait itself (spinning included) is this machine's time, not the host's
  const int64_t until = until_ns < 0 ? device_free_ : until_ns;
  if (until > est_host_) {
    est_host_ = until + static_cast<int64_t>(std::llround(params_.host_wake_ns));
    ++waits_;
  }
}

void DeviceClock::host_add(double ns) {
  std::lock_guard<std::mutex> lock(mu_);
  est_host_ += static_cast<int64_t>(std::llround(ns));
}

ClockReading DeviceClock::read() {
  std::lock_guard<std::mutex> lock(mu_);
  advance_locked();
  return ClockReading{est_host_, now_ns(), device_free_, busy_, tasks_, waits_};
}

void DeviceClock::reset() {
  const int64_t now = now_ns();
  std::lock_guard<std::mutex> lock(mu_);
  est_host_ = now;
  ++epoch_;
  waiting_ = 0;
  free_.assign(free_.size(), 0);
  device_free_ = 0;
  busy_ = 0;
  tasks_ = 0;
  waits_ = 0;
}

}  // namespace neuron::rt
