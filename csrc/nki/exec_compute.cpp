// Vector, Scalar and GpSimd Engine instructions. Every one works partition by partition on
// rows of fp32 values (or int64 for bitvec operators and all-32-bit-integer operands), with a
// parallel definedness row in checking mode.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "exec_internal.h"

namespace neuron::nki::detail {
namespace {

struct Views {
  View v[kMaxOperands];
  bool has[kMaxOperands] = {};
};

Views views(Ctx& c) {
  Views r;
  for (int k = 0; k < c.in().nap; ++k) {
    if (!c.has(k)) continue;
    make_view(c, k, r.v[k]);
    collapse_free(r.v[k]);
    r.has[k] = true;
  }
  return r;
}

// Element 0 of partition p of a [P, 1] vector operand.
float vec_at(const View& v, int64_t p) {
  float x;
  load_f32(v.dtype, v.base + p * v.stride[0], v.es, 1, &x);
  return x;
}
int64_t vec_at_i(const View& v, int64_t p) {
  int64_t x;
  load_i64(v.dtype, v.base + p * v.stride[0], v.es, 1, &x);
  return x;
}
uint8_t vec_def(const View& v, int64_t p) {
  if (!v.def) return 1;
  uint8_t ok = 1;
  for (int b = 0; b < v.es; ++b) ok &= v.def[p * v.stride[0] + b];
  return ok;
}
void vec_store(const View& v, int64_t p, float x, uint8_t def) {
  store_f32(v.dtype, v.base + p * v.stride[0], v.es, 1, &x);
  if (v.def) std::memset(v.def + p * v.stride[0], def, static_cast<size_t>(v.es));
}

bool int_path(const Views& w, std::initializer_list<int> ks, std::initializer_list<int64_t> ops) {
  for (int64_t op : ops)
    if (op >= 0 && alu_is_bitvec(static_cast<Alu>(op))) return true;
  for (int k : ks)
    if (w.has[k] && !dt_is_int32(w.v[k].dtype)) return false;
  return true;
}

int64_t imm_i(double v) { return static_cast<int64_t>(std::llround(v)); }

// Definedness: out[i] &= in[i].
inline void and_into(uint8_t* out, const uint8_t* in, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] &= in[i];
}

float reduce_f(Alu op, const float* x, int64_t n) {
  float acc = alu_identity(op);
  switch (op) {
    case Alu::Add:
      for (int64_t i = 0; i < n; ++i) acc += x[i];
      return acc;
    case Alu::Max:
      for (int64_t i = 0; i < n; ++i) acc = std::isnan(x[i]) || x[i] > acc ? x[i] : acc;
      return acc;
    case Alu::Subtract:  // a running subtraction from the first element
      if (n == 0) return 0.0f;
      acc = x[0];
      for (int64_t i = 1; i < n; ++i) acc -= x[i];
      return acc;
    default:
      for (int64_t i = 0; i < n; ++i) acc = alu_ss(op, acc, x[i]);
      return acc;
  }
}
int64_t reduce_i(Alu op, const int64_t* x, int64_t n) {
  if (n == 0) return 0;
  int64_t acc = x[0];
  for (int64_t i = 1; i < n; ++i) acc = alu_ss_i(op, acc, x[i]);
  return acc;
}

void tensor_copy(Ctx& c, Views& w) {
  View &d = w.v[0], &s = w.v[1];
  const int64_t F = s.free();
  const bool raw = d.dtype == s.dtype;
  const bool direct = raw && contiguous_rows(s) && contiguous_rows(d);
  for_blocks(s.parts(), F, [&](int64_t p0, int64_t rows, Scratch& sc) {
    if (direct) {
      for (int64_t r = 0; r < rows; ++r)
        std::memmove(d.base + (p0 + r) * d.stride[0], s.base + (p0 + r) * s.stride[0],
                     static_cast<size_t>(F * s.es));
    } else if (raw) {
      uint8_t* b = sc.db(0, F * s.es);
      for (int64_t r = 0; r < rows; ++r) {
        gather_bytes(s, p0 + r, b);
        scatter_bytes(d, p0 + r, b);
      }
    } else {
      float* x = sc.fb(0, rows * F);
      gather_f32(s, p0, rows, x);
      scatter_f32(d, p0, rows, x);
    }
    if (c.check) {
      uint8_t* df = sc.db(1, rows * F);
      gather_def(s, p0, rows, df);
      if (!all_defined(df, rows * F)) c.note_undefined(1);
      scatter_def(d, p0, rows, df);
    }
  });
}

void memset_op(Ctx& c, Views& w) {
  View& d = w.v[0];
  const int64_t F = d.free();
  const double val = isa::Fields<Op::Memset>{c.in()}.imm<"value">();
  const bool ints = dt_is_int32(d.dtype);
  for_blocks(d.parts(), F, [&](int64_t p0, int64_t rows, Scratch& sc) {
    const int64_t n = rows * F;
    if (ints) {
      int64_t* x = sc.ib(0, n);
      std::fill(x, x + n, imm_i(val));
      scatter_i64(d, p0, rows, x);
    } else {
      float* x = sc.fb(0, n);
      std::fill(x, x + n, static_cast<float>(val));
      scatter_f32(d, p0, rows, x);
    }
    if (c.check) {
      uint8_t* df = sc.db(0, n);
      std::fill(df, df + n, uint8_t{1});
      scatter_def(d, p0, rows, df);
    }
  });
}

// Values of an iota/affine_select pattern for partition p (int32 arithmetic).
// (affine_select stores its pattern in the same slots as iota).
void pattern_values(const Instr& in, int64_t p, int64_t* out) {
  using FX = isa::Fields<Op::Iota>;
  static_assert(FX::slot<"pattern"> == isa::Fields<Op::AffineSelect>::slot<"pattern"> &&
                FX::slot<"offset"> == isa::Fields<Op::AffineSelect>::slot<"offset"> &&
                FX::slot<"channel_multiplier"> ==
                    isa::Fields<Op::AffineSelect>::slot<"channel_multiplier">);
  const FX f{in};
  const int nd = static_cast<int>(f.i<"pattern_dims">());
  int64_t step[4] = {0, 0, 0, 0}, num[4] = {1, 1, 1, 1};
  for (int d = 0; d < nd; ++d) {
    step[4 - nd + d] = f.i<"pattern">(2 * d);
    num[4 - nd + d] = f.i<"pattern">(2 * d + 1);
  }
  const int64_t base = f.i<"offset">() + p * f.i<"channel_multiplier">();
  int64_t k = 0;
  for (int64_t w = 0; w < num[0]; ++w)
    for (int64_t z = 0; z < num[1]; ++z)
      for (int64_t y = 0; y < num[2]; ++y)
        for (int64_t x = 0; x < num[3]; ++x)
          out[k++] =
              static_cast<int32_t>(base + w * step[0] + z * step[1] + y * step[2] + x * step[3]);
}

void iota(Ctx& c, Views& w) {
  View& d = w.v[0];
  const int64_t F = d.free();
  const bool ints = dt_is_int(d.dtype);
  for_partitions(d.parts(), F, [&](int64_t p) {
    Scratch& sc = scratch();
    int64_t* v = sc.ib(0, F);
    pattern_values(c.in(), p, v);
    if (ints) {
      store_row_i(d, p, v);
    } else {
      float* x = sc.fb(0, F);
      for (int64_t i = 0; i < F; ++i) x[i] = static_cast<float>(v[i]);
      store_row(d, p, x);
    }
    if (c.check) {
      uint8_t* df = sc.db(0, F);
      std::fill(df, df + F, uint8_t{1});
      store_def_row(d, p, df);
    }
  });
}

void affine_select(Ctx& c, Views& w) {
  View &d = w.v[0], &t = w.v[1];
  const int64_t F = d.free();
  const isa::Fields<Op::AffineSelect> f{c.in()};
  const auto cmp = f.alu<"cmp_op">();
  const float off = static_cast<float>(f.imm<"on_false_value">());
  for_partitions(d.parts(), F, [&](int64_t p) {
    Scratch& sc = scratch();
    int64_t* v = sc.ib(0, F);
    pattern_values(c.in(), p, v);
    float* x = sc.fb(0, F);
    load_row(t, p, x);
    uint8_t* df = c.check ? sc.db(0, F) : nullptr;
    if (df) load_def_row(t, p, df);
    bool undefined = false;
    for (int64_t i = 0; i < F; ++i) {
      if (alu_ss_i(cmp, v[i], 0) == 0) {
        x[i] = off;
        if (df) df[i] = 1;
      } else if (df && !df[i]) {
        undefined = true;
      }
    }
    store_row(d, p, x);
    if (df) {
      if (undefined) c.note_undefined(1);
      store_def_row(d, p, df);
    }
  });
}

void tensor_tensor(Ctx& c, Views& w) {
  View &d = w.v[0], &a = w.v[1], &b = w.v[2];
  const int64_t F = a.free();
  const isa::Fields<Op::TensorTensor> f{c.in()};
  const auto op = f.alu<"op">();
  const bool ints = int_path(w, {0, 1, 2}, {f.i<"op">()});
  const bool direct = !ints && F >= 128 && f32_rows(a) && f32_rows(b) && f32_rows(d);
  for_blocks(a.parts(), F, [&](int64_t p0, int64_t rows, Scratch& sc) {
    const int64_t n = rows * F;
    if (direct) {
      for (int64_t r = 0; r < rows; ++r)
        alu_vv(op, f32_row(a, p0 + r), f32_row(b, p0 + r), f32_row(d, p0 + r), F);
    } else if (ints) {
      int64_t *x = sc.ib(0, n), *y = sc.ib(1, n);
      gather_i64(a, p0, rows, x);
      gather_i64(b, p0, rows, y);
      alu_vv_i(op, x, y, x, n);
      scatter_i64(d, p0, rows, x);
    } else {
      float *x = sc.fb(0, n), *y = sc.fb(1, n);
      gather_f32(a, p0, rows, x);
      gather_f32(b, p0, rows, y);
      alu_vv(op, x, y, x, n);
      scatter_f32(d, p0, rows, x);
    }
    if (c.check) {
      uint8_t *da = sc.db(0, n), *db = sc.db(1, n);
      gather_def(a, p0, rows, da);
      gather_def(b, p0, rows, db);
      if (!all_defined(da, n)) c.note_undefined(1);
      if (!all_defined(db, n)) c.note_undefined(2);
      and_into(da, db, n);
      scatter_def(d, p0, rows, da);
    }
  });
}

// Definedness of a [P, 1] operand for rows p0..p0+rows (all 1 when absent).
void vec_defs(const Views& w, int k, int64_t p0, int64_t rows, uint8_t* ok) {
  if (!w.has[k]) return;
  for (int64_t r = 0; r < rows; ++r) ok[r] &= vec_def(w.v[k], p0 + r);
}

// Marks whole rows undefined where the per-partition operand was undefined.
void apply_row_defs(uint8_t* def, const uint8_t* row_ok, int64_t rows, int64_t F) {
  for (int64_t r = 0; r < rows; ++r)
    if (!row_ok[r]) std::fill(def + r * F, def + (r + 1) * F, uint8_t{0});
}

// The float arithmetic of tensor_scalar: op0, then op1 (when `two`), with an immediate or a
// per-partition scalar each.
struct ScalarOps {
  Alu op0, op1;
  bool two, rev0, rev1;
  float imm0, imm1;
  explicit ScalarOps(const isa::Fields<Op::TensorScalar>& f)
      : op0(f.alu<"op0">()),
        op1(f.i<"op1">() >= 0 ? f.alu<"op1">() : Alu::Bypass),
        two(f.i<"op1">() >= 0),
        rev0(f.flag<"reverse0">()),
        rev1(f.flag<"reverse1">()),
        imm0(static_cast<float>(f.imm<"imm0">())),
        imm1(static_cast<float>(f.imm<"imm1">())) {}
  // Dense rows x[rows, F] in place; v0/v1: the scalar of each row (null: the immediate).
  void rows(float* x, int64_t rows, int64_t F, const float* v0, const float* v1) const {
    if (!v0 && !v1) {  // immediates: one pass over the whole block
      alu_vs(op0, x, imm0, rev0, x, rows * F);
      if (two) alu_vs(op1, x, imm1, rev1, x, rows * F);
      return;
    }
    for (int64_t r = 0; r < rows; ++r) {
      float* xr = x + r * F;
      alu_vs(op0, xr, v0 ? v0[r] : imm0, rev0, xr, F);
      if (two) alu_vs(op1, xr, v1 ? v1[r] : imm1, rev1, xr, F);
    }
  }
};

void tensor_scalar(Ctx& c, Views& w) {
  using FX = isa::Fields<Op::TensorScalar>;
  const FX f{c.in()};
  constexpr int k0 = FX::k<"operand0">, k1 = FX::k<"operand1">;
  View &d = w.v[FX::k<"dst">], &a = w.v[FX::k<"data">];
  const int64_t F = a.free();
  const ScalarOps so(f);
  const Alu op0 = so.op0, op1 = so.op1;
  const bool two = so.two, rev0 = so.rev0, rev1 = so.rev1;
  const float imm0 = so.imm0, imm1 = so.imm1;
  const bool ints = int_path(w, {0, 1, 2, 3}, {f.i<"op0">(), f.i<"op1">()});
  const bool vec0 = w.has[k0], vec1 = two && w.has[k1];
  const bool direct = !ints && F >= 128 && f32_rows(a) && f32_rows(d);
  for_blocks(a.parts(), F, [&](int64_t p0, int64_t rows, Scratch& sc) {
    const int64_t n = rows * F;
    if (direct) {
      for (int64_t r = 0; r < rows; ++r) {
        float* o = f32_row(d, p0 + r);
        alu_vs(op0, f32_row(a, p0 + r), vec0 ? vec_at(w.v[k0], p0 + r) : imm0, rev0, o, F);
        if (two) alu_vs(op1, o, vec1 ? vec_at(w.v[k1], p0 + r) : imm1, rev1, o, F);
      }
    } else if (ints) {
      int64_t* x = sc.ib(0, n);
      gather_i64(a, p0, rows, x);
      for (int64_t r = 0; r < rows; ++r) {
        int64_t* xr = x + r * F;
        alu_vs_i(op0, xr, vec0 ? vec_at_i(w.v[k0], p0 + r) : imm_i(f.imm<"imm0">()), rev0, xr, F);
        if (two)
          alu_vs_i(op1, xr, vec1 ? vec_at_i(w.v[k1], p0 + r) : imm_i(f.imm<"imm1">()), rev1, xr, F);
      }
      scatter_i64(d, p0, rows, x);
    } else {
      float* x = sc.fb(0, n);
      gather_f32(a, p0, rows, x);
      float* v0 = vec0 ? sc.fb(1, rows) : nullptr;
      float* v1 = vec1 ? sc.fb(2, rows) : nullptr;
      for (int64_t r = 0; r < rows; ++r) {
        if (v0) v0[r] = vec_at(w.v[k0], p0 + r);
        if (v1) v1[r] = vec_at(w.v[k1], p0 + r);
      }
      so.rows(x, rows, F, v0, v1);
      scatter_f32(d, p0, rows, x);
    }
    if (c.check) {
      uint8_t* da = sc.db(0, n);
      uint8_t* ok = sc.db(1, rows);
      gather_def(a, p0, rows, da);
      std::fill(ok, ok + rows, uint8_t{1});
      vec_defs(w, k0, p0, rows, ok);
      if (two) vec_defs(w, k1, p0, rows, ok);
      apply_row_defs(da, ok, rows, F);
      if (!all_defined(da, n)) c.note_undefined(1);
      scatter_def(d, p0, rows, da);
    }
  });
}

void scalar_tensor_tensor(Ctx& c, Views& w) {
  using FX = isa::Fields<Op::ScalarTensorTensor>;
  const FX f{c.in()};
  constexpr int k0 = FX::k<"operand0">;
  View &d = w.v[FX::k<"dst">], &a = w.v[FX::k<"data">], &b = w.v[FX::k<"operand1">];
  const int64_t F = a.free();
  const auto op0 = f.alu<"op0">(), op1 = f.alu<"op1">();
  const bool rev0 = f.flag<"reverse0">(), rev1 = f.flag<"reverse1">();
  for_blocks(a.parts(), F, [&](int64_t p0, int64_t rows, Scratch& sc) {
    const int64_t n = rows * F;
    float *x = sc.fb(0, n), *y = sc.fb(1, n);
    gather_f32(a, p0, rows, x);
    gather_f32(b, p0, rows, y);
    for (int64_t r = 0; r < rows; ++r) {
      const float s0 = w.has[k0] ? vec_at(w.v[k0], p0 + r) : static_cast<float>(f.imm<"imm0">());
      alu_vs(op0, x + r * F, s0, rev0, x + r * F, F);
    }
    if (rev1) {
      alu_vv(op1, y, x, x, n);
    } else {
      alu_vv(op1, x, y, x, n);
    }
    scatter_f32(d, p0, rows, x);
    if (c.check) {
      uint8_t *da = sc.db(0, n), *db = sc.db(1, n), *ok = sc.db(2, rows);
      gather_def(a, p0, rows, da);
      gather_def(b, p0, rows, db);
      and_into(da, db, n);
      std::fill(ok, ok + rows, uint8_t{1});
      vec_defs(w, k0, p0, rows, ok);
      apply_row_defs(da, ok, rows, F);
      if (!all_defined(da, n)) c.note_undefined(1);
      scatter_def(d, p0, rows, da);
    }
  });
}

void tensor_reduce(Ctx& c, Views& w) {
  using FX = isa::Fields<Op::TensorReduce>;
  const FX f{c.in()};
  View &d = w.v[FX::k<"dst">], &a = w.v[FX::k<"data">];
  const Ap& ap = f.ap<"data">();
  int64_t inner = 1;
  for (int k = 1; k < ap.ndim; ++k)
    if (f.i<"axis_mask">() & (int64_t{1} << k)) inner *= ap.num[k];
  const int64_t F = a.free(), groups = F / inner;
  const auto op = f.alu<"op">();
  const bool negate = f.flag<"negate">();
  const bool ints = int_path(w, {0, 1}, {f.i<"op">()});
  for_partitions(a.parts(), F, [&](int64_t p) {
    Scratch& sc = scratch();
    if (ints) {
      int64_t* x = sc.ib(0, F);
      load_row_i(a, p, x);
      int64_t* o = sc.ib(1, groups);
      for (int64_t g = 0; g < groups; ++g)
        o[g] = (negate ? -1 : 1) * reduce_i(op, x + g * inner, inner);
      store_row_i(d, p, o);
    } else {
      float* x = sc.fb(0, F);
      load_row(a, p, x);
      float* o = sc.fb(1, groups);
      for (int64_t g = 0; g < groups; ++g) {
        const float r = reduce_f(op, x + g * inner, inner);
        o[g] = negate ? -r : r;
      }
      store_row(d, p, o);
    }
    if (c.check) {
      uint8_t* da = sc.db(0, F);
      uint8_t* o = sc.db(1, groups);
      load_def_row(a, p, da);
      for (int64_t g = 0; g < groups; ++g) o[g] = all_defined(da + g * inner, inner);
      if (!all_defined(da, F)) c.note_undefined(1);
      store_def_row(d, p, o);
    }
  });
}

void partition_reduce(Ctx& c, Views& w) {
  View &d = w.v[0], &a = w.v[1];
  const int64_t P = a.parts(), F = a.free();
  const isa::Fields<Op::PartitionReduce> f{c.in()};
  const auto op = f.alu<"op">();
  Scratch& sc = scratch();
  const bool ints = int_path(w, {0, 1}, {f.i<"op">()});
  uint8_t* dacc = sc.db(0, F);
  uint8_t* drow = sc.db(1, F);
  std::fill(dacc, dacc + F, uint8_t{1});
  if (ints) {
    int64_t *acc = sc.ib(0, F), *x = sc.ib(1, F);
    load_row_i(a, 0, acc);
    for (int64_t p = 1; p < P; ++p) {
      load_row_i(a, p, x);
      alu_vv_i(op, acc, x, acc, F);
    }
    store_row_i(d, 0, acc);
  } else {
    float *acc = sc.fb(0, F), *x = sc.fb(1, F);
    load_row(a, 0, acc);
    for (int64_t p = 1; p < P; ++p) {
      load_row(a, p, x);
      alu_vv(op, acc, x, acc, F);
    }
    store_row(d, 0, acc);
  }
  if (c.check) {
    for (int64_t p = 0; p < P; ++p) {
      load_def_row(a, p, drow);
      and_into(dacc, drow, F);
    }
    if (!all_defined(dacc, F)) c.note_undefined(1);
    store_def_row(d, 0, dacc);
  }
}

// Applies a reduce command to engine registers acc/acc_def of partition p.
void apply_reduce_cmd(ReduceCmd cmd, float& acc, uint8_t& acc_def, float value, uint8_t value_def,
                      float loaded, uint8_t loaded_def, Alu op) {
  switch (cmd) {
    case ReduceCmd::Idle:
      break;
    case ReduceCmd::Reset:
      acc = 0.0f;
      acc_def = 1;
      break;
    case ReduceCmd::Reduce:
      acc = alu_ss(op, acc, value);
      acc_def &= value_def;
      break;
    case ReduceCmd::ResetReduce:
      acc = value;
      acc_def = value_def;
      break;
    case ReduceCmd::LoadReduce:
      acc = alu_ss(op, loaded, value);
      acc_def = loaded_def & value_def;
      break;
    case ReduceCmd::Count:
      break;
  }
}

void activation(Ctx& c, Views& w) {
  using FX = isa::Fields<Op::Activation>;
  const FX f{c.in()};
  constexpr int kb = FX::k<"bias">, ks = FX::k<"scale">, kr = FX::k<"reduce_res">;
  View &d = w.v[FX::k<"dst">], &a = w.v[FX::k<"data">];
  const int64_t F = a.free();
  const auto fn = f.act<"op">();
  const bool reduce = f.i<"reduce_op">() >= 0 || w.has[kr];
  const auto cmd = f.cmd<"reduce_cmd">();
  const double scale_imm = f.imm<"scale_imm">(), bias_imm = f.imm<"bias_imm">();
  CoreState& core = c.core;
  const bool per_row = w.has[kb] || w.has[ks];
  for_blocks(a.parts(), F, [&](int64_t p0, int64_t rows, Scratch& sc) {
    const int64_t n = rows * F;
    float* x = sc.fb(0, n);
    gather_f32(a, p0, rows, x);
    if (per_row) {
      for (int64_t r = 0; r < rows; ++r) {
        const float scale = w.has[ks] ? vec_at(w.v[ks], p0 + r) : static_cast<float>(scale_imm);
        const float bias = w.has[kb] ? vec_at(w.v[kb], p0 + r) : static_cast<float>(bias_imm);
        float* xr = x + r * F;
#pragma GCC ivdep
        for (int64_t i = 0; i < F; ++i) xr[i] = xr[i] * scale + bias;
      }
    } else if (scale_imm != 1.0 || bias_imm != 0.0) {
      const float scale = static_cast<float>(scale_imm), bias = static_cast<float>(bias_imm);
#pragma GCC ivdep
      for (int64_t i = 0; i < n; ++i) x[i] = x[i] * scale + bias;
    }
    act_apply(fn, x, x, n);
    scatter_f32(d, p0, rows, x);
    uint8_t* da = nullptr;
    if (c.check) {
      da = sc.db(0, n);
      uint8_t* ok = sc.db(1, rows);
      gather_def(a, p0, rows, da);
      std::fill(ok, ok + rows, uint8_t{1});
      vec_defs(w, kb, p0, rows, ok);
      vec_defs(w, ks, p0, rows, ok);
      apply_row_defs(da, ok, rows, F);
      if (!all_defined(da, n)) c.note_undefined(1);
      scatter_def(d, p0, rows, da);
    }
    if (!reduce) return;
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t p = p0 + r;
      if (p >= 128) break;
      float sum = 0.0f;
      for (int64_t i = 0; i < F; ++i) sum += x[r * F + i];
      const uint8_t row_ok = da ? static_cast<uint8_t>(all_defined(da + r * F, F)) : uint8_t{1};
      const float loaded = w.has[kr] ? vec_at(w.v[kr], p) : 0.0f;
      const uint8_t loaded_def = w.has[kr] ? vec_def(w.v[kr], p) : 1;
      apply_reduce_cmd(cmd, core.act_acc[p], core.act_acc_def[p], sum, row_ok, loaded, loaded_def,
                       Alu::Add);
      if (w.has[kr]) vec_store(w.v[kr], p, core.act_acc[p], core.act_acc_def[p]);
    }
  });
}

