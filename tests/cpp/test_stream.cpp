// Streams: in-order execution, sequence numbers, cross-stream waits, error capture and
// launch-blocking mode, plus the trace they record.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

#include "runtime/error.h"
#include "runtime/internal.h"
#include "runtime/stream.h"
#include "runtime/trace.h"

using namespace neuron::rt;

namespace {

class Gate {
 public:
  void block(Stream& s) {
    auto f = p_.get_future().share();
    s.launch("gate", [f] { f.wait(); });
  }
  void open() { p_.set_value(); }

 private:
  std::promise<void> p_;
};

// Returns the message of the exception of type E thrown by fn, or fails the test.
template <typename E, typename F>
std::string error_of(F fn) {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "unexpected exception type: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected an exception";
  return "";
}

struct LaunchBlockingScope {
  LaunchBlockingScope() { detail::g_launch_blocking.store(true); }
  ~LaunchBlockingScope() { detail::g_launch_blocking.store(false); }
};

}  // namespace

TEST(Stream, RunsTasksInLaunchOrder) {
  Stream s(0, 1, 0);
  std::vector<int> order;  // touched only by the worker until synchronize()
  for (int i = 0; i < 2000; ++i) s.launch("append", [&order, i] { order.push_back(i); });
  s.synchronize();
  ASSERT_EQ(order.size(), 2000u);
  for (int i = 0; i < 2000; ++i) ASSERT_EQ(order[i], i);
  EXPECT_EQ(s.launched(), 2000u);
  EXPECT_EQ(s.completed(), 2000u);
}

TEST(Stream, IdentityAndSequenceNumbers) {
  Stream s(3, 7, -1);
  EXPECT_EQ(s.device(), 3);
  EXPECT_EQ(s.id(), 7);
  EXPECT_EQ(s.priority(), -1);
  EXPECT_EQ(s.launched(), 0u);
  EXPECT_TRUE(s.query());
  s.synchronize();  // nothing launched: returns at once
  Gate gate;
  gate.block(s);
  std::atomic<int> ran{0};
  s.launch("inc", [&] { ran++; });
  EXPECT_EQ(s.launched(), 2u);
  EXPECT_FALSE(s.query());
  EXPECT_EQ(s.completed(), 0u);
  EXPECT_EQ(ran.load(), 0);
  gate.open();
  s.wait_completed(2);
  EXPECT_EQ(ran.load(), 1);
  EXPECT_TRUE(s.query());
}

TEST(Stream, WaitForMakesTheOtherStreamsWriteVisible) {
  Stream a(0, 1, 0), b(0, 2, 0);
  Gate gate;
  int value = 0;
  int seen = -1;
  gate.block(a);
  a.launch("write", [&] { value = 42; });
  b.wait_for(a, a.launched());
  b.launch("read", [&] { seen = value; });
  // B must not run its read while A is held at the gate.
  std::this_thread::sleep_for(std::chrono::milliseconds(3));
  EXPECT_EQ(b.completed(), 0u);
  EXPECT_FALSE(b.query());
  gate.open();
  b.synchronize();
  EXPECT_EQ(seen, 42);
}

TEST(Stream, WaitForAnAlreadyCompletedPointOrItselfDoesNotBlock) {
  Stream a(0, 1, 0), b(0, 2, 0);
  a.launch("noop", [] {});
  a.synchronize();
  b.wait_for(a, a.launched());
  b.wait_for(b, 100);  // in-order already; must not wait for a future task
  std::atomic<bool> ran{false};
  b.launch("set", [&] { ran = true; });
  b.synchronize();
  EXPECT_TRUE(ran.load());
}

