// Caching HBM allocator: per-stream reuse, cross-stream safety, accounting, cache release and
// out-of-memory reporting.
#include <gtest/gtest.h>

#include <cstdint>
#include <future>
#include <thread>
#include <vector>

#include "runtime/allocator.h"
#include "runtime/error.h"
#include "runtime/stream.h"

using namespace neuron::rt;

namespace {

constexpr size_t kKiB = 1024;
constexpr size_t kMiB = 1024 * kKiB;

// A task that keeps its stream busy until open() is called.
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

}  // namespace

TEST(FormatBytes, PicksTheUnit) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(100), "100 B");
  EXPECT_EQ(format_bytes(1023), "1023 B");
  EXPECT_EQ(format_bytes(1024), "1.00 KiB");
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(format_bytes(512 * kMiB), "512.00 MiB");
  EXPECT_EQ(format_bytes(2ull << 30), "2.00 GiB");
  EXPECT_EQ(format_bytes(24ull << 30), "24.00 GiB");
}

TEST(Allocator, ZeroBytesIsNullAndAlignmentIs64) {
  HbmAllocator a(0, 64 * kMiB);
  EXPECT_EQ(a.allocate(0, nullptr), nullptr);
  std::vector<void*> ptrs;
  for (size_t n : {size_t{1}, size_t{63}, size_t{1000}, 3 * kMiB + 5}) {
    void* p = a.allocate(n, nullptr);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u) << n;
    static_cast<char*>(p)[n - 1] = 1;  // writable to the last byte
    ptrs.push_back(p);
  }
  for (void* p : ptrs) a.free(p);
  a.free(nullptr);  // no-op
}

TEST(Allocator, ReusesABlockOnTheSameStream) {
  Stream s(0, 1, 0);
  HbmAllocator a(0, 64 * kMiB);
  void* p = a.allocate(1000, &s);
  a.free(p);
  // 900 and 1000 bytes round to the same 1 KiB block.
  void* q = a.allocate(900, &s);
  EXPECT_EQ(q, p);
  a.free(q);
  // Large blocks too.
  void* big = a.allocate(3 * kMiB, &s);
  a.free(big);
  EXPECT_EQ(a.allocate(3 * kMiB + 100, &s), big);
  EXPECT_EQ(a.stats().segment.current, 2);
}

TEST(Allocator, DoesNotServeASmallRequestFromAMuchBiggerBlock) {
  Stream s(0, 1, 0);
  HbmAllocator a(0, 64 * kMiB);
  void* big = a.allocate(kMiB, &s);
  a.free(big);
  void* small = a.allocate(100, &s);
  EXPECT_NE(small, big);
  EXPECT_EQ(a.stats().segment.current, 2);
  // 1 MiB cached block for a 512 KiB request: within 2x, reused.
  a.free(small);
  EXPECT_EQ(a.allocate(512 * kKiB, &s), big);
}

TEST(Allocator, DoesNotReuseAcrossStreams) {
  Stream s1(0, 1, 0), s2(0, 2, 0);
  HbmAllocator a(0, 64 * kMiB);
  void* p = a.allocate(4096, &s1);
  a.free(p);
  void* q = a.allocate(4096, &s2);
  EXPECT_NE(q, p);
  EXPECT_EQ(a.allocate(4096, &s1), p);
}

TEST(Allocator, RecordStreamDelaysReuseUntilTheOtherStreamPassedTheFree) {
  Stream a_stream(0, 1, 0), b_stream(0, 2, 0);
  HbmAllocator a(0, 64 * kMiB);
  void* p = a.allocate(4096, &a_stream);
  a.record_stream(p, &b_stream);
  Gate gate;
  gate.block(b_stream);  // work on B that may still read p
  a.free(p);
  EXPECT_EQ(a.stats().active.current, 1);  // freed, but waiting on B
  void* q = a.allocate(4096, &a_stream);
  EXPECT_NE(q, p);
  gate.open();
  b_stream.synchronize();
  void* r = a.allocate(4096, &a_stream);
  EXPECT_EQ(r, p);
  a.free(q);
  a.free(r);
  EXPECT_EQ(a.stats().active.current, 0);
}

TEST(Allocator, RecordStreamOnTheAllocatingStreamIsHarmless) {
  Stream s(0, 1, 0);
  HbmAllocator a(0, 64 * kMiB);
  void* p = a.allocate(4096, &s);
  a.record_stream(p, &s);
  a.free(p);
  EXPECT_EQ(a.allocate(4096, &s), p);
  EXPECT_THROW(a.record_stream(reinterpret_cast<void*>(0x1000), &s), Error);
}

