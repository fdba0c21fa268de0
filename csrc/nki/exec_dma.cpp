// DMA instructions: copies between HBM, SBUF and HBM with any access patterns (dtype casts
// through fp32, definedness tracking in checking mode).
#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <string>

#ifdef __SSE2__
#include <emmintrin.h>
#include <xmmintrin.h>
#endif

#include "exec_internal.h"
#include "rendezvous.h"
#include "simd_transpose.h"

namespace neuron::nki::detail {

namespace {

// Drops size-1 dims and merges contiguous neighbours over all dims (DMA sees flat data).
void collapse_all(View& v) {
  int out = 0;
  for (int d = 0; d < v.ndim; ++d) {
    if (v.num[d] == 1) continue;
    if (out > 0 && v.stride[out - 1] == v.stride[d] * v.num[d]) {
      v.num[out - 1] *= v.num[d];
      v.stride[out - 1] = v.stride[d];
    } else {
      v.num[out] = v.num[d];
      v.stride[out] = v.stride[d];
      ++out;
    }
  }
  if (out == 0) {
    v.num[0] = 1;
    v.stride[0] = v.es;
    out = 1;
  }
  v.ndim = out;
}

// Walks a view in flat order, one innermost run at a time.
struct Cursor {
  const View& v;
  int64_t idx[kMaxApDims] = {};
  int64_t offset() const {
    int64_t o = 0;
    for (int d = 0; d < v.ndim; ++d) o += idx[d] * v.stride[d];
    return o;
  }
  int64_t run_left() const { return v.num[v.ndim - 1] - idx[v.ndim - 1]; }
  int64_t inner_stride() const { return v.stride[v.ndim - 1]; }
  void advance(int64_t n) {
    int d = v.ndim - 1;
    idx[d] += n;
    while (d > 0 && idx[d] >= v.num[d]) {
      idx[d] = 0;
      ++idx[--d];
    }
  }
};

inline void copy_elems(uint8_t* d, int64_t ds, const uint8_t* s, int64_t ss, int64_t n, int es) {
  if (ds == es && ss == es) {
    std::memmove(d, s, static_cast<size_t>(n * es));
    return;
  }
  switch (es) {
    case 1:
      for (int64_t i = 0; i < n; ++i) d[i * ds] = s[i * ss];
      return;
    case 2:
      for (int64_t i = 0; i < n; ++i) std::memcpy(d + i * ds, s + i * ss, 2);
      return;
    case 4:
      for (int64_t i = 0; i < n; ++i) std::memcpy(d + i * ds, s + i * ss, 4);
      return;
    default:
      for (int64_t i = 0; i < n; ++i) std::memcpy(d + i * ds, s + i * ss, static_cast<size_t>(es));
  }
}

// Copies src to dst (same element count) with dtype conversion through fp32 and, in
// checking mode, definedness propagation. Returns the number of undefined elements written.
int64_t dma_walk(const View& dst, const View& src, int64_t* first_bad) {
  Cursor cd{dst}, cs{src};
  const int64_t total = dst.numel();
  const bool same = dst.dtype == src.dtype;
  Scratch& sc = scratch();
  int64_t done = 0, bad = 0;
  const bool track = dst.def != nullptr;
  while (done < total) {
    const int64_t n = std::min(cd.run_left(), cs.run_left());
    const int64_t od = cd.offset(), os = cs.offset();
    const int64_t sd = cd.inner_stride(), ss = cs.inner_stride();
    if (same) {
      copy_elems(dst.base + od, sd, src.base + os, ss, n, dst.es);
    } else {
      float* tmp = sc.fb(5, n);
      load_f32(src.dtype, src.base + os, ss, n, tmp);
      store_f32(dst.dtype, dst.base + od, sd, n, tmp);
    }
    if (track || src.def) {
      for (int64_t i = 0; i < n; ++i) {
        uint8_t ok = 1;
        if (src.def) {
          const uint8_t* e = src.def + os + i * ss;
          for (int b = 0; b < src.es; ++b) ok &= e[b];
        }
        if (!ok) {
          if (bad == 0 && first_bad) *first_bad = done + i;
          ++bad;
        }
        if (track) std::memset(dst.def + od + i * sd, ok, static_cast<size_t>(dst.es));
      }
    }
    cd.advance(n);
    cs.advance(n);
    done += n;
  }
  return bad;
}

// dst = srcs[0] + ... + srcs[n-1] elementwise in flat order (equal element counts; n <= 4): each
// source cast to fp32, summed left to right in fp32, the sum cast to dst's dtype (the DMA
// engines' compute). An element is defined when all its sources are; *bad_src is the first
// source that was not. Each run's sources are loaded before its destination is stored, so dst
// may also be a source (in-place accumulation).
int64_t dma_sum_walk(const View& dst, const View* const* srcs, int n, int64_t* first_bad,
                     int* bad_src) {
  Cursor cd{dst};
  Cursor cs[4] = {{*srcs[0]}, {n > 1 ? *srcs[1] : dst}, {n > 2 ? *srcs[2] : dst},
                  {n > 3 ? *srcs[3] : dst}};
  const int64_t total = dst.numel();
  Scratch& sc = scratch();
  int64_t done = 0, bad = 0;
  const bool track = dst.def != nullptr;
  bool any_def = track;
  for (int j = 0; j < n; ++j) any_def |= srcs[j]->def != nullptr;
  while (done < total) {
    int64_t m = cd.run_left();
    for (int j = 0; j < n; ++j) m = std::min(m, cs[j].run_left());
    float* acc = sc.fb(4, m);
    float* tmp = sc.fb(5, m);
    int64_t os[4];
    for (int j = 0; j < n; ++j) {
      os[j] = cs[j].offset();
      load_f32(srcs[j]->dtype, srcs[j]->base + os[j], cs[j].inner_stride(), m, j ? tmp : acc);
      if (j)
        for (int64_t i = 0; i < m; ++i) acc[i] += tmp[i];
    }
    const int64_t od = cd.offset(), sd = cd.inner_stride();
    if (any_def) {
      for (int64_t i = 0; i < m; ++i) {
        uint8_t ok = 1;
        for (int j = 0; j < n; ++j) {
          if (!srcs[j]->def) continue;
          const uint8_t* e = srcs[j]->def + os[j] + i * cs[j].inner_stride();
          uint8_t oj = 1;
          for (int b = 0; b < srcs[j]->es; ++b) oj &= e[b];
          if (!oj && bad == 0 && bad_src && *bad_src < 0) *bad_src = j;
          ok &= oj;
        }
        if (!ok) {
          if (bad == 0 && first_bad) *first_bad = done + i;
          ++bad;
        }
        if (track) std::memset(dst.def + od + i * sd, ok, static_cast<size_t>(dst.es));
      }
    }
    store_f32(dst.dtype, dst.base + od, sd, m, acc);
    cd.advance(m);
    for (int j = 0; j < n; ++j) cs[j].advance(m);
    done += m;
  }
  return bad;
}

// ---------------------------------------------------------------------------------------------
// Structural copies (same dtype, no definedness tracking): both views are refined to a common
// shape, so each dimension has one count and two strides; then a copy is runs of memcpy, a
// blocked 2-D transpose, or strided element loops. The generic walker above recomputes both
// offsets for every run, which costs ~10 ns per element when a run is one element long (a DMA
// transpose).

void merge_dims(Dim* dims, int& nd) {
  int out = 0;
  for (int i = 0; i < nd; ++i) {
    if (dims[i].n == 1) continue;
    if (out > 0 && dims[i].ds == dims[out - 1].ds * dims[out - 1].n &&
        dims[i].ss == dims[out - 1].ss * dims[out - 1].n) {
      dims[out - 1].n *= dims[i].n;
    } else {
      dims[out++] = dims[i];
    }
  }
  if (out == 0) dims[out++] = {1, 0, 0};
  nd = out;
}

// Calls fn(dst, src) for every index of the dimensions in `loop` (an odometer).
template <typename Fn>
void for_each_index(uint8_t* d, const uint8_t* s, const Dim* dims, const int* loop, int nl,
                    Fn&& fn) {
  int64_t idx[kMaxRefined] = {};
  while (true) {
    fn(d, s);
    int k = 0;
    for (; k < nl; ++k) {
      const Dim& x = dims[loop[k]];
      d += x.ds;
      s += x.ss;
      if (++idx[k] < x.n) break;
      d -= x.ds * x.n;
      s -= x.ss * x.n;
      idx[k] = 0;
    }
    if (k == nl) return;
  }
}

template <int ES>
inline void copy_el(uint8_t* d, const uint8_t* s) {
  std::memcpy(d, s, ES);
}

#ifdef __SSE2__
// 8 x 8 block of 16-bit elements: src rows i (8 contiguous j each) -> dst rows j (8 contiguous i).
inline void transpose8x8_u16(uint8_t* d, int64_t dstride, const uint8_t* s, int64_t sstride) {
  __m128i r[8], o[8];
  for (int i = 0; i < 8; ++i)
    r[i] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i * sstride));
  simd::transpose8x8_epi16(r, o);
  for (int j = 0; j < 8; ++j) _mm_storeu_si128(reinterpret_cast<__m128i*>(d + j * dstride), o[j]);
}