void reciprocal(Ctx& c, Views& w) {
  View &d = w.v[0], &a = w.v[1];
  const int64_t F = a.free();
  for_blocks(a.parts(), F, [&](int64_t p0, int64_t rows, Scratch& sc) {
    const int64_t n = rows * F;
    float* x = sc.fb(0, n);
    gather_f32(a, p0, rows, x);
    act_apply(Act::Reciprocal, x, x, n);
    scatter_f32(d, p0, rows, x);
    if (c.check) {
      uint8_t* da = sc.db(0, n);
      gather_def(a, p0, rows, da);
      if (!all_defined(da, n)) c.note_undefined(1);
      scatter_def(d, p0, rows, da);
    }
  });
}

void scan(Ctx& c, Views& w) {
  using FX = isa::Fields<Op::TensorTensorScan>;
  const FX f{c.in()};
  constexpr int ki = FX::k<"initial">;
  View &d = w.v[FX::k<"dst">], &a = w.v[FX::k<"data0">], &b = w.v[FX::k<"data1">];
  const int64_t F = a.free();
  const auto op0 = f.alu<"op0">(), op1 = f.alu<"op1">();
  const bool rev0 = f.flag<"reverse0">(), rev1 = f.flag<"reverse1">();
  for_partitions(a.parts(), F, [&](int64_t p) {
    Scratch& sc = scratch();
    float *x = sc.fb(0, F), *y = sc.fb(1, F);
    load_row(a, p, x);
    load_row(b, p, y);
    float prev = w.has[ki] ? vec_at(w.v[ki], p) : static_cast<float>(f.imm<"initial_imm">());
    for (int64_t i = 0; i < F; ++i) {
      const float t = rev0 ? alu_ss(op0, prev, x[i]) : alu_ss(op0, x[i], prev);
      prev = rev1 ? alu_ss(op1, y[i], t) : alu_ss(op1, t, y[i]);
      x[i] = prev;
    }
    store_row(d, p, x);
    if (c.check) {
      uint8_t *da = sc.db(0, F), *db = sc.db(1, F);
      load_def_row(a, p, da);
      load_def_row(b, p, db);
      uint8_t ok = w.has[ki] ? vec_def(w.v[ki], p) : 1;
      for (int64_t i = 0; i < F; ++i) {
        ok &= da[i] & db[i];
        da[i] = ok;
      }
      if (!ok) c.note_undefined(1);
      store_def_row(d, p, da);
    }
  });
}

