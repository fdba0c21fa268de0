// Program::build_plan(): the execution plan of unchecked runs (program.h, struct Plan). Today it
// holds DMA elision: an HBM->SBUF copy whose tile only feeds thin-operand matmuls is skipped
// and the matmuls read the HBM tensor in place, which removes two of the three passes over the
// weights of a decode step (copy in, write the tile, read it back).
//
// The analysis is exact and conservative. A candidate is a same-dtype DMA without dynamic
// offsets from an HBM kernel input that no instruction writes into SBUF. Its destination box
// (partitions x bytes) is followed in program order until an instruction overwrites all of it
// with a plain write or the program ends; every access that overlaps the box on the way must be
// a matmul operand whose elements map one to one onto the DMA's destination, and whose on-chip
// form takes the thin-operand GEMV path (so the in-place read computes the same bits). Anything
// else (a partial write, another reader, a dynamic offset, runtime loops) keeps the DMA.
#include <algorithm>
#include <utility>
#include <vector>

#include "exec_internal.h"
#include "program.h"

namespace neuron::nki {

namespace {

using detail::Dim;
using detail::View;

// Instructions scanned after a candidate before giving up (bounds the plan's cost).
constexpr int32_t kScanLimit = 1 << 14;
constexpr size_t kMaxLiveBoxes = 64;

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
    b.p0 = 0;
    b.p1 = buf.partitions - 1;
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

// Whether an access writes every byte of its box (partitions in a row, a dense row-major free
// part).
bool dense(const Phys& ph) {
  if (ph.reg >= 0 || (ph.num[0] > 1 && ph.stride[0] != ph.pitch)) return false;
  int64_t expect = dt_size(ph.dtype);
  for (int d = ph.ndim - 1; d >= 1; --d) {
    if (ph.num[d] == 1) continue;
    if (ph.stride[d] != expect) return false;
    expect *= ph.num[d];
  }
  return true;
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

}  // namespace

void Program::build_plan() {
  Plan& pl = plan_;
  const auto n = static_cast<int32_t>(instrs_.size());
  pl = Plan{};
  pl.skip.assign(instrs_.size(), 0);
  pl.alt.assign(instrs_.size(), -1);
  for (const Instr& in : instrs_)
    if (in.def().control) return;  // program order is not execution order
  std::vector<uint8_t> in_place(static_cast<size_t>(num_slots_), 0);
  struct Redirect {
    int32_t pc;
    int k;
    Phys ph;
  };
  std::vector<Redirect> found;
  std::vector<Box> live, rest;
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
    if (!sb.is_input || sb.written) continue;
    CopyMap map;
    if (!copy_map(d, s, map)) continue;
    const Box r = box_of(*this, d);
    // `live`: the parts of the box still holding the DMA's data (not rewritten since).
    live.assign(1, r);
    found.clear();
    bool ok = true;
    for (int32_t j = i + 1; j < n && ok && !live.empty(); ++j) {
      if (j - i > kScanLimit) {
        ok = false;
        break;
      }
      const Instr& x = instrs_[j];
      const isa::InstrDef& def = x.def();
      for (int k = 0; k < x.nap && ok; ++k) {
        const Phys& p = phys_[j][k];
        if (!x.ap[k].present() || p.mem == Mem::Hbm || def.operands[k].writes()) continue;
        const Box b = box_of(*this, p);
        bool reads_live = false, all_live = false;
        for (const Box& l : live) {
          reads_live |= l.overlaps(b);
          all_live |= l.contains(b);
        }
        if (!reads_live) continue;  // rewritten bytes (or none of the DMA's)
        Phys mapped;
        if (all_live && x.op == Op::Matmul && thin_reader(x, phys_[j], k) &&
            map_operand(map, s, p, mapped))
          found.push_back({j, k, mapped});
        else
          ok = false;
      }
      for (int k = 0; k < x.nap && ok; ++k) {
        const Phys& p = phys_[j][k];
        if (!x.ap[k].present() || p.mem == Mem::Hbm || !def.operands[k].writes()) continue;
        const Box w = box_of(*this, p);
        bool hits = false;
        for (const Box& l : live) hits |= l.overlaps(w);
        if (!hits) continue;
        // A plain write of every byte of its box ends the DMA's data there.
        if (!plain_writer(x.op) || def.operands[k].role != isa::Role::Dst || !dense(p)) {
          ok = false;
          break;
        }
        rest.clear();
        for (const Box& l : live) subtract(l, w, rest);
        live.swap(rest);
        if (live.size() > kMaxLiveBoxes) ok = false;
      }
    }
    if (!ok) continue;
    pl.skip[static_cast<size_t>(i)] = 1;
    ++pl.elided;
    in_place[static_cast<size_t>(s.slot)] = 1;
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
  for (int32_t s = 0; s < num_slots_; ++s)
    if (in_place[static_cast<size_t>(s)]) pl.in_place_slots.push_back(s);
  for (const Buffer& b : buffers_)
    if (b.mem == Mem::Hbm && b.written) pl.written_slots.push_back(b.slot);
}

}  // namespace neuron::nki
