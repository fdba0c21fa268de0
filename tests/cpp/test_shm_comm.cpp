#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "runtime/error.h"
#include "runtime/shm_comm.h"

using neuron::rt::ShmComm;
using namespace std::chrono_literals;

namespace {

std::string unique_prefix() { return "neuron_emu_test_" + std::to_string(getpid()) + "_" + std::to_string(rand()); }

// Runs body(rank) in `world` forked processes; returns true if all exited with 0.
template <typename F>
bool run_ranks(int world, F body) {
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      int rc = 1;
      try {
        rc = body(r);
      } catch (const std::exception& e) {
        fprintf(stderr, "rank %d: %s\n", r, e.what());
      }
      _exit(rc);
    }
    pids.push_back(pid);
  }
  bool ok = true;
  for (pid_t p : pids) {
    int status = 0;
    waitpid(p, &status, 0);
    ok &= WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  return ok;
}

}  // namespace

TEST(ShmComm, SlotsAreVisibleToPeersAfterBarrier) {
  const std::string prefix = unique_prefix();
  EXPECT_TRUE(run_ranks(4, [&](int rank) {
    ShmComm c(prefix, rank, 4, 1 << 16, 1 << 12);
    c.connect(10s);
    for (int round = 0; round < 50; ++round) {
      std::memset(c.slot(rank), rank * 10 + round % 7, 1024);
      c.barrier("test", 10s);
      for (int p = 0; p < 4; ++p)
        if (static_cast<unsigned char>(c.slot(p)[1023]) != static_cast<unsigned char>(p * 10 + round % 7)) return 2;
      c.barrier("test", 10s);
    }
    return 0;
  }));
}

TEST(ShmComm, SendRecvChunksLargeMessagesInOrder) {
  const std::string prefix = unique_prefix();
  EXPECT_TRUE(run_ranks(2, [&](int rank) {
    ShmComm c(prefix, rank, 2, 1 << 12, 1 << 10);  // 1 KiB mailbox: a 100 KiB message is chunked
    c.connect(10s);
    std::vector<int> buf(25600);
    for (int m = 0; m < 3; ++m) {
      if (rank == 0) {
        for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<int>(i) * (m + 1);
        c.send(1, buf.data(), buf.size() * sizeof(int), 10s);
      } else {
        std::fill(buf.begin(), buf.end(), -1);
        c.recv(0, buf.data(), buf.size() * sizeof(int), 10s);
        for (size_t i = 0; i < buf.size(); ++i)
          if (buf[i] != static_cast<int>(i) * (m + 1)) return 3;
      }
    }
    return 0;
  }));
}

TEST(ShmComm, BarrierTimesOutNamingTheCollective) {
  const std::string prefix = unique_prefix();
  EXPECT_TRUE(run_ranks(2, [&](int rank) {
    ShmComm c(prefix, rank, 2, 1 << 12, 1 << 10);
    c.connect(10s);
    if (rank == 1) {
      c.barrier("sync", 10s);  // pairs with rank 0's first barrier below
      return 0;
    }
    c.barrier("sync", 10s);
    try {
      c.barrier("allreduce", 300ms);  // rank 1 never arrives
    } catch (const neuron::rt::Error& e) {
      return std::string(e.what()).find("allreduce") != std::string::npos &&
                     std::string(e.what()).find("timed out") != std::string::npos
                 ? 0
                 : 4;
    }
    return 5;
  }));
}

TEST(ShmComm, RejectsBadRanks) {
  EXPECT_THROW(ShmComm("neuron_emu_bad", 3, 2, 4096, 1024), neuron::rt::Error);
  EXPECT_THROW(ShmComm("neuron_emu_bad", 0, 0, 4096, 1024), neuron::rt::Error);
}
