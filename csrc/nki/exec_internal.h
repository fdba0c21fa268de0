// Internal to the executor: resolved operand views, per-thread scratch, and the row helpers
// the instruction implementations share. Not part of the public interface.
#pragma once

#include <atomic>
#include <cstring>
#include <functional>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "error.h"
#include "executor.h"
#include "runtime/thread_pool.h"

namespace neuron::nki::detail {

// A resolved operand: address of element 0 (and of its shadow), byte strides, sizes.
// On chip, dim 0 is the partition dimension.
struct View {
  uint8_t* base = nullptr;
  uint8_t* def = nullptr;  // shadow at base (null: always defined, writes untracked)
  DT dtype = DT::Float32;
  int es = 4;
  int ndim = 0;
  Mem mem = Mem::Sbuf;
  std::array<int64_t, kMaxApDims> stride{};
  std::array<int64_t, kMaxApDims> num{};

  int64_t parts() const { return num[0]; }
  int64_t free() const {
    int64_t n = 1;
    for (int d = 1; d < ndim; ++d) n *= num[d];
    return n;
  }
  int64_t numel() const { return num[0] * free(); }
};

// The shadow bytes an operand covers (checking mode): its elements' definedness flags.
struct Footprint {
  const uint8_t* def = nullptr;
  int es = 0;
  int ndim = 0;
  std::array<int64_t, kMaxApDims> stride{};
  std::array<int64_t, kMaxApDims> num{};
  int64_t numel() const;
  // The row-major index of the element holding byte p (-1: none) and the element at index i.
  int64_t index_of(const uint8_t* p) const;
  const uint8_t* at_index(int64_t i) const;
  const uint8_t* first_undefined() const;  // its first never-written byte (null: none)
};

// An instruction that read never-written memory, or values derived from it (checking mode):
// which operand, where (its first such byte) and what the instruction wrote. Kept per
// (instruction, operand), its latest execution, to trace an error back to the read of the
// never-written memory its values come from.
struct UndefinedRead {
  int64_t seq = 0;
  int32_t pc = 0;
  int k = 0;                    // the operand blamed (the hint of note_undefined, if it holds
  const uint8_t* at = nullptr;  // never-written bytes) and its first never-written byte
  std::vector<std::pair<int, Footprint>> reads;  // every read operand holding such bytes
  std::vector<Footprint> writes;
};

struct Ctx {
  Ctx(const Program& p, CoreState& c, const std::vector<Binding>& b, const ExecOptions& o)
      : prog(p), core(c), bind(b), opt(o) {}
  const Program& prog;
  CoreState& core;
  const std::vector<Binding>& bind;
  const ExecOptions& opt;
  const Plan* plan = nullptr;  // unchecked runs: the program's execution plan
  bool check = false;
  int32_t pc = 0;
  std::array<int64_t, kMaxOperands> dyn{};
  // The first instruction that read undefined memory (checking mode), and every one that did
  // (note_undefined), for error messages.
  std::mutex undef_mu;
  int32_t first_undef_pc = -1;
  std::string first_undef_what;
  std::vector<UndefinedRead> undef_reads;
  std::unordered_map<int64_t, size_t> undef_index;  // pc * kMaxOperands + k -> undef_reads
  int64_t undef_seq = 0;
  int64_t last_undef = -1;

