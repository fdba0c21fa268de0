#include "runtime/shm_comm.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>
#include <thread>

#include "runtime/error.h"

namespace neuron::rt {

namespace {

constexpr uint64_t kMagic = 0x324b4e4c4e55454eULL;  // "NEULNK2"
constexpr int kMaxWorld = 128;
constexpr size_t kReasonBytes = 2048;
constexpr size_t kDescBytes = 4096;
constexpr size_t kHeaderBytes = 64 * 1024;
constexpr auto kSlice = std::chrono::milliseconds(50);      // futex sleep between checks
constexpr auto kLiveness = std::chrono::milliseconds(200);  // how often peer processes are checked

// Process-shared futex wait/wake on a 32-bit word (FUTEX_WAIT without the PRIVATE flag).
void futex_wait(std::atomic<uint32_t>* addr, uint32_t expected, std::chrono::milliseconds slice) {
  timespec ts{static_cast<time_t>(slice.count() / 1000), static_cast<long>((slice.count() % 1000) * 1000000)};
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), FUTEX_WAIT, expected, &ts, nullptr, 0);
}
void futex_wake(std::atomic<uint32_t>* addr) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

// State and start time (clock ticks since boot) of a process, from /proc/<pid>/stat. Returns
// false when the process does not exist; `known` is false when that cannot be told.
bool read_proc_stat(int64_t pid, char* state, uint64_t* start, bool* known) {
  *known = true;
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%lld/stat", static_cast<long long>(pid));
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    *known = errno == ENOENT || errno == ESRCH;
    return false;
  }
  char buf[1024];
  const ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0) return false;
  buf[n] = 0;
  const char* p = std::strrchr(buf, ')');  // the command name may contain spaces and parentheses
  if (!p || p[1] != ' ') {
    *known = false;
    return false;
  }
  *state = p[2];
  // Field 3 is the state; the start time is field 22.
  p += 2;
  for (int field = 3; field < 22 && p; ++field) {
    p = std::strchr(p, ' ');
    if (p) ++p;
  }
  *start = p ? std::strtoull(p, nullptr, 10) : 0;
  return true;
}

uint64_t random_token() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd() ^
         static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
         (static_cast<uint64_t>(getpid()) << 16);
}

std::string ranks_text(const std::vector<int>& ranks) {
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

}  // namespace

struct alignas(64) ShmComm::Mailbox {
  std::atomic<uint32_t> full;  // 0: empty (sender may write), 1: full (receiver may read)
  uint64_t bytes;              // this chunk
  uint64_t total;              // the whole message
  char dtype[24];
};

struct ShmComm::Segment {
  uint64_t magic;
  uint64_t token;
  int32_t world;
  int32_t rank;
  int64_t pid;
  uint64_t start_time;
  alignas(64) std::atomic<uint32_t> epoch;  // barriers this rank has entered
  alignas(64) std::atomic<uint32_t> bell;   // rank 0's segment: rung when a barrier completes
  alignas(64) std::atomic<uint32_t> failed;  // 0: healthy, 1: being written, 2: failed
  int32_t origin;                            // label of the rank where the failure started
  char reason[kReasonBytes];
  alignas(64) std::atomic<uint32_t> desc_len[2];
  char desc[2][kDescBytes];  // descriptors of the last two collectives (by begin() parity)
  Mailbox mailbox[kMaxWorld];  // mailbox[d]: messages from this rank to rank d
};