void tensor_scalar_reduce(Ctx& c, Views& w) {
  using FX = isa::Fields<Op::TensorScalarReduce>;
  const FX f{c.in()};
  constexpr int k0 = FX::k<"operand0">, kr = FX::k<"reduce_res">;
  View &d = w.v[FX::k<"dst">], &a = w.v[FX::k<"data">];
  const int64_t F = a.free();
  const auto op0 = f.alu<"op0">(), rop = f.alu<"reduce_op">();
  const bool rev0 = f.flag<"reverse0">(), neg = f.flag<"negate">();
  for_partitions(a.parts(), F, [&](int64_t p) {
    Scratch& sc = scratch();
    float* x = sc.fb(0, F);
    load_row(a, p, x);
    const float s0 = w.has[k0] ? vec_at(w.v[k0], p) : static_cast<float>(f.imm<"imm0">());
    alu_vs(op0, x, s0, rev0, x, F);
    store_row(d, p, x);
    float r = reduce_f(rop, x, F);
    if (neg) r = -r;
    uint8_t ok = 1;
    if (c.check) {
      uint8_t* da = sc.db(0, F);
      load_def_row(a, p, da);
      if (w.has[k0] && !vec_def(w.v[k0], p)) std::fill(da, da + F, uint8_t{0});
      ok = all_defined(da, F);
      if (!ok) c.note_undefined(1);
      store_def_row(d, p, da);
    }
    vec_store(w.v[kr], p, r, ok);
  });
}

