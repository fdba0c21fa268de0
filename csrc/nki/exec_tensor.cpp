// Tensor Engine instructions: nc_matmul (through kernels::gemm in fp32, which is how the PE
// array accumulates) and nc_transpose.
#include <dlfcn.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <string_view>

#include "exec_internal.h"
#include "kernels/blas.h"
#include "kernels/gemm.h"
#include "simd.h"
#include "simd_matmul.h"

namespace neuron::nki::detail {

namespace {

// MKL's thread-local thread count: matmul tiles are split over the runtime's host pool
// instead, because MKL's OpenMP workers spin between the many small tile GEMMs and starve the
// other threads on small hosts.
// The Fortran-convention entry point (argument by reference) is the one every MKL build exports.
using SetThreadsFn = int (*)(const int*);
SetThreadsFn mkl_set_threads_local() {
  static const SetThreadsFn fn = [] {
    kernels::blas::functions();  // loads the BLAS library if nothing has yet
    void* h = dlopen("libtorch_cpu.so", RTLD_NOW | RTLD_NOLOAD);
    return h ? reinterpret_cast<SetThreadsFn>(dlsym(h, "mkl_set_num_threads_local_")) : nullptr;
  }();
  return fn;
}

// Runs run(n0, n1) over the columns of a tile product: in blocks over the host threads when the
// product is large (m * n * k >= 2^21 and at least min_cols columns), each block at least
// min_grain columns and a multiple of `align`; else in one call (and inside a parallel region).
template <typename Fn>
void split_columns(const kernels::GemmProblem& g, int64_t min_cols, int64_t min_grain,
                   int64_t align, Fn&& run) {
  const int64_t threads = rt::in_parallel_region() ? 1 : rt::num_threads();
  if (threads <= 1 || g.m * g.n * g.k < (int64_t{1} << 21) || g.n < min_cols) {
    run(int64_t{0}, g.n);
    return;
  }
  const int64_t share = ((g.n + threads - 1) / threads + align - 1) / align * align;
  rt::parallel_for(0, g.n, std::max(min_grain, share), run);
}

// C[M, N] (+)= A^T-layout GEMM of one tile, column blocks in parallel, one MKL thread each.
void tile_gemm(const kernels::GemmProblem& g) {
  const SetThreadsFn set = mkl_set_threads_local();
  split_columns(g, 64, 32, 1, [&](int64_t n0, int64_t n1) {
    kernels::GemmProblem q = g;
    q.n = n1 - n0;
    q.b = static_cast<const float*>(g.b) + n0 * g.b_cs;
    q.c = static_cast<float*>(g.c) + n0 * g.c_cs;
    const int one = 1;
    const int prev = set ? set(&one) : 0;
    kernels::gemm(q);
    if (set) set(&prev);
  });
}

// Whether simd::matmul_f32 computes this tile product: where neither side is thin (gemm's GEMV
// route keeps its arithmetic) and not a single product onto PSUM (the BLAS fuses that one:
// fma(a, b, C)), on AVX-512 or AVX2 hosts. Without a micro-kernel kernels::gemm's BLAS route
// gives the same bits for one tile's contraction (NkiSimd.MatmulTileMatchesPortableAndGemm), but
// not always beyond it (MKL on AMD Zen 4 splits a double_row matmul's 256 into two chains): those
// take matmul_f32's portable loops.
bool use_micro_kernel(const kernels::GemmProblem& g) {
  return std::string_view(kernels::gemm_route(g)) == "blas" && !(g.k == 1 && g.beta != 0.0) &&
         (simd::matmul_uses_micro_kernel() || g.k > 128);
}

// C (+)= A^T B by the micro-kernel (g: sizes, C, accumulate). Large tiles are shared by the host
// threads panel by panel (simd::matmul_f32_shared): whichever thread is free claims the next
// panel, so a helper that wakes late costs its share, not the whole tile.
void tile_matmul(const kernels::GemmProblem& g, const simd::MatmulOperand& A,
                 const simd::MatmulOperand& B) {
  float* C = static_cast<float*>(g.c);
  const bool acc = g.beta != 0.0;
  const int64_t threads = rt::in_parallel_region() ? 1 : rt::num_threads();
  if (threads <= 1 || g.m * g.n * g.k < (int64_t{1} << 21) ||
      g.n < 2 * simd::matmul_panel_columns()) {
    simd::matmul_f32(C, g.c_rs, A, B, g.m, g.k, 0, g.n, acc);
    return;
  }
  simd::MatmulPanels panels;
  rt::parallel_for(0, threads, 1, [&](int64_t, int64_t) {
    simd::matmul_f32_shared(C, g.c_rs, A, B, g.m, g.k, g.n, acc, panels);
  });
}

// An on-chip operand the micro-kernel reads in place: [K, F] with contiguous bf16/fp32 rows.
bool in_place_operand(const View& v, simd::MatmulOperand& o) {
  if (v.ndim != 2 || v.stride[1] != v.es || (v.dtype != DT::BFloat16 && v.dtype != DT::Float32))
    return false;
  o = {v.base, v.stride[0], v.dtype == DT::BFloat16};
  return true;
}

// Matmuls with one thin operand (decode: one to a few tokens against a weight tile) as GEMVs
// straight from the wide operand's rows in its own dtype (simd::gemv: the arithmetic of one
// AXPY per k, accumulators in registers) instead of gathering it into fp32 for a GEMM. fp32
// accumulation over k in order, like PSUM. An operand the execution plan reads in place from
// HBM (a weight loaded by an elided DMA, often transposed) takes the same path: the plan only
// redirects operands whose on-chip form qualifies here, so the result is bit-identical.
constexpr int64_t kThin = 16;

bool thin_dtype(DT t) { return t == DT::BFloat16 || t == DT::Float32; }

bool thin_operand(const View& v) {
  return v.ndim == 2 && thin_dtype(v.dtype) && (v.stride[1] == v.es || v.mem == Mem::Hbm);
}

}  // namespace

bool thin_matmul_shapes(const View& s, const View& m) {
  return std::min(s.free(), m.free()) <= kThin && thin_operand(s) && thin_operand(m);
}

namespace {

// One thin matmul split in its two phases: the GEMVs into a rows x width accumulator A (the
// thin operand indexes the rows, the wide one is streamed; columns are independent, so any
// split of them gives the same bits), then the store (or PSUM accumulation) of A into dst.
struct ThinMatmul {
  View d, s, m;
  bool acc = false;
  int64_t K = 0, M = 0, N = 0, rows = 0, width = 0;
  bool thin_moving = false;
  // The thin operand as fp32 coefficient rows (rows x K), when a matmul run loaded it once for
  // all of its work items; otherwise columns() loads it per call.
  const float* coef = nullptr;

