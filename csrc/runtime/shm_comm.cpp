#include "runtime/shm_comm.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>

#include "runtime/error.h"

namespace neuron::rt {

namespace {

constexpr uint64_t kMagic = 0x4b4e4c4e55454eULL;  // "NEULNK"
constexpr size_t kHeaderBytes = 16384;
constexpr int kMaxWorld = 128;

// Process-shared futex wait/wake on a 32-bit word (FUTEX_WAIT without the PRIVATE flag).
void futex_wait(std::atomic<uint32_t>* addr, uint32_t expected, std::chrono::milliseconds slice) {
  timespec ts{static_cast<time_t>(slice.count() / 1000), static_cast<long>((slice.count() % 1000) * 1000000)};
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), FUTEX_WAIT, expected, &ts, nullptr, 0);
}
void futex_wake(std::atomic<uint32_t>* addr) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

// Waits until pred() holds, sleeping on `word` between checks; throws after `timeout`.
template <typename Pred>
void wait_on(std::atomic<uint32_t>* word, Pred pred, std::chrono::milliseconds timeout, const std::string& what) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (int spins = 0; !pred(); ++spins) {
    if (spins < 64) {
      std::this_thread::yield();
      continue;
    }
    const uint32_t seen = word->load(std::memory_order_acquire);
    if (pred()) return;
    futex_wait(word, seen, std::chrono::milliseconds(100));
    if (std::chrono::steady_clock::now() > deadline) {
      if (pred()) return;
      throw Error(str(what, " timed out after ", timeout.count() / 1000.0, " s"));
    }
  }
}

}  // namespace

struct ShmComm::Segment {
  struct alignas(64) Mailbox {
    std::atomic<uint32_t> full;  // 0: empty (sender may write), 1: full (receiver may read)
    uint64_t bytes;
  };
  uint64_t magic;
  int32_t world;
  int32_t rank;
  // Barrier (used in rank 0's segment only).
  alignas(64) std::atomic<uint32_t> arrived;
  alignas(64) std::atomic<uint32_t> generation;
  alignas(64) Mailbox mailbox[kMaxWorld];  // mailbox[d]: messages from this rank to rank d
};

