#include "Collectives.h"

#include <algorithm>
#include <cstring>

#include "GlooLink.h"
#include "kernels/dtype.h"

namespace neuron::torch_glue {

namespace {

using kernels::CollectiveOp;
using kernels::DType;

// [begin, end) of part q when n items are split into `parts` nearly equal parts.
std::pair<int64_t, int64_t> part(int64_t n, int parts, int q) {
  return {n * q / parts, n * (q + 1) / parts};
}

// The divisor of the last reduction step: every rank's contribution, for AVG only.
int64_t last_divisor(const Fabric& f, CollectiveOp op) { return op == CollectiveOp::Avg ? f.size() : 0; }

}  // namespace

char* Fabric::scratch_bytes(size_t n) {
  if (scratch.size() < n) scratch.resize(n);
  return scratch.data();
}

void all_reduce(Fabric& f, const char* in, char* out, int64_t n, DType dtype, CollectiveOp op, const std::string& what) {
  rt::ShmComm& c = *f.shm;
  const int L = c.world(), l = c.rank(), H = f.hosts;
  const size_t es = kernels::element_size(dtype);
  const DType acc = kernels::collective_acc_dtype(dtype);
  const size_t as = kernels::element_size(acc);
  const int64_t per_chunk = std::max<int64_t>(1, static_cast<int64_t>(c.slot_bytes() / es));
  for (int64_t off = 0; off < n; off += per_chunk) {
    const int64_t cnt = std::min(per_chunk, n - off);
    std::memcpy(c.slot(l), in + off * static_cast<int64_t>(es), static_cast<size_t>(cnt) * es);
    c.barrier(what.c_str(), f.timeout);
    // This rank reduces its shard of the chunk over the host's slots, in place in its own slot
    // (only it reads that range of its slot).
    const auto [s0, s1] = part(cnt, L, l);
    const int64_t len = s1 - s0;
    std::vector<const void*> srcs;
    for (int q = 0; q < L; ++q) srcs.push_back(c.slot(q) + s0 * static_cast<int64_t>(es));
    char* shard = c.slot(l) + s0 * static_cast<int64_t>(es);
    if (H == 1 || len == 0) {  // (an empty shard is empty on every host)
      kernels::collective_reduce_step(shard, dtype, srcs, dtype, len, op, last_divisor(f, op));
    } else {
      // Across hosts, on partial results in the accumulation dtype: each host reduces one
      // piece of the shard (all-to-all + reduce), then everyone gathers the pieces.
      const int64_t piece = (len + H - 1) / H;
      const size_t pb = static_cast<size_t>(piece) * as;
      char* stage = f.scratch_bytes((2 * static_cast<size_t>(H) + 1) * pb);
      char* recv = stage + static_cast<size_t>(H) * pb;
      char* mine = recv + static_cast<size_t>(H) * pb;
      std::memset(stage + static_cast<size_t>(len) * as, 0, static_cast<size_t>(H * piece - len) * as);
      kernels::collective_reduce_step(stage, acc, srcs, dtype, len, op, 0);
      f.cross->all_to_all(stage, std::vector<size_t>(static_cast<size_t>(H), pb), recv,
                          std::vector<size_t>(static_cast<size_t>(H), pb), what);
      std::vector<const void*> pieces;
      for (int h = 0; h < H; ++h) pieces.push_back(recv + static_cast<size_t>(h) * pb);
      kernels::collective_reduce_step(mine, acc, pieces, acc, piece, op, 0);
      f.cross->all_gather(mine, pb, stage, what);
      kernels::collective_reduce_step(shard, dtype, {stage}, acc, len, op, last_divisor(f, op));
    }
    c.barrier(what.c_str(), f.timeout);
    if (out) {
      for (int q = 0; q < L; ++q) {
        const auto [q0, q1] = part(cnt, L, q);
        std::memcpy(out + (off + q0) * static_cast<int64_t>(es), c.slot(q) + q0 * static_cast<int64_t>(es),
                    static_cast<size_t>(q1 - q0) * es);
      }
    }
    c.barrier(what.c_str(), f.timeout);  // the slots may be overwritten
  }
}

void reduce_scatter(Fabric& f, const std::vector<const char*>& blocks, char* out, int64_t m, DType dtype,
                    CollectiveOp op, const std::string& what) {
  rt::ShmComm& c = *f.shm;
  const int L = c.world(), l = c.rank(), H = f.hosts, N = f.size();
  const size_t es = kernels::element_size(dtype);
  const DType acc = kernels::collective_acc_dtype(dtype);
  const size_t as = kernels::element_size(acc);
  // The slot holds a chunk of every rank's block, host by host: position h * L + q is the
  // block of ranks[h][q].
  const int64_t per_chunk = std::max<int64_t>(1, static_cast<int64_t>(c.slot_bytes() / (es * static_cast<size_t>(N))));
  for (int64_t off = 0; off < m; off += per_chunk) {
    const int64_t cnt = std::min(per_chunk, m - off);
    const size_t cb = static_cast<size_t>(cnt) * es;
    for (int h = 0; h < H; ++h)
      for (int q = 0; q < L; ++q)
        std::memcpy(c.slot(l) + static_cast<size_t>(h * L + q) * cb,
                    blocks[static_cast<size_t>(f.ranks[h][q])] + off * static_cast<int64_t>(es), cb);
    c.barrier(what.c_str(), f.timeout);
    auto local = [&](int h) {
      std::vector<const void*> srcs;
      for (int q = 0; q < L; ++q) srcs.push_back(c.slot(q) + static_cast<size_t>(h * L + l) * cb);
      return srcs;
    };
    char* dst = out + off * static_cast<int64_t>(es);
    if (H == 1) {
      kernels::collective_reduce_step(dst, dtype, local(0), dtype, cnt, op, last_divisor(f, op));
      c.barrier(what.c_str(), f.timeout);
      continue;
    }
    // Row h: this host's partial result for the counterpart on host h.
    const size_t rb = static_cast<size_t>(cnt) * as;
    char* stage = f.scratch_bytes(2 * static_cast<size_t>(H) * rb);
    char* recv = stage + static_cast<size_t>(H) * rb;
    for (int h = 0; h < H; ++h) kernels::collective_reduce_step(stage + static_cast<size_t>(h) * rb, acc, local(h), dtype, cnt, op, 0);
    c.barrier(what.c_str(), f.timeout);  // the slots may be overwritten
    f.cross->all_to_all(stage, std::vector<size_t>(static_cast<size_t>(H), rb), recv,
                        std::vector<size_t>(static_cast<size_t>(H), rb), what);
    std::vector<const void*> rows;
    for (int h = 0; h < H; ++h) rows.push_back(recv + static_cast<size_t>(h) * rb);
    kernels::collective_reduce_step(dst, dtype, rows, acc, cnt, op, last_divisor(f, op));
  }
}

void all_gather(Fabric& f, const char* in, size_t bytes, const std::vector<char*>& outs, const std::string& what) {
  rt::ShmComm& c = *f.shm;
  const int L = c.world(), l = c.rank(), H = f.hosts;
  // Slot layout: the chunk of the counterpart on host h at h * chunk.
  const size_t per_chunk = std::max<size_t>(1, c.slot_bytes() / static_cast<size_t>(H));
  for (size_t off = 0; off < bytes; off += per_chunk) {
    const size_t cnt = std::min(per_chunk, bytes - off);
    if (H == 1)
      std::memcpy(c.slot(l), in + off, cnt);
    else
      f.cross->all_gather(in + off, cnt, c.slot(l), what);
    c.barrier(what.c_str(), f.timeout);
    for (int q = 0; q < L; ++q)
      for (int h = 0; h < H; ++h)
        if (char* o = outs[static_cast<size_t>(f.ranks[h][q])]) std::memcpy(o + off, c.slot(q) + static_cast<size_t>(h) * cnt, cnt);
    c.barrier(what.c_str(), f.timeout);
  }
}

void shm_broadcast(rt::ShmComm& c, char* buf, size_t bytes, int root, const char* what, std::chrono::milliseconds to) {
  for (size_t off = 0; off < bytes; off += c.slot_bytes()) {
    const size_t cnt = std::min(c.slot_bytes(), bytes - off);
    if (c.rank() == root) std::memcpy(c.slot(root), buf + off, cnt);
    c.barrier(what, to);
    if (c.rank() != root) std::memcpy(buf + off, c.slot(root), cnt);
    c.barrier(what, to);
  }
}

void shm_scatter(rt::ShmComm& c, const std::vector<const char*>& ins, char* out, size_t bytes, int root,
                 const char* what, std::chrono::milliseconds to) {
  const int w = c.world();
  const size_t per = std::max<size_t>(1, c.slot_bytes() / static_cast<size_t>(w));
  for (size_t off = 0; off < bytes; off += per) {
    const size_t cnt = std::min(per, bytes - off);
    if (c.rank() == root)
      for (int r = 0; r < w; ++r) std::memcpy(c.slot(root) + static_cast<size_t>(r) * per, ins[static_cast<size_t>(r)] + off, cnt);
    c.barrier(what, to);
    std::memcpy(out + off, c.slot(root) + static_cast<size_t>(c.rank()) * per, cnt);
    c.barrier(what, to);
  }
}

void shm_all_to_all(rt::ShmComm& c, const std::vector<std::pair<const char*, size_t>>& send,
                    const std::vector<std::pair<char*, size_t>>& recv, const char* what, std::chrono::milliseconds to) {
  const int w = c.world();
  // The descriptors (checked already) carry every rank's split sizes, but only as a check; the
  // chunk count follows from the largest block, agreed here.
  uint64_t mine = 0;
  for (const auto& s : send) mine = std::max<uint64_t>(mine, s.second);
  std::memcpy(c.slot(c.rank()), &mine, sizeof(mine));
  c.barrier(what, to);
  uint64_t largest = 0;
  for (int r = 0; r < w; ++r) {
    uint64_t v;
    std::memcpy(&v, c.slot(r), sizeof(v));
    largest = std::max(largest, v);
  }
  c.barrier(what, to);
  const size_t cs = std::max<size_t>(1, c.slot_bytes() / static_cast<size_t>(w));
  for (size_t off = 0; off < largest; off += cs) {
    for (int q = 0; q < w; ++q) {
      const auto& [ptr, bytes] = send[static_cast<size_t>(q)];
      if (bytes > off) std::memcpy(c.slot(c.rank()) + static_cast<size_t>(q) * cs, ptr + off, std::min(cs, bytes - off));
    }
    c.barrier(what, to);
    for (int p = 0; p < w; ++p) {
      const auto& [ptr, bytes] = recv[static_cast<size_t>(p)];
      if (bytes > off) std::memcpy(ptr + off, c.slot(p) + static_cast<size_t>(c.rank()) * cs, std::min(cs, bytes - off));
    }
    c.barrier(what, to);
  }
}

}  // namespace neuron::torch_glue