  // The thin operand's rows as fp32, rows x K at out (strided reads, one element per partition).
  void load_coef(float* out) const {
    const View& t = thin();
    for (int64_t r = 0; r < rows; ++r)
      load_f32(t.dtype, t.base + r * t.stride[1], t.stride[0], K, out + r * K);
  }

  bool init(const View& d_, const View& s_, const View& m_, bool acc_) {
    if (!thin_matmul_shapes(s_, m_)) return false;
    d = d_;
    s = s_;
    m = m_;
    acc = acc_;
    K = s.parts();
    M = s.free();
    N = m.free();
    thin_moving = N <= M;
    rows = thin_moving ? N : M;
    width = thin_moving ? M : N;
    return true;
  }
  int64_t wide_bytes() const { return K * width * (thin_moving ? s.es : m.es); }
  const View& thin() const { return thin_moving ? m : s; }
  const View& wide() const { return thin_moving ? s : m; }

  // Whether t runs in one GEMV chain right after this matmul (simd::gemv_chain_bf16): one
  // coefficient row each against bf16 wide operands of the same shape and strides, in a layout
  // the chain kernel reads together, t's weights the next K values of the same rows (a
  // projection's next 128-row chunk), so a chain's column block is one contiguous stretch of
  // every row.
  bool chains_with(const ThinMatmul& t) const {
    const View &a = wide(), &b = t.wide();
    return rows == 1 && t.rows == 1 && a.dtype == DT::BFloat16 && b.dtype == DT::BFloat16 &&
           K == t.K && width == t.width && a.stride[0] == b.stride[0] &&
           a.stride[1] == b.stride[1] && b.base == a.base + K * a.stride[0] &&
           simd::gemv_chain_reads_together(a.stride[0], a.stride[1], K);
  }
  // Whether columns() of this matmul can prefetch the weights of `t`'s columns while it runs
  // (simd::gemv_bf16_then): one coefficient row each against column-contiguous bf16 weights
  // with the same row stride and K.
  bool prefetches_for(const ThinMatmul& t) const {
    const View &a = wide(), &b = t.wide();
    return rows == 1 && t.rows == 1 && a.dtype == DT::BFloat16 && b.dtype == DT::BFloat16 &&
           a.stride[0] == 2 && b.stride[0] == 2 && a.stride[1] == b.stride[1] && K == t.K;
  }