  const Instr& in() const { return prog.instrs()[pc]; }
  // The current instruction's operands resolved by the plan (null: make_view resolves them).
  const PlanView* planned() const {
    if (!plan) return nullptr;
    const int32_t at = plan->view_at[static_cast<size_t>(pc)];
    return at >= 0 ? plan->views.data() + at : nullptr;
  }
  bool has(int k) const {
    if (k >= in().nap) return false;
    const PlanView* pv = planned();
    return pv ? pv[k].present : in().ap[k].present();
  }
  [[noreturn]] void fail(const std::string& kind, const std::string& msg,
                         const std::string& rule) const {
    throw NkiError(kind, prog.instr_name(in()), prog.location(in()), msg, rule);
  }
  // Operand k of the current instruction read never-written memory or values derived from it.
  void note_undefined(int k);
  // For an error at the current instruction, after note_undefined: "; ..." naming the
  // instruction that read the never-written memory the offending values derive from.
  std::string undefined_origin() const;
  std::string describe_read(int32_t at_pc, int k) const;
};

// One dimension of a copy refined to a shape common to its destination and source: count, dst
// and src byte strides.
struct Dim {
  int64_t n, ds, ss;
};
constexpr int kMaxRefined = 2 * kMaxApDims;
// Common refinement of two views of the same element count (innermost dimension first). False
// when the two factorizations are incompatible (e.g. [2, 3] vs [3, 2]).
bool refine(const View& d, const View& s, Dim* out, int& nd);

// Whether nc_matmul with these (free-collapsed) operands takes the thin-operand GEMV path.
bool thin_matmul_shapes(const View& s, const View& m);
// Runs the matmul run of Plan::matmul_run at c.pc (`span` instructions): its matmuls' GEMVs as
// one parallel job, then in program order their stores and, through `step` (which runs the
// instruction at c.pc and advances it), the other instructions. Leaves c.pc unchanged; false
// (nothing done) when one of the matmuls does not take the thin path after all.
bool matmul_run(Ctx& c, int32_t span, const std::function<void()>& step);

// Resolves operand k of the current instruction (dynamic offsets, bounds). Returns false
// when a DMA with oob_mode=skip is out of bounds.
bool make_view(Ctx& c, int k, View& v);
// An operand the plan resolved, at this launch's addresses.
void plan_view(Ctx& c, const PlanView& p, View& v);
// Runs the fused run starting at c.pc (exec_compute.cpp). Leaves c.pc unchanged.
void fused_run(Ctx& c, const FusedRun& run);
// Merges free dimensions that are contiguous in memory (keeps dim 0).
void collapse_free(View& v);

// Shared by the DMA and collective executors (exec_dma.cpp). copy_view copies s into d (dtype
// conversion through fp32, definedness in checking mode) and returns the number of elements
// derived from never-written memory (and the flat index of the first); visible_output is the
// caller-visible HBM tensor operand k writes (null: on chip or kernel-private);
// note_copied_undefined reports (or remembers) never-written data copied by operand ks.
int64_t copy_view(View d, View s, int64_t* first_bad);
const Binding* visible_output(const Ctx& c, int k, const View& v);
void note_copied_undefined(Ctx& c, int ks, const Binding* out, int64_t bad, int64_t first_bad);
std::string shape_str(const View& v);

struct Scratch {
  std::vector<float> f[6];
  std::vector<int64_t> i[4];
  std::vector<uint8_t> d[6];
  float* fb(int k, int64_t n) {
    if (static_cast<int64_t>(f[k].size()) < n) f[k].resize(static_cast<size_t>(n));
    return f[k].data();
  }
  int64_t* ib(int k, int64_t n) {
    if (static_cast<int64_t>(i[k].size()) < n) i[k].resize(static_cast<size_t>(n));
    return i[k].data();
  }
  uint8_t* db(int k, int64_t n) {
    if (static_cast<int64_t>(d[k].size()) < n) d[k].resize(static_cast<size_t>(n));
    return d[k].data();
  }
};
Scratch& scratch();

// Calls fn(ptr, n, stride_bytes, position) for every innermost run of row p.
template <typename Fn>
inline void for_each_run(const View& v, int64_t p, Fn&& fn, bool shadow = false) {
  uint8_t* row = (shadow ? v.def : v.base) + p * v.stride[0];
  if (v.ndim <= 1) {
    fn(row, int64_t{1}, int64_t{v.es}, int64_t{0});
    return;
  }
  const int inner = v.ndim - 1;
  if (inner == 1) {
    fn(row, v.num[1], v.stride[1], int64_t{0});
    return;
  }
  int64_t idx[kMaxApDims] = {};
  int64_t pos = 0;
  const int64_t n = v.num[inner], s = v.stride[inner];
  for (;;) {
    uint8_t* ptr = row;
    for (int d = 1; d < inner; ++d) ptr += idx[d] * v.stride[d];
    fn(ptr, n, s, pos);
    pos += n;
    int d = inner - 1;
    for (; d >= 1; --d) {
      if (++idx[d] < v.num[d]) break;
      idx[d] = 0;
    }
    if (d < 1) return;
  }
}

// Raw bytes of row p (bit-exact copies), packed element after element.
inline void gather_bytes(const View& v, int64_t p, uint8_t* out) {
  const int es = v.es;
  for_each_run(v, p, [&](uint8_t* ptr, int64_t n, int64_t s, int64_t pos) {
    if (s == es) {
      std::memcpy(out + pos * es, ptr, static_cast<size_t>(n * es));
    } else {
      for (int64_t i = 0; i < n; ++i)
        std::memcpy(out + (pos + i) * es, ptr + i * s, static_cast<size_t>(es));
    }
  });
}
inline void scatter_bytes(const View& v, int64_t p, const uint8_t* in) {
  const int es = v.es;
  for_each_run(v, p, [&](uint8_t* ptr, int64_t n, int64_t s, int64_t pos) {
    if (s == es) {
      std::memcpy(ptr, in + pos * es, static_cast<size_t>(n * es));
    } else {
      for (int64_t i = 0; i < n; ++i)
        std::memcpy(ptr + i * s, in + (pos + i) * es, static_cast<size_t>(es));
    }
  });
}

inline void load_row(const View& v, int64_t p, float* out) {
  for_each_run(v, p, [&](uint8_t* ptr, int64_t n, int64_t s, int64_t pos) {
    load_f32(v.dtype, ptr, s, n, out + pos);
  });
}
inline void store_row(const View& v, int64_t p, const float* in) {
  for_each_run(v, p, [&](uint8_t* ptr, int64_t n, int64_t s, int64_t pos) {
    store_f32(v.dtype, ptr, s, n, in + pos);
  });
}
inline void load_row_i(const View& v, int64_t p, int64_t* out) {
  for_each_run(v, p, [&](uint8_t* ptr, int64_t n, int64_t s, int64_t pos) {
    load_i64(v.dtype, ptr, s, n, out + pos);
  });
}
inline void store_row_i(const View& v, int64_t p, const int64_t* in) {
  for_each_run(v, p, [&](uint8_t* ptr, int64_t n, int64_t s, int64_t pos) {
    store_i64(v.dtype, ptr, s, n, in + pos);
  });
}

// Definedness of every element of row p (1 = all its bytes defined).
inline void load_def_row(const View& v, int64_t p, uint8_t* out) {
  if (!v.def) {
    std::fill(out, out + v.free(), uint8_t{1});
    return;
  }
  const int es = v.es;
  for_each_run(
      v, p,
      [&](uint8_t* ptr, int64_t n, int64_t s, int64_t pos) {
        for (int64_t i = 0; i < n; ++i) {
          const uint8_t* e = ptr + i * s;
          uint8_t ok = 1;
          for (int b = 0; b < es; ++b) ok &= e[b];
          out[pos + i] = ok;
        }
      },
      true);
}
inline void store_def_row(const View& v, int64_t p, const uint8_t* in) {
  if (!v.def) return;
  const int es = v.es;
  for_each_run(
      v, p,
      [&](uint8_t* ptr, int64_t n, int64_t s, int64_t pos) {
        for (int64_t i = 0; i < n; ++i)
          for (int b = 0; b < es; ++b) ptr[i * s + b] = in[pos + i];
      },
      true);
}
inline bool all_defined(const uint8_t* d, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (!d[i]) return false;
  return true;
}

// Runs fn(p) for every partition, in parallel when the work is large.
template <typename Fn>
inline void for_partitions(int64_t parts, int64_t per_part, Fn&& fn) {
  if (parts <= 1 || parts * per_part < 32768 || rt::in_parallel_region()) {
    for (int64_t p = 0; p < parts; ++p) fn(p);
    return;
  }
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, per_part));
  rt::parallel_for(0, parts, grain, [&](int64_t b, int64_t e) {
    for (int64_t p = b; p < e; ++p) fn(p);
  });
}

