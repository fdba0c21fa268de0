// Runtime singleton and devices: initialisation from the environment, stream pools, the
// allocator's sync callback, per-thread current stream, and fork safety.
//
// Tests that need a particular environment or an uninitialised runtime run in a fresh process
// (death tests in "threadsafe" style re-execute the binary), so they do not depend on test
// order or on what earlier tests in this process did.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <thread>

#include "runtime/error.h"
#include "runtime/runtime.h"

using namespace neuron::rt;

namespace {

constexpr size_t kMiB = 1024 * 1024;

// Inside a child process: report a failed check on stderr and exit with 1.
#define CHILD_CHECK(cond)                                                           \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      std::fprintf(stderr, "child check failed at line %d: %s\n", __LINE__, #cond); \
      _exit(1);                                                                     \
    }                                                                               \
  } while (0)

void clear_runtime_env() {
  for (const char* v : {"NEURON_EMU_INSTANCE_TYPE", "NEURON_LOGICAL_NC_CONFIG",
                        "NEURON_RT_VIRTUAL_CORE_SIZE", "NEURON_RT_VISIBLE_CORES",
                        "NEURON_RT_NUM_CORES", "NEURON_EMU_HBM_GB", "NEURON_LAUNCH_BLOCKING"}) {
    unsetenv(v);
  }
}

template <typename E, typename F>
std::string message_of(F fn) {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  } catch (...) {
    return "<other exception>";
  }
  return "<no exception>";
}

LogicalCore test_core(int index, uint64_t capacity) {
  LogicalCore c;
  c.index = index;
  c.global_id = index;
  c.hbm_capacity = capacity;
  return c;
}

class RuntimeDeathTest : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

}  // namespace

TEST_F(RuntimeDeathTest, BadEnvironmentThrowsOnEveryCallUntilFixed) {
  EXPECT_EXIT(
      {
        clear_runtime_env();
        setenv("NEURON_RT_VISIBLE_CORES", "9", 1);
        std::fprintf(stderr, "%s\n", message_of<ConfigError>([] { Runtime::get(); }).c_str());
        CHILD_CHECK(!Runtime::initialized());
        CHILD_CHECK(message_of<ConfigError>([] { Runtime::get(); }).find("core 9 does not exist") !=
                    std::string::npos);
        unsetenv("NEURON_RT_VISIBLE_CORES");
        Runtime& rt = Runtime::get();
        CHILD_CHECK(Runtime::initialized());
        CHILD_CHECK(rt.device_count() == 4);
        CHILD_CHECK(&Runtime::get() == &rt);
        _exit(0);
      },
      ::testing::ExitedWithCode(0),
      "NEURON_RT_VISIBLE_CORES=9: core 9 does not exist; trn2.3xlarge with LNC 2 has logical cores "
      "0-3");
}

TEST_F(RuntimeDeathTest, VisibleCoresBecomeDevicesInOrder) {
  EXPECT_EXIT(
      {
        clear_runtime_env();
        setenv("NEURON_RT_VISIBLE_CORES", "1,3", 1);
        setenv("NEURON_EMU_HBM_GB", "0.25", 1);
        Runtime& rt = Runtime::get();
        CHILD_CHECK(rt.device_count() == 2);
        CHILD_CHECK(rt.topology().visible.size() == 2);
        CHILD_CHECK(rt.device(0).index() == 0 && rt.device(0).core().global_id == 1);
        CHILD_CHECK(rt.device(1).index() == 1 && rt.device(1).core().global_id == 3);
        CHILD_CHECK(rt.device(1).allocator().capacity() == 256 * kMiB);
        CHILD_CHECK(rt.device(1).default_stream().device() == 1);
        CHILD_CHECK(!rt.launch_blocking());
        std::fprintf(stderr, "%s\n", message_of<Error>([&] { rt.device(2); }).c_str());
        CHILD_CHECK(message_of<Error>([&] { rt.device(-1); }).find("neuron:-1 is not available") !=
                    std::string::npos);
        _exit(0);
      },
      ::testing::ExitedWithCode(0),
      "The device index is out of range: neuron:2 is not available, this process sees 2 logical "
      "NeuronCores \\(neuron:0-neuron:1\\); "
      "NEURON_RT_VISIBLE_CORES and NEURON_RT_NUM_CORES select them");
}