  // Columns [j0, j1) into A; `next_w` (from prefetches_for) is the first column's weights of the
  // GEMV this thread runs next, prefetched meanwhile.
  void columns(float* A, int64_t j0, int64_t j1, const uint8_t* next_w = nullptr) const {
    const View& wide = thin_moving ? s : m;
    const float* coef = this->coef;
    if (!coef) {
      float* c = scratch().fb(3, rows * K);
      load_coef(c);
      coef = c;
    }
    const uint8_t* w = wide.base + j0 * wide.stride[1];
    if (next_w)
      simd::gemv_bf16_then(A + j0, coef, w, wide.stride[1], K, j1 - j0, next_w);
    else if (wide.dtype == DT::BFloat16)
      simd::gemv_rows_bf16(A + j0, width, coef, rows, w, wide.stride[0], wide.stride[1], K, j1 - j0);
    else
      simd::gemv_rows_f32(A + j0, width, coef, rows, w, wide.stride[0], wide.stride[1], K, j1 - j0);
  }

  // dst [M, N]: row i, column j = A[j][i] (thin moving) or A[i][j] (thin stationary). Clobbers A.
  void store(float* A) const {
    Scratch& sc = scratch();
    if (thin_moving && d.ndim == 2) {  // a few columns: each one strided store over partitions
      float* prev = sc.fb(5, M);
      for (int64_t j = 0; j < N; ++j) {
        float* col = A + j * M;
        uint8_t* base = d.base + j * d.stride[1];
        if (acc) {
          load_f32(d.dtype, base, d.stride[0], M, prev);
          for (int64_t i = 0; i < M; ++i) col[i] += prev[i];
        }
        store_f32(d.dtype, base, d.stride[0], M, col);
      }
      return;
    }
    float* out = sc.fb(4, N);
    float* prev = sc.fb(5, N);
    for (int64_t i = 0; i < M; ++i) {
      float* row = out;
      if (thin_moving)
        for (int64_t j = 0; j < N; ++j) out[j] = A[j * M + i];
      else
        row = A + i * N;
      if (acc) {
        load_row(d, i, prev);
        for (int64_t j = 0; j < N; ++j) row[j] += prev[j];
      }
      store_row(d, i, row);
    }
  }
};

// Columns [j0, j1) of the chain mm[0, L) (each chains_with mm[0]) into A[l]: the bits of
// mm[l].columns, with the weights of a column block read for every member together.
void chain_columns(const ThinMatmul* mm, int64_t L, float* const* A, int64_t j0, int64_t j1) {
  constexpr int64_t kMax = 16;
  const int64_t K = mm[0].K;
  float* coef = scratch().fb(3, std::min(L, kMax) * K);
  for (int64_t l0 = 0; l0 < L; l0 += kMax) {
    const int64_t n = std::min(kMax, L - l0);
    float* acc[kMax];
    const float* cf[kMax];
    const uint8_t* w[kMax];
    for (int64_t l = 0; l < n; ++l) {
      const ThinMatmul& t = mm[l0 + l];
      const View& wide = t.wide();
      if (t.coef) {
        cf[l] = t.coef;
      } else {
        t.load_coef(coef + l * K);
        cf[l] = coef + l * K;
      }
      acc[l] = A[l0 + l] + j0;
      w[l] = wide.base + j0 * wide.stride[1];
    }
    const View& wide = mm[0].wide();
    simd::gemv_chain_bf16(acc, cf, w, n, wide.stride[0], wide.stride[1], K, j1 - j0,
                          mm[0].width - j1);
  }
}

bool thin_matmul(const View& d, const View& s, const View& m, bool acc) {
  ThinMatmul t;
  if (!t.init(d, s, m, acc)) return false;
  float* A = scratch().fb(2, t.rows * t.width);
  t.columns(A, 0, t.width);
  t.store(A);
  return true;
}

// The operands of the current instruction (a matmul) as the thin path takes them.
bool thin_views(Ctx& c, ThinMatmul& t) {
  using FX = isa::Fields<Op::Matmul>;
  const FX f{c.in()};
  if (f.i<"perf_mode">() != 0 || f.flag<"is_transpose">()) return false;
  View d, s, m;
  make_view(c, FX::k<"dst">, d);
  make_view(c, FX::k<"stationary">, s);
  make_view(c, FX::k<"moving">, m);
  collapse_free(d);
  collapse_free(s);
  collapse_free(m);
  return t.init(d, s, m, f.flag<"accumulate">());
}

}  // namespace

// A matmul run (Plan::matmul_run): its matmuls read SBUF (or HBM in place) and write PSUM
// only, and the instructions between them write nothing the run's matmuls read, so all of its
// GEMVs run first as one parallel job (inline inside a parallel region). Consecutive matmuls
// with the same wide layout (a projection's chain over k chunks, gate and up side by side) form
// GEMV chains whose column blocks are computed for every member at once (one pass over the
// weight rows instead of one per k chunk); the work items (column ranges of a chain) are
// claimed one at a time by whichever host thread is free. Then, in program order, each
// matmul's result is stored (PSUM accumulation adds in the same order as one by one) and every
// other instruction of the run's span runs through `step`.
bool matmul_run(Ctx& c, int32_t span, const std::function<void()>& step) {
  // Weight bytes per work item: a single GEMV's, and a chain's (whose kernel prefetches the
  // next column block within an item).
  constexpr int64_t kItemBytes = 32 * 1024, kChainItemBytes = 128 * 1024;
  const int32_t pc0 = c.pc;
  const auto& member = c.plan->run_member;
  std::vector<ThinMatmul> mm;
  std::vector<int64_t> offset(1, 0);
  for (int32_t pc = pc0; pc < pc0 + span; ++pc) {
    if (!member[static_cast<size_t>(pc)]) continue;
    c.pc = pc;
    ThinMatmul& t = mm.emplace_back();
    if (!thin_views(c, t)) {
      c.pc = pc0;
      return false;
    }
    offset.push_back(offset.back() + t.rows * t.width);
  }
  c.pc = pc0;
  const auto count = static_cast<int32_t>(mm.size());
  // Every matmul's thin operand loaded once for all of its work items (a strided read of one
  // element per partition: reloading it per item was most of a decode step's bf16 loads). The
  // thin operands are on-chip memory that no instruction of the run writes before its matmul.
  thread_local std::vector<float> coefs;
  int64_t ncoef = 0;
  for (const ThinMatmul& t : mm) ncoef += t.rows * t.K;
  if (coefs.size() < static_cast<size_t>(ncoef)) coefs.resize(static_cast<size_t>(ncoef));
  for (int64_t at = 0; ThinMatmul& t : mm) {
    t.load_coef(coefs.data() + at);
    t.coef = coefs.data() + at;
    at += t.rows * t.K;
  }
  // Not the per-instruction scratch: the instructions between the matmuls use that.
  thread_local std::vector<float> results;
  if (results.size() < static_cast<size_t>(offset.back())) results.resize(static_cast<size_t>(offset.back()));
  std::vector<float*> A(static_cast<size_t>(count));
  for (int32_t i = 0; i < count; ++i) A[static_cast<size_t>(i)] = results.data() + offset[static_cast<size_t>(i)];
  struct Item {
    int32_t i, L;
    int64_t j0, j1;
  };
  std::vector<Item> items;
  for (int32_t i = 0; i < count;) {
    const ThinMatmul& t = mm[static_cast<size_t>(i)];
    int32_t L = 1;
    while (i + L < count &&
           mm[static_cast<size_t>(i + L - 1)].chains_with(mm[static_cast<size_t>(i + L)]))
      ++L;
    const int64_t per_col = std::max<int64_t>(1, t.wide_bytes() / std::max<int64_t>(1, t.width)) * L;
    const int64_t cols = std::max<int64_t>(16, (L > 1 ? kChainItemBytes : kItemBytes) / per_col / 16 * 16);
    for (int64_t j = 0; j < t.width; j += cols) items.push_back({i, L, j, std::min(t.width, j + cols)});
    i += L;
  }
  // Claimed one at a time: a helper that wakes late (or is descheduled on a busy host) leaves
  // its share to the others instead of holding up the run with a fixed half.
  std::atomic<int64_t> claim{0};
  const auto n_items = static_cast<int64_t>(items.size());
  const int64_t workers =
      std::min<int64_t>(n_items, rt::in_parallel_region() ? 1 : rt::num_threads());
  // The item a thread most likely runs after item k (items are claimed in order), whose weights
  // it prefetches while running k: the first of every projection's chain is not cold then.
  auto next_weights = [&](int64_t k) -> const uint8_t* {
    if (k + workers >= n_items) return nullptr;
    const Item &it = items[static_cast<size_t>(k)], &nx = items[static_cast<size_t>(k + workers)];
    const ThinMatmul &t = mm[static_cast<size_t>(it.i)], &u = mm[static_cast<size_t>(nx.i)];
    if (it.L > 1 || nx.L > 1 || !t.prefetches_for(u)) return nullptr;
    return u.wide().base + nx.j0 * u.wide().stride[1];
  };
  rt::parallel_for(0, workers, 1, [&](int64_t, int64_t) {
    for (int64_t k; (k = claim.fetch_add(1, std::memory_order_relaxed)) < n_items;) {
      const Item& it = items[static_cast<size_t>(k)];
      const auto i = static_cast<size_t>(it.i);
      if (it.L > 1)
        chain_columns(&mm[i], it.L, &A[i], it.j0, it.j1);
      else
        mm[i].columns(A[i], it.j0, it.j1, next_weights(k));
    }
  });
  size_t next = 0;
  for (c.pc = pc0; c.pc < pc0 + span;) {
    if (member[static_cast<size_t>(c.pc)]) {
      mm[next].store(A[next]);
      ++next;
      ++c.pc;
    } else {
      step();
    }
  }
  c.pc = pc0;
  return true;
}

namespace {

// Gathers a [K, F] on-chip operand into a dense row-major fp32 matrix (and its definedness).
void gather(const View& v, float* out, uint8_t* def, bool check) {
  const int64_t F = v.free();
  for_partitions(v.parts(), F, [&](int64_t k) {
    load_row(v, k, out + k * F);
    if (check) load_def_row(v, k, def + k * F);
  });
}

}  // namespace
}  // namespace neuron::nki::detail