// 4 x 4 block of 32-bit elements.
inline void transpose4x4_u32(uint8_t* d, int64_t dstride, const uint8_t* s, int64_t sstride) {
  __m128 r0 = _mm_loadu_ps(reinterpret_cast<const float*>(s));
  __m128 r1 = _mm_loadu_ps(reinterpret_cast<const float*>(s + sstride));
  __m128 r2 = _mm_loadu_ps(reinterpret_cast<const float*>(s + 2 * sstride));
  __m128 r3 = _mm_loadu_ps(reinterpret_cast<const float*>(s + 3 * sstride));
  _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
  _mm_storeu_ps(reinterpret_cast<float*>(d), r0);
  _mm_storeu_ps(reinterpret_cast<float*>(d + dstride), r1);
  _mm_storeu_ps(reinterpret_cast<float*>(d + 2 * dstride), r2);
  _mm_storeu_ps(reinterpret_cast<float*>(d + 3 * dstride), r3);
}
#endif

// Copies dims[a] x dims[b] (a 2-D block) where a has unit dst stride and b unit src stride, in
// 32 x 32 tiles (reads and writes stay within 32 cache lines each), 8 x 8 (16-bit) or 4 x 4
// (32-bit) register transposes inside a tile.
template <int ES>
void transpose2d(uint8_t* d, const uint8_t* s, const Dim& a, const Dim& b) {
  constexpr int64_t kT = 32;
  constexpr int64_t kR = ES == 2 ? 8 : (ES == 4 ? 4 : 0);  // register block
  for (int64_t b0 = 0; b0 < b.n; b0 += kT) {
    const int64_t b1 = std::min(b.n, b0 + kT);
    for (int64_t a0 = 0; a0 < a.n; a0 += kT) {
      const int64_t a1 = std::min(a.n, a0 + kT);
      int64_t jr = b0, ir = a0;  // first row/column not covered by register blocks
#ifdef __SSE2__
      if constexpr (kR > 0) {
        const int64_t jend = b0 + (b1 - b0) / kR * kR, iend = a0 + (a1 - a0) / kR * kR;
        for (int64_t j = b0; j < jend; j += kR)
          for (int64_t i = a0; i < iend; i += kR) {
            uint8_t* dp = d + j * b.ds + i * a.ds;
            const uint8_t* sp = s + j * b.ss + i * a.ss;
            if constexpr (ES == 2)
              transpose8x8_u16(dp, b.ds, sp, a.ss);
            else
              transpose4x4_u32(dp, b.ds, sp, a.ss);
          }
        jr = jend;
        ir = iend;
        for (int64_t j = b0; j < jr; ++j)  // ragged columns of the register-blocked rows
          for (int64_t i = ir; i < a1; ++i)
            copy_el<ES>(d + j * b.ds + i * a.ds, s + j * b.ss + i * a.ss);
      }
#endif
      for (int64_t j = jr; j < b1; ++j) {
        uint8_t* dr = d + j * b.ds;
        const uint8_t* sr = s + j * b.ss;
        for (int64_t i = a0; i < a1; ++i) copy_el<ES>(dr + i * a.ds, sr + i * a.ss);
      }
    }
  }
}