ShmComm::ShmComm(const std::string& prefix, int rank, int world, size_t slot_bytes, size_t mailbox_bytes)
    : prefix_(prefix), rank_(rank), world_(world), slot_bytes_(slot_bytes), mailbox_bytes_(mailbox_bytes) {
  static_assert(sizeof(Segment) <= kHeaderBytes, "shared header too large");
  NEURON_RT_CHECK(world >= 1 && world <= kMaxWorld, "neuron collectives: world size ", world, " not in [1, ",
                  kMaxWorld, "]");
  NEURON_RT_CHECK(rank >= 0 && rank < world, "neuron collectives: rank ", rank, " not in [0, ", world, ")");
  segment_bytes_ = kHeaderBytes + slot_bytes_ + static_cast<size_t>(world) * mailbox_bytes_;
  segs_.assign(static_cast<size_t>(world), nullptr);
  const std::string name = "/" + prefix_ + "_" + std::to_string(rank_);
  shm_unlink(name.c_str());  // a stale segment from a crashed run
  const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  NEURON_RT_CHECK(fd >= 0, "neuron collectives: shm_open(", name, ") failed: ", std::strerror(errno));
  if (ftruncate(fd, static_cast<off_t>(segment_bytes_)) != 0) {
    const int err = errno;
    close(fd);
    shm_unlink(name.c_str());
    throw Error(str("neuron collectives: cannot size shared memory ", name, " to ", segment_bytes_,
                    " bytes: ", std::strerror(err), " (is /dev/shm large enough?)"));
  }
  void* p = mmap(nullptr, segment_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  NEURON_RT_CHECK(p != MAP_FAILED, "neuron collectives: mmap of ", name, " failed: ", std::strerror(errno));
  auto* s = new (p) Segment();  // the file is zero-filled; placement-new sets up the atomics
  s->world = world_;
  s->rank = rank_;
  std::atomic_thread_fence(std::memory_order_release);
  s->magic = kMagic;
  segs_[static_cast<size_t>(rank_)] = s;
}

ShmComm::~ShmComm() {
  for (int r = 0; r < world_; ++r)
    if (segs_[static_cast<size_t>(r)]) munmap(segs_[static_cast<size_t>(r)], segment_bytes_);
  if (!unlinked_) shm_unlink(("/" + prefix_ + "_" + std::to_string(rank_)).c_str());
}

void ShmComm::connect(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (int r = 0; r < world_; ++r) {
    if (segs_[static_cast<size_t>(r)]) continue;
    const std::string name = "/" + prefix_ + "_" + std::to_string(r);
    for (;;) {
      const int fd = shm_open(name.c_str(), O_RDWR, 0600);
      if (fd >= 0) {
        struct stat st {};
        if (fstat(fd, &st) == 0 && static_cast<size_t>(st.st_size) == segment_bytes_) {
          void* p = mmap(nullptr, segment_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
          close(fd);
          NEURON_RT_CHECK(p != MAP_FAILED, "neuron collectives: mmap of ", name, " failed");
          auto* s = static_cast<Segment*>(p);
          if (s->magic == kMagic) {
            NEURON_RT_CHECK(s->world == world_ && s->rank == r, "neuron collectives: segment ", name,
                            " belongs to another group (world ", s->world, ", rank ", s->rank, ")");
            segs_[static_cast<size_t>(r)] = s;
            break;
          }
          munmap(p, segment_bytes_);
        } else {
          close(fd);
        }
      }
      NEURON_RT_CHECK(std::chrono::steady_clock::now() < deadline, "neuron collectives: rank ", r,
                      " did not create its shared memory segment ", name, " in time");
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
  // Everyone has mapped everyone: the names are no longer needed, so nothing is left behind
  // in /dev/shm even if a rank crashes later.
  barrier("connect", timeout);
  shm_unlink(("/" + prefix_ + "_" + std::to_string(rank_)).c_str());
  unlinked_ = true;
}

char* ShmComm::slot(int r) const { return reinterpret_cast<char*>(seg(r)) + kHeaderBytes; }

void ShmComm::barrier(const char* what, std::chrono::milliseconds timeout) {
  Segment* s0 = seg(0);
  const uint32_t gen = s0->generation.load(std::memory_order_acquire);
  if (s0->arrived.fetch_add(1, std::memory_order_acq_rel) + 1 == static_cast<uint32_t>(world_)) {
    s0->arrived.store(0, std::memory_order_relaxed);
    s0->generation.fetch_add(1, std::memory_order_acq_rel);
    futex_wake(&s0->generation);
    return;
  }
  wait_on(&s0->generation, [&] { return s0->generation.load(std::memory_order_acquire) != gen; }, timeout,
          str("neuron collective ", what, " on rank ", rank_, " of ", world_, ": waiting for the other ranks"));
}

void ShmComm::send(int dst, const void* data, size_t bytes, std::chrono::milliseconds timeout) {
  NEURON_RT_CHECK(dst >= 0 && dst < world_ && dst != rank_, "send: bad destination rank ", dst);
  Segment::Mailbox& box = seg(rank_)->mailbox[dst];
  char* area = slot(rank_) + slot_bytes_ + static_cast<size_t>(dst) * mailbox_bytes_;
  const char* src = static_cast<const char*>(data);
  size_t done = 0;
  do {
    wait_on(&box.full, [&] { return box.full.load(std::memory_order_acquire) == 0; }, timeout,
            str("send from rank ", rank_, " to rank ", dst));
    const size_t n = std::min(mailbox_bytes_, bytes - done);
    std::memcpy(area, src + done, n);
    box.bytes = n;
    box.full.store(1, std::memory_order_release);
    futex_wake(&box.full);
    done += n;
  } while (done < bytes);
}

void ShmComm::recv(int src_rank, void* data, size_t bytes, std::chrono::milliseconds timeout) {
  NEURON_RT_CHECK(src_rank >= 0 && src_rank < world_ && src_rank != rank_, "recv: bad source rank ", src_rank);
  Segment::Mailbox& box = seg(src_rank)->mailbox[rank_];
  const char* area = slot(src_rank) + slot_bytes_ + static_cast<size_t>(rank_) * mailbox_bytes_;
  char* dst = static_cast<char*>(data);
  size_t done = 0;
  do {
    wait_on(&box.full, [&] { return box.full.load(std::memory_order_acquire) == 1; }, timeout,
            str("recv on rank ", rank_, " from rank ", src_rank));
    const size_t n = box.bytes;
    NEURON_RT_CHECK(done + n <= bytes, "recv on rank ", rank_, ": message from rank ", src_rank, " is larger (",
                    done + n, " bytes) than the receive buffer (", bytes, " bytes)");
    std::memcpy(dst + done, area, n);
    box.full.store(0, std::memory_order_release);
    futex_wake(&box.full);
    done += n;
  } while (done < bytes);
}

}  // namespace neuron::rt