namespace neuron::nki::isa::exec {
using namespace detail;

void Matmul(Ctx& c) {
  using FX = Fields<Op::Matmul>;
  const FX f{c.in()};
  View d, s, m;
  make_view(c, FX::k<"dst">, d);
  make_view(c, FX::k<"stationary">, s);
  make_view(c, FX::k<"moving">, m);
  collapse_free(d);
  const bool dbl = f.i<"perf_mode">() == 1, acc = f.flag<"accumulate">(),
             transpose = f.flag<"is_transpose">();
  if (!c.check && !dbl && !transpose) {
    View s2 = s, m2 = m;
    collapse_free(s2);
    collapse_free(m2);
    if (thin_matmul(d, s2, m2, acc)) return;
  }
  const int64_t K = s.parts(), SF = s.free(), MF = m.free();
  const int64_t M = dbl ? SF / 2 : SF, N = dbl ? MF / 2 : MF, Kt = dbl ? 2 * K : K;
  const bool direct = !transpose && d.dtype == DT::Float32 && d.ndim == 2 && d.stride[1] == 4;
  kernels::GemmProblem g;
  g.m = M;
  g.n = N;
  g.k = Kt;
  g.beta = acc ? 1.0f : 0.0f;
  const bool micro = !transpose && use_micro_kernel(g);
  if (micro && direct && !c.check && !dbl) {
    // Planned runs: the tiles are read where they are (bf16 widened while packed).
    View s2 = s, m2 = m;
    collapse_free(s2);
    collapse_free(m2);
    simd::MatmulOperand sa, mb;
    if (in_place_operand(s2, sa) && in_place_operand(m2, mb)) {
      g.c = d.base;
      g.c_rs = d.stride[0] / 4;
      tile_matmul(g, sa, mb);
      return;
    }
  }
  Scratch& sc = scratch();
  float* sraw = sc.fb(0, K * SF);
  float* mraw = sc.fb(1, K * MF);
  uint8_t* sdef = c.check ? sc.db(0, K * SF) : nullptr;
  uint8_t* mdef = c.check ? sc.db(1, K * MF) : nullptr;
  gather(s, sraw, sdef, c.check);
  if (!transpose) gather(m, mraw, mdef, c.check);

  // Contraction index kk = j * K + k for double_row ([K, 2, F] operands), else kk = k.
  float* A = sraw;  // [Kt, M]
  float* B = mraw;  // [Kt, N]
  if (dbl) {
    A = sc.fb(2, Kt * M);
    B = sc.fb(3, Kt * N);
    for (int64_t k = 0; k < K; ++k)
      for (int64_t j = 0; j < 2; ++j) {
        std::memcpy(A + (j * K + k) * M, sraw + k * SF + j * M, static_cast<size_t>(M) * 4);
        std::memcpy(B + (j * K + k) * N, mraw + k * MF + j * N, static_cast<size_t>(N) * 4);
      }
  }

  float* C = direct ? nullptr : sc.fb(4, M * N);
  if (transpose) {
    // Transpose mode passes data through the array bit-exactly: dst = stationary^T.
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * N + j] = A[j * M + i];
    if (acc) {
      float* prev = sc.fb(5, N);
      for (int64_t i = 0; i < M; ++i) {
        load_row(d, i, prev);
        for (int64_t j = 0; j < N; ++j) C[i * N + j] += prev[j];
      }
    }
  } else {
    g.a = A;
    g.a_rs = 1;
    g.a_cs = M;
    g.b = B;
    g.b_rs = N;
    g.b_cs = 1;
    g.in_dtype = kernels::DType::Float32;
    g.out_dtype = kernels::DType::Float32;
    if (direct) {
      g.c = d.base;
      g.c_rs = d.stride[0] / 4;
      g.c_cs = 1;
    } else {
      if (acc)
        for (int64_t i = 0; i < M; ++i) load_row(d, i, C + i * N);
      g.c = C;
      g.c_rs = N;
      g.c_cs = 1;
    }
    if (micro)
      tile_matmul(g, {reinterpret_cast<const uint8_t*>(A), M * 4, false},
                  {reinterpret_cast<const uint8_t*>(B), N * 4, false});
    else
      tile_gemm(g);
  }
  if (!direct) for_partitions(M, N, [&](int64_t i) { store_row(d, i, C + i * N); });

