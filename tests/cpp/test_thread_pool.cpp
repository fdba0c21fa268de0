// Host thread pool: coverage of the range, chunking, nesting, exceptions, concurrent callers.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "runtime/thread_pool.h"

using namespace neuron::rt;

namespace {

struct Chunk {
  int64_t begin, end;
};

std::vector<Chunk> run_and_collect(int64_t begin, int64_t end, int64_t grain) {
  std::mutex mu;
  std::vector<Chunk> chunks;
  parallel_for(begin, end, grain, [&](int64_t b, int64_t e) {
    std::lock_guard<std::mutex> lock(mu);
    chunks.push_back({b, e});
  });
  std::sort(chunks.begin(), chunks.end(),
            [](const Chunk& x, const Chunk& y) { return x.begin < y.begin; });
  return chunks;
}

}  // namespace

TEST(ThreadPool, NumThreadsIsAtLeastOne) {
  EXPECT_GE(num_threads(), 1);
  EXPECT_LE(num_threads(), static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
}

TEST(ThreadPool, CoversEveryIndexExactlyOnce) {
  for (int64_t n : {1, 2, 3, 7, 100, 10007}) {
    for (int64_t grain : {1, 2, 16, 1000, 100000}) {
      std::vector<std::atomic<int>> hits(n);
      parallel_for(5, 5 + n, grain, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) hits[i - 5].fetch_add(1);
      });
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(hits[i].load(), 1) << "n=" << n << " grain=" << grain << " i=" << i;
    }
  }
}

TEST(ThreadPool, SplitsIntoAtMostNumThreadsContiguousChunksRespectingGrain) {
  for (int64_t grain : {1, 10, 300}) {
    auto chunks = run_and_collect(0, 1000, grain);
    ASSERT_FALSE(chunks.empty());
    EXPECT_LE(static_cast<int>(chunks.size()), num_threads());
    EXPECT_EQ(chunks.front().begin, 0);
    EXPECT_EQ(chunks.back().end, 1000);
    for (size_t i = 0; i + 1 < chunks.size(); ++i) {
      EXPECT_EQ(chunks[i].end, chunks[i + 1].begin);
      EXPECT_GE(chunks[i].end - chunks[i].begin, grain);  // all but the last hold a full grain
    }
  }
  // A range within one grain is a single chunk.
  auto one = run_and_collect(0, 50, 64);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].begin, 0);
  EXPECT_EQ(one[0].end, 50);
}

TEST(ThreadPool, EmptyRangeCallsNothing) {
  int calls = 0;
  parallel_for(10, 10, 1, [&](int64_t, int64_t) { ++calls; });
  parallel_for(10, 3, 1, [&](int64_t, int64_t) { ++calls; });
  EXPECT_EQ(calls, 0);
}

TEST(ThreadPool, SmallRangesRunInlineInsideARegion) {
  EXPECT_FALSE(in_parallel_region());
  const auto caller = std::this_thread::get_id();
  std::thread::id ran_on;
  bool inside = false;
  parallel_for(0, 10, 100, [&](int64_t, int64_t) {
    ran_on = std::this_thread::get_id();
    inside = in_parallel_region();
  });
  EXPECT_EQ(ran_on, caller);
  EXPECT_TRUE(inside);
  EXPECT_FALSE(in_parallel_region());
}

TEST(ThreadPool, NestedCallsRunInlineOnTheSameThread) {
  std::vector<std::atomic<int>> hits(400);
  std::atomic<int> mismatches{0};
  parallel_for(0, 4, 1, [&](int64_t b, int64_t e) {
    EXPECT_TRUE(in_parallel_region());
    for (int64_t o = b; o < e; ++o) {
      const auto outer_thread = std::this_thread::get_id();
      parallel_for(o * 100, o * 100 + 100, 1, [&](int64_t ib, int64_t ie) {
        if (std::this_thread::get_id() != outer_thread || ib != o * 100 || ie != o * 100 + 100)
          mismatches++;
        for (int64_t i = ib; i < ie; ++i) hits[i]++;
      });
    }
  });
  EXPECT_EQ(mismatches.load(), 0);
  for (auto& h : hits) ASSERT_EQ(h.load(), 1);
}

TEST(ThreadPool, ExceptionsPropagateToTheCaller) {
  try {
    parallel_for(0, 1000, 1, [](int64_t b, int64_t e) {
      if (b <= 500 && 500 < e) throw std::runtime_error("chunk with 500 failed");
    });
    FAIL() << "expected an exception";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "chunk with 500 failed");
  }
  EXPECT_FALSE(in_parallel_region());
  // Inline path too.
  EXPECT_THROW(parallel_for(0, 1, 1, [](int64_t, int64_t) { throw std::logic_error("x"); }),
               std::logic_error);
  EXPECT_FALSE(in_parallel_region());
  // The pool still works afterwards.
  std::atomic<int64_t> sum{0};
  parallel_for(0, 100, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) sum += i;
  });
  EXPECT_EQ(sum.load(), 4950);
}

TEST(ThreadPool, ConcurrentCallersDoNotDeadlock) {
  std::vector<std::thread> callers;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 4; ++t) {
    callers.emplace_back([&wrong, t] {
      for (int rep = 0; rep < 200; ++rep) {
        const int64_t n = 1000 + t * 17 + rep;
        std::atomic<int64_t> sum{0};
        parallel_for(0, n, 1, [&](int64_t b, int64_t e) {
          int64_t local = 0;
          for (int64_t i = b; i < e; ++i) local += i;
          sum += local;
        });
        if (sum.load() != n * (n - 1) / 2) wrong++;
      }
    });
  }
  for (auto& c : callers) c.join();
  EXPECT_EQ(wrong.load(), 0);
}

TEST(ThreadPool, RunConcurrentlyRunsEveryPartAtTheSameTime) {
  // Each part waits until all have started: only possible if they run at the same time.
  constexpr int kParts = 4;
  std::atomic<int> started{0};
  std::atomic<int> nested_inline{0};
  neuron::rt::run_concurrently(kParts, [&](int) {
    started.fetch_add(1);
    while (started.load() < kParts) std::this_thread::yield();
    // A parallel_for inside a part runs on the part's own thread (no oversubscription).
    const auto self = std::this_thread::get_id();
    neuron::rt::parallel_for(0, 1000, 1, [&](int64_t, int64_t) {
      if (std::this_thread::get_id() == self) nested_inline.fetch_add(1);
    });
  });
  EXPECT_EQ(started.load(), kParts);
  EXPECT_EQ(nested_inline.load(), kParts);
}

TEST(ThreadPool, RunConcurrentlyRethrowsTheLowestFailingPart) {
  try {
    neuron::rt::run_concurrently(3, [](int i) {
      if (i >= 1) throw std::runtime_error("part " + std::to_string(i));
    });
    FAIL() << "expected an exception";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "part 1");
  }
}