template <int ES>
void copy_structured(uint8_t* d, const uint8_t* s, const Dim* dims, int nd) {
  int loop[kMaxRefined];
  const Dim& in = dims[0];
  if (in.ds == ES && in.ss == ES) {  // contiguous runs
    int nl = 0;
    for (int k = 1; k < nd; ++k) loop[nl++] = k;
    const auto bytes = static_cast<size_t>(in.n * ES);
    for_each_index(d, s, dims, loop, nl,
                   [&](uint8_t* dp, const uint8_t* sp) { std::memmove(dp, sp, bytes); });
    return;
  }
  // A transpose: the unit-stride dimension of one side is another dimension of the other.
  int a = -1, b = -1;
  for (int k = 0; k < nd && a < 0; ++k)
    if (dims[k].ds == ES)
      for (int j = 0; j < nd; ++j)
        if (j != k && dims[j].ss == ES) {
          a = k;
          b = j;
          break;
        }
  if (a >= 0) {
    int nl = 0;
    for (int k = 0; k < nd; ++k)
      if (k != a && k != b) loop[nl++] = k;
    for_each_index(d, s, dims, loop, nl, [&](uint8_t* dp, const uint8_t* sp) {
      transpose2d<ES>(dp, sp, dims[a], dims[b]);
    });
    return;
  }
  int nl = 0;
  for (int k = 1; k < nd; ++k) loop[nl++] = k;
  for_each_index(d, s, dims, loop, nl, [&](uint8_t* dp, const uint8_t* sp) {
    for (int64_t i = 0; i < in.n; ++i) copy_el<ES>(dp + i * in.ds, sp + i * in.ss);
  });
}

