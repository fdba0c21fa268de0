// Events: host query/wait, device-side waits from another stream, elapsed time.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <thread>

#include "runtime/error.h"
#include "runtime/event.h"
#include "runtime/stream.h"

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

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected Error";
  return "";
}

}  // namespace

TEST(Event, UnrecordedEventIsComplete) {
  Event e;
  EXPECT_FALSE(e.recorded());
  EXPECT_TRUE(e.query());
  EXPECT_EQ(e.device(), -1);
  e.synchronize();  // returns at once
  Stream s(0, 1, 0);
  e.block(s);  // no-op
  EXPECT_EQ(s.launched(), 0u);
}

TEST(Event, QueryAndSynchronizeFollowTheMarkedWork) {
  for (bool timing : {false, true}) {
    Stream s(2, 1, 0);
    Gate gate;
    gate.block(s);
    Event e(timing);
    e.record(s);
    EXPECT_TRUE(e.recorded());
    EXPECT_EQ(e.device(), 2);
    EXPECT_FALSE(e.query()) << timing;
    gate.open();
    e.synchronize();
    EXPECT_TRUE(e.query());
  }
}

TEST(Event, MarksOnlyWorkLaunchedBeforeRecord) {
  Stream s(0, 1, 0);
  s.launch("before", [] {});
  Event e;
  e.record(s);
  Gate gate;
  gate.block(s);  // launched after the record: the event must not wait for it
  e.synchronize();
  EXPECT_TRUE(e.query());
  gate.open();
  s.synchronize();
}

TEST(Event, ReRecordingMovesTheMark) {
  Stream s(0, 1, 0);
  Event e;
  e.record(s);
  EXPECT_TRUE(e.query());
  Gate gate;
  gate.block(s);
  e.record(s);
  EXPECT_FALSE(e.query());
  gate.open();
  e.synchronize();
  EXPECT_TRUE(e.query());
}

TEST(Event, BlockMakesAnotherStreamWait) {
  Stream a(0, 1, 0), b(0, 2, 0);
  Gate gate;
  int value = 0, seen = -1;
  gate.block(a);
  a.launch("write", [&] { value = 7; });
  Event e;
  e.record(a);
  e.block(b);
  b.launch("read", [&] { seen = value; });
  std::this_thread::sleep_for(std::chrono::milliseconds(3));
  EXPECT_EQ(b.completed(), 0u);
  gate.open();
  b.synchronize();
  EXPECT_EQ(seen, 7);
}

TEST(Event, ElapsedTimeBetweenTimingEvents) {
  Stream s(0, 1, 0);
  Event start(true), end(true);
  EXPECT_TRUE(start.timing());
  start.record(s);
  s.launch("sleep", [] { std::this_thread::sleep_for(std::chrono::milliseconds(3)); });
  end.record(s);
  end.synchronize();
  start.synchronize();
  // The markers run on the stream around the task, so they bracket its 3 ms at least.
  const double ms = start.elapsed_ms(end);
  EXPECT_GE(ms, 2.9);
  EXPECT_LE(end.elapsed_ms(start), -2.9);
}

TEST(Event, ElapsedTimeErrors) {
  Stream s(0, 1, 0);
  Event plain, t1(true), t2(true);
  plain.record(s);
  t1.record(s);
  EXPECT_NE(error_of([&] { plain.elapsed_ms(t1); }).find("enable_timing=True"), std::string::npos);
  EXPECT_NE(error_of([&] { t1.elapsed_ms(plain); }).find("enable_timing=True"), std::string::npos);
  EXPECT_EQ(error_of([&] { t1.elapsed_ms(t2); }),
            "elapsed_ms: the end event was never recorded; call record() on both events first");
  t1.synchronize();
  Gate gate;
  gate.block(s);
  t2.record(s);
  EXPECT_EQ(error_of([&] { t1.elapsed_ms(t2); }),
            "elapsed_ms: the end event has not completed yet; call synchronize() on it first");
  gate.open();
  t2.synchronize();
  EXPECT_GE(t1.elapsed_ms(t2), 0.0);
}