TEST(Allocator, Accounting) {
  HbmAllocator a(0, 64 * kMiB);
  void* p = a.allocate(1000, nullptr);      // 1 KiB block
  void* q = a.allocate(3 * kMiB, nullptr);  // 4 MiB block
  MemoryStats s = a.stats();
  EXPECT_EQ(s.allocation.current, 2);
  EXPECT_EQ(s.segment.current, 2);
  EXPECT_EQ(s.active.current, 2);
  EXPECT_EQ(s.allocated_bytes.current, static_cast<int64_t>(1024 + 4 * kMiB));
  EXPECT_EQ(s.reserved_bytes.current, static_cast<int64_t>(1024 + 4 * kMiB));
  EXPECT_EQ(s.active_bytes.current, static_cast<int64_t>(1024 + 4 * kMiB));
  EXPECT_EQ(s.requested_bytes.current, static_cast<int64_t>(1000 + 3 * kMiB));

  a.free(q);
  s = a.stats();
  EXPECT_EQ(s.allocation.current, 1);
  EXPECT_EQ(s.allocation.peak, 2);
  EXPECT_EQ(s.allocation.allocated, 2);
  EXPECT_EQ(s.allocation.freed, 1);
  EXPECT_EQ(s.allocated_bytes.current, 1024);
  EXPECT_EQ(s.allocated_bytes.peak, static_cast<int64_t>(1024 + 4 * kMiB));
  EXPECT_EQ(s.requested_bytes.current, 1000);
  EXPECT_EQ(s.reserved_bytes.current,
            static_cast<int64_t>(1024 + 4 * kMiB));  // cached, still reserved
  EXPECT_EQ(s.active.current, 1);
  EXPECT_EQ(s.segment.current, 2);

  a.reset_peak_stats();
  s = a.stats();
  EXPECT_EQ(s.allocated_bytes.peak, 1024);
  EXPECT_EQ(s.allocation.peak, 1);
  EXPECT_EQ(s.reserved_bytes.peak, static_cast<int64_t>(1024 + 4 * kMiB));

  // Reusing the cached block does not create a segment.
  void* q2 = a.allocate(3 * kMiB, nullptr);
  EXPECT_EQ(q2, q);
  s = a.stats();
  EXPECT_EQ(s.segment.allocated, 2);
  EXPECT_EQ(s.allocated_bytes.peak, static_cast<int64_t>(1024 + 4 * kMiB));

  a.reset_accumulated_stats();
  s = a.stats();
  EXPECT_EQ(s.allocation.allocated, 0);
  EXPECT_EQ(s.allocation.freed, 0);
  EXPECT_EQ(s.allocation.current, 2);
  a.free(p);
  a.free(q2);
  s = a.stats();
  EXPECT_EQ(s.allocation.current, 0);
  EXPECT_EQ(s.allocation.freed, 2);
  EXPECT_EQ(s.allocated_bytes.current, 0);
  EXPECT_EQ(s.requested_bytes.current, 0);
}

TEST(Allocator, EmptyCacheReleasesReservedBytes) {
  HbmAllocator a(0, 64 * kMiB);
  void* keep = a.allocate(4096, nullptr);
  void* x = a.allocate(8192, nullptr);
  void* y = a.allocate(5 * kMiB, nullptr);
  a.free(x);
  a.free(y);
  EXPECT_EQ(a.stats().reserved_bytes.current, static_cast<int64_t>(4096 + 8192 + 6 * kMiB));
  a.empty_cache();
  MemoryStats s = a.stats();
  EXPECT_EQ(s.reserved_bytes.current, 4096);
  EXPECT_EQ(s.segment.current, 1);
  EXPECT_EQ(s.allocated_bytes.current, 4096);
  // Released blocks are gone for good: a new allocation makes a new segment.
  void* z = a.allocate(8192, nullptr);
  EXPECT_EQ(a.stats().segment.allocated, 4);
  a.free(z);
  a.free(keep);
}

TEST(Allocator, EmptyCacheSynchronizesBeforeReleasingBlocksInUseByQueuedWork) {
  Stream s(0, 1, 0);
  HbmAllocator a(0, 64 * kMiB);
  Gate gate;
  gate.block(s);
  void* p = a.allocate(4096, &s);
  a.free(p);  // queued work on s (the gate) may still use p
  struct Ctx {
    Gate* gate;
    Stream* s;
    int calls = 0;
  } ctx{&gate, &s};
  a.set_sync_callback(
      [](void* c) {
        auto* x = static_cast<Ctx*>(c);
        ++x->calls;
        x->gate->open();
        x->s->synchronize();
      },
      &ctx);
  a.empty_cache();
  EXPECT_EQ(ctx.calls, 1);
  EXPECT_EQ(a.stats().reserved_bytes.current, 0);
  a.empty_cache();  // nothing left in flight: no sync needed
  EXPECT_EQ(ctx.calls, 1);
}