ShmComm::ShmComm(int rank, int world, size_t slot_bytes, size_t mailbox_bytes, std::string group,
                 std::vector<int> labels)
    : rank_(rank),
      world_(world),
      slot_bytes_(slot_bytes),
      mailbox_bytes_(mailbox_bytes),
      group_(std::move(group)),
      labels_(std::move(labels)) {
  static_assert(sizeof(Segment) <= kHeaderBytes, "shared header too large");
  NEURON_RT_CHECK(world >= 1 && world <= kMaxWorld, "neuron collectives: ", world,
                  " ranks on one host; at most ", kMaxWorld, " are supported");
  NEURON_RT_CHECK(rank >= 0 && rank < world, "neuron collectives: rank ", rank, " not in [0, ", world, ")");
  if (labels_.empty())
    for (int r = 0; r < world; ++r) labels_.push_back(r);
  NEURON_RT_CHECK(static_cast<int>(labels_.size()) == world, "neuron collectives: ", labels_.size(),
                  " rank labels for ", world, " ranks");
  segment_bytes_ = kHeaderBytes + slot_bytes_ + static_cast<size_t>(world) * mailbox_bytes_;
  segs_.assign(static_cast<size_t>(world), nullptr);
  pid_ = getpid();
  token_ = random_token();
  const std::string name = str("neuron_emu_", group_, "_", rank);
  fd_ = static_cast<int32_t>(memfd_create(name.c_str(), MFD_CLOEXEC));
  NEURON_RT_CHECK(fd_ >= 0, "neuron collectives: memfd_create failed: ", std::strerror(errno));
  if (ftruncate(fd_, static_cast<off_t>(segment_bytes_)) != 0) {
    const int err = errno;
    close(fd_);
    throw Error(str("neuron collectives: cannot size shared memory to ", segment_bytes_, " bytes: ",
                    std::strerror(err)));
  }
  void* p = mmap(nullptr, segment_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    close(fd_);
    throw Error(str("neuron collectives: mmap of ", segment_bytes_, " bytes of shared memory failed: ",
                    std::strerror(err)));
  }
  auto* s = new (p) Segment();  // the memory is zero-filled; placement-new sets up the atomics
  s->world = world_;
  s->rank = rank_;
  s->pid = pid_;
  char state = 0;
  bool known = false;
  read_proc_stat(pid_, &state, &s->start_time, &known);
  s->token = token_;
  std::atomic_thread_fence(std::memory_order_release);
  s->magic = kMagic;
  segs_[static_cast<size_t>(rank_)] = s;
}

ShmComm::~ShmComm() {
  for (Segment* s : segs_)
    if (s) munmap(s, segment_bytes_);
  if (fd_ >= 0) close(fd_);
}

std::string ShmComm::label(int r) const { return std::to_string(labels_[static_cast<size_t>(r)]); }

void ShmComm::connect(const std::vector<Handle>& peers, std::chrono::milliseconds timeout) {
  NEURON_RT_CHECK(static_cast<int>(peers.size()) == world_, "neuron collectives: ", peers.size(), " handles for ",
                  world_, " ranks");
  const std::string where = str("neuron collectives (group '", group_, "', rank ", label(rank_), ")");
  for (int r = 0; r < world_; ++r) {
    if (seg(r)) continue;
    const Handle& h = peers[static_cast<size_t>(r)];
    char path[96];
    std::snprintf(path, sizeof(path), "/proc/%lld/fd/%d", static_cast<long long>(h.pid), h.fd);
    const int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
      const int err = errno;
      throw Error(str(where, ": cannot open the shared memory of rank ", label(r), " (", path,
                      "): ", std::strerror(err),
                      err == ENOENT ? "; its process (pid " + std::to_string(h.pid) + ") has exited" : std::string()));
    }
    struct stat st {};
    const bool sized = fstat(fd, &st) == 0 && static_cast<size_t>(st.st_size) == segment_bytes_;
    void* p = sized ? mmap(nullptr, segment_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
    close(fd);
    NEURON_RT_CHECK(sized, where, ": the shared memory of rank ", label(r), " has ", st.st_size, " bytes, this rank's ",
                    segment_bytes_,
                    "; NEURON_EMU_COLLECTIVE_SLOT_MB and NEURON_EMU_COLLECTIVE_MAILBOX_MB must be the same on every rank");
    NEURON_RT_CHECK(p != MAP_FAILED, where, ": mmap of rank ", label(r), "'s shared memory failed: ",
                    std::strerror(errno));
    auto* s = static_cast<Segment*>(p);
    if (s->magic != kMagic || s->token != h.token || s->world != world_ || s->rank != r) {
      munmap(p, segment_bytes_);
      throw Error(str(where, ": ", path, " is not rank ", label(r), "'s shared memory of this group"));
    }
    segs_[static_cast<size_t>(r)] = s;
  }
  barrier("connect", timeout);
  // Everyone has mapped everyone: the descriptor is no longer needed.
  close(fd_);
  fd_ = -1;
}

char* ShmComm::slot(int r) const { return reinterpret_cast<char*>(seg(r)) + kHeaderBytes; }

void ShmComm::abort(const std::string& reason) noexcept { abort_as(labels_[static_cast<size_t>(rank_)], reason); }