TEST(Stream, TaskErrorSurfacesAtSynchronizeWithNameDeviceAndStream) {
  Stream s(3, 5, 0);
  std::atomic<bool> later_ran{false};
  std::atomic<bool> both_launched{false};
  // The failing task waits until both are queued: an error that is already
  // recorded would (correctly) be raised by the second launch instead.
  s.launch("my_kernel", [&] {
    while (!both_launched.load()) std::this_thread::yield();
    throw std::runtime_error("boom");
  });
  s.launch("later", [&] { later_ran = true; });
  both_launched = true;
  EXPECT_EQ(error_of<Error>([&] { s.synchronize(); }),
            "my_kernel failed on neuron:3 (stream 5): boom");
  EXPECT_TRUE(later_ran.load());
  s.synchronize();  // cleared after being raised once
  EXPECT_TRUE(s.query());
}

TEST(Stream, TaskErrorSurfacesAtTheNextLaunchWhichIsNotQueued) {
  Stream s(0, 1, 0);
  s.launch("bad_op", [] { throw std::runtime_error("index out of range"); });
  s.wait_completed(1);
  std::atomic<int> ran{0};
  EXPECT_EQ(error_of<Error>([&] { s.launch("next", [&] { ran++; }); }),
            "bad_op failed on neuron:0 (stream 1): index out of range");
  EXPECT_EQ(s.launched(), 1u);
  s.launch("next", [&] { ran++; });  // the error was cleared
  s.synchronize();
  EXPECT_EQ(ran.load(), 1);
}

TEST(Stream, KeepsTheFirstErrorOnly) {
  Stream s(0, 1, 0);
  std::atomic<bool> both_launched{false};
  s.launch("first", [&] {
    while (!both_launched.load()) std::this_thread::yield();
    throw std::runtime_error("one");
  });
  s.launch("second", [] { throw std::runtime_error("two"); });
  both_launched = true;
  EXPECT_EQ(error_of<Error>([&] { s.synchronize(); }), "first failed on neuron:0 (stream 1): one");
  EXPECT_NO_THROW(s.synchronize());
}

TEST(Stream, KeepsOutOfMemoryAndConfigErrorTypes) {
  Stream s(1, 0, 0);
  s.launch("alloc", [] { throw OutOfMemoryError("no room"); });
  EXPECT_EQ(error_of<OutOfMemoryError>([&] { s.synchronize(); }),
            "alloc failed on neuron:1 (stream 0): no room");
  s.launch("cfg", [] { throw ConfigError("X=1: bad"); });
  EXPECT_EQ(error_of<ConfigError>([&] { s.synchronize(); }),
            "cfg failed on neuron:1 (stream 0): X=1: bad");
  s.launch("plain", [] { throw std::logic_error("nope"); });
  try {
    s.synchronize();
    FAIL() << "expected Error";
  } catch (const OutOfMemoryError&) {
    FAIL() << "a plain error must not become OutOfMemoryError";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "plain failed on neuron:1 (stream 0): nope");
  }
  s.launch("odd", [] { throw 42; });
  EXPECT_EQ(error_of<Error>([&] { s.synchronize(); }),
            "odd failed on neuron:1 (stream 0): unknown exception");
}

TEST(Stream, QueryRethrowsAndClears) {
  Stream s(0, 1, 0);
  s.launch("q", [] { throw std::runtime_error("x"); });
  s.wait_completed(1);
  EXPECT_THROW(s.query(), Error);
  EXPECT_TRUE(s.query());
}

TEST(Stream, CheckErrorWithoutErrorDoesNothing) {
  Stream s(0, 1, 0);
  EXPECT_NO_THROW(s.check_error());
  s.launch("e", [] { throw std::runtime_error("x"); });
  s.wait_completed(1);
  EXPECT_THROW(s.check_error(), Error);
  EXPECT_NO_THROW(s.check_error());
}

TEST(Stream, SynchronizeFromItsOwnTaskIsAnErrorNotAHang) {
  Stream s(0, 4, 0);
  s.launch("self_sync", [&s] { s.synchronize(); });
  const std::string msg = error_of<Error>([&] { s.synchronize(); });
  EXPECT_NE(
      msg.find(
          "self_sync failed on neuron:0 (stream 4): a task on neuron:0 (stream 4) waited for work"),
      std::string::npos)
      << msg;
}