TEST(Allocator, OutOfMemoryMessageAndCounters) {
  HbmAllocator a(1, 8 * kMiB);
  int syncs = 0;
  a.set_sync_callback([](void* c) { ++*static_cast<int*>(c); }, &syncs);
  void* live = a.allocate(4 * kMiB, nullptr);
  void* cached = a.allocate(2 * kMiB, nullptr);
  a.free(cached);
  // 4 MiB more does not fit next to 6 MiB reserved: the cache is flushed and the retry fits.
  void* third = a.allocate(3 * kMiB, nullptr);
  MemoryStats s = a.stats();
  EXPECT_EQ(syncs, 1);
  EXPECT_EQ(s.num_alloc_retries, 1);
  EXPECT_EQ(s.num_ooms, 0);
  EXPECT_EQ(s.reserved_bytes.current, static_cast<int64_t>(8 * kMiB));

  try {
    a.allocate(kMiB + 1, nullptr);
    FAIL() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    EXPECT_STREQ(
        e.what(),
        "neuron:1 out of HBM memory: tried to allocate 1.00 MiB (a 2.00 MiB block); 8.00 MiB of "
        "8.00 MiB allocated, "
        "8.00 MiB reserved by the caching allocator, 0 B free. Free tensors or call "
        "torch.neuron.empty_cache(); the capacity per logical core is set by the instance profile "
        "(NEURON_EMU_HBM_GB overrides it).");
  }
  s = a.stats();
  EXPECT_EQ(s.num_ooms, 1);
  EXPECT_EQ(s.num_alloc_retries, 1);  // nothing cached: no flush, no retry
  EXPECT_EQ(syncs, 1);

  a.free(third);  // 4 MiB cached; a 6 MiB request needs a flush and still does not fit
  try {
    a.allocate(6 * kMiB, nullptr);
    FAIL() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    EXPECT_STREQ(
        e.what(),
        "neuron:1 out of HBM memory: tried to allocate 6.00 MiB; 4.00 MiB of 8.00 MiB allocated, "
        "4.00 MiB reserved by the caching allocator, 4.00 MiB free. Free tensors or call "
        "torch.neuron.empty_cache(); the capacity per logical core is set by the instance profile "
        "(NEURON_EMU_HBM_GB overrides it).");
  }
  s = a.stats();
  EXPECT_EQ(s.num_ooms, 2);
  EXPECT_EQ(s.num_alloc_retries, 2);
  EXPECT_EQ(syncs, 2);
  EXPECT_THROW(a.allocate(9 * kMiB, nullptr), OutOfMemoryError);  // larger than the capacity
  EXPECT_EQ(a.stats().num_ooms, 3);
  a.free(live);
}

TEST(Allocator, OutOfMemoryMessageNamesTheBlockARequestNeeds) {
  // 4 B need one 512 B block: "tried to allocate 4 B ... 107 B free" contradicted itself.
  HbmAllocator a(0, 107);
  try {
    a.allocate(4, nullptr);
    FAIL() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("tried to allocate 4 B (a 512 B block); 0 B of 107 B allocated"),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("107 B free"), std::string::npos) << msg;
  }
}

TEST(Allocator, FreeOfUnknownPointerThrows) {
  HbmAllocator a(2, 64 * kMiB);
  int x = 0;
  EXPECT_THROW(a.free(&x), Error);
  void* p = a.allocate(100, nullptr);
  a.free(p);
  try {
    a.free(p);  // double free
    FAIL() << "expected Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("neuron:2: free of pointer"), std::string::npos)
        << e.what();
  }
}

TEST(Allocator, OwnsInteriorPointersOfLiveBlocks) {
  HbmAllocator a(0, 64 * kMiB);
  char* p = static_cast<char*>(a.allocate(1000, nullptr));  // 1 KiB block
  EXPECT_TRUE(a.owns(p));
  EXPECT_TRUE(a.owns(p + 999));
  EXPECT_TRUE(a.owns(p + 1023));
  int other = 0;
  EXPECT_FALSE(a.owns(&other));
  EXPECT_FALSE(a.owns(nullptr));
  a.free(p);
  EXPECT_FALSE(a.owns(p));
}

TEST(Allocator, ConcurrentAllocateAndFreeKeepTheBooksBalanced) {
  HbmAllocator a(0, 256 * kMiB);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&a, t] {
      std::vector<void*> mine;
      for (int i = 0; i < 500; ++i) {
        mine.push_back(a.allocate(64 + 97 * ((i + t) % 50), nullptr));
        if (i % 3 == 0) {
          a.free(mine.front());
          mine.erase(mine.begin());
        }
      }
      for (void* p : mine) a.free(p);
    });
  }
  for (auto& th : threads) th.join();
  MemoryStats s = a.stats();
  EXPECT_EQ(s.allocation.current, 0);
  EXPECT_EQ(s.allocated_bytes.current, 0);
  EXPECT_EQ(s.active.current, 0);
  EXPECT_EQ(s.allocation.allocated, 2000);
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved_bytes.current, 0);
}