// Runs fn(p0, rows, scratch) over blocks of partitions sized so that a block of rows of
// `per_part` elements stays cache resident; blocks run in parallel when the work is large.
template <typename Fn>
inline void for_blocks(int64_t parts, int64_t per_part, Fn&& fn) {
  const int64_t rows =
      std::max<int64_t>(1, std::min<int64_t>(parts, 8192 / std::max<int64_t>(1, per_part)));
  const int64_t blocks = (parts + rows - 1) / rows;
  auto run = [&](int64_t b0, int64_t b1) {
    Scratch& sc = scratch();
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t p0 = b * rows;
      fn(p0, std::min(rows, parts - p0), sc);
    }
  };
  if (blocks <= 1 || parts * per_part < 32768 || rt::in_parallel_region()) {
    run(0, blocks);
    return;
  }
  rt::parallel_for(0, blocks, 1, run);
}

// Row p of a view as a plain float array when its rows are contiguous fp32 (no copy needed).
inline float* f32_row(const View& v, int64_t p) {
  return (v.dtype == DT::Float32 && v.ndim == 2 && v.stride[1] == 4)
             ? reinterpret_cast<float*>(v.base + p * v.stride[0])
             : nullptr;
}
inline bool f32_rows(const View& v) {
  return v.dtype == DT::Float32 && v.ndim == 2 && v.stride[1] == 4;
}
inline bool contiguous_rows(const View& v) { return v.ndim == 2 && v.stride[1] == v.es; }