TEST(Stream, LaunchBlockingWaitsForEachTaskAndRaisesAtLaunch) {
  LaunchBlockingScope blocking;
  Stream s(2, 3, 0);
  std::atomic<bool> done{false};
  s.launch("slow", [&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    done = true;
  });
  EXPECT_TRUE(done.load());  // no synchronize needed
  EXPECT_EQ(s.completed(), 1u);
  EXPECT_EQ(error_of<Error>([&] { s.launch("bad", [] { throw std::runtime_error("at once"); }); }),
            "bad failed on neuron:2 (stream 3): at once");
  EXPECT_NO_THROW(s.synchronize());
}

TEST(Stream, DestructorDrainsTheQueue) {
  std::atomic<int> count{0};
  {
    Stream s(0, 1, 0);
    for (int i = 0; i < 100; ++i) {
      s.launch("inc", [&count, i] {
        if (i == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        count++;
      });
    }
  }
  EXPECT_EQ(count.load(), 100);
}

TEST(Stream, TaskCapturesAreReleasedBeforeCompletion) {
  Stream s(0, 1, 0);
  auto token = std::make_shared<int>(1);
  std::weak_ptr<int> weak = token;
  s.launch("hold", [token] {});
  token.reset();
  s.synchronize();
  EXPECT_TRUE(weak.expired());
}

TEST(Stream, ConcurrentProducersAllTasksRun) {
  Stream s(0, 1, 0);
  std::atomic<int> count{0};
  std::vector<std::thread> producers;
  for (int t = 0; t < 3; ++t) {
    producers.emplace_back([&] {
      for (int i = 0; i < 1000; ++i)
        s.launch("inc", [&] { count.fetch_add(1, std::memory_order_relaxed); });
    });
  }
  for (auto& p : producers) p.join();
  s.synchronize();
  EXPECT_EQ(count.load(), 3000);
  EXPECT_EQ(s.launched(), 3000u);
}

TEST(Intern, EqualStringsShareOnePointer) {
  const char* a = intern(std::string("op_") + "add");
  const char* b = intern("op_add");
  EXPECT_EQ(a, b);
  EXPECT_STREQ(a, "op_add");
  EXPECT_NE(intern("op_mul"), a);
}

TEST(Trace, RecordsEachTaskWhenEnabled) {
  Tracer& tr = Tracer::get();
  tr.drain();
  Stream s(2, 6, 0);
  s.launch("untraced", [] {});
  s.synchronize();
  tr.enable(true);
  s.launch("matmul", [] {});
  s.launch("softmax", [] {});
  s.synchronize();
  tr.enable(false);
  s.launch("untraced", [] {});
  s.synchronize();
  auto events = tr.drain();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_STREQ(events[0].name, "matmul");
  EXPECT_STREQ(events[1].name, "softmax");
  for (const auto& e : events) {
    EXPECT_EQ(e.device, 2);
    EXPECT_EQ(e.stream, 6);
    EXPECT_LE(e.start_ns, e.end_ns);
  }
  EXPECT_LE(events[0].end_ns, events[1].start_ns);
  EXPECT_TRUE(tr.drain().empty());
}

TEST(Trace, ChromeJsonEscapesNames) {
  std::vector<TraceEvent> events = {{"a\"b\\c\nd\x01", 1, 2, 1500, 4750}, {"plain", 0, 0, 0, 1}};
  EXPECT_EQ(Tracer::to_chrome_json(events),
            "{\"traceEvents\":["
            "{\"name\":\"a\\\"b\\\\c\\nd\\u0001\",\"ph\":\"X\",\"pid\":1,\"tid\":2,\"ts\":1.500,"
            "\"dur\":3.250},"
            "{\"name\":\"plain\",\"ph\":\"X\",\"pid\":0,\"tid\":0,\"ts\":0.000,\"dur\":0.001}]}");
  EXPECT_EQ(Tracer::to_chrome_json({}), "{\"traceEvents\":[]}");
}