void ShmComm::abort_as(int origin, const std::string& reason) noexcept {
  Segment* s = seg(rank_);
  uint32_t healthy = 0;
  if (!s->failed.compare_exchange_strong(healthy, 1, std::memory_order_acq_rel)) return;
  s->origin = origin;
  const size_t n = std::min(reason.size(), kReasonBytes - 1);
  std::memcpy(s->reason, reason.data(), n);
  s->reason[n] = 0;
  s->failed.store(2, std::memory_order_release);
  // Wake whoever sleeps on a word this rank could be waited on with.
  for (Segment* other : segs_) {
    if (!other) continue;
    other->bell.fetch_add(1, std::memory_order_acq_rel);
    futex_wake(&other->bell);
    futex_wake(&other->mailbox[rank_].full);
  }
  for (int d = 0; d < world_; ++d) futex_wake(&s->mailbox[d].full);
}

std::string ShmComm::failure() const {
  const Segment* s = seg(rank_);
  if (s->failed.load(std::memory_order_acquire) != 2) return {};
  if (s->origin == labels_[static_cast<size_t>(rank_)]) return s->reason;
  return str("rank ", s->origin, " failed: ", s->reason);
}

std::string ShmComm::any_failure() const {
  std::string own = failure();
  if (!own.empty()) return own;
  for (int r = 0; r < world_; ++r) {
    const Segment* s = seg(r);
    if (s && r != rank_ && s->failed.load(std::memory_order_acquire) == 2) return str("rank ", s->origin, " failed: ", s->reason);
  }
  return {};
}

void ShmComm::fail(const std::string& reason) {
  abort(reason);
  throw Error(failure().empty() ? reason : failure());
}

void ShmComm::check_usable() const {
  const std::string f = failure();
  if (!f.empty())
    throw Error(str("neuron collectives: process group '", group_, "' is unusable after an earlier failure: ", f));
}

bool ShmComm::peer_alive(int r) const {
  const Segment* s = seg(r);
  char state = 0;
  uint64_t start = 0;
  bool known = false;
  if (!read_proc_stat(s->pid, &state, &start, &known)) return !known;
  return state != 'Z' && state != 'X' && (s->start_time == 0 || start == s->start_time);
}

template <typename Ready, typename Pending>
void ShmComm::wait(std::atomic<uint32_t>* word, Ready ready, Pending pending, std::chrono::milliseconds timeout,
                   const std::string& what) {
  const auto start = std::chrono::steady_clock::now();
  auto next_liveness = start + kLiveness;
  for (int spins = 0; !ready(); ++spins) {
    if (spins < 64) {
      std::this_thread::yield();
      continue;
    }
    const uint32_t seen = word->load(std::memory_order_acquire);
    if (ready()) return;
    futex_wait(word, seen, kSlice);
    if (ready()) return;
    const std::string own = failure();
    if (!own.empty()) throw Error(own);  // aborted from another thread (e.g. a remote failure)
    for (int r = 0; r < world_; ++r) {
      const Segment* s = seg(r);
      if (r == rank_ || s->failed.load(std::memory_order_acquire) != 2) continue;
      // Keep the root cause: a rank that failed because of another one carries its reason.
      const std::string reason = s->reason;
      abort_as(s->origin, reason);
      throw Error(str(what, " on rank ", label(rank_), " of group '", group_, "': rank ", s->origin, " failed: ", reason));
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= next_liveness) {
      next_liveness = now + kLiveness;
      for (int r : pending()) {
        if (peer_alive(r)) continue;
        fail(str(what, " on rank ", label(rank_), " of group '", group_, "': rank ", label(r), " (pid ", seg(r)->pid,
                 ") has exited"));
      }
    }
    if (now - start > timeout) {
      std::vector<int> missing;
      for (int r : pending()) missing.push_back(labels_[static_cast<size_t>(r)]);
      fail(str(what, " on rank ", label(rank_), " of group '", group_, "': timed out after ",
               std::chrono::duration<double>(timeout).count(), " s waiting for ", ranks_text(missing)));
    }
  }
}

void ShmComm::begin(const CollectiveDesc& desc) {
  check_usable();
  const size_t n = desc.encoded_size();
  NEURON_RT_CHECK(n <= kDescBytes, "neuron collectives: descriptor of ", desc.op, " too large (", n, " bytes)");
  const int b = static_cast<int>(collectives_++ & 1);
  Segment* s = seg(rank_);
  desc.encode(s->desc[b]);
  s->desc_len[b].store(static_cast<uint32_t>(n), std::memory_order_release);
  check_pending_ = true;
  pending_what_ = "neuron collective " + desc.op;
}

void ShmComm::end(std::chrono::milliseconds timeout) {
  if (check_pending_) barrier(pending_what_.c_str(), timeout);
}