void select_reduce(Ctx& c, Views& w) {
  using FX = isa::Fields<Op::SelectReduce>;
  const FX f{c.in()};
  constexpr int kf = FX::k<"on_false">, kr = FX::k<"reduce_res">;
  View &d = w.v[FX::k<"dst">], &pr = w.v[FX::k<"predicate">], &t = w.v[FX::k<"on_true">];
  const int64_t F = t.free();
  const bool rev = f.flag<"reverse_pred">();
  const auto cmd = f.cmd<"reduce_cmd">();
  const bool reduce = w.has[kr];
  CoreState& core = c.core;
  for_partitions(t.parts(), F, [&](int64_t p) {
    Scratch& sc = scratch();
    float *x = sc.fb(0, F), *q = sc.fb(1, F);
    load_row(t, p, x);
    load_row(pr, p, q);
    const float fv = w.has[kf] ? vec_at(w.v[kf], p) : static_cast<float>(f.imm<"on_false_imm">());
    uint8_t *dx = nullptr, *dq = nullptr;
    if (c.check) {
      dx = sc.db(0, F);
      dq = sc.db(1, F);
      load_def_row(t, p, dx);
      load_def_row(pr, p, dq);
    }
    const uint8_t fdef = w.has[kf] ? vec_def(w.v[kf], p) : 1;
    float mx = -std::numeric_limits<float>::infinity();
    uint8_t all_ok = 1;
    for (int64_t i = 0; i < F; ++i) {
      const bool take = (q[i] != 0.0f) != rev;
      if (!take) x[i] = fv;
      if (dx) {
        dx[i] = dq[i] & (take ? dx[i] : fdef);
        all_ok &= dx[i];
      }
      mx = std::max(mx, x[i]);
    }
    store_row(d, p, x);
    if (dx) {
      if (!all_ok) c.note_undefined(2);
      store_def_row(d, p, dx);
    }
    if (reduce && p < 128) {
      apply_reduce_cmd(cmd == ReduceCmd::Idle ? ReduceCmd::ResetReduce : cmd, core.sel_acc[p],
                       core.sel_acc_def[p], mx, all_ok, vec_at(w.v[kr], p), vec_def(w.v[kr], p),
                       Alu::Max);
      vec_store(w.v[kr], p, core.sel_acc[p], core.sel_acc_def[p]);
    }
  });
}

void copy_predicated(Ctx& c, Views& w) {
  using FX = isa::Fields<Op::CopyPredicated>;
  const FX f{c.in()};
  constexpr int ks = FX::k<"src">;
  View &d = w.v[FX::k<"dst">], &pr = w.v[FX::k<"predicate">];
  const int64_t F = d.free();
  const bool rev = f.flag<"reverse_pred">();
  for_partitions(d.parts(), F, [&](int64_t p) {
    Scratch& sc = scratch();
    float *o = sc.fb(0, F), *q = sc.fb(1, F), *s = sc.fb(2, F);
    load_row(d, p, o);
    load_row(pr, p, q);
    if (w.has[ks]) {
      load_row(w.v[ks], p, s);
    } else {
      std::fill(s, s + F, static_cast<float>(f.imm<"src_imm">()));
    }
    uint8_t *dd = nullptr, *dq = nullptr, *ds = nullptr;
    if (c.check) {
      dd = sc.db(0, F);
      dq = sc.db(1, F);
      ds = sc.db(2, F);
      load_def_row(d, p, dd);
      load_def_row(pr, p, dq);
      if (w.has[ks]) {
        load_def_row(w.v[ks], p, ds);
      } else {
        std::fill(ds, ds + F, uint8_t{1});
      }
    }
    bool bad_pred = false, bad_src = false, bad_old = false;  // which input it came from
    for (int64_t i = 0; i < F; ++i) {
      const bool take = (q[i] != 0.0f) != rev;
      if (take) o[i] = s[i];
      if (dd) {
        bad_pred |= !dq[i];
        (take ? bad_src : bad_old) |= !(take ? ds[i] : dd[i]);
        dd[i] = dq[i] & (take ? ds[i] : dd[i]);
      }
    }
    store_row(d, p, o);
    if (dd) {
      if (bad_pred) c.note_undefined(FX::k<"predicate">);
      if (bad_src) c.note_undefined(ks);
      if (bad_old) c.note_undefined(FX::k<"dst">);
      store_def_row(d, p, dd);
    }
  });
}

// The accumulator start value of reduce_cmd reset_reduce for an operator.
float reset_value(Alu op) {
  switch (op) {
    case Alu::Multiply:
      return 1.0f;
    case Alu::Max:
      return -std::numeric_limits<float>::infinity();
    case Alu::Min:
      return std::numeric_limits<float>::infinity();
    default:
      return 0.0f;
  }
}

