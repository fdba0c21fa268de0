// Program::build_plan(): the execution plan of unchecked runs (program.h, struct Plan). Today it
// holds DMA elision: an HBM->SBUF copy whose tile only feeds thin-operand matmuls is skipped
// and the matmuls read the HBM tensor in place, which removes two of the three passes over the
// weights of a decode step (copy in, write the tile, read it back).
//
// The analysis is exact and conservative. A candidate is a same-dtype DMA without dynamic
// offsets from an HBM kernel input into SBUF. Its destination (partitions x bytes) is followed
// in program order until plain writes have overwritten all of it or the program ends; every
// access that touches bytes still holding the DMA's data must be a matmul operand whose
// elements map one to one onto the DMA's destination, and whose on-chip form takes the
// thin-operand GEMV path (so the in-place read computes the same bits). Accesses are compared
// by their exact byte footprints (a strided write of every other run is known to leave the
// other runs alone). Anything else (another reader, a write that is not a plain overwrite of a
// known footprint, a dynamic offset, runtime loops) keeps the DMA. The source may be a tensor
// the program writes (a KV cache updated after it was read): no write to it may come between
// the DMA and its last in-place reader; a write to another HBM tensor in that window is a
// hazard checked at launch (the caller may pass the same memory twice).
#include <algorithm>
#include <utility>
#include <vector>

#include "collective.h"
#include "exec_internal.h"
#include "program.h"