  if (c.check) {
    uint8_t* col_s = sc.db(2, M);
    uint8_t* col_m = sc.db(3, N);
    uint8_t* out = sc.db(4, N);
    bool undefined = false, onto_undefined = false;  // an input; the PSUM accumulated onto
    if (transpose) {
      for (int64_t i = 0; i < M; ++i) {
        for (int64_t j = 0; j < N; ++j) {
          out[j] = sdef[j * SF + i];
          undefined |= !out[j];
        }
        if (acc) {
          uint8_t* prev = sc.db(5, N);
          load_def_row(d, i, prev);
          onto_undefined |= !all_defined(prev, N);
          for (int64_t j = 0; j < N; ++j) out[j] &= prev[j];
        }
        store_def_row(d, i, out);
      }
    } else {
      std::fill(col_s, col_s + M, uint8_t{1});
      std::fill(col_m, col_m + N, uint8_t{1});
      for (int64_t k = 0; k < K; ++k) {
        for (int64_t x = 0; x < SF; ++x) col_s[dbl ? x % M : x] &= sdef[k * SF + x];
        for (int64_t x = 0; x < MF; ++x) col_m[dbl ? x % N : x] &= mdef[k * MF + x];
      }
      undefined = !all_defined(col_s, M) || !all_defined(col_m, N);
      uint8_t* prev = sc.db(5, N);
      for (int64_t i = 0; i < M; ++i) {
        if (acc) {
          load_def_row(d, i, prev);
          onto_undefined |= !all_defined(prev, N);
        }
        for (int64_t j = 0; j < N; ++j) out[j] = col_s[i] & col_m[j] & (acc ? prev[j] : uint8_t{1});
        store_def_row(d, i, out);
      }
    }
    if (onto_undefined) c.note_undefined(FX::k<"dst">);
    if (undefined) c.note_undefined(all_defined(col_s, M) ? FX::k<"moving"> : FX::k<"stationary">);
  }
}

void Transpose(Ctx& c) {
  using FX = Fields<Op::Transpose>;
  View d, s;
  make_view(c, FX::k<"dst">, d);
  make_view(c, FX::k<"data">, s);
  collapse_free(d);
  collapse_free(s);
  const int64_t P = s.parts(), F = s.free();
  Scratch& sc = scratch();
  float* T = sc.fb(0, P * F);
  uint8_t* Td = c.check ? sc.db(0, P * F) : nullptr;
  gather(s, T, Td, c.check);
  float* row = sc.fb(1, P);
  uint8_t* drow = c.check ? sc.db(1, P) : nullptr;
  bool undefined = false;
  for (int64_t f = 0; f < F; ++f) {
    for (int64_t p = 0; p < P; ++p) row[p] = T[p * F + f];
    store_row(d, f, row);
    if (c.check) {
      for (int64_t p = 0; p < P; ++p) {
        drow[p] = Td[p * F + f];
        undefined |= !drow[p];
      }
      store_def_row(d, f, drow);
    }
  }
  if (undefined) c.note_undefined(FX::k<"data">);
}

}  // namespace neuron::nki::isa::exec