void tensor_scalar_cumulative(Ctx& c, Views& w) {
  using FX = isa::Fields<Op::TensorScalarCumulative>;
  const FX f{c.in()};
  constexpr int k0 = FX::k<"imm0_vector">, k1 = FX::k<"imm1_vector">;
  View &d = w.v[FX::k<"dst">], &a = w.v[FX::k<"src">];
  const int64_t F = a.free();
  const auto op0 = f.alu<"op0">(), op1 = f.alu<"op1">();
  const auto cmd = f.cmd<"reduce_cmd">();
  const bool rev0 = f.flag<"reverse0">();
  CoreState& core = c.core;
  for_partitions(a.parts(), F, [&](int64_t p) {
    Scratch& sc = scratch();
    float* x = sc.fb(0, F);
    load_row(a, p, x);
    const float imm0 = w.has[k0] ? vec_at(w.v[k0], p) : static_cast<float>(f.imm<"imm0">());
    const int64_t q = std::min<int64_t>(p, 127);
    float reg = core.sel_acc[q];
    uint8_t reg_def = core.sel_acc_def[q];
    if (cmd == ReduceCmd::ResetReduce || cmd == ReduceCmd::Reset) {
      reg = reset_value(op1);
      reg_def = 1;
    } else if (cmd == ReduceCmd::LoadReduce) {
      reg = w.has[k1] ? vec_at(w.v[k1], p) : static_cast<float>(f.imm<"imm1">());
      reg_def = w.has[k1] ? vec_def(w.v[k1], p) : 1;
    }
    uint8_t* da = c.check ? sc.db(0, F) : nullptr;
    if (da) {
      load_def_row(a, p, da);
      if (w.has[k0] && !vec_def(w.v[k0], p)) std::fill(da, da + F, uint8_t{0});
    }
    for (int64_t i = 0; i < F; ++i) {
      const float t = rev0 ? alu_ss(op0, imm0, x[i]) : alu_ss(op0, x[i], imm0);
      reg = alu_ss(op1, t, reg);
      x[i] = reg;
      if (da) {
        reg_def &= da[i];
        da[i] = reg_def;
      }
    }
    if (p < 128) {
      core.sel_acc[p] = reg;
      core.sel_acc_def[p] = reg_def;
    }
    store_row(d, p, x);
    if (da) {
      if (!all_defined(da, F)) c.note_undefined(1);
      store_def_row(d, p, da);
    }
  });
}

void range_select(Ctx& c, Views& w) {
  using FX = isa::Fields<Op::RangeSelect>;
  const FX f{c.in()};
  constexpr int kb0 = FX::k<"bound0">, kb1 = FX::k<"bound1">, kr = FX::k<"reduce_res">;
  View &d = w.v[FX::k<"dst">], &t = w.v[FX::k<"on_true_tile">];
  const int64_t F = t.free();
  const auto c0 = f.alu<"comp_op0">(), c1 = f.alu<"comp_op1">();
  const auto cmd = f.cmd<"reduce_cmd">();
  const float start = static_cast<float>(f.imm<"range_start">()),
              fill = static_cast<float>(f.imm<"on_false_value">());
  CoreState& core = c.core;
  for_partitions(t.parts(), F, [&](int64_t p) {
    Scratch& sc = scratch();
    float* x = sc.fb(0, F);
    load_row(t, p, x);
    const float b0 = vec_at(w.v[kb0], p), b1 = vec_at(w.v[kb1], p);
    uint8_t* dx = c.check ? sc.db(0, F) : nullptr;
    if (dx) load_def_row(t, p, dx);
    const uint8_t bdef = vec_def(w.v[kb0], p) & vec_def(w.v[kb1], p);
    // Both comparisons of the whole row at once (alu_vs: the ALU's values, one loop per op).
    float* idx = sc.fb(1, F);
    float* k0 = sc.fb(2, F);
    float* k1 = sc.fb(3, F);
    for (int64_t i = 0; i < F; ++i) idx[i] = static_cast<float>(i) + start;
    alu_vs(c0, idx, b0, false, k0, F);
    alu_vs(c1, idx, b1, false, k1, F);
    float mx = -std::numeric_limits<float>::infinity();
    uint8_t all_ok = 1;
    for (int64_t i = 0; i < F; ++i) {
      const bool keep = k0[i] != 0.0f && k1[i] != 0.0f;
      if (!keep) x[i] = fill;
      if (dx) {
        dx[i] = bdef & (keep ? dx[i] : uint8_t{1});
        all_ok &= dx[i];
      }
      mx = std::max(mx, x[i]);
    }
    store_row(d, p, x);
    if (dx) {
      if (!all_ok) c.note_undefined(1);
      store_def_row(d, p, dx);
    }
    if (w.has[kr] && p < 128) {
      apply_reduce_cmd(cmd == ReduceCmd::Idle ? ReduceCmd::ResetReduce : cmd, core.sel_acc[p],
                       core.sel_acc_def[p], mx, all_ok, vec_at(w.v[kr], p), vec_def(w.v[kr], p),
                       Alu::Max);
      vec_store(w.v[kr], p, core.sel_acc[p], core.sel_acc_def[p]);
    }
  });
}

void bn_stats(Ctx& c, Views& w) {
  View &d = w.v[0], &a = w.v[1];
  const int64_t F = a.free();
  for_partitions(a.parts(), F, [&](int64_t p) {
    Scratch& sc = scratch();
    float* x = sc.fb(0, F);
    load_row(a, p, x);
    float out[6];
    for (int half = 0; half < 2; ++half) {
      double n = 0, mean = 0, m2 = 0;
      for (int64_t i = half; i < F; i += 2) {  // Welford
        n += 1;
        const double delta = x[i] - mean;
        mean += delta / n;
        m2 += delta * (x[i] - mean);
      }
      out[half * 3 + 0] = static_cast<float>(n);
      out[half * 3 + 1] = static_cast<float>(mean);
      out[half * 3 + 2] = static_cast<float>(m2);
    }
    store_row(d, p, out);
    if (c.check) {
      uint8_t* da = sc.db(0, F);
      load_def_row(a, p, da);
      uint8_t o[6];
      std::fill(o, o + 6, static_cast<uint8_t>(all_defined(da, F)));
      if (!o[0]) c.note_undefined(1);
      store_def_row(d, p, o);
    }
  });
}

void bn_aggr(Ctx& c, Views& w) {
  View &d = w.v[0], &a = w.v[1];
  const int64_t F = a.free();
  for_partitions(a.parts(), F, [&](int64_t p) {
    Scratch& sc = scratch();
    float* x = sc.fb(0, F);
    load_row(a, p, x);
    double n = 0, sum = 0;
    for (int64_t i = 0; i + 2 < F; i += 3) {
      n += x[i];
      sum += static_cast<double>(x[i]) * x[i + 1];
    }
    const double mean = n > 0 ? sum / n : 0.0;
    double m2 = 0;
    for (int64_t i = 0; i + 2 < F; i += 3) {
      const double dm = x[i + 1] - mean;
      m2 += x[i + 2] + x[i] * dm * dm;
    }
    float out[2] = {static_cast<float>(mean), static_cast<float>(n > 0 ? m2 / n : 0.0)};
    store_row(d, p, out);
    if (c.check) {
      uint8_t* da = sc.db(0, F);
      load_def_row(a, p, da);
      uint8_t o[2];
      o[0] = o[1] = all_defined(da, F);
      if (!o[0]) c.note_undefined(1);
      store_def_row(d, p, o);
    }
  });
}

// nonzero_with_count: each GpSimd core (16 partitions) works on its partition 0 only.
void nonzero_with_count(Ctx& c, Views& w) {
  using FX = isa::Fields<Op::NonzeroWithCount>;
  const FX f{c.in()};
  View &d = w.v[FX::k<"dst">], &s = w.v[FX::k<"src">];
  const int64_t T = s.free();
  const int64_t off = f.i<"index_offset">(), pad = f.i<"padding_val">();
  const bool ints = dt_is_int(s.dtype);
  for_partitions(s.parts(), T, [&](int64_t p) {
    if (p % 16 != 0) return;
    Scratch& sc = scratch();
    int64_t* o = sc.ib(0, T + 1);
    int64_t n = 0;
    if (ints) {
      int64_t* xi = sc.ib(1, T);
      load_row_i(s, p, xi);
      for (int64_t i = 0; i < T; ++i)
        if (xi[i] != 0) o[n++] = static_cast<int32_t>(i + off);
    } else {
      float* x = sc.fb(0, T);
      load_row(s, p, x);
      for (int64_t i = 0; i < T; ++i)
        if (x[i] != 0.0f) o[n++] = static_cast<int32_t>(i + off);
    }
    std::fill(o + n, o + T, static_cast<int64_t>(static_cast<int32_t>(pad)));
    o[T] = n;
    store_row_i(d, p, o);
    if (c.check) {
      uint8_t* ds = sc.db(0, T);
      load_def_row(s, p, ds);
      uint8_t* od = sc.db(1, T + 1);
      const bool ok = all_defined(ds, T);
      std::fill(od, od + T + 1, static_cast<uint8_t>(ok));
      if (!ok) c.note_undefined(FX::k<"src">);
      store_def_row(d, p, od);
    }
  });
}

