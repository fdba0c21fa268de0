// The meeting point of multi-core launches: buffered sends, barriers, and waits that can never
// be satisfied raising errors (never hanging).
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <thread>

#include "nki/error.h"
#include "nki/exchange.h"

using neuron::nki::Exchange;
using neuron::nki::Message;
using neuron::nki::NkiError;

namespace {
Message msg(int64_t v) {
  Message m;
  m.numel = 1;
  m.data.resize(8);
  std::memcpy(m.data.data(), &v, 8);
  return m;
}
int64_t val(const Message& m) {
  int64_t v;
  std::memcpy(&v, m.data.data(), 8);
  return v;
}
}  // namespace

TEST(NkiExchange, SymmetricSendRecvOnTwoPipesDoesNotBlock) {
  Exchange x(2);
  int64_t got[2][2] = {};
  auto rank = [&](int r) {
    x.send(r, 1 - r, 0, msg(10 + r));
    x.send(r, 1 - r, 1, msg(20 + r));
    got[r][1] = val(x.recv(r, 1 - r, 1, "sendrecv", "k.py:2"));  // other pipe first
    got[r][0] = val(x.recv(r, 1 - r, 0, "sendrecv", "k.py:1"));
    x.barrier(r, 3, "core_barrier", "k.py:3");
    x.finish(r, false);
  };
  std::thread t(rank, 1);
  rank(0);
  t.join();
  EXPECT_EQ(got[0][0], 11);
  EXPECT_EQ(got[1][0], 10);
  EXPECT_EQ(got[0][1], 21);
  EXPECT_EQ(got[1][1], 20);
}

TEST(NkiExchange, ReceiveFromAFinishedPartnerNamesBoth) {
  Exchange x(2);
  x.finish(1, false);
  try {
    x.recv(0, 1, 0, "nki.isa.sendrecv", "k.py:7");
    FAIL() << "expected a deadlock error";
  } catch (const NkiError& e) {
    const std::string m = e.what();
    EXPECT_EQ(e.kind(), "deadlock");
    EXPECT_NE(m.find("shard 0 waits at nki.isa.sendrecv at k.py:7"), std::string::npos) << m;
    EXPECT_NE(m.find("shard 1 finished"), std::string::npos) << m;
  }
}

TEST(NkiExchange, CrossedWaitsAreADeadlockNotAHang) {
  Exchange x(2);
  std::string err0, err1;
  std::thread t([&] {
    try {
      x.recv(1, 0, 0, "nki.isa.sendrecv", "k.py:9");
    } catch (const NkiError& e) {
      err1 = e.what();
    }
    x.finish(1, true);
  });
  try {
    x.barrier(0, 3, "nki.isa.core_barrier", "k.py:4");
  } catch (const NkiError& e) {
    err0 = e.what();
  }
  x.finish(0, true);
  t.join();
  // whichever program noticed first names both waits; the other sees its partner fail
  const std::string& full = err0.find("deadlock:") != std::string::npos ? err0 : err1;
  EXPECT_NE(full.find("shard 0 waits at nki.isa.core_barrier at k.py:4 for cores (0, 1)"),
            std::string::npos)
      << err0 << " | " << err1;
  EXPECT_NE(full.find("shard 1 waits at nki.isa.sendrecv at k.py:9"), std::string::npos) << full;
  EXPECT_FALSE(err0.empty());
  EXPECT_FALSE(err1.empty());
}
