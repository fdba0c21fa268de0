// The estimated Trainium2 clock: tasks placed on a core's timeline after the host launched
// them and after the core's previous task; host waits end at the estimated end of the work;
// time spent waiting for this machine does not count as host time.
#include <gtest/gtest.h>

#include <time.h>

#include <chrono>
#include <thread>

#include "runtime/device_clock.h"
#include "runtime/stream.h"

namespace neuron::rt {
namespace {

struct FreshClock {
  ClockParams old = DeviceClock::get().params();
  FreshClock(double wake_ns) {
    DeviceClock::get().set_params(ClockParams{wake_ns});
    DeviceClock::get().reset();
  }
  ~FreshClock() { DeviceClock::get().set_params(old); }
};

TEST(DeviceClock, BackToBackTasksQueueOnTheCoreAndTheWaitEndsAtTheirEnd) {
  FreshClock fresh(5000);
  DeviceClock& c = DeviceClock::get();
  const auto a = c.launch(0, 1e6);
  const auto b = c.launch(0, 2e6);
  const auto d = c.launch(1, 3e6);  // another core runs in parallel
  EXPECT_EQ(a.end_ns - a.start_ns, 1000000);
  EXPECT_EQ(b.start_ns, a.end_ns);  // the host launched b long before a ended
  EXPECT_EQ(b.end_ns, a.end_ns + 2000000);
  EXPECT_GE(d.start_ns, a.start_ns);
  EXPECT_LT(d.start_ns, b.start_ns);
  c.host_wait_begin();
  c.host_wait_end(b.end_ns);
  const ClockReading r = c.read();
  EXPECT_GE(r.est_host_ns, b.end_ns + 5000);
  EXPECT_EQ(r.device_busy_ns, 6e6);
  EXPECT_EQ(r.tasks, 3);
  EXPECT_EQ(r.host_waits, 1);
  EXPECT_EQ(r.device_free_ns, std::max(b.end_ns, d.end_ns));
}

TEST(DeviceClock, WaitingForThisMachineIsNotHostTime) {
  FreshClock fresh(0);
  DeviceClock& c = DeviceClock::get();
  const ClockReading r0 = c.read();
  c.host_wait_begin();
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  c.host_wait_end(0);  // nothing to wait for on the estimated device
  const ClockReading r1 = c.read();
  EXPECT_GE(r1.real_ns - r0.real_ns, 30000000);
  EXPECT_LT(r1.est_host_ns - r0.est_host_ns, r1.real_ns - r0.real_ns - 29000000);
  EXPECT_EQ(r1.host_waits, 0);
}

TEST(DeviceClock, HostTimeIsTheHostThreadsCpuTime) {
  FreshClock fresh(0);
  DeviceClock& c = DeviceClock::get();
  const auto cpu = [] {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
  };
  const ClockReading r0 = c.read();
  const int64_t c0 = cpu();
  volatile uint64_t x = 0;
  while (cpu() - c0 < 20000000) x = x + 1;  // 20 ms of this thread's CPU
  std::this_thread::sleep_for(std::chrono::milliseconds(30));  // not host work
  const int64_t c1 = cpu();
  const ClockReading r1 = c.read();
  EXPECT_GE(r1.est_host_ns - r0.est_host_ns, c1 - c0);
  EXPECT_LT(r1.est_host_ns - r0.est_host_ns, c1 - c0 + 5000000);
}

TEST(DeviceClock, StreamTasksCarryTheirEstimateAndSynchronizeWaitsForIt) {
  FreshClock fresh(0);
  Stream s(0, 7, 0);
  const ClockReading r0 = DeviceClock::get().read();
  for (int i = 0; i < 4; ++i) s.launch("est_task", [] {}, 250e3);
  s.synchronize();
  const ClockReading r1 = DeviceClock::get().read();
  EXPECT_EQ(r1.tasks - r0.tasks, 4);
  EXPECT_EQ(r1.device_busy_ns - r0.device_busy_ns, 1e6);
  // The host waited until the four estimated tasks ended: at least 1 ms of estimated time.
  EXPECT_GE(r1.est_host_ns - r0.est_host_ns, 1000000);
  EXPECT_EQ(r1.host_waits - r0.host_waits, 1);
}

}  // namespace
}  // namespace neuron::rt