// Same-dtype copy without definedness tracking; false when the views do not refine to a
// common shape (the generic walker handles those).
bool fast_copy(const View& d, const View& s) {
  Dim dims[kMaxRefined];
  int nd = 0;
  if (!refine(d, s, dims, nd)) return false;
  merge_dims(dims, nd);
  int64_t total = 1;
  for (int k = 0; k < nd; ++k) total *= dims[k].n;
  // Large copies: split the outermost dimension over the host threads.
  const int o = nd - 1;
  auto run = [&](uint8_t* dp, const uint8_t* sp, const Dim* ds, int n) {
    switch (d.es) {
      case 1:
        copy_structured<1>(dp, sp, ds, n);
        break;
      case 2:
        copy_structured<2>(dp, sp, ds, n);
        break;
      case 4:
        copy_structured<4>(dp, sp, ds, n);
        break;
      case 8:
        copy_structured<8>(dp, sp, ds, n);
        break;
      default:
        return false;
    }
    return true;
  };
  if (total * d.es >= (int64_t{1} << 18) && nd > 1 && dims[o].n > 1 && !rt::in_parallel_region()) {
    if (d.es != 1 && d.es != 2 && d.es != 4 && d.es != 8) return false;
    rt::parallel_for(0, dims[o].n, 1, [&](int64_t b, int64_t e) {
      Dim local[kMaxRefined];
      std::copy(dims, dims + nd, local);
      local[o].n = e - b;
      run(d.base + b * dims[o].ds, s.base + b * dims[o].ss, local, nd);
    });
    return true;
  }
  return run(d.base, s.base, dims, nd);
}

}  // namespace

bool refine(const View& d, const View& s, Dim* out, int& nd) {
  int id = d.ndim - 1, is = s.ndim - 1;
  int64_t dn = d.num[id], dst = d.stride[id], sn = s.num[is], sst = s.stride[is];
  nd = 0;
  while (true) {
    if (nd == kMaxRefined) return false;
    if (dn == sn) {
      out[nd++] = {dn, dst, sst};
      --id;
      --is;
      if (id < 0 || is < 0) return id < 0 && is < 0;
      dn = d.num[id], dst = d.stride[id], sn = s.num[is], sst = s.stride[is];
    } else if (dn % sn == 0) {
      out[nd++] = {sn, dst, sst};
      dst *= sn;
      dn /= sn;
      if (--is < 0) return false;
      sn = s.num[is], sst = s.stride[is];
    } else if (sn % dn == 0) {
      out[nd++] = {dn, dst, sst};
      sst *= dn;
      sn /= dn;
      if (--id < 0) return false;
      dn = d.num[id], dst = d.stride[id];
    } else {
      return false;
    }
  }
}

}  // namespace neuron::nki::detail