// Rows p0..p0+rows of a view as a dense [rows, free] array (and back).
inline void gather_f32(const View& v, int64_t p0, int64_t rows, float* out) {
  const int64_t F = v.free();
  if (F == 1 && v.ndim <= 2) {  // one element per partition: a single strided load
    load_f32(v.dtype, v.base + p0 * v.stride[0], v.stride[0], rows, out);
  } else if (v.ndim == 2 && v.dtype == DT::Float32 && v.stride[1] == 4) {
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(out + r * F, v.base + (p0 + r) * v.stride[0], static_cast<size_t>(F) * 4);
  } else if (v.ndim == 2) {
    for (int64_t r = 0; r < rows; ++r)
      load_f32(v.dtype, v.base + (p0 + r) * v.stride[0], v.stride[1], F, out + r * F);
  } else {
    for (int64_t r = 0; r < rows; ++r) load_row(v, p0 + r, out + r * F);
  }
}
inline void scatter_f32(const View& v, int64_t p0, int64_t rows, const float* in) {
  const int64_t F = v.free();
  if (F == 1 && v.ndim <= 2) {
    store_f32(v.dtype, v.base + p0 * v.stride[0], v.stride[0], rows, in);
  } else if (v.ndim == 2 && v.dtype == DT::Float32 && v.stride[1] == 4) {
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(v.base + (p0 + r) * v.stride[0], in + r * F, static_cast<size_t>(F) * 4);
  } else if (v.ndim == 2) {
    for (int64_t r = 0; r < rows; ++r)
      store_f32(v.dtype, v.base + (p0 + r) * v.stride[0], v.stride[1], F, in + r * F);
  } else {
    for (int64_t r = 0; r < rows; ++r) store_row(v, p0 + r, in + r * F);
  }
}
inline void gather_i64(const View& v, int64_t p0, int64_t rows, int64_t* out) {
  const int64_t F = v.free();
  for (int64_t r = 0; r < rows; ++r) load_row_i(v, p0 + r, out + r * F);
}
inline void scatter_i64(const View& v, int64_t p0, int64_t rows, const int64_t* in) {
  const int64_t F = v.free();
  for (int64_t r = 0; r < rows; ++r) store_row_i(v, p0 + r, in + r * F);
}
inline void gather_def(const View& v, int64_t p0, int64_t rows, uint8_t* out) {
  const int64_t F = v.free();
  for (int64_t r = 0; r < rows; ++r) load_def_row(v, p0 + r, out + r * F);
}
inline void scatter_def(const View& v, int64_t p0, int64_t rows, const uint8_t* in) {
  const int64_t F = v.free();
  for (int64_t r = 0; r < rows; ++r) store_def_row(v, p0 + r, in + r * F);
}

}  // namespace neuron::nki::detail
