#include "verify.h"

#include <stdexcept>
#include <string>
#include <vector>

#include "collective.h"
#include "error.h"
#include "executor.h"

namespace neuron::nki::isa {
namespace {

std::string shape_of(const Ap& a) {
  std::string r = "(";
  for (int d = 0; d < a.ndim; ++d) r += (d ? ", " : "") + std::to_string(a.num[d]);
  return r + (a.ndim == 1 ? ",)" : ")");
}

bool onchip(Mem m) { return m != Mem::Hbm; }

// "{name}" and "{value}" in a message template.
std::string format(std::string_view tmpl, std::string_view name, std::string_view value) {
  std::string out;
  for (size_t i = 0; i < tmpl.size();) {
    if (tmpl.substr(i, 6) == "{name}") {
      out += name;
      i += 6;
    } else if (tmpl.substr(i, 7) == "{value}") {
      out += value;
      i += 7;
    } else {
      out += tmpl[i++];
    }
  }
  return out;
}

std::string short_api(const InstrDef& d) {
  std::string_view a = d.api;
  const auto dot = a.rfind('.');
  return std::string(dot == std::string_view::npos ? a : a.substr(dot + 1));
}

std::string mems_of(uint8_t set) {
  std::string r;
  for (Mem m : {Mem::Hbm, Mem::Sbuf, Mem::Psum})
    if (set & (1u << static_cast<int>(m))) {
      if (!r.empty()) r += '/';
      r += mem_name(m);
    }
  return r;
}

std::string engines_of(uint8_t set) {
  std::string r;
  for (int e = 0; e < kNumEngines; ++e)
    if (set & (1u << e)) {
      if (!r.empty()) r += '/';
      r += engine_name(static_cast<Engine>(e));
    }
  return r;
}

}  // namespace

void Checker::access_pattern(int k) const {
  const Ap& a = in.ap[k];
  if (a.buf < 0 || a.buf >= static_cast<int32_t>(prog.buffers().size()))
    fail(role(k) + " refers to an unknown tensor", "");
  const Buffer& b = buffer(k);
  const std::string who = role(k) + " ('" + b.name + "' in " + std::string(mem_name(b.mem)) + ")";
  if (a.ndim < 1 || a.ndim > kMaxApDims)
    fail(who + " has " + std::to_string(a.ndim) + " dimensions",
         "access patterns have 1 to 6 dimensions");
  for (int d = 0; d < a.ndim; ++d)
    if (a.num[d] <= 0)
      fail(who + " has an empty dimension in shape " + shape_of(a),
           "access patterns are non-empty");
  const int64_t es = dt_size(a.dtype);
  const Target& t = target();
  if (onchip(b.mem)) {
    if (a.num[0] > t.partitions)
      fail(who + " partition dimension " + std::to_string(a.num[0]) + " exceeds maximum " +
               std::to_string(t.partitions),
           "partition dimension <= 128 (nl.tile_size.pmax)");
    if (a.ndim - 1 > 4)
      fail(who + " has " + std::to_string(a.ndim - 1) + " free dimensions in shape " + shape_of(a),
           "on-chip access patterns have at most 4 free dimensions");
    if (b.bytes_per_partition % es != 0)
      fail(who + " views a tensor of " + std::to_string(b.bytes_per_partition) +
               " bytes per partition as " + std::string(dt_name(a.dtype)),
           "a reinterpreting view must tile the partition exactly");
    const int64_t fa = b.bytes_per_partition / es;  // elements per partition in the view's dtype
    const bool broadcast_ok = def.operands[k].partition_broadcast && a.step[0] == 0;
    if (a.num[0] > 1 && a.step[0] != fa && !broadcast_ok)
      fail(who + " steps " + std::to_string(a.step[0]) +
               " elements between partitions, but the tensor has " + std::to_string(fa) +
               " elements per partition",
           "the partition dimension is accessed contiguously (step = elements per partition)");
    if (a.reg < 0) {
      if (a.offset < 0 || a.offset >= b.partitions * fa)
        fail(who + " starts at element " + std::to_string(a.offset) + " outside the tensor",
             "accesses stay inside the tensor");
      const int64_t p0 = a.offset / fa, f0 = a.offset % fa;
      int64_t flo = f0, fhi = f0;
      for (int d = 1; d < a.ndim; ++d) {
        const int64_t ext = a.step[d] * (a.num[d] - 1);
        (ext < 0 ? flo : fhi) += ext;
      }
      const int64_t plast = p0 + (a.step[0] == 0 ? 0 : a.num[0] - 1);
      if (plast >= b.partitions)
        fail(who + " accesses partitions " + std::to_string(p0) + ".." + std::to_string(plast) +
                 " of a tensor with " + std::to_string(b.partitions) + " partitions",
             "accesses stay inside the tensor");
      if (flo < 0 || fhi >= fa)
        fail(who + " accesses elements " + std::to_string(flo) + ".." + std::to_string(fhi) +
                 " of each partition, which holds " + std::to_string(fa),
             "accesses stay inside the tensor (free dimensions never cross partitions)");
      if (!def.any_partition_start && a.step[0] != 0) {
        const int64_t np = a.num[0];
        if (!isa::engines_can_start(p0, np))
          fail(who + " starts at partition " + std::to_string(p0) + " with " + std::to_string(np) +
                   " partitions",
               "compute engines start at partition 0 (>64 partitions), 0/64 (>32) or a multiple of "
               "32");
      }
    }
  } else {
    if (b.total_bytes % es != 0)
      fail(who + " views a tensor of " + std::to_string(b.total_bytes) + " bytes as " +
               std::string(dt_name(a.dtype)),
           "a reinterpreting view must tile the tensor exactly");
    if (a.reg < 0) {
      const int64_t n = b.total_bytes / es;
      int64_t lo = a.offset, hi = a.offset;
      for (int d = 0; d < a.ndim; ++d) {
        const int64_t ext = a.step[d] * (a.num[d] - 1);
        (ext < 0 ? lo : hi) += ext;
      }
      if (lo < 0 || hi >= n)
        fail(who + " accesses elements " + std::to_string(lo) + ".." + std::to_string(hi) +
                 " of a tensor with " + std::to_string(n),
             "accesses stay inside the tensor");
    }
  }
  if (a.reg >= prog.num_registers()) fail(who + " uses an unknown register", "");
}

void Checker::memory(int k) const {
  const Operand& o = def.operands[k];
  const Mem m = mem(k);
  if (o.mem & (1u << static_cast<int>(m))) return;
  std::string rule(o.mem_rule);
  if (rule.empty())
    rule = o.mem == kOnChip ? "engine operands live in SBUF or PSUM"
                            : short_api(def) + " operands live in " + mems_of(o.mem);
  fail(role(k) + " '" + name(k) + "' is in " + std::string(mem_name(m)) +
           (o.mem == kSbuf ? ", not SBUF" : ""),
       rule);
}

void Checker::dtype(int k) const {
  const Operand& o = def.operands[k];
  if (dt_in(o.dtypes, dt(k))) return;
  if (o.dtype_rule.empty())
    fail(role(k) + " has packed dtype " + std::string(dt_name(dt(k))),
         "engines do not compute on packed types (DMA only)");
  fail(role(k) + " has dtype " + std::string(dt_name(dt(k))), std::string(o.dtype_rule));
}

void Checker::shape(int k, bool partitions) const {
  const Operand& o = def.operands[k];
  if (o.shape == ShapeRule::None || o.shape == ShapeRule::Vector || !present(o.ref)) return;
  if (partitions) {
    same_parts(k, o.ref);
  } else if (o.shape == ShapeRule::Same) {
    same_free(k, o.ref);
  }
}

void Checker::same_parts(int a, int b) const {
  if (P(a) != P(b))
    fail(role(a) + " has " + std::to_string(P(a)) + " partitions but " + role(b) + " has " +
             std::to_string(P(b)),
         "operands have the same partition dimension");
}

void Checker::same_free(int a, int b) const {
  if (F(a) != F(b))
    fail(role(a) + " has " + std::to_string(F(a)) + " elements per partition but " + role(b) +
             " has " + std::to_string(F(b)),
         "operands have the same number of elements per partition");
}

void Checker::not_packed(int k) const {
  if (dt_is_packed(dt(k)))
    fail(role(k) + " has packed dtype " + std::string(dt_name(dt(k))),
         "engines do not compute on packed types (DMA only)");
}

void Checker::in_sbuf(int k, const std::string& rule) const {
  if (mem(k) != Mem::Sbuf)
    fail(role(k) + " '" + name(k) + "' is in " + std::string(mem_name(mem(k))) + ", not SBUF",
         rule);
}

void Checker::in_psum(int k, const std::string& rule) const {
  if (mem(k) != Mem::Psum)
    fail(role(k) + " '" + name(k) + "' is in " + std::string(mem_name(mem(k))), rule);
}

void Checker::bitvec_ints(Alu op, std::initializer_list<int> operands) const {
  if (!alu_is_bitvec(op)) return;
  for (int k : operands)
    if (present(k) && !dt_is_int(dt(k)))
      fail("bitvec operator " + std::string(alu_name(op)) + " needs integer dtypes, got " +
               std::string(dt_name(dt(k))),
           "bitvec operators work on integer bit patterns");
}

void Checker::attribute(const Attr& a) const {
  const std::string nm(a.name);
  if (a.is_float()) return;
  for (int j = 0; j < a.count; ++j) {
    const int64_t v = in.i[a.slot + j];
    switch (a.kind) {
      case AttrKind::Int:
        if (v < a.lo || v > a.hi) {
          if (a.lo == 1 && a.hi == INT64_MAX)
            fail(nm + " " + std::to_string(v), nm + " is a positive constant");
          fail("invalid " + nm + " " + std::to_string(v),
               nm + " is in [" + std::to_string(a.lo) + ", " + std::to_string(a.hi) + "]");
        }
        break;
      case AttrKind::Bool:
        if (v != 0 && v != 1) fail(nm + " is " + std::to_string(v), nm + " is a boolean");
        break;
      case AttrKind::AluOrNone:
        if (v == -1) break;
        [[fallthrough]];
      case AttrKind::Alu: {
        if (v < 0 || v >= static_cast<int64_t>(Alu::Count)) fail("invalid " + nm, "");
        if (!((a.allowed >> v) & 1))
          fail(format(a.msg, nm, alu_name(static_cast<Alu>(v))), std::string(a.rule));
        break;
      }
      case AttrKind::Act:
        if (v < 0 || v >= static_cast<int64_t>(Act::Count) ||
            act_is_integer_only(static_cast<Act>(v)))
          fail("invalid activation function", "");
        break;
      case AttrKind::ReduceCmd:
        if (v < 0 || v >= static_cast<int64_t>(ReduceCmd::Count)) fail("invalid " + nm, "");
        break;
      case AttrKind::Reg:
        if (v < 0 || v >= prog.num_registers()) fail("unknown register (" + nm + ")", "");
        break;
      case AttrKind::RegOrNone:
        if (v < -1 || v >= prog.num_registers()) fail("unknown register (" + nm + ")", "");
        break;
      case AttrKind::Jump:  // filled in by Program::add
      case AttrKind::Float:
        break;
    }
  }
}

void Checker::run() const {
  if (in.op >= Op::Count) fail("invalid opcode", "");
  if (in.nap > kMaxOperands) fail("too many operands", "");
  if (static_cast<int>(in.engine) >= kNumEngines || !(def.engines & engine_bit(in.engine)))
    fail("engine " +
             std::string(static_cast<int>(in.engine) < kNumEngines ? engine_name(in.engine) : "?") +
             " cannot run it",
         short_api(def) + " runs on the " + engines_of(def.engines) + " Engine");
  if (target().nc_version < def.min_nc_version)
    fail(short_api(def) + " on NeuronCore-v" + std::to_string(target().nc_version),
         std::string(def.version_rule));
  for (int k = def.num_operands; k < in.nap; ++k)
    if (in.ap[k].present()) fail("operand " + std::to_string(k) + " is not an operand of it", "");

  // The GpSimd Engine cannot reach PSUM.
  if (in.engine == Engine::GpSimd)
    for (int k = 0; k < in.nap; ++k)
      if (present(k) && in.ap[k].buf < static_cast<int32_t>(prog.buffers().size()) &&
          mem(k) == Mem::Psum)
        fail("operand '" + name(k) + "' is in PSUM, which the GpSimd Engine cannot access",
             "GpSimd Engine accesses SBUF only");

  for (int k = 0; k < def.num_operands; ++k) {
    if (present(k)) {
      access_pattern(k);
    } else if (def.operands[k].required) {
      fail("missing operand " + role(k), "");
    }
  }
  for (int k = 0; k < def.num_operands; ++k)
    if (present(k)) {
      memory(k);
      dtype(k);
    }
  if (def.psum_a >= 0 && present(def.psum_a) && present(def.psum_b) &&
      mem(def.psum_a) == Mem::Psum && mem(def.psum_b) == Mem::Psum)
    fail(role(def.psum_a) + " '" + name(def.psum_a) + "' and " + role(def.psum_b) + " '" +
             name(def.psum_b) + "' are both in PSUM",
         std::string(def.psum_rule));
  for (bool partitions : {true, false})
    for (int k = def.num_operands - 1; k >= 0; --k)
      if (present(k)) shape(k, partitions);
  for (int k = 0; k < def.num_operands; ++k) {
    const Operand& o = def.operands[k];
    if (o.shape != ShapeRule::Vector || !present(k) || !present(o.ref)) continue;
    if (P(k) != P(o.ref) || F(k) != 1)
      fail(role(k) + " has shape " + shape_of(in.ap[k]) + "; expected (" +
               std::to_string(P(o.ref)) + ", 1)",
           "vector operands have one element per partition");
  }
  for (int j = 0; j < def.num_attrs; ++j) attribute(def.attrs[j]);
  if (def.check) def.check(*this);
}

// ---------------------------------------------------------------------------------------------
// Custom checks: rules that span operands and attributes.

namespace check {

void DmaCopy(const Checker& c) {
  using F = Fields<Op::DmaCopy>;
  constexpr int d = F::k<"dst">, s = F::k<"src">;
  const Ap &da = c.in.ap[d], &sa = c.in.ap[s];
  if (da.numel() != sa.numel())
    c.fail("src has shape " + shape_of(sa) + " (" + std::to_string(sa.numel()) +
               " elements) but dst has shape " + shape_of(da) + " (" + std::to_string(da.numel()) +
               " elements)",
           "DMA copy in/out element counts must match");
  if ((dt_is_packed(c.dt(d)) || dt_is_packed(c.dt(s))) && c.dt(d) != c.dt(s))
    c.fail("cannot cast between " + std::string(dt_name(c.dt(s))) + " and " +
               std::string(dt_name(c.dt(d))),
           "DMA casts are not supported for packed MX types");
}

namespace {
// The rules of a gather/scatter (dma_copy or dma_compute with an indirect operand).
template <Op Id>
void check_indirect(const Checker& c) {
  using F = Fields<Id>;
  constexpr int d = F::template k<"dst">, s = F::template k<"src">, x = F::template k<"index">;
  const int ind = F{c.in}.template i<"indirect">() ? d : s, other = ind == d ? s : d;
  const Ap &da = c.in.ap[d], &sa = c.in.ap[s], &xa = c.in.ap[x];
  int q = 0;  // the indexed dimension (dma_transpose of a gather moves it)
  if constexpr (Id == Op::DmaIndirect) q = static_cast<int>(F{c.in}.template i<"dim">());
  const Ap &ia = c.in.ap[ind], &oa = c.in.ap[other];
  if (q >= ia.ndim || q >= oa.ndim)
    c.fail("the indexed dimension " + std::to_string(q) + " is not a dimension of " +
               c.role(ind) + " " + shape_of(ia) + " and " + c.role(other) + " " + shape_of(oa),
           "an indirect DMA indexes a dimension both operands have");
  if (c.mem(ind) != Mem::Hbm)
    c.fail("the indirect operand '" + c.name(ind) + "' is in " + std::string(mem_name(c.mem(ind))),
           "an indirect DMA gathers from or scatters to an HBM tensor");
  if (da.numel() != sa.numel())
    c.fail("src has shape " + shape_of(sa) + " (" + std::to_string(sa.numel()) +
               " elements) but dst has shape " + shape_of(da) + " (" + std::to_string(da.numel()) +
               " elements)",
           "DMA copy in/out element counts must match");
  const int64_t n = ia.num[q];
  if (xa.numel() != n || c.F(x) != 1)
    c.fail("index has shape " + shape_of(xa) + " for " + std::to_string(n) +
               " entries of the indirect dimension",
           "an indirect DMA takes one index per entry of the indexed dimension: a [P, 1] tile");
  if (oa.num[q] != n)
    c.fail(c.role(other) + " has " + std::to_string(oa.num[q]) + " entries in dimension " +
               std::to_string(q) + ", " + c.role(ind) + " " + std::to_string(n),
           "the other operand of an indirect DMA has one entry per index in the indexed dimension");
  if (c.dt(d) != c.dt(s) && (dt_is_packed(c.dt(d)) || dt_is_packed(c.dt(s))))
    c.fail("cannot cast between " + std::string(dt_name(c.dt(s))) + " and " +
               std::string(dt_name(c.dt(d))),
           "DMA casts are not supported for packed MX types");
}
}  // namespace

void DmaIndirect(const Checker& c) { check_indirect<Op::DmaIndirect>(c); }

void DmaComputeIndirect(const Checker& c) {
  check_indirect<Op::DmaComputeIndirect>(c);
  using F = Fields<Op::DmaComputeIndirect>;
  c.not_packed(F::k<"dst">);
  c.not_packed(F::k<"src">);
}

void DmaCompute(const Checker& c) {
  using F = Fields<Op::DmaCompute>;
  constexpr int d = F::k<"dst">;
  const Ap& da = c.in.ap[d];
  c.not_packed(d);
  for (int k = F::k<"src0">; k <= F::k<"src3">; ++k) {
    if (!c.present(k)) continue;
    c.not_packed(k);
    const Ap& sa = c.in.ap[k];
    if (sa.numel() != da.numel())
      c.fail(c.role(k) + " has shape " + shape_of(sa) + " (" + std::to_string(sa.numel()) +
                 " elements) but dst has shape " + shape_of(da) + " (" +
                 std::to_string(da.numel()) + " elements)",
             "dma_compute sources and destination have the same element count");
  }
}

void TensorCopy(const Checker& c) {
  using F = Fields<Op::TensorCopy>;
  if (c.dt(F::k<"dst">) != c.dt(F::k<"src">)) {
    c.not_packed(F::k<"dst">);
    c.not_packed(F::k<"src">);
  }
}

// iota and affine_select: the [step, num] pattern covers dst's free dimensions.
void Iota(const Checker& c) {
  static_assert(Fields<Op::Iota>::slot<"pattern_dims"> ==
                    Fields<Op::AffineSelect>::slot<"pattern_dims"> &&
                Fields<Op::Iota>::slot<"pattern"> == Fields<Op::AffineSelect>::slot<"pattern">);
  const Fields<Op::Iota> f{c.in};
  const int64_t nd = f.i<"pattern_dims">();
  if (nd < 1 || nd > 4)
    c.fail("pattern has " + std::to_string(nd) + " dimensions", "patterns have 1 to 4 dimensions");
  int64_t total = 1;
  for (int d = 0; d < nd; ++d) {
    const int64_t num = f.i<"pattern">(2 * d + 1);
    if (num <= 0) c.fail("pattern dimension " + std::to_string(d) + " is empty", "");
    total *= num;
  }
  if (total != c.F(0))
    c.fail("pattern produces " + std::to_string(total) + " elements per partition but dst has " +
               std::to_string(c.F(0)),
           "the pattern covers dst's free dimensions exactly");
}

void TensorTensor(const Checker& c) {
  const Fields<Op::TensorTensor> f{c.in};
  c.bitvec_ints(f.alu<"op">(), {0, 1, 2});
}

void TensorScalar(const Checker& c) {
  const Fields<Op::TensorScalar> f{c.in};
  const Alu op0 = f.alu<"op0">();
  const bool two = f.i<"op1">() >= 0;
  if (two) {
    const Alu op1 = f.alu<"op1">();
    if (alu_is_bitvec(op0) != alu_is_bitvec(op1))
      c.fail("op0 " + std::string(alu_name(op0)) + " and op1 " + std::string(alu_name(op1)) +
                 " mix bitvec and arithmetic operators",
             "both operators of tensor_scalar are bitvec or both arithmetic");
    c.bitvec_ints(op1, {0, 1});
  }
  c.bitvec_ints(op0, {0, 1});
  if (c.in.engine == Engine::Scalar) {
    const bool ok =
        (op0 == Alu::Multiply && (!two || f.alu<"op1">() == Alu::Add)) || (op0 == Alu::Add && !two);
    if (!ok)
      c.fail("operators (" + std::string(alu_name(op0)) + ", " +
                 (two ? std::string(alu_name(f.alu<"op1">())) : std::string("None")) +
                 ") on the Scalar Engine",
             "Scalar Engine tensor_scalar supports (multiply, add), (multiply, None), (add, None)");
  }
}

void TensorReduce(const Checker& c) {
  using F = Fields<Op::TensorReduce>;
  const F f{c.in};
  constexpr int d = F::k<"dst">, s = F::k<"data">;
  c.bitvec_ints(f.alu<"op">(), {d, s});
  const int64_t mask = f.i<"axis_mask">();
  const Ap& a = c.in.ap[s];
  const int nd = a.ndim;
  if (mask & 1)
    c.fail("axis includes 0, the partition dimension",
           "tensor_reduce reduces free axes only; transpose or matmul with ones to reduce "
           "partitions");
  int first = -1, last = -1, count = 0;
  for (int k = 1; k < nd; ++k)
    if (mask & (int64_t{1} << k)) {
      if (first < 0) first = k;
      last = k;
      ++count;
    }
  if (mask >> nd)
    c.fail("axis refers to a dimension >= " + std::to_string(nd), "reduction axes exist");
  if (count == 0) c.fail("no axis to reduce", "tensor_reduce needs at least one free axis");
  if (last != nd - 1 || last - first + 1 != count)
    c.fail("axes must be the last contiguous free dimensions of data with shape " + shape_of(a),
           "tensor_reduce axis is [1], [1,2], ... ending at the most minor dimension");
  c.same_parts(d, s);
  int64_t kept = 1;
  for (int k = 1; k < first; ++k) kept *= a.num[k];
  if (c.F(d) != kept)
    c.fail("dst has " + std::to_string(c.F(d)) + " elements per partition; reducing data " +
               shape_of(a) + " leaves " + std::to_string(kept),
           "tensor_reduce output shape");
}

void PartitionReduce(const Checker& c) {
  using F = Fields<Op::PartitionReduce>;
  constexpr int d = F::k<"dst">, s = F::k<"data">;
  if (c.P(d) != 1)
    c.fail("dst has " + std::to_string(c.P(d)) + " partitions",
           "the partition reduction result has 1 partition");
  c.same_free(d, s);
}

void Matmul(const Checker& c) {
  using F = Fields<Op::Matmul>;
  const F f{c.in};
  constexpr int d = F::k<"dst">, st = F::k<"stationary">, mv = F::k<"moving">;
  const Target& t = c.target();
  const bool dbl = f.i<"perf_mode">() == 1, transpose = f.flag<"is_transpose">();
  const bool f32a = c.dt(st) == DT::Float32, f32b = c.dt(mv) == DT::Float32;
  if (f32a != f32b)
    c.fail("stationary is " + std::string(dt_name(c.dt(st))) + " but moving is " +
               std::string(dt_name(c.dt(mv))),
           "nc_matmul: float32 operands cannot be mixed with 16/8-bit operands");
  if (c.P(st) != c.P(mv))
    c.fail("stationary has " + std::to_string(c.P(st)) +
               " partitions (contraction) but moving has " + std::to_string(c.P(mv)),
           "nc_matmul: stationary and moving share the contraction (partition) dimension");
  int64_t m = c.F(st), n = c.F(mv);
  const Ap &sa = c.in.ap[st], &ma = c.in.ap[mv];
  if (dbl) {
    if (t.nc_version < 3)
      c.fail("perf_mode=double_row on NeuronCore-v2", "double_row needs NeuronCore-v3+");
    auto fp8 = [](DT x) { return x == DT::F8E4M3 || x == DT::F8E4M3FN || x == DT::F8E5M2; };
    if (!fp8(c.dt(st)) || !fp8(c.dt(mv)))
      c.fail("double_row with non-fp8 inputs", "double_row performance mode takes fp8 inputs");
    if (sa.ndim != 3 || sa.num[1] != 2 || ma.ndim != 3 || ma.num[1] != 2)
      c.fail("stationary " + shape_of(sa) + " and moving " + shape_of(ma),
             "double_row operands are [K, 2, M] and [K, 2, N]");
    m /= 2;
    n /= 2;
    if (transpose)
      c.fail("double_row with is_transpose", "double_row cannot be combined with transpose mode");
  }
  if (m > 128)
    c.fail("stationary free size " + std::to_string(m) + " exceeds maximum 128 (stationary shape " +
               shape_of(sa) + ")",
           "Tensor Engine stationary tile is at most 128x128 (nl.tile_size.gemm_stationary_fmax)");
  if (n > 512)
    c.fail("moving free size " + std::to_string(n) + " exceeds maximum 512 (moving shape " +
               shape_of(ma) + ")",
           "Tensor Engine moving tile free size <= 512 (nl.tile_size.gemm_moving_fmax)");
  if (c.P(d) != m || c.F(d) != n)
    c.fail("dst has shape " + shape_of(c.in.ap[d]) + " but stationary.T @ moving is (" +
               std::to_string(m) + ", " + std::to_string(n) + ")",
           "nc_matmul dst shape is (stationary free size, moving free size)");
  const bool same16 = c.dt(d) == c.dt(st) && (c.dt(d) == DT::BFloat16 || c.dt(d) == DT::Float16);
  if (c.dt(d) != DT::Float32 && !(transpose && same16 && t.nc_version >= 3))
    c.fail("dst dtype is " + std::string(dt_name(c.dt(d))),
           "nc_matmul accumulates in fp32 PSUM (bf16/fp16 output only in transpose mode on "
           "NeuronCore-v3)");
  // One matmul writes within one PSUM bank of every partition.
  const Ap& da = c.in.ap[d];
  if (da.reg < 0) {
    const Buffer& b = c.buffer(d);
    const int64_t es = dt_size(da.dtype), fa = b.bytes_per_partition / es;
    int64_t lo = da.offset % fa, hi = lo;
    for (int k = 1; k < da.ndim; ++k) {
      const int64_t ext = da.step[k] * (da.num[k] - 1);
      (ext < 0 ? lo : hi) += ext;
    }
    const int64_t bank = t.psum_bank_bytes();
    // A manually placed tensor may start inside its bank (psum.alloc / psum.mod_alloc).
    const int64_t base = b.fixed_offset >= 0 ? b.fixed_offset % bank : 0;
    const int64_t blo = base + lo * es, bhi = base + (hi + 1) * es - 1;
    if (blo / bank != bhi / bank)
      c.fail("the output spans bytes " + std::to_string(blo) + ".." + std::to_string(bhi) +
                 " of each partition of '" + b.name + "', crossing a 2 KiB PSUM bank boundary",
             "one nc_matmul output fits in one PSUM bank (2 KiB = 512 fp32 per partition)");
  }
}

void Transpose(const Checker& c) {
  using F = Fields<Op::Transpose>;
  constexpr int d = F::k<"dst">, s = F::k<"data">;
  if (c.in.engine == Engine::Tensor) {
    c.in_sbuf(s, "Tensor Engine transpose reads SBUF");
    c.in_psum(d, "Tensor Engine transpose writes PSUM");
    if (c.F(s) > 128)
      c.fail("data free size " + std::to_string(c.F(s)) + " exceeds maximum 128",
             "Tensor Engine transpose handles at most 128x128");
  } else if (c.P(s) > 32 || c.F(s) > 32) {
    c.fail("data has shape " + shape_of(c.in.ap[s]),
           "Vector Engine transpose handles at most 32x32");
  }
  if (c.P(d) != c.F(s) || c.F(d) != c.P(s))
    c.fail("dst has shape " + shape_of(c.in.ap[d]) + " but the transpose of " +
               shape_of(c.in.ap[s]) + " is (" + std::to_string(c.F(s)) + ", " +
               std::to_string(c.P(s)) + ")",
           "transpose swaps the partition and free dimensions");
}

void BnStats(const Checker& c) {
  using FX = Fields<Op::BnStats>;
  constexpr int d = FX::k<"dst">, s = FX::k<"data">;
  if (c.F(s) > 512)
    c.fail("data has " + std::to_string(c.F(s)) + " elements per partition",
           "bn_stats takes at most 512 elements per partition (nl.tile_size.bn_stats_fmax)");
  if (c.F(d) != 6)
    c.fail("dst has " + std::to_string(c.F(d)) + " elements per partition",
           "bn_stats writes 6 statistics per partition");
}

void BnAggr(const Checker& c) {
  using FX = Fields<Op::BnAggr>;
  constexpr int d = FX::k<"dst">, s = FX::k<"data">;
  if (c.F(s) % 3 != 0)
    c.fail("data has " + std::to_string(c.F(s)) + " elements per partition",
           "bn_aggr reads (count, mean, var*count) triples");
  if (c.F(d) != 2)
    c.fail("dst has " + std::to_string(c.F(d)) + " elements per partition",
           "bn_aggr writes mean and variance");
}

// Fails with "<what> has N elements per partition" when `bad`.
void check_elems(const Checker& c, int k, const char* what, bool bad, const char* rule) {
  if (bad) c.fail(std::string(what) + " has " + std::to_string(c.F(k)) + " elements per partition", rule);
}

// nonzero_with_count: dst holds the T indices of a row plus the count.
void NonzeroWithCount(const Checker& c) {
  using FX = Fields<Op::NonzeroWithCount>;
  constexpr int d = FX::k<"dst">, s = FX::k<"src">;
  check_elems(c, d, "dst", c.F(d) != c.F(s) + 1,
              "nonzero_with_count writes one more element per partition than src (the count)");
}

// nc_find_index8: 8 to 16384 data elements, 8 values and 8 indices per partition.
void FindIndex8(const Checker& c) {
  using FX = Fields<Op::FindIndex8>;
  constexpr int d = FX::k<"dst">, a = FX::k<"data">, v = FX::k<"vals">;
  check_elems(c, a, "data", c.F(a) < 8 || c.F(a) > 16384,
              "nc_find_index8 searches 8 to 16384 elements per partition");
  check_elems(c, v, "vals", c.F(v) != 8, "nc_find_index8 looks up 8 values per partition");
  check_elems(c, d, "dst", c.F(d) != 8, "nc_find_index8 writes 8 indices per partition");
}

// nc_match_replace8: at most 16384 data elements and 8 values (and indices) per partition.
void MatchReplace8(const Checker& c) {
  using FX = Fields<Op::MatchReplace8>;
  constexpr int a = FX::k<"data">, v = FX::k<"vals">, i = FX::k<"dst_idx">;
  check_elems(c, a, "data", c.F(a) > 16384,
              "nc_match_replace8 searches at most 16384 elements per partition");
  check_elems(c, v, "vals", c.F(v) != 8, "nc_match_replace8 replaces 8 values per partition");
  check_elems(c, i, "dst_idx", c.in.ap[i].present() && c.F(i) != 8,
              "nc_match_replace8 writes 8 indices per partition");
}

// nc_n_gather: one gathered element per index, in data's dtype.
void NGather(const Checker& c) {
  using FX = Fields<Op::NGather>;
  constexpr int d = FX::k<"dst">, a = FX::k<"data">, i = FX::k<"indices">;
  if (c.dt(d) != c.dt(a))
    c.fail("dst has dtype " + std::string(dt_name(c.dt(d))) + ", data " + std::string(dt_name(c.dt(a))),
           "nc_n_gather writes data's dtype");
  check_elems(c, d, "dst", c.F(d) != c.F(i),
              "nc_n_gather writes one element per partition for each index");
}

// local_gather: partitions in whole GpSimd cores (16 each), 1 to 32 elements per index, at most
// 4096 valid indices per core (no more than the core's index slice holds), in src's dtype.
void LocalGather(const Checker& c) {
  using FX = Fields<Op::LocalGather>;
  constexpr int d = FX::k<"dst">, s = FX::k<"src_buffer">, i = FX::k<"index">;
  const FX f{c.in};
  const int64_t ne = f.i<"num_elem_per_idx">(), nv = f.i<"num_valid_indices">();
  if (c.dt(d) != c.dt(s))
    c.fail("dst has dtype " + std::string(dt_name(c.dt(d))) + ", src_buffer " + std::string(dt_name(c.dt(s))),
           "local_gather writes src_buffer's dtype");
  if (c.P(s) % 16 != 0)
    c.fail("src_buffer has " + std::to_string(c.P(s)) + " partitions",
           "local_gather works on whole GpSimd cores (a multiple of 16 partitions)");
  if (ne < 1 || ne > 32 || (ne & (ne - 1)) != 0)
    c.fail("num_elem_per_idx is " + std::to_string(ne), "local_gather reads 1, 2, 4, 8, 16 or 32 elements per index");
  if (nv < 1 || nv > 16 * c.F(i) || nv > 4096)
    c.fail("num_valid_indices is " + std::to_string(nv) + " (the index slice of a core holds " +
               std::to_string(16 * c.F(i)) + ")",
           "local_gather uses 1 to min(4096, 16 * index elements per partition) indices per core");
  check_elems(c, d, "dst", c.F(d) != nv * ne,
              "local_gather writes num_valid_indices * num_elem_per_idx elements per partition");
}

// topk: whole GpSimd cores; the documented ranges of n and K.
void TopK(const Checker& c) {
  using FX = Fields<Op::TopK>;
  constexpr int v = FX::k<"val_dst">, s = FX::k<"src">;
  const int64_t n = FX{c.in}.i<"n">(), K = c.F(v);
  if (c.P(s) % 16 != 0)
    c.fail("src has " + std::to_string(c.P(s)) + " partitions",
           "topk works on whole GpSimd cores (a multiple of 16 partitions)");
  if (n < 8 || n >= 65536)
    c.fail("n is " + std::to_string(n), "topk takes 8 <= n < 65536 elements per 16-partition snake");
  if (K < 1 || K >= 32768 || K > n)
    c.fail("K (val_dst's free size) is " + std::to_string(K) + " for n = " + std::to_string(n),
           "topk selects 1 <= K < 32768 and K <= n values");
  if (c.F(s) * 16 < n)
    c.fail("src has " + std::to_string(c.F(s)) + " elements per partition for n = " + std::to_string(n),
           "the snake of n elements fits src: its free size is at least ceil(n / 16)");
}

// sequence_bounds: one partition; a (start, end) pair per segment id.
void SequenceBounds(const Checker& c) {
  using FX = Fields<Op::SequenceBounds>;
  constexpr int d = FX::k<"dst">, s = FX::k<"segment_ids">;
  if (c.P(s) != 1)
    c.fail("segment_ids has " + std::to_string(c.P(s)) + " partitions", "sequence_bounds works on one partition");
  check_elems(c, d, "dst", c.F(d) != 2 * c.F(s),
              "sequence_bounds writes a start and an end index per segment id ([1, 2, n])");
}

void Max8(const Checker& c) {
  using FX = Fields<Op::Max8>;
  constexpr int d = FX::k<"dst">, s = FX::k<"data">;
  if (c.F(s) < 8)
    c.fail("data has " + std::to_string(c.F(s)) + " elements per partition",
           "max8 needs at least 8 elements per partition");
  if (c.F(d) != 8)
    c.fail("dst has " + std::to_string(c.F(d)) + " elements per partition",
           "max8 writes 8 values per partition");
}

// nc_stream_shuffle: equal row sizes; every source partition a mask entry names exists.
void StreamShuffle(const Checker& c) {
  using FX = Fields<Op::StreamShuffle>;
  constexpr int d = FX::k<"dst">, s = FX::k<"src">;
  if (c.F(d) != c.F(s))
    c.fail("dst has " + std::to_string(c.F(d)) + " elements per partition, src " +
               std::to_string(c.F(s)),
           "nc_stream_shuffle moves whole partitions");
  const int64_t dp = c.in.ap[d].num[0], sp = c.in.ap[s].num[0];
  const FX f{c.in};
  for (int64_t p = 0; p < dp; ++p) {
    const int64_t i = p % 32, m = (f.i<"mask">(static_cast<int>(i / 8)) >> (6 * (i % 8))) & 63;
    if (m != 63 && (p / 32) * 32 + m >= sp)
      c.fail("dst partition " + std::to_string(p) + " reads src partition " +
                 std::to_string((p / 32) * 32 + m) + " of " + std::to_string(sp),
             "shuffle_mask entries name partitions of the same 32-partition quadrant of src");
  }
}

// register_load / register_store: one element.
void RegLoad(const Checker& c) {
  static_assert(Fields<Op::RegLoad>::k<"src"> == Fields<Op::RegStore>::k<"dst">);
  const int64_t n = c.in.ap[Fields<Op::RegLoad>::k<"src">].numel();
  if (n != 1)
    c.fail("the tensor view has " + std::to_string(n) + " elements",
           "registers move exactly one element");
}

// sendrecv: dst takes the peer's src tile as it is (no conversion), so this core's own tiles
// already agree.
void SendRecv(const Checker& c) {
  using FX = Fields<Op::SendRecv>;
  constexpr int d = FX::k<"dst">, s = FX::k<"src">;
  if (c.dt(d) != c.dt(s))
    c.fail("dst is " + std::string(dt_name(c.dt(d))) + ", src " + std::string(dt_name(c.dt(s))),
           "sendrecv src and dst have the same dtype");
  if (c.in.ap[d].numel() != c.in.ap[s].numel() || c.P(d) != c.P(s))
    c.fail("dst has " + std::to_string(c.P(d)) + " x " + std::to_string(c.F(d)) +
               " elements, src " + std::to_string(c.P(s)) + " x " + std::to_string(c.F(s)),
           "sendrecv src and dst have the same shape");
}

// nki.collectives: the tensors of one call are all in HBM or all in SBUF, of one dtype, and
// their sizes follow from the kind and the replica group size n.
namespace {
void collective(const Checker& c) {
  coll::Info x;
  try {
    x = coll::info_of(c.prog, c.in);
  } catch (const std::invalid_argument& e) {
    c.fail(e.what(), "replica groups list disjoint ranks, every group of the same size");
  }
  const Ap &d = c.in.ap[x.dst], &s = c.in.ap[x.src];
  const std::string rule = "the tensors of a collective are all in HBM or all in SBUF, of one dtype";
  std::vector<int> ks{x.src};
  if (x.src1 >= 0) ks.push_back(x.src1);
  for (int k : ks) {
    if (c.mem(k) != c.mem(x.dst))
      c.fail(c.role(k) + " is in " + std::string(mem_name(c.mem(k))) + ", dst in " +
                 std::string(mem_name(c.mem(x.dst))),
             rule);
    if (c.dt(k) != c.dt(x.dst))
      c.fail(c.role(k) + " is " + std::string(dt_name(c.dt(k))) + ", dst " + std::string(dt_name(c.dt(x.dst))), rule);
    if (c.in.ap[k].numel() != s.numel())
      c.fail("src1 has shape " + shape_of(c.in.ap[k]) + ", src " + shape_of(s),
             "the two sources of a reducing permute have the same shape");
  }
  if ((x.kind == coll::Kind::AllToAll || x.kind == coll::Kind::Permute) && c.mem(x.dst) != Mem::Hbm)
    c.fail("its tensors are in SBUF", std::string(c.def.api) + " moves HBM tensors (SBUF is not supported)");
  const int64_t n = x.ranks;
  const bool split = x.kind == coll::Kind::AllGather || x.kind == coll::Kind::ReduceScatter ||
                     x.kind == coll::Kind::AllToAll;
  if (split && x.dim >= (x.kind == coll::Kind::AllGather ? s.ndim : s.ndim))
    c.fail("collective_dim " + std::to_string(x.dim) + " of a " + std::to_string(s.ndim) + "-dimensional src " +
               shape_of(s),
           "collective_dim names a dimension of the tensors");
  int64_t want = s.numel();
  if (x.kind == coll::Kind::AllGather) want = s.numel() * n;
  if (x.kind == coll::Kind::ReduceScatter) {
    if (s.num[x.dim] % n)
      c.fail("dimension " + std::to_string(x.dim) + " of src " + shape_of(s) + " does not split into " +
                 std::to_string(n) + " blocks",
             "reduce_scatter splits collective_dim into one block per rank of the group");
    want = s.numel() / n;
  }
  if (x.kind == coll::Kind::AllToAll && s.num[x.dim] % n)
    c.fail("dimension " + std::to_string(x.dim) + " of src " + shape_of(s) + " does not split into " +
               std::to_string(n) + " blocks",
           "all_to_all splits collective_dim into one block per rank of the group");
  if (d.numel() != want)
    c.fail("dst has shape " + shape_of(d) + " (" + std::to_string(d.numel()) + " elements) for src " +
               shape_of(s) + " and groups of " + std::to_string(n) + " rank(s); expected " +
               std::to_string(want) + " elements",
           std::string(c.def.api) + ": dst holds " +
               (x.kind == coll::Kind::AllGather       ? "every rank's src"
                : x.kind == coll::Kind::ReduceScatter ? "one block of src"
                                                      : "a tensor of src's shape"));
}
}  // namespace

// Random numbers: which engines each NeuronCore generation runs them on, the state sizes.
void Rng(const Checker& c) {
  if (c.target().nc_version < 3 && c.in.engine != Engine::Vector)
    c.fail("rng on the " + std::string(engine_name(c.in.engine)) + " Engine on NeuronCore-v" +
               std::to_string(c.target().nc_version),
           "rng runs on the Vector Engine on NeuronCore-v2 (GpSimd or Vector from NeuronCore-v3)");
}

void Rand2(const Checker& c) {
  using FX = Fields<Op::Rand2>;
  const FX f{c.in};
  if (!f.has<"min_vec">() && !f.has<"max_vec">() && !(f.imm<"min">() < f.imm<"max">()))
    c.fail("min " + std::to_string(f.imm<"min">()) + " is not below max " +
               std::to_string(f.imm<"max">()),
           "rand2 needs min < max");
}

void Dropout(const Checker& c) {
  using FX = Fields<Op::Dropout>;
  constexpr int d = FX::k<"dst">, a = FX::k<"data">, p = FX::k<"prob">;
  if (c.dt(d) != c.dt(a))
    c.fail("dst has dtype " + std::string(dt_name(c.dt(d))) + ", data " +
               std::string(dt_name(c.dt(a))),
           "dropout writes data's dtype (dst.dtype == data.dtype)");
  if (!c.present(p)) return;
  const bool float_prob = !dt_is_int(c.dt(p)) && !dt_is_packed(c.dt(p));
  if (dt_is_int(c.dt(a)) ? c.dt(p) != DT::Float32 : !float_prob)
    c.fail("prob has dtype " + std::string(dt_name(c.dt(p))) + " for " +
               std::string(dt_name(c.dt(a))) + " data",
           "dropout prob is float32 for integer data, a float type for float data");
}

void SetRngSeed(const Checker& c) {
  constexpr int s = Fields<Op::SetRngSeed>::k<"src_seeds">;
  if (c.P(s) != 1 || c.F(s) != 1)
    c.fail("src_seeds has shape [" + std::to_string(c.P(s)) + ", " + std::to_string(c.F(s)) + "]",
           "set_rng_seed takes a [1, 1] seed");
}

// rand_set_state / rand_get_state: GpSimd from NeuronCore-v3, Vector from v4; one lane's state
// per partition (6 words per XORWOW generator, 4 generators per Vector lane).
void RandSetState(const Checker& c) {
  const bool vec = c.in.engine == Engine::Vector;
  const std::string api = c.in.op == Op::RandSetState ? "rand_set_state" : "rand_get_state";
  if (vec && c.target().nc_version < 4)
    c.fail(api + " on the Vector Engine on NeuronCore-v" + std::to_string(c.target().nc_version),
           api + " runs on the GpSimd Engine on NeuronCore-v3 (GpSimd or Vector from "
                 "NeuronCore-v4)");
  const int64_t words = (vec ? RngState::kVectorGens : 1) * kernels::kXorwowWords;
  if (c.F(0) != words)
    c.fail(c.role(0) + " has " + std::to_string(c.F(0)) + " elements per partition",
           std::string("the XORWOW state of a ") + (vec ? "Vector" : "GpSimd") + " lane is " +
               std::to_string(words) + " uint32 (6 GpSimd, 24 Vector)");
}

void AllReduce(const Checker& c) { collective(c); }
void AllGather(const Checker& c) { collective(c); }
void ReduceScatter(const Checker& c) { collective(c); }
void AllToAll(const Checker& c) { collective(c); }
void CollectivePermute(const Checker& c) { collective(c); }
void PermuteImplicit(const Checker& c) { collective(c); }
void PermuteImplicitReduce(const Checker& c) { collective(c); }

}  // namespace check
}  // namespace neuron::nki::isa