// nc_find_index8 / nc_match_replace8: o[k] = index of the first occurrence of want[k] in x
// (values compare as fp32); with `replace`, each match becomes imm before the next value is
// looked up. Returns the first k not found (its o[k] is 0), or -1.
int match8(float* x, int64_t F, const float* want, int64_t* o, bool replace, float imm) {
  int missing = -1;
  for (int k = 0; k < 8; ++k) {
    const int64_t i = std::find(x, x + F, want[k]) - x;
    if (i == F && missing < 0) missing = k;
    o[k] = i == F ? 0 : i;
    if (replace && i < F) x[i] = imm;
  }
  return missing;
}

// Shared by both: runs match8 over every partition, tracks definedness, then reports the first
// value absent from its partition (undefined on the hardware, an error here).
template <bool kReplace>
void match8_rows(Ctx& c, Views& w, int kd, int ka, int kv, int kidx, float imm) {
  View &a = w.v[ka], &v = w.v[kv];
  const int64_t F = a.free(), P = a.parts();
  std::vector<int> missing(static_cast<size_t>(P), -1);
  for_partitions(P, F, [&](int64_t p) {
    Scratch& sc = scratch();
    float* x = sc.fb(0, F);
    float* want = sc.fb(1, 8);
    int64_t* o = sc.ib(0, 8);
    load_row(a, p, x);
    load_row(v, p, want);
    missing[static_cast<size_t>(p)] = match8(x, F, want, o, kReplace, imm);
    if (kReplace) store_row(w.v[kd], p, x);
    if (kidx >= 0) store_row_i(w.v[kidx], p, o);
    if (c.check) {
      uint8_t* da = sc.db(0, F);
      uint8_t* dv = sc.db(1, 8);
      load_def_row(a, p, da);
      load_def_row(v, p, dv);
      const bool data_ok = all_defined(da, F), ok = data_ok && all_defined(dv, 8);
      if (!ok) c.note_undefined(data_ok ? kv : ka);
      if (kReplace) {  // replaced elements are defined when the values were
        const bool vals_ok = all_defined(dv, 8);
        if (!vals_ok) std::fill(da, da + F, uint8_t{0});
        for (int k = 0; k < 8 && vals_ok; ++k)
          if (k != missing[static_cast<size_t>(p)]) da[o[k]] = 1;
        store_def_row(w.v[kd], p, da);
      }
      if (kidx >= 0) {
        uint8_t od[8];
        std::fill(od, od + 8, static_cast<uint8_t>(ok));
        store_def_row(w.v[kidx], p, od);
      }
    }
  });
  for (int64_t p = 0; p < P; ++p) {
    const int k = missing[static_cast<size_t>(p)];
    if (k < 0) continue;
    float* want = scratch().fb(1, 8);
    load_row(v, p, want);
    c.fail("runtime",
           "value " + std::to_string(want[k]) + " (vals[" + std::to_string(p) + ", " +
               std::to_string(k) + "]) does not occur in partition " + std::to_string(p) +
               " of data",
           std::string(kReplace ? "nc_match_replace8" : "nc_find_index8") +
               " looks up values that occur in data (otherwise the result is undefined)");
  }
}

void find_index8(Ctx& c, Views& w) {
  using FX = isa::Fields<Op::FindIndex8>;
  match8_rows<false>(c, w, -1, FX::k<"data">, FX::k<"vals">, FX::k<"dst">, 0.0f);
}

void match_replace8(Ctx& c, Views& w) {
  using FX = isa::Fields<Op::MatchReplace8>;
  const FX f{c.in()};
  match8_rows<true>(c, w, FX::k<"dst">, FX::k<"data">, FX::k<"vals">,
                    w.has[FX::k<"dst_idx">] ? FX::k<"dst_idx"> : -1,
                    static_cast<float>(f.imm<"imm">()));
}

void max8(Ctx& c, Views& w) {
  View &d = w.v[0], &a = w.v[1];
  const int64_t F = a.free();
  for_partitions(a.parts(), F, [&](int64_t p) {
    Scratch& sc = scratch();
    float* x = sc.fb(0, F);
    load_row(a, p, x);
    std::partial_sort(x, x + 8, x + F, [](float u, float v) { return u > v; });
    store_row(d, p, x);
    if (c.check) {
      uint8_t* da = sc.db(0, F);
      load_def_row(a, p, da);
      uint8_t o[8];
      std::fill(o, o + 8, static_cast<uint8_t>(all_defined(da, F)));
      if (!o[0]) c.note_undefined(1);
      store_def_row(d, p, o);
    }
  });
}

// The gathers of one partition (nc_n_gather, local_gather): o[j] = the `ne` elements of x (of
// F elements of `es` bytes) starting at k[j], for j < n; an out-of-range k[j] gives zeros
// (the caller reports it). With `xd`, od[j * ne + e] says whether that element is defined:
// its index (kd, or every index when null) and its source element were both written.
void gather_runs(const uint8_t* x, int64_t F, int es, const int64_t* k, int64_t n, int64_t ne,
                 uint8_t* o, const uint8_t* xd = nullptr, const uint8_t* kd = nullptr,
                 uint8_t* od = nullptr) {
  for (int64_t j = 0; j < n; ++j) {
    const bool in_range = k[j] >= 0 && k[j] + ne <= F;
    uint8_t* oj = o + j * ne * es;
    if (in_range)
      std::memcpy(oj, x + k[j] * es, static_cast<size_t>(ne * es));
    else
      std::memset(oj, 0, static_cast<size_t>(ne * es));
    if (!xd) continue;
    const bool idx_ok = in_range && (!kd || kd[j]);
    for (int64_t e = 0; e < ne; ++e) od[j * ne + e] = static_cast<uint8_t>(idx_ok && xd[k[j] + e]);
  }
}

// nc_n_gather: raw element copies within a partition (any dtype, bit-exact); an index outside
// the partition's data is a runtime error (undefined on the hardware).
void n_gather(Ctx& c, Views& w) {
  using FX = isa::Fields<Op::NGather>;
  View &d = w.v[FX::k<"dst">], &a = w.v[FX::k<"data">], &ix = w.v[FX::k<"indices">];
  const int64_t F = a.free(), N = ix.free(), P = a.parts();
  const int es = a.es;
  std::vector<int64_t> bad(static_cast<size_t>(P), -1);
  for_partitions(P, F + N, [&](int64_t p) {
    Scratch& sc = scratch();
    uint8_t* x = sc.db(0, F * es);
    uint8_t* o = sc.db(1, N * es);
    int64_t* k = sc.ib(0, N);
    gather_bytes(a, p, x);
    load_row_i(ix, p, k);
    for (int64_t j = 0; j < N && bad[static_cast<size_t>(p)] < 0; ++j)
      if (k[j] < 0 || k[j] >= F) bad[static_cast<size_t>(p)] = j;
    uint8_t *da = nullptr, *di = nullptr, *od = nullptr;
    if (c.check) {
      da = sc.db(2, F);
      di = sc.db(3, N);
      od = sc.db(4, N);
      load_def_row(a, p, da);
      load_def_row(ix, p, di);
    }
    gather_runs(x, F, es, k, N, 1, o, da, di, od);
    scatter_bytes(d, p, o);
    if (c.check) {
      if (!all_defined(od, N)) c.note_undefined(FX::k<"data">);
      store_def_row(d, p, od);
    }
  });
  for (int64_t p = 0; p < P; ++p) {
    const int64_t j = bad[static_cast<size_t>(p)];
    if (j < 0) continue;
    int64_t* k = scratch().ib(0, N);
    load_row_i(ix, p, k);
    c.fail("runtime",
           "index " + std::to_string(k[j]) + " (indices[" + std::to_string(p) + ", " + std::to_string(j) +
               "]) is outside the " + std::to_string(F) + " elements of partition " + std::to_string(p) +
               " of data",
           "nc_n_gather indices are in [0, data elements per partition)");
  }
}