namespace neuron::nki {

namespace {

using detail::Dim;
using detail::View;

// Instructions scanned after a candidate before giving up (bounds the plan's cost).
constexpr int32_t kScanLimit = 1 << 14;
constexpr size_t kMaxLiveBoxes = 512;

// The partitions and in-partition bytes an on-chip access may touch.
struct Box {
  Mem mem = Mem::Sbuf;
  int64_t p0 = 0, p1 = -1;  // partitions, inclusive
  int64_t b0 = 0, b1 = 0;   // bytes within a partition, [b0, b1)
  bool overlaps(const Box& o) const {
    return mem == o.mem && p0 <= o.p1 && o.p0 <= p1 && b0 < o.b1 && o.b0 < b1;
  }
  bool contains(const Box& o) const {
    return mem == o.mem && p0 <= o.p0 && p1 >= o.p1 && b0 <= o.b0 && b1 >= o.b1;
  }
};

// Appends the parts of `a` outside `w` (at most four boxes).
void subtract(const Box& a, const Box& w, std::vector<Box>& out) {
  if (!a.overlaps(w)) {
    out.push_back(a);
    return;
  }
  Box x = a;
  if (a.p0 < w.p0) {
    x.p1 = w.p0 - 1;
    out.push_back(x);
  }
  if (a.p1 > w.p1) {
    x = a;
    x.p0 = w.p1 + 1;
    out.push_back(x);
  }
  x = a;
  x.p0 = std::max(a.p0, w.p0);
  x.p1 = std::min(a.p1, w.p1);
  if (a.b0 < w.b0) {
    Box y = x;
    y.b1 = w.b0;
    out.push_back(y);
  }
  if (a.b1 > w.b1) {
    Box y = x;
    y.b0 = w.b1;
    out.push_back(y);
  }
}

Box box_of(const Program& prog, const Phys& ph) {
  Box b;
  b.mem = ph.mem;
  const Buffer& buf = prog.buffers()[static_cast<size_t>(ph.buf)];
  const int64_t pitch = ph.pitch;
  if (ph.reg >= 0) {  // anywhere inside its tensor
    b.p0 = buf.part0;
    b.p1 = b.p0 + buf.partitions - 1;
    b.b0 = buf.addr;
    b.b1 = buf.addr + buf.bytes_per_partition;
    return b;
  }
  const int64_t es = dt_size(ph.dtype);
  b.p0 = ph.byte_off / pitch;
  b.p1 = b.p0 + (ph.stride[0] != 0 ? ph.num[0] - 1 : 0);
  int64_t lo = ph.byte_off % pitch, hi = lo + es;
  for (int d = 1; d < ph.ndim; ++d) {
    const int64_t ext = ph.stride[d] * (ph.num[d] - 1);
    (ext < 0 ? lo : hi) += ext;
  }
  if (lo < 0 || hi > pitch) {  // not a plain in-partition access: assume all of the memory
    b.p0 = 0;
    b.p1 = prog.target().partitions - 1;
    lo = 0;
    hi = pitch;
  }
  b.b0 = lo;
  b.b1 = hi;
  return b;
}

// The exact bytes of a static on-chip access whose partitions are consecutive: a few boxes
// (its partitions x each merged run of its free pattern). False (use box_of) when the access
// has a dynamic offset, skips or repeats partitions, or has more than kMaxRuns runs.
constexpr int64_t kMaxRuns = 256;

bool footprint(const Program& prog, const Phys& ph, std::vector<Box>& out) {
  const Box bb = box_of(prog, ph);
  if (ph.reg >= 0 || (ph.num[0] > 1 && ph.stride[0] != ph.pitch)) return false;
  if (bb.b1 - bb.b0 > ph.pitch) return false;
  struct D {
    int64_t n, s;
  };
  D dims[kMaxApDims];
  int nd = 0;
  for (int d = 1; d < ph.ndim; ++d) {
    if (ph.num[d] == 1) continue;
    if (ph.stride[d] <= 0) return false;
    dims[nd++] = {ph.num[d], ph.stride[d]};
  }
  for (int k = 1; k < nd; ++k)  // by stride, smallest first (insertion sort)
    for (int j = k; j > 0 && dims[j - 1].s > dims[j].s; --j) std::swap(dims[j - 1], dims[j]);
  int64_t run = dt_size(ph.dtype);  // contiguous bytes of the innermost runs
  int first = 0;
  while (first < nd && dims[first].s == run) run *= dims[first++].n;
  int64_t runs = 1;
  for (int d = first; d < nd; ++d) runs *= dims[d].n;
  if (runs > kMaxRuns) return false;
  const size_t base = out.size();
  int64_t idx[kMaxApDims] = {};
  const int64_t lo = ph.byte_off % ph.pitch;
  for (;;) {
    int64_t off = lo;
    for (int d = first; d < nd; ++d) off += idx[d] * dims[d].s;
    Box b = bb;
    b.b0 = off;
    b.b1 = off + run;
    out.push_back(b);
    int d = first;
    for (; d < nd; ++d) {
      if (++idx[d] < dims[d].n) break;
      idx[d] = 0;
    }
    if (d == nd) break;
  }
  std::sort(out.begin() + static_cast<std::ptrdiff_t>(base), out.end(),
            [](const Box& a, const Box& b) { return a.b0 < b.b0; });
  size_t w = base;  // merge touching runs
  for (size_t r = base; r < out.size(); ++r) {
    if (w > base && out[r].b0 <= out[w - 1].b1)
      out[w - 1].b1 = std::max(out[w - 1].b1, out[r].b1);
    else
      out[w++] = out[r];
  }
  out.resize(w);
  return true;
}

// Whether every byte of `b` is inside the union of `live`.
bool covered(const Box& b, const std::vector<Box>& live) {
  std::vector<Box> rest{b}, next;
  for (const Box& l : live) {
    next.clear();
    for (const Box& r : rest) subtract(r, l, next);
    rest.swap(next);
    if (rest.empty()) return true;
  }
  return rest.empty();
}

View view_of(const Phys& ph) {
  View v;
  v.dtype = ph.dtype;
  v.es = dt_size(ph.dtype);
  v.ndim = ph.ndim;
  v.mem = ph.mem;
  v.buf = ph.buf;
  v.stride = ph.stride;
  v.num = ph.num;
  return v;
}

// Instructions that only write their destination (it is not read, predicated or accumulated).
bool plain_writer(Op op) {
  switch (op) {
    case Op::DmaCopy:
    case Op::TensorCopy:
    case Op::Memset:
    case Op::TensorTensor:
    case Op::TensorScalar:
    case Op::Reciprocal:
    case Op::Activation:
    case Op::RangeSelect:
    case Op::Iota:
    case Op::AffineSelect:
    case Op::ScalarTensorTensor:
    case Op::TensorReduce:
    case Op::TensorScalarReduce:
    case Op::TensorTensorScan:
    case Op::Transpose:
    case Op::Max8:
    case Op::Rng:
    case Op::Rand2:
    case Op::Dropout:
    case Op::RandGetState:
    case Op::SendRecv:  // dst: every element of the peer's tile (the shapes must match)
      return true;
    default:
      return false;
  }
}

// The DMA's copy as dimensions of its destination (outermost first by stride) with the source
// stride of each; false when destination elements could repeat (no one-to-one mapping).
struct CopyMap {
  Dim dims[detail::kMaxRefined];
  int nd = 0;
  int64_t dst_off = 0, src_off = 0;
};

bool copy_map(const Phys& d, const Phys& s, CopyMap& m) {
  Dim raw[detail::kMaxRefined];
  int nr = 0;
  if (!detail::refine(view_of(d), view_of(s), raw, nr)) return false;
  m.nd = 0;
  for (int k = 0; k < nr; ++k)
    if (raw[k].n > 1) {
      if (raw[k].ds <= 0) return false;
      m.dims[m.nd++] = raw[k];
    }
  for (int k = 1; k < m.nd; ++k)  // by destination stride, largest first (insertion sort)
    for (int j = k; j > 0 && m.dims[j - 1].ds < m.dims[j].ds; --j) std::swap(m.dims[j - 1], m.dims[j]);
  int64_t extent = dt_size(d.dtype);  // bytes spanned by the finer dimensions
  for (int k = m.nd - 1; k >= 0; --k) {
    if (m.dims[k].ds < extent) return false;
    extent = m.dims[k].ds * (m.dims[k].n - 1) + extent;
  }
  m.dst_off = d.byte_off;
  m.src_off = s.byte_off;
  return true;
}

// The operand `o` (inside the DMA's destination) as an access of the DMA's source, or false.
bool map_operand(const CopyMap& m, const Phys& src, const Phys& o, Phys& out) {
  if (o.reg >= 0 || o.dtype != src.dtype) return false;
  int64_t rel = o.byte_off - m.dst_off;
  if (rel < 0) return false;
  int64_t idx[detail::kMaxRefined] = {};
  for (int k = 0; k < m.nd; ++k) {
    idx[k] = rel / m.dims[k].ds;
    if (idx[k] >= m.dims[k].n) return false;
    rel -= idx[k] * m.dims[k].ds;
  }
  if (rel != 0) return false;
  out = o;
  out.mem = Mem::Hbm;
  out.slot = src.slot;
  out.buf = src.buf;
  out.reg = -1;
  int64_t off = m.src_off;
  for (int k = 0; k < m.nd; ++k) off += idx[k] * m.dims[k].ss;
  out.byte_off = off;
  bool used[detail::kMaxRefined] = {};
  for (int j = 0; j < o.ndim; ++j) {
    if (o.num[j] == 1) continue;
    if (o.stride[j] == 0) {
      out.stride[j] = 0;
      continue;
    }
    if (o.stride[j] < 0) return false;
    int found = -1;
    for (int k = 0; k < m.nd && found < 0; ++k) {
      if (used[k] || o.stride[j] % m.dims[k].ds) continue;
      const int64_t step = o.stride[j] / m.dims[k].ds;
      if (idx[k] + step * (o.num[j] - 1) < m.dims[k].n) found = k;
    }
    if (found < 0) return false;
    used[found] = true;
    out.stride[j] = o.stride[j] / m.dims[found].ds * m.dims[found].ss;
  }
  // The in-place form must take the same (thin-operand) path: free dims still one dimension.
  View v = view_of(out);
  detail::collapse_free(v);
  return v.ndim == 2;
}

// Whether operand k of matmul `in` would run on the thin-operand path in its on-chip form.
bool thin_reader(const Instr& in, const std::array<Phys, kMaxOperands>& ph, int k) {
  using FX = isa::Fields<Op::Matmul>;
  constexpr int ks = FX::k<"stationary">, km = FX::k<"moving">;
  if (k != ks && k != km) return false;
  const FX f{in};
  if (f.i<"perf_mode">() != 0 || f.flag<"is_transpose">()) return false;
  View s = view_of(ph[ks]), m = view_of(ph[km]);
  detail::collapse_free(s);
  detail::collapse_free(m);
  return detail::thin_matmul_shapes(s, m);
}

// Weight bytes a run must stream before sharing it over the host threads pays for waking them.
constexpr int64_t kMinRunBytes = 128 * 1024;
// Bounds of one run: instructions spanned, on-chip writes tracked between its matmuls, and
// GEMV results held until their stores (floats).
constexpr int32_t kMaxRunSpan = 4096;
constexpr size_t kMaxRunWrites = 512;
constexpr int64_t kMaxRunResults = int64_t{1} << 22;

// Instructions whose only effect is on their operands (and this core's registers): no
// rendezvous with another core or rank (after which HBM could hold another core's data), no
// loop structure, no indirect addressing.
bool local_effects(const isa::InstrDef& def) {
  if (coll::moves_data(def.op)) return false;
  switch (def.op) {
    case Op::CoreBarrier:
    case Op::SendRecv:
    case Op::DmaIndirect:
    case Op::DmaComputeIndirect:
    case Op::RankId:
      return false;
    default:
      return !def.control;
  }
}

// Runs of thin matmuls (their planned form, in-place operands included) that stream at least
// kMinRunBytes of their wide operands together. A run spans consecutive thin matmuls and the
// instructions between them, as long as those only write on-chip memory that no later matmul
// of the run reads (the activation and product between a projection's gate/up chunks, the PSUM
// copies between a projection's column blocks): the run's GEMVs can then all be computed first,
// as one parallel job, and give the bits they give in program order. Matmuls write only PSUM
// and read only SBUF or HBM, so they never depend on each other's GEMVs; their stores (and
// PSUM accumulation) and the other instructions still run in program order.
void build_matmul_runs(const Program& prog, Plan& pl) {
  const auto& instrs = prog.instrs();
  const auto n = static_cast<int32_t>(instrs.size());
  pl.matmul_run.assign(instrs.size(), 0);
  pl.run_member.assign(instrs.size(), 0);
  using FX = isa::Fields<Op::Matmul>;
  constexpr int kd = FX::k<"dst">, ks = FX::k<"stationary">, km = FX::k<"moving">;
  auto operands = [&](int32_t j) -> const std::array<Phys, kMaxOperands>& {
    const int32_t a = pl.alt[static_cast<size_t>(j)];
    return a >= 0 ? pl.alt_phys[static_cast<size_t>(a)] : prog.phys()[static_cast<size_t>(j)];
  };
  struct Thin {
    int64_t bytes = 0, results = 0;  // 0 bytes: not a thin matmul
  };
  auto thin = [&](int32_t j) -> Thin {
    const Instr& in = instrs[static_cast<size_t>(j)];
    if (in.op != Op::Matmul) return {};
    const FX f{in};
    if (f.i<"perf_mode">() != 0 || f.flag<"is_transpose">()) return {};
    const auto& ph = operands(j);
    if (ph[kd].reg >= 0 || ph[ks].reg >= 0 || ph[km].reg >= 0) return {};  // resolved early
    View s = view_of(ph[ks]), m = view_of(ph[km]);
    detail::collapse_free(s);
    detail::collapse_free(m);
    if (!detail::thin_matmul_shapes(s, m)) return {};
    const View& wide = m.free() <= s.free() ? s : m;
    return {wide.parts() * wide.free() * wide.es, s.free() * m.free()};
  };
  std::vector<Box> written;
  std::vector<int32_t> members;
  for (int32_t i = 0; i < n;) {
    const Thin first = thin(i);
    if (first.bytes == 0) {
      ++i;
      continue;
    }
    members.assign(1, i);
    written.clear();
    int64_t bytes = first.bytes, results = first.results;
    for (int32_t j = i + 1; j < n && j - i < kMaxRunSpan; ++j) {
      if (pl.skip[static_cast<size_t>(j)]) continue;  // an elided DMA: nothing runs
      const Instr& x = instrs[static_cast<size_t>(j)];
      const Thin t = thin(j);
      if (t.bytes > 0) {
        if (results + t.results > kMaxRunResults) break;
        const auto& ph = operands(j);
        bool clash = false;
        for (int k : {ks, km}) {
          if (ph[k].mem == Mem::Hbm) continue;
          const Box b = box_of(prog, ph[k]);
          for (const Box& w : written) clash |= w.overlaps(b);
        }
        if (clash) break;
        members.push_back(j);
        bytes += t.bytes;
        results += t.results;
        continue;
      }
      const isa::InstrDef& def = x.def();
      if (!local_effects(def)) break;
      bool ok = true;
      for (int k = 0; k < x.nap && ok; ++k) {
        const Phys& p = prog.phys()[static_cast<size_t>(j)][k];
        if (!x.ap[k].present() || !def.operands[k].writes()) continue;
        if (p.mem == Mem::Hbm) ok = false;  // in-place readers might read it
        else if (p.mem == Mem::Sbuf) written.push_back(box_of(prog, p));
      }
      if (!ok || written.size() > kMaxRunWrites) break;
    }
    if (members.size() < 2 || bytes < kMinRunBytes) {
      ++i;
      continue;
    }
    pl.matmul_run[static_cast<size_t>(i)] = members.back() - i + 1;
    for (int32_t j : members) pl.run_member[static_cast<size_t>(j)] = 1;
    ++pl.runs;
    i = members.back() + 1;
  }
}

}  // namespace

void Program::build_plan() {
  Plan& pl = plan_;
  const auto n = static_cast<int32_t>(instrs_.size());
  pl = Plan{};
  pl.skip.assign(instrs_.size(), 0);
  pl.alt.assign(instrs_.size(), -1);
  pl.matmul_run.assign(instrs_.size(), 0);
  for (const Instr& in : instrs_)
    if (in.def().control) return;  // program order is not execution order
  struct Redirect {
    int32_t pc;
    int k;
    Phys ph;
  };
  struct HbmWrite {
    int32_t pc, slot;
    bool in_range;  // may touch the DMA's source range
  };
  std::vector<Redirect> found;
  std::vector<HbmWrite> writes;
  std::vector<Box> live, rest, fp;
  std::vector<std::pair<int32_t, int32_t>> hazards;
  for (int32_t i = 0; i < n; ++i) {
    const Instr& in = instrs_[i];
    if (in.op != Op::DmaCopy) continue;
    using FX = isa::Fields<Op::DmaCopy>;
    const Phys& d = phys_[i][FX::k<"dst">];
    const Phys& s = phys_[i][FX::k<"src">];
    if (d.mem != Mem::Sbuf || s.mem != Mem::Hbm || d.reg >= 0 || s.reg >= 0 ||
        d.dtype != s.dtype)
      continue;
    const Buffer& sb = buffers_[static_cast<size_t>(s.buf)];
    if (!sb.is_input) continue;
    CopyMap map;
    if (!copy_map(d, s, map)) continue;
    // `live`: the bytes of the destination still holding the DMA's data (not rewritten since).
    live.clear();
    if (!footprint(*this, d, live)) live.assign(1, box_of(*this, d));
    found.clear();
    writes.clear();
    bool ok = true;
    for (int32_t j = i + 1; j < n && ok && !live.empty(); ++j) {
      if (j - i > kScanLimit) {
        ok = false;
        break;
      }
      const Instr& x = instrs_[j];
      const isa::InstrDef& def = x.def();
      auto touches = [&](const Phys& p, bool& exact) {
        const Box b = box_of(*this, p);
        bool any = false;
        for (const Box& l : live) any |= l.overlaps(b);
        exact = false;
        if (!any) return false;
        fp.clear();
        exact = footprint(*this, p, fp);
        if (!exact) return true;
        for (const Box& f : fp)
          for (const Box& l : live)
            if (l.overlaps(f)) return true;
        return false;
      };
      for (int k = 0; k < x.nap && ok; ++k) {
        const Phys& p = phys_[j][k];
        if (!x.ap[k].present() || p.mem == Mem::Hbm || def.operands[k].writes()) continue;
        bool exact = false;
        if (!touches(p, exact)) continue;  // rewritten bytes (or none of the DMA's)
        bool all_live = exact;
        for (size_t q = 0; q < fp.size() && all_live; ++q) all_live = covered(fp[q], live);
        Phys mapped;
        if (all_live && x.op == Op::Matmul && thin_reader(x, phys_[j], k) &&
            map_operand(map, s, p, mapped))
          found.push_back({j, k, mapped});
        else
          ok = false;
      }
      for (int k = 0; k < x.nap && ok; ++k) {
        const Phys& p = phys_[j][k];
        if (!x.ap[k].present() || !def.operands[k].writes()) continue;
        if (p.mem == Mem::Hbm) {
          const bool in_range = p.reg >= 0 || (p.lo <= s.hi && s.lo <= p.hi);
          writes.push_back({j, p.slot, in_range});
          continue;
        }
        bool exact = false;
        if (!touches(p, exact)) continue;
        // A plain write of a known footprint ends the DMA's data there.
        if (!plain_writer(x.op) || def.operands[k].role != isa::Role::Dst || !exact) {
          ok = false;
          break;
        }
        for (const Box& w : fp) {
          rest.clear();
          for (const Box& l : live) subtract(l, w, rest);
          live.swap(rest);
        }
        if (live.size() > kMaxLiveBoxes) ok = false;
      }
    }
    if (!ok) continue;
    // HBM writes between the DMA and its last in-place reader: none into the source itself;
    // writes to other tensors are hazards checked at launch (aliased arguments).
    const int32_t last = found.empty() ? i : found.back().pc;
    bool clash = false;
    size_t nh = hazards.size();
    for (const HbmWrite& w : writes) {
      if (w.pc > last) break;
      if (w.slot == s.slot) {
        clash |= w.in_range;
      } else {
        hazards.emplace_back(s.slot, w.slot);
      }
    }
    if (clash) {
      hazards.resize(nh);
      continue;
    }
    pl.skip[static_cast<size_t>(i)] = 1;
    ++pl.elided;
    for (const Redirect& f : found) {
      int32_t& a = pl.alt[static_cast<size_t>(f.pc)];
      if (a < 0) {
        a = static_cast<int32_t>(pl.alt_phys.size());
        pl.alt_phys.push_back(phys_[static_cast<size_t>(f.pc)]);
      }
      pl.alt_phys[static_cast<size_t>(a)][f.k] = f.ph;
      ++pl.redirected;
    }
  }
  std::sort(hazards.begin(), hazards.end());
  hazards.erase(std::unique(hazards.begin(), hazards.end()), hazards.end());
  pl.hazards = std::move(hazards);
  build_matmul_runs(*this, pl);
}

}  // namespace neuron::nki