void ShmComm::check_descriptors() {
  check_pending_ = false;
  const int b = static_cast<int>((collectives_ - 1) & 1);
  const Segment* me = seg(rank_);
  const uint32_t n = me->desc_len[b].load(std::memory_order_acquire);
  bool equal = true;
  for (int r = 0; r < world_ && equal; ++r) {
    const Segment* s = seg(r);
    equal = s->desc_len[b].load(std::memory_order_acquire) == n && std::memcmp(s->desc[b], me->desc[b], n) == 0;
  }
  if (equal) return;
  std::vector<CollectiveDesc> descs;
  for (int r = 0; r < world_; ++r) {
    const Segment* s = seg(r);
    descs.push_back(CollectiveDesc::decode(s->desc[b], s->desc_len[b].load(std::memory_order_acquire)));
  }
  const std::string msg = collective_mismatch(descs, labels_, group_);
  if (!msg.empty()) fail(msg);
}

void ShmComm::barrier(const char* what, std::chrono::milliseconds timeout) {
  check_usable();
  const uint32_t e = ++epoch_;
  seg(rank_)->epoch.store(e);  // seq_cst, paired with the seq_cst loads below
  auto arrived = [&](int r) { return static_cast<int32_t>(seg(r)->epoch.load() - e) >= 0; };
  auto all = [&] {
    for (int r = 0; r < world_; ++r)
      if (!arrived(r)) return false;
    return true;
  };
  Segment* s0 = seg(0);
  if (all()) {
    // The last rank to arrive sees everyone (seq_cst order) and wakes the sleepers.
    s0->bell.fetch_add(1, std::memory_order_acq_rel);
    futex_wake(&s0->bell);
  } else {
    wait(
        &s0->bell, all,
        [&] {
          std::vector<int> missing;
          for (int r = 0; r < world_; ++r)
            if (!arrived(r)) missing.push_back(r);
          return missing;
        },
        timeout, what);
  }
  if (check_pending_) check_descriptors();
}

void ShmComm::send(int dst, const void* data, size_t bytes, const CollectiveDesc& desc,
                   std::chrono::milliseconds timeout) {
  check_usable();
  NEURON_RT_CHECK(dst >= 0 && dst < world_ && dst != rank_, "send: bad destination rank ", dst);
  Mailbox& box = seg(rank_)->mailbox[dst];
  char* area = slot(rank_) + slot_bytes_ + static_cast<size_t>(dst) * mailbox_bytes_;
  const char* src = static_cast<const char*>(data);
  const std::string what = str("neuron send from rank ", label(rank_), " to rank ", label(dst));
  size_t done = 0;
  do {
    wait(&box.full, [&] { return box.full.load(std::memory_order_acquire) == 0; }, [&] { return std::vector<int>{dst}; },
         timeout, what);
    const size_t n = std::min(mailbox_bytes_, bytes - done);
    std::memcpy(area, src + done, n);
    box.bytes = n;
    box.total = bytes;
    std::snprintf(box.dtype, sizeof(box.dtype), "%s", desc.dtype.c_str());
    box.full.store(1, std::memory_order_release);
    futex_wake(&box.full);
    done += n;
  } while (done < bytes);
}

void ShmComm::recv(int src_rank, void* data, size_t bytes, const CollectiveDesc& desc,
                   std::chrono::milliseconds timeout) {
  check_usable();
  NEURON_RT_CHECK(src_rank >= 0 && src_rank < world_ && src_rank != rank_, "recv: bad source rank ", src_rank);
  Mailbox& box = seg(src_rank)->mailbox[rank_];
  const char* area = slot(src_rank) + slot_bytes_ + static_cast<size_t>(rank_) * mailbox_bytes_;
  char* dst = static_cast<char*>(data);
  const std::string what = str("neuron recv on rank ", label(rank_), " from rank ", label(src_rank));
  size_t done = 0;
  do {
    wait(&box.full, [&] { return box.full.load(std::memory_order_acquire) == 1; },
         [&] { return std::vector<int>{src_rank}; }, timeout, what);
    const size_t n = box.bytes;
    if (box.total != bytes || desc.dtype != box.dtype)
      fail(str(what, ": rank ", label(src_rank), " sent ", box.total, " bytes of ", box.dtype, ", but this rank receives ",
               bytes, " bytes of ", desc.dtype, " (", desc.text(), ")"));
    std::memcpy(dst + done, area, n);
    box.full.store(0, std::memory_order_release);
    futex_wake(&box.full);
    done += n;
  } while (done < bytes);
}

}  // namespace neuron::rt