// local_gather: core g (partitions [16g, 16g + 16)) flattens its index rows partition-first
// (idx[f * 16 + q] = index[16g + q, f]) and keeps the first nv; each of its partitions then
// copies, for each idx[j], the ne contiguous elements starting there (bit-exact). An index whose
// elements run past the partition's data is a runtime error (undefined on the hardware).
void local_gather(Ctx& c, Views& w) {
  using FX = isa::Fields<Op::LocalGather>;
  const FX f{c.in()};
  View &d = w.v[FX::k<"dst">], &s = w.v[FX::k<"src_buffer">], &ix = w.v[FX::k<"index">];
  const int64_t P = s.parts(), F = s.free(), NI = ix.free();
  const int64_t ne = f.i<"num_elem_per_idx">(), nv = f.i<"num_valid_indices">();
  const int64_t cores = P / 16;
  const int es = s.es;
  std::vector<int64_t> idx(static_cast<size_t>(cores * nv));
  std::vector<uint8_t> idef(c.check ? idx.size() : 0);
  int64_t bad = -1;  // first out-of-range position in idx
  {
    Scratch& sc = scratch();
    int64_t* rows = sc.ib(0, 16 * NI);
    uint8_t* drows = c.check ? sc.db(0, 16 * NI) : nullptr;
    for (int64_t g = 0; g < cores; ++g) {
      gather_i64(ix, 16 * g, 16, rows);
      if (c.check) gather_def(ix, 16 * g, 16, drows);
      for (int64_t j = 0; j < nv; ++j) {
        const int64_t q = j % 16, fi = j / 16;
        const size_t at = static_cast<size_t>(g * nv + j);
        idx[at] = rows[q * NI + fi];
        if (c.check) idef[at] = drows[q * NI + fi];
        if (bad < 0 && (idx[at] < 0 || idx[at] + ne > F)) bad = static_cast<int64_t>(at);
      }
    }
  }
  for_partitions(P, F + nv * ne, [&](int64_t p) {
    Scratch& sc = scratch();
    uint8_t* x = sc.db(0, F * es);
    uint8_t* o = sc.db(1, nv * ne * es);
    gather_bytes(s, p, x);
    const int64_t* k = idx.data() + (p / 16) * nv;
    uint8_t *ds = nullptr, *od = nullptr;
    if (c.check) {
      ds = sc.db(2, F);
      od = sc.db(3, nv * ne);
      load_def_row(s, p, ds);
    }
    gather_runs(x, F, es, k, nv, ne, o, ds, c.check ? idef.data() + (p / 16) * nv : nullptr, od);
    scatter_bytes(d, p, o);
    if (c.check) {
      if (!all_defined(od, nv * ne)) c.note_undefined(FX::k<"src_buffer">);
      store_def_row(d, p, od);
    }
  });
  if (bad >= 0) {
    const int64_t g = bad / nv, j = bad % nv;
    c.fail("runtime",
           "index " + std::to_string(idx[static_cast<size_t>(bad)]) + " (index[" + std::to_string(16 * g + j % 16) +
               ", " + std::to_string(j / 16) + "]) reads " + std::to_string(ne) + " elements past the " +
               std::to_string(F) + " elements per partition of src_buffer",
           "local_gather indices i satisfy i + num_elem_per_idx <= src_buffer elements per partition");
  }
}

// sequence_bounds: over the runs of equal ids x[0, n) (int32 ids compared as integers, float32
// ids as floats), o[i] = start of i's run and o[n + i] = one past its end; id 0 is padding
// (n, -1). Returns the index of the first negative id, or -1.
template <class T>
int64_t bounds_of_runs(const T* x, int64_t n, int64_t* o) {
  int64_t neg = -1;
  for (int64_t i = 0; i < n; ++i) {
    if (x[i] < T(0) && neg < 0) neg = i;
    o[i] = x[i] == T(0) ? n : (i > 0 && x[i] == x[i - 1] ? o[i - 1] : i);
  }
  for (int64_t i = n - 1; i >= 0; --i)
    o[n + i] = x[i] == T(0) ? -1 : (i + 1 < n && x[i] == x[i + 1] ? o[n + i + 1] : i + 1);
  return neg;
}

// A negative id is a runtime error (the hardware requires non-negative ids).
void sequence_bounds(Ctx& c, Views& w) {
  using FX = isa::Fields<Op::SequenceBounds>;
  View &d = w.v[FX::k<"dst">], &s = w.v[FX::k<"segment_ids">];
  const int64_t n = s.free();
  std::vector<int64_t> bad(static_cast<size_t>(s.parts()), -1);
  for_partitions(s.parts(), 2 * n, [&](int64_t p) {
    Scratch& sc = scratch();
    int64_t* o = sc.ib(0, 2 * n);
    if (dt_is_int(s.dtype)) {
      int64_t* x = sc.ib(1, n);
      load_row_i(s, p, x);
      bad[static_cast<size_t>(p)] = bounds_of_runs(x, n, o);
    } else {
      float* x = sc.fb(0, n);
      load_row(s, p, x);
      bad[static_cast<size_t>(p)] = bounds_of_runs(x, n, o);
    }
    store_row_i(d, p, o);
    if (c.check) {
      uint8_t* ds = sc.db(0, n);
      load_def_row(s, p, ds);
      const bool ok = all_defined(ds, n);
      uint8_t* od = sc.db(1, 2 * n);
      std::fill(od, od + 2 * n, static_cast<uint8_t>(ok));
      if (!ok) c.note_undefined(FX::k<"segment_ids">);
      store_def_row(d, p, od);
    }
  });
  for (int64_t b : bad)
    if (b >= 0)
      c.fail("runtime", "segment id at index " + std::to_string(b) + " of segment_ids is negative",
             "sequence_bounds segment ids are non-negative (0 is padding)");
}

// Source rows are read before any is written (dst may be src: an in-place shuffle).
void stream_shuffle(Ctx& c, Views& w) {
  View &d = w.v[0], &s = w.v[1];
  using FX = isa::Fields<Op::StreamShuffle>;
  const FX f{c.in()};
  const int64_t F = d.free(), P = d.parts();
  Scratch& sc = scratch();
  float* x = sc.fb(0, P * F);
  int64_t* xi = sc.ib(0, P * F);
  uint8_t* df = sc.db(0, P * F);
  const bool ints = dt_is_int(s.dtype) || dt_is_int(d.dtype);
  std::vector<int64_t> from(static_cast<size_t>(P), -1);
  for (int64_t p = 0; p < P; ++p) {
    const int64_t i = p % 32, m = (f.i<"mask">(static_cast<int>(i / 8)) >> (6 * (i % 8))) & 63;
    if (m == 63) continue;
    const int64_t q = (p / 32) * 32 + m;
    from[static_cast<size_t>(p)] = q;
    if (ints)
      load_row_i(s, q, xi + p * F);
    else
      load_row(s, q, x + p * F);
    if (c.check) {
      load_def_row(s, q, df + p * F);
      if (!all_defined(df + p * F, F)) c.note_undefined(1);
    }
  }
  for (int64_t p = 0; p < P; ++p) {
    if (from[static_cast<size_t>(p)] < 0) continue;
    if (ints)
      store_row_i(d, p, xi + p * F);
    else
      store_row(d, p, x + p * F);
    if (c.check) store_def_row(d, p, df + p * F);
  }
}

}  // namespace

