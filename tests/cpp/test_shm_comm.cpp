#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "runtime/collective_desc.h"
#include "runtime/error.h"
#include "runtime/shm_comm.h"

using neuron::rt::CollectiveDesc;
using neuron::rt::ShmComm;
using namespace std::chrono_literals;

namespace {

constexpr int kMaxRanks = 8;

// What the forked ranks of one test share: their handles (the c10d store's job in production).
struct Board {
  std::atomic<int> posted;
  ShmComm::Handle handles[kMaxRanks];
};

Board* new_board() {
  void* p = mmap(nullptr, sizeof(Board), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  return new (p) Board();
}

// Creates rank `rank`'s communicator and connects it to the others through `board`.
std::unique_ptr<ShmComm> join(Board* board, int rank, int world, size_t slot = 1 << 16, size_t mailbox = 1 << 12) {
  auto c = std::make_unique<ShmComm>(rank, world, slot, mailbox, "test");
  board->handles[rank] = c->handle();
  board->posted.fetch_add(1);
  while (board->posted.load() < world) std::this_thread::sleep_for(1ms);
  c->connect(std::vector<ShmComm::Handle>(board->handles, board->handles + world), 10s);
  return c;
}

// Runs body(rank) in `world` forked processes; returns their exit codes.
template <typename F>
std::vector<int> run_ranks(int world, F body) {
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
  std::vector<int> codes;
  for (pid_t p : pids) {
    int status = 0;
    waitpid(p, &status, 0);
    codes.push_back(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
  }
  return codes;
}

bool all_ok(const std::vector<int>& codes) {
  for (int c : codes)
    if (c != 0) return false;
  return true;
}

CollectiveDesc desc(const char* op, std::vector<int64_t> shape, const char* dtype = "float32", uint64_t seq = 1) {
  CollectiveDesc d;
  d.seq = seq;
  d.op = op;
  d.dtype = dtype;
  d.shape = shape;
  d.numel = 1;
  for (auto s : shape) d.numel *= static_cast<uint64_t>(s);
  d.tensors = 1;
  return d;
}

// 0 if `what` of the exception thrown by fn contains every needle, else a distinct code.
template <typename F>
int expect_error(F fn, std::vector<std::string> needles) {
  try {
    fn();
  } catch (const neuron::rt::Error& e) {
    for (const auto& n : needles) {
      if (std::string(e.what()).find(n) == std::string::npos) {
        fprintf(stderr, "message lacks '%s': %s\n", n.c_str(), e.what());
        return 7;
      }
    }
    return 0;
  }
  return 6;
}

}  // namespace

TEST(ShmComm, SlotsAreVisibleToPeersAfterBarrier) {
  Board* b = new_board();
  EXPECT_TRUE(all_ok(run_ranks(4, [&](int rank) {
    auto c = join(b, rank, 4);
    for (int round = 0; round < 50; ++round) {
      std::memset(c->slot(rank), rank * 10 + round % 7, 1024);
      c->barrier("test", 10s);
      for (int p = 0; p < 4; ++p)
        if (static_cast<unsigned char>(c->slot(p)[1023]) != static_cast<unsigned char>(p * 10 + round % 7)) return 2;
      c->barrier("test", 10s);
    }
    return 0;
  })));
}

TEST(ShmComm, SendRecvChunksLargeMessagesInOrder) {
  Board* b = new_board();
  EXPECT_TRUE(all_ok(run_ranks(2, [&](int rank) {
    auto c = join(b, rank, 2, 1 << 12, 1 << 10);  // 1 KiB mailbox: a 100 KiB message is chunked
    std::vector<int> buf(25600);
    const CollectiveDesc d = desc("send", {25600}, "int32");
    for (int m = 0; m < 3; ++m) {
      if (rank == 0) {
        for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<int>(i) * (m + 1);
        c->send(1, buf.data(), buf.size() * sizeof(int), d, 10s);
      } else {
        std::fill(buf.begin(), buf.end(), -1);
        c->recv(0, buf.data(), buf.size() * sizeof(int), d, 10s);
        for (size_t i = 0; i < buf.size(); ++i)
          if (buf[i] != static_cast<int>(i) * (m + 1)) return 3;
      }
    }
    return 0;
  })));
}

TEST(ShmComm, RecvOfAnotherSizeOrDtypeFailsNamingBoth) {
  Board* b = new_board();
  EXPECT_TRUE(all_ok(run_ranks(2, [&](int rank) {
    auto c = join(b, rank, 2);
    std::vector<float> buf(6, 1.0f);
    if (rank == 0) {
      c->send(1, buf.data(), 24, desc("send", {6}), 10s);
      return 0;
    }
    return expect_error([&] { c->recv(0, buf.data(), 12, desc("recv", {6}, "bfloat16"), 10s); },
                        {"rank 0 sent 24 bytes of float32", "receives 12 bytes of bfloat16"});
  })));
}

TEST(ShmComm, BarrierTimesOutNamingTheCollectiveAndTheMissingRank) {
  Board* b = new_board();
  EXPECT_TRUE(all_ok(run_ranks(3, [&](int rank) {
    auto c = join(b, rank, 3);
    c->barrier("sync", 10s);
    if (rank == 2) {
      std::this_thread::sleep_for(1500ms);  // alive, but never enters the second barrier
      return 0;
    }
    return expect_error([&] { c->barrier("allreduce", 400ms); }, {"allreduce", "timed out", "waiting for rank 2"});
  })));
}

TEST(ShmComm, DeadPeerFailsTheWaitWithinASecondNamingIt) {
  Board* b = new_board();
  EXPECT_TRUE(all_ok(run_ranks(3, [&](int rank) {
    auto c = join(b, rank, 3);
    c->barrier("sync", 10s);
    if (rank == 1) _exit(0);  // gone without a word
    const auto t0 = std::chrono::steady_clock::now();
    const int rc = expect_error([&] { c->barrier("all_gather", 60s); }, {"all_gather", "rank 1", "has exited"});
    return rc ? rc : (std::chrono::steady_clock::now() - t0 < 10s ? 0 : 8);
  })));
}

TEST(ShmComm, AbortOfOneRankFailsItsPeersAndLaterCalls) {
  Board* b = new_board();
  EXPECT_TRUE(all_ok(run_ranks(3, [&](int rank) {
    auto c = join(b, rank, 3);
    if (rank == 0) {
      c->abort("bad input on rank 0");
      return expect_error([&] { c->barrier("x", 10s); }, {"unusable", "bad input on rank 0"});
    }
    const int rc = expect_error([&] { c->barrier("reduce", 60s); }, {"reduce", "rank 0 failed: bad input on rank 0"});
    if (rc) return rc;
    // The failure is sticky: a later call fails at once, keeping the root cause.
    return expect_error([&] { c->barrier("reduce", 60s); }, {"unusable", "rank 0 failed: bad input on rank 0"});
  })));
}

TEST(ShmComm, MismatchedDescriptorsFailOnEveryRankNamingWhatDiffers) {
  Board* b = new_board();
  EXPECT_TRUE(all_ok(run_ranks(3, [&](int rank) {
    auto c = join(b, rank, 3);
    // Equal descriptors pass, also for a collective without a barrier of its own.
    c->begin(desc("all_reduce", {4}));
    c->end(10s);
    c->begin(desc("all_reduce", {rank == 1 ? 1 : 2}, "float32", 2));
    return expect_error([&] { c->barrier("all_reduce", 10s); },
                        {"ranks 0, 2 call all_reduce #2 (float32[2])", "rank 1 calls all_reduce #2 (float32[1])",
                         "differs: shape"});
  })));
}

TEST(ShmComm, AllToAllSplitsAreCheckedPairwise) {
  Board* b = new_board();
  EXPECT_TRUE(all_ok(run_ranks(2, [&](int rank) {
    auto c = join(b, rank, 2);
    CollectiveDesc d = desc("all_to_all_single", {}, "float32");
    d.shape.clear();
    d.send_bytes = {4, 4};
    d.recv_bytes = rank == 1 ? std::vector<uint64_t>{8, 4} : std::vector<uint64_t>{4, 4};
    c->begin(d);
    return expect_error([&] { c->end(10s); }, {"rank 0 sends 4 bytes to rank 1", "rank 1 expects 8 bytes from rank 0"});
  })));
}

TEST(ShmComm, LeavesNothingInDevShmEvenWhenKilledBeforeConnecting) {
  auto entries = [] {
    std::vector<std::string> names;
    if (DIR* d = opendir("/dev/shm")) {
      while (dirent* e = readdir(d))
        if (std::strstr(e->d_name, "neuron_emu")) names.push_back(e->d_name);
      closedir(d);
    }
    return names;
  };
  const auto before = entries();
  const pid_t pid = fork();
  if (pid == 0) {
    ShmComm c(0, 2, 1 << 20, 1 << 12, "killed");
    kill(getpid(), SIGKILL);  // before any peer connects
  }
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(entries(), before);
}

TEST(ShmComm, ConnectToAnExitedPeerNamesIt) {
  Board* b = new_board();
  const auto codes = run_ranks(2, [&](int rank) {
    auto c = std::make_unique<ShmComm>(rank, 2, 1 << 12, 1 << 10, "test");
    b->handles[rank] = c->handle();
    b->posted.fetch_add(1);
    if (rank == 1) _exit(0);
    while (b->posted.load() < 2) std::this_thread::sleep_for(1ms);
    std::this_thread::sleep_for(200ms);
    return expect_error([&] { c->connect(std::vector<ShmComm::Handle>(b->handles, b->handles + 2), 10s); },
                        {"rank 1", "has exited"});
  });
  EXPECT_EQ(codes[0], 0);
}

TEST(ShmComm, RejectsBadRanks) {
  EXPECT_THROW(ShmComm(3, 2, 4096, 1024), neuron::rt::Error);
  EXPECT_THROW(ShmComm(0, 0, 4096, 1024), neuron::rt::Error);
}

TEST(CollectiveDesc, RoundTripsThroughItsBinaryForm) {
  CollectiveDesc d = desc("reduce_scatter_tensor", {8, 3}, "bfloat16", 42);
  d.reduce = "avg";
  d.root = 3;
  d.send_bytes = {1, 2, 3};
  d.recv_bytes = {4, 5, 6};
  std::vector<char> buf(d.encoded_size());
  d.encode(buf.data());
  const CollectiveDesc e = CollectiveDesc::decode(buf.data(), buf.size());
  EXPECT_EQ(e.text(), d.text());
  EXPECT_EQ(e.send_bytes, d.send_bytes);
  EXPECT_EQ(e.recv_bytes, d.recv_bytes);
  EXPECT_LE(d.encoded_size(), CollectiveDesc::max_encoded_size(3));
  EXPECT_THROW(CollectiveDesc::decode(buf.data(), buf.size() / 2), neuron::rt::Error);
  const CollectiveDesc f = desc("all_reduce", {2});
  EXPECT_EQ(neuron::rt::collective_mismatch({f, f}, {0, 1}, "g"), "");
  EXPECT_NE(neuron::rt::collective_mismatch({f, d}, {0, 1}, "g").find("differs: operation, sequence number, dtype, shape"),
            std::string::npos);
}