// Shared with exec_collective.cpp (declared in exec_internal.h).
namespace neuron::nki::detail {

// Copies s into d (dtype conversion through fp32, definedness in checking mode); returns the
// number of elements derived from never-written memory and the flat index of the first.
int64_t copy_view(View d, View s, int64_t* first_bad) {
  if (d.dtype == s.dtype && !d.def && !s.def) {
    View dc = d, sc = s;
    collapse_all(dc);
    collapse_all(sc);
    if (fast_copy(dc, sc)) return 0;
  }
  // Large transfers with a common outer dimension are split over the host threads.
  const int64_t total = d.numel();
  if (total >= 65536 && d.num[0] == s.num[0] && d.num[0] > 1 && !rt::in_parallel_region()) {
    std::atomic<int64_t> abad{0};
    std::atomic<int64_t> afirst{-1};
    rt::parallel_for(0, d.num[0], 1, [&](int64_t b, int64_t e) {
      View dd = d, ss = s;
      dd.base += b * d.stride[0];
      ss.base += b * s.stride[0];
      if (dd.def) dd.def += b * d.stride[0];
      if (ss.def) ss.def += b * s.stride[0];
      dd.num[0] = ss.num[0] = e - b;
      collapse_all(dd);
      collapse_all(ss);
      int64_t fb = -1;
      const int64_t nb = dma_walk(dd, ss, &fb);
      if (nb) {
        abad += nb;
        int64_t expect = -1;
        afirst.compare_exchange_strong(expect, fb + b * (total / d.num[0]));
      }
    });
    *first_bad = afirst.load();
    return abad.load();
  }
  collapse_all(d);
  collapse_all(s);
  return dma_walk(d, s, first_bad);
}

// The caller-visible HBM tensor operand k writes (null: on chip or kernel-private).
const Binding* visible_output(const Ctx& c, int k, const View& v) {
  if (v.mem != Mem::Hbm) return nullptr;
  const Binding& b = c.bind[static_cast<size_t>(c.prog.phys()[c.pc][k].slot)];
  return b.scratch ? nullptr : &b;
}

// Never-written data copied by operand `ks` into `out`: an error when it reaches a
// caller-visible HBM tensor, else remembered for later messages.
void note_copied_undefined(Ctx& c, int ks, const Binding* out, int64_t bad, int64_t first_bad) {
  if (!bad) return;
  if (out && c.check) {
    c.note_undefined(ks);
    c.fail("uninitialized",
           "writes " + std::to_string(bad) +
               " element(s) derived from uninitialized SBUF/PSUM memory to HBM tensor '" +
               out->name + "' (first at flat element " + std::to_string(first_bad) +
               " of the transfer)" + c.undefined_origin(),
           "kernels read only memory they have written");
  }
  c.note_undefined(ks);
}

std::string shape_str(const View& v) {
  std::string s = std::string(dt_name(v.dtype)) + " [" + std::to_string(v.parts());
  s += ", " + std::to_string(v.free()) + "]";
  return s;
}

}  // namespace neuron::nki::detail