// One execute function per instruction (isa.def), each over the instruction's resolved views.
// topk: per 16-partition core, the K largest of its n-element snake, ascending, at output snake
// positions 0..K-1 (read-modify-write of the touched rows: the other elements keep their bits).
void topk(Ctx& c, Views& w) {
  using FX = isa::Fields<Op::TopK>;
  View &vd = w.v[FX::k<"val_dst">], &id = w.v[FX::k<"idx_dst">], &s = w.v[FX::k<"src">];
  const int64_t n = FX{c.in()}.i<"n">(), K = vd.free(), F = s.free();
  const int64_t cores = s.parts() / 16;
  for_partitions(cores, 16 * (F + K), [&](int64_t g) {
    Scratch& sc = scratch();
    float* x = sc.fb(0, 16 * F);
    uint8_t* dx = c.check ? sc.db(0, 16 * F) : nullptr;
    for (int q = 0; q < 16; ++q) {
      load_row(s, 16 * g + q, x + q * F);
      if (dx) load_def_row(s, 16 * g + q, dx + q * F);
    }
    bool defined = true;
    std::vector<int64_t> order(static_cast<size_t>(n));
    for (int64_t e = 0; e < n; ++e) {
      order[static_cast<size_t>(e)] = e;
      if (dx && !dx[(e % 16) * F + e / 16]) defined = false;
    }
    auto val = [&](int64_t e) { return x[(e % 16) * F + e / 16]; };
    auto above = [&](int64_t a, int64_t b) {  // a ranks above b: larger (NaN largest), then lower index
      const float va = val(a), vb = val(b);
      const bool na = std::isnan(va), nb = std::isnan(vb);
      if (na != nb) return na;
      if (!na && va != vb) return va > vb;
      return a < b;
    };
    std::partial_sort(order.begin(), order.begin() + K, order.end(), above);
    // Ascending by value, ties by ascending index.
    std::sort(order.begin(), order.begin() + K, [&](int64_t a, int64_t b) {
      const float va = val(a), vb = val(b);
      const bool na = std::isnan(va), nb = std::isnan(vb);
      if (na != nb) return nb;
      if (!na && va != vb) return va < vb;
      return a < b;
    });
    float* vr = sc.fb(1, K);
    int64_t* ir = sc.ib(0, K);
    uint8_t* dv = c.check ? sc.db(1, K) : nullptr;
    uint8_t* di = c.check ? sc.db(2, K) : nullptr;
    for (int q = 0; q < 16 && q < K; ++q) {
      const int64_t p = 16 * g + q;
      load_row(vd, p, vr);
      load_row_i(id, p, ir);
      if (c.check) {
        load_def_row(vd, p, dv);
        load_def_row(id, p, di);
      }
      for (int64_t j = q; j < K; j += 16) {
        const int64_t e = order[static_cast<size_t>(j)];
        vr[j / 16] = val(e);
        ir[j / 16] = e;
        if (c.check) dv[j / 16] = di[j / 16] = static_cast<uint8_t>(defined);
      }
      store_row(vd, p, vr);
      store_row_i(id, p, ir);
      if (c.check) {
        store_def_row(vd, p, dv);
        store_def_row(id, p, di);
      }
    }
    if (!defined) c.note_undefined(FX::k<"src">);
  });
}

// Plan::fused_runs: every instruction of the run on a block of partitions, then the next block.
// The operands are dense fp32 copies ("registers", FusedRun): loaded on first read, stored
// after the block when written. The arithmetic is the instructions' own (ScalarOps, alu_vv, a
// copy of fp32 bits), on the same fp32 values, so the results are the same bits.
void fused_run(Ctx& c, const FusedRun& run) {
  const Plan& pl = *c.plan;
  const FusedReg* regs = pl.fused_regs.data() + run.reg0;
  const int nr = run.nregs;
  View v[FusedRun::kMaxRegs];
  int64_t at[FusedRun::kMaxRegs], width = 0;
  for (int r = 0; r < nr; ++r) {
    plan_view(c, regs[r].view, v[r]);
    collapse_free(v[r]);
    at[r] = width;
    width += regs[r].free;
  }
  const int64_t P = run.parts;
  const int64_t block = std::max<int64_t>(1, std::min<int64_t>(P, 8192 / width));
  float* buf = scratch().fb(0, block * width);
  const int32_t start = c.pc;
  for (int64_t p0 = 0; p0 < P; p0 += block) {
    const int64_t rows = std::min(block, P - p0);
    uint32_t loaded = 0, dirty = 0;
    auto reg = [&](int r, bool read) {
      float* x = buf + at[r] * block;
      if (read && !(loaded >> r & 1)) {
        gather_f32(v[r], p0, rows, x);
        loaded |= 1u << r;
      }
      return x;
    };
    auto wrote = [&](int r) {
      loaded |= 1u << r;
      dirty |= 1u << r;
    };
    for (c.pc = start; c.pc < run.end; ++c.pc) {
      const auto& map = pl.fused_ops[static_cast<size_t>(run.op0 + c.pc - start)];
      const Instr& in = c.in();
      switch (in.op) {
        case Op::TensorScalar: {
          using FX = isa::Fields<Op::TensorScalar>;
          const ScalarOps so(FX{in});
          const int ra = map[FX::k<"data">], rd = map[FX::k<"dst">];
          const int r0 = map[FX::k<"operand0">], r1 = map[FX::k<"operand1">];
          const float* v0 = r0 >= 0 ? reg(r0, true) : nullptr;
          const float* v1 = r1 >= 0 ? reg(r1, true) : nullptr;
          const float* a = reg(ra, true);
          float* d = reg(rd, false);
          const int64_t F = regs[ra].free;
          if (d != a) std::memcpy(d, a, static_cast<size_t>(rows * F) * 4);
          so.rows(d, rows, F, v0, v1);
          wrote(rd);
          break;
        }
        case Op::TensorTensor: {
          using FX = isa::Fields<Op::TensorTensor>;
          const int r1 = map[FX::k<"data1">], rd = map[FX::k<"dst">];
          const float* a = reg(r1, true);
          const float* b = reg(map[FX::k<"data2">], true);
          alu_vv(FX{in}.alu<"op">(), a, b, reg(rd, false), rows * regs[r1].free);
          wrote(rd);
          break;
        }
        case Op::TensorCopy: {
          using FX = isa::Fields<Op::TensorCopy>;
          const int rs = map[FX::k<"src">], rd = map[FX::k<"dst">];
          const float* s = reg(rs, true);
          float* d = reg(rd, false);
          if (d != s) std::memcpy(d, s, static_cast<size_t>(rows * regs[rs].free) * 4);
          wrote(rd);
          break;
        }
        default:
          c.fail("runtime", "instruction in a fused run that cannot be fused", "");
      }
    }
    for (int r = 0; r < nr; ++r)
      if (dirty >> r & 1) scatter_f32(v[r], p0, rows, buf + at[r] * block);
  }
  c.pc = start;
}

template <void (*Fn)(Ctx&, Views&)>
void run_views(Ctx& c) {
  Views w = views(c);
  Fn(c, w);
}

}  // namespace neuron::nki::detail

namespace neuron::nki::isa::exec {
using namespace detail;
void TensorCopy(Ctx& c) { run_views<tensor_copy>(c); }
void StreamShuffle(Ctx& c) { run_views<stream_shuffle>(c); }
void NGather(Ctx& c) { run_views<n_gather>(c); }
void LocalGather(Ctx& c) { run_views<local_gather>(c); }
void SequenceBounds(Ctx& c) { run_views<sequence_bounds>(c); }
void Memset(Ctx& c) { run_views<memset_op>(c); }
void Iota(Ctx& c) { run_views<iota>(c); }
void AffineSelect(Ctx& c) { run_views<affine_select>(c); }
void TensorTensor(Ctx& c) { run_views<tensor_tensor>(c); }
void TensorScalar(Ctx& c) { run_views<tensor_scalar>(c); }
void ScalarTensorTensor(Ctx& c) { run_views<scalar_tensor_tensor>(c); }
void TensorReduce(Ctx& c) { run_views<tensor_reduce>(c); }
void PartitionReduce(Ctx& c) { run_views<partition_reduce>(c); }
void Activation(Ctx& c) { run_views<activation>(c); }
void Reciprocal(Ctx& c) { run_views<reciprocal>(c); }
void TensorTensorScan(Ctx& c) { run_views<scan>(c); }
void TensorScalarReduce(Ctx& c) { run_views<tensor_scalar_reduce>(c); }
void SelectReduce(Ctx& c) { run_views<select_reduce>(c); }
void CopyPredicated(Ctx& c) { run_views<copy_predicated>(c); }
void BnStats(Ctx& c) { run_views<bn_stats>(c); }
void BnAggr(Ctx& c) { run_views<bn_aggr>(c); }
void Max8(Ctx& c) { run_views<max8>(c); }
void TensorScalarCumulative(Ctx& c) { run_views<tensor_scalar_cumulative>(c); }
void RangeSelect(Ctx& c) { run_views<range_select>(c); }
void NonzeroWithCount(Ctx& c) { run_views<nonzero_with_count>(c); }
void FindIndex8(Ctx& c) { run_views<find_index8>(c); }
void MatchReplace8(Ctx& c) { run_views<match_replace8>(c); }
void TopK(Ctx& c) { run_views<topk>(c); }
}  // namespace neuron::nki::isa::exec