TEST_F(RuntimeDeathTest, LaunchBlockingFromEnvironment) {
  EXPECT_EXIT(
      {
        clear_runtime_env();
        setenv("NEURON_LAUNCH_BLOCKING", "1", 1);
        Runtime& rt = Runtime::get();
        CHILD_CHECK(rt.launch_blocking());
        Stream& s = rt.device(0).default_stream();
        std::atomic<bool> done{false};
        s.launch("slow", [&] {
          std::this_thread::sleep_for(std::chrono::milliseconds(2));
          done = true;
        });
        CHILD_CHECK(done.load());
        CHILD_CHECK(message_of<Error>([&] {
                      s.launch("bad", [] { throw std::runtime_error("now"); });
                    }) == "bad failed on neuron:0 (stream 0): now");
        _exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST_F(RuntimeDeathTest, BadLaunchBlockingValueIsAConfigError) {
  EXPECT_EXIT(
      {
        clear_runtime_env();
        setenv("NEURON_LAUNCH_BLOCKING", "maybe", 1);
        std::fprintf(stderr, "%s\n", message_of<ConfigError>([] { Runtime::get(); }).c_str());
        CHILD_CHECK(!Runtime::initialized());
        _exit(0);
      },
      ::testing::ExitedWithCode(0), "NEURON_LAUNCH_BLOCKING=maybe: expected a boolean");
}

TEST_F(RuntimeDeathTest, ChildOfAnUninitialisedParentMayInitialise) {
  EXPECT_EXIT(
      {
        clear_runtime_env();
        CHILD_CHECK(!Runtime::initialized());
        const pid_t pid = fork();
        if (pid == 0) {
          Runtime& rt = Runtime::get();
          rt.device(0).default_stream().launch("noop", [] {});
          rt.device(0).synchronize();
          _exit(Runtime::in_bad_fork() || !Runtime::initialized() ? 1 : 0);
        }
        int status = 0;
        CHILD_CHECK(waitpid(pid, &status, 0) == pid);
        CHILD_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        CHILD_CHECK(!Runtime::in_bad_fork());
        Runtime::get();
        _exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(Runtime, ForkedChildOfAnInitialisedParentIsInBadFork) {
  Runtime& rt = Runtime::get();
  Device& d = rt.device(0);
  void* p = d.allocator().allocate(4096, &d.default_stream());
  d.default_stream().launch("noop", [] {});
  d.default_stream().synchronize();

  const pid_t pid = fork();
  if (pid == 0) {
    CHILD_CHECK(Runtime::in_bad_fork());
    CHILD_CHECK(!Runtime::initialized());
    CHILD_CHECK(message_of<BadForkError>([] { Runtime::get(); }) ==
                "Cannot re-initialize Neuron runtime in forked subprocess. To use Neuron with "
                "multiprocessing, "
                "you must use the 'spawn' start method");
    // Inherited tensors are destroyed in the child: freeing them must be a silent no-op.
    try {
      d.allocator().free(p);
    } catch (...) {
      CHILD_CHECK(!"free threw in the forked child");
    }
    CHILD_CHECK(message_of<BadForkError>([] { current_stream(0); }).find("Cannot re-initialize") ==
                0);
    CHILD_CHECK(message_of<BadForkError>([&] {
                  d.default_stream().launch("x", [] {});
                }).find("Cannot") == 0);
    CHILD_CHECK(message_of<BadForkError>([&] { d.synchronize(); }).find("Cannot") == 0);
    _exit(0);
  }
  ASSERT_GT(pid, 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);

  // The parent is unaffected.
  EXPECT_FALSE(Runtime::in_bad_fork());
  EXPECT_TRUE(Runtime::initialized());
  EXPECT_TRUE(d.allocator().owns(p));
  d.allocator().free(p);
  std::atomic<bool> ran{false};
  d.default_stream().launch("after_fork", [&] { ran = true; });
  d.synchronize();
  EXPECT_TRUE(ran.load());
}

TEST(Runtime, CurrentStreamIsPerThreadAndDefaultsToTheDefaultStream) {
  Runtime& rt = Runtime::get();
  EXPECT_TRUE(Runtime::initialized());
  EXPECT_EQ(&Runtime::get(), &rt);
  EXPECT_EQ(rt.device_count(), static_cast<int>(rt.topology().visible.size()));
  Device& d = rt.device(0);
  EXPECT_EQ(current_device(), 0);
  EXPECT_EQ(&current_stream(0), &d.default_stream());

  Stream& pool = d.pool_stream(0);
  set_current_stream(pool);
  EXPECT_EQ(&current_stream(0), &pool);
  Stream* other_thread = nullptr;
  std::thread([&] { other_thread = &current_stream(0); }).join();
  EXPECT_EQ(other_thread, &d.default_stream());
  set_current_stream(d.default_stream());
  EXPECT_EQ(&current_stream(0), &d.default_stream());

  EXPECT_THROW(set_current_device(rt.device_count()), Error);
  EXPECT_EQ(current_device(), 0);
  EXPECT_THROW(current_stream(rt.device_count()), Error);
  if (rt.device_count() > 1) {
    set_current_device(1);
    EXPECT_EQ(current_device(), 1);
    int seen = -1;
    std::thread([&] { seen = current_device(); }).join();
    EXPECT_EQ(seen, 0);
    set_current_device(0);
  }
}

TEST(Runtime, SynchronizeAllRaisesAPendingError) {
  Runtime& rt = Runtime::get();
  Stream& s = rt.device(0).pool_stream(0);
  s.launch("doomed", [] { throw std::runtime_error("bad input"); });
  const std::string msg = message_of<Error>([&] { rt.synchronize_all(); });
  EXPECT_NE(msg.find("doomed failed on neuron:0 (stream "), std::string::npos) << msg;
  EXPECT_NO_THROW(rt.synchronize_all());
}

TEST(Device, StreamPoolsAreLazyAndRoundRobin) {
  Device d(test_core(5, 64 * kMiB));
  EXPECT_EQ(d.index(), 5);
  EXPECT_EQ(d.default_stream().id(), 0);
  EXPECT_EQ(d.default_stream().device(), 5);
  EXPECT_EQ(d.streams().size(), 1u);
  for (int64_t i = 1; i <= Device::kPoolSize; ++i) {
    Stream& s = d.pool_stream(0);
    EXPECT_EQ(s.id(), i);
    EXPECT_EQ(s.device(), 5);
    EXPECT_EQ(s.priority(), 0);
  }
  EXPECT_EQ(d.pool_stream(0).id(), 1);  // wrapped around
  Stream& high = d.pool_stream(-1);
  EXPECT_EQ(high.id(), Device::kPoolSize + 1);
  EXPECT_EQ(high.priority(), -1);
  EXPECT_EQ(d.pool_stream(-3).id(), Device::kPoolSize + 2);  // any negative priority is "high"
  EXPECT_EQ(&d.stream(Device::kPoolSize + 1), &high);
  EXPECT_EQ(&d.stream(0), &d.default_stream());
  EXPECT_EQ(d.streams().size(), static_cast<size_t>(Device::kPoolSize + 3));
  EXPECT_EQ(message_of<Error>([&] { d.stream(Device::kPoolSize + 3); }),
            "neuron:5 has no stream 35; streams 0-34 exist (0 is the default stream, pool streams "
            "are created "
            "on first use)");
  EXPECT_THROW(d.stream(-1), Error);
  EXPECT_THROW(d.stream(1000), Error);
}

TEST(Device, SynchronizeWaitsForAllStreamsAndRaisesTheFirstError) {
  Device d(test_core(1, 64 * kMiB));
  Stream& s = d.pool_stream(0);
  std::atomic<bool> slow_done{false};
  d.default_stream().launch("slow", [&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    slow_done = true;
  });
  s.launch("bad", [] { throw std::runtime_error("boom"); });
  EXPECT_EQ(message_of<Error>([&] { d.synchronize(); }), "bad failed on neuron:1 (stream 1): boom");
  EXPECT_TRUE(slow_done.load());
  EXPECT_NO_THROW(d.synchronize());
}

TEST(Device, AllocatorFlushSynchronizesTheDevicesStreams) {
  Device d(test_core(0, 4 * kMiB));
  HbmAllocator& a = d.allocator();
  Stream& s = d.pool_stream(0);
  s.launch("busy", [] { std::this_thread::sleep_for(std::chrono::milliseconds(5)); });
  void* p = a.allocate(2 * kMiB, &s);
  a.free(p);  // cached, but queued work on s may still use it
  // 4 MiB only fits once p goes back to the host, which needs s to finish first.
  void* q = a.allocate(4 * kMiB, &d.default_stream());
  EXPECT_NE(q, nullptr);
  EXPECT_EQ(s.completed(), s.launched());
  EXPECT_EQ(a.stats().num_alloc_retries, 1);
  EXPECT_EQ(a.stats().reserved_bytes.current, static_cast<int64_t>(4 * kMiB));
  a.free(q);
}