namespace neuron::nki::isa::exec {
using namespace detail;

void DmaCopy(Ctx& c) {
  using FX = Fields<Op::DmaCopy>;
  constexpr int kd = FX::k<"dst">, ks = FX::k<"src">;
  View d, s;
  if (!make_view(c, kd, d) || !make_view(c, ks, s)) return;  // skipped out-of-bounds access
  int64_t first_bad = -1;
  const int64_t bad = copy_view(d, s, &first_bad);
  note_copied_undefined(c, ks, visible_output(c, kd, d), bad, first_bad);
}

// The other cores of the logical core: core_barrier and sendrecv meet them through the
// launch's CoreGroup (a launch without one is a group of one core).
namespace {
CoreGroup& group_of(Ctx& c, std::unique_ptr<CoreGroup>& own) {
  if (c.opt.group) return *c.opt.group;
  own = std::make_unique<CoreGroup>(1, c.opt.poll_interrupt ? 0 : -1);
  return *own;
}
CoreGroup::Site site_of(const Ctx& c) { return {c.prog.instr_name(c.in()), c.prog.location(c.in())}; }

void check_rank(Ctx& c, const char* what, int64_t r, int n) {
  if (r >= n)
    c.fail("runtime",
           std::string(what) + " " + std::to_string(r) + " is not a core of this logical core: the " +
               "launch runs " + std::to_string(n) + " instance(s) at a time (launch the kernel " +
               "as kernel[2](...) on a logical core of two NeuronCores, NEURON_LOGICAL_NC_CONFIG=2)",
           "ranks name the NeuronCores of the logical core running the launch");
}
}  // namespace

void CoreBarrier(Ctx& c) {
  using FX = Fields<Op::CoreBarrier>;
  std::unique_ptr<CoreGroup> own;
  CoreGroup& g = group_of(c, own);
  const auto cores = static_cast<uint32_t>(FX{c.in()}.i<"cores">());
  for (int r = 0; r < 32; ++r)
    if (cores >> r & 1u) check_rank(c, "core", r, g.size());
  if (!(cores >> c.opt.rank & 1u))
    c.fail("runtime",
           "core " + std::to_string(c.opt.rank) + " is not one of the barrier's cores",
           "a core takes part in the barriers it executes");
  g.barrier(c.opt.rank, cores, site_of(c));
}

void SendRecv(Ctx& c) {
  using FX = Fields<Op::SendRecv>;
  constexpr int kd = FX::k<"dst">, ks = FX::k<"src">;
  const FX f{c.in()};
  std::unique_ptr<CoreGroup> own;
  CoreGroup& g = group_of(c, own);
  const int64_t to = f.i<"send_to_rank">(), from = f.i<"recv_from_rank">();
  check_rank(c, "send_to_rank", to, g.size());
  check_rank(c, "recv_from_rank", from, g.size());
  View d, s;
  make_view(c, kd, d);
  make_view(c, ks, s);
  const CoreGroup::Site here = site_of(c);
  g.sendrecv(c.opt.rank, static_cast<int>(to), static_cast<int>(from), f.i<"pipe_id">(), s, here,
             [&](const CoreGroup::Message& m) {
               if (m.src.dtype != d.dtype || m.src.numel() != d.numel() ||
                   m.src.parts() != d.parts())
                 c.fail("runtime",
                        "receives a " + shape_str(m.src) + " tile from rank " +
                            std::to_string(from) + " (" + m.site.instr + " at " + m.site.loc +
                            ") into a " + shape_str(d) + " dst",
                        "the src of a sendrecv and the dst of its peer have the same shape and "
                        "dtype");
               int64_t first_bad = -1;
               const int64_t bad = copy_view(d, m.src, &first_bad);
               note_copied_undefined(c, ks, visible_output(c, kd, d), bad, first_bad);
             });
}

namespace {
// A gather (the indirect operand is src) or scatter (dst) of entry p of the indirect operand's
// dimension q to index[p] * scale elements from its base, with entry p of the other operand's
// dimension q; add: dst entry += src entry in fp32 (dma_compute's read-modify-write) instead of
// a copy.
void indirect_transfer(Ctx& c, int kd, int ks, int kx, bool scatter, int64_t scale, bool skip_oob,
                       bool add, size_t q) {
  View d, s, ix;
  make_view(c, kd, d);
  make_view(c, ks, s);
  make_view(c, kx, ix);
  const int ki = scatter ? kd : ks;
  View& ind = scatter ? d : s;
  View& other = scatter ? s : d;
  const Binding& hb = c.bind[static_cast<size_t>(c.prog.phys()[c.pc][ki].slot)];
  const Binding* out = nullptr;
  if (d.mem == Mem::Hbm) {
    const Binding& b = c.bind[static_cast<size_t>(c.prog.phys()[c.pc][kd].slot)];
    if (!b.scratch) out = &b;
  }
  // The byte extent of one entry of the indirect dimension around its base.
  int64_t ext_lo = 0, ext_hi = ind.es;
  for (size_t k = 0; k < static_cast<size_t>(ind.ndim); ++k) {
    if (k == q) continue;
    const int64_t span = (ind.num[k] - 1) * ind.stride[k];
    (span < 0 ? ext_lo : ext_hi) += span;
  }
  const int64_t base_off = ind.base - hb.data;
  const int64_t n = ind.num[q];
  for (int64_t p = 0; p < n; ++p) {
    int64_t idx = 0;
    load_i64(ix.dtype, ix.base + p * ix.stride[0], 0, 1, &idx);
    if (ix.def) {
      uint8_t ok = 1;
      for (int b = 0; b < ix.es; ++b) ok &= ix.def[p * ix.stride[0] + b];
      if (!ok) {
        c.note_undefined(kx);
        c.fail("uninitialized",
               "index " + std::to_string(p) + " comes from never-written memory" +
                   c.undefined_origin(),
               "kernels read only memory they have written");
      }
    }
    const int64_t delta = idx * scale * ind.es;
    if (base_off + delta + ext_lo < 0 || base_off + delta + ext_hi > hb.bytes) {
      if (skip_oob) continue;
      // Worded first as the NKI simulator words it (an IndexError on the flattened tensor: the
      // first element of the access outside it), then which entry and index value did it.
      const int64_t size = hb.bytes / ind.es;
      const int64_t lo = (base_off + delta + ext_lo) / ind.es;
      const int64_t first = lo < 0 ? lo : std::max(lo, size);
      c.fail("index",
             "index " + std::to_string(first) + " is out of bounds for axis 0 with size " +
                 std::to_string(size) + "; index " + std::to_string(idx) + " (entry " +
                 std::to_string(p) + ") moves the access of '" + hb.name +
                 "' outside the tensor (" + std::to_string(size) + " elements)",
             "indirect DMA indices stay inside the tensor (or use oob_mode=nisa.oob_mode.skip)");
    }
    View a = ind, b = other;
    a.num[q] = b.num[q] = 1;
    a.base += delta;
    if (a.def) a.def += delta;
    b.base += p * other.stride[q];
    if (b.def) b.def += p * other.stride[q];
    View& dd = scatter ? a : b;
    View& ss = scatter ? b : a;
    collapse_all(dd);
    collapse_all(ss);
    int64_t first_bad = -1;
    int bad_src = -1;
    const View* both[2] = {&dd, &ss};
    const int64_t bad =
        add ? dma_sum_walk(dd, both, 2, &first_bad, &bad_src) : dma_walk(dd, ss, &first_bad);
    if (bad && c.check) {
      c.note_undefined(add && bad_src == 0 ? kd : ks);
      if (out)
        c.fail("uninitialized",
               "writes element(s) derived from uninitialized SBUF/PSUM memory to HBM tensor '" +
                   out->name + "' (entry " + std::to_string(p) + " of the indirect transfer)" +
                   c.undefined_origin(),
               "kernels read only memory they have written");
    }
  }
}
}  // namespace

void DmaIndirect(Ctx& c) {
  using FX = Fields<Op::DmaIndirect>;
  const FX f{c.in()};
  indirect_transfer(c, FX::k<"dst">, FX::k<"src">, FX::k<"index">, f.i<"indirect">() != 0,
                    f.i<"scale">(), f.i<"oob_mode">() == 1, false,
                    static_cast<size_t>(f.i<"dim">()));
}

void DmaComputeIndirect(Ctx& c) {
  using FX = Fields<Op::DmaComputeIndirect>;
  const FX f{c.in()};
  indirect_transfer(c, FX::k<"dst">, FX::k<"src">, FX::k<"index">, f.i<"indirect">() != 0,
                    f.i<"scale">(), f.i<"oob_mode">() == 1, true, 0);
}

void DmaCompute(Ctx& c) {
  using FX = Fields<Op::DmaCompute>;
  constexpr int kd = FX::k<"dst">, k0 = FX::k<"src0">;
  View d, s[4];
  if (!make_view(c, kd, d)) return;  // skipped out-of-bounds access
  const View* srcs[4];
  int ks[4], n = 0;
  for (int k = k0; k < k0 + 4; ++k) {
    if (!c.in().ap[k].present()) continue;
    if (!make_view(c, k, s[n])) return;
    srcs[n] = &s[n];
    ks[n++] = k;
  }
  int64_t first_bad = -1;
  int bad_src = -1;
  const int64_t bad = dma_sum_walk(d, srcs, n, &first_bad, &bad_src);
  note_copied_undefined(c, bad_src >= 0 ? ks[bad_src] : k0, visible_output(c, kd, d), bad,
                        first_bad);
}

}  // namespace neuron::nki::isa::exec
