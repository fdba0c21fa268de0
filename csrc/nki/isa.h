// The NeuronCore instruction set, declared once. Every instruction is one entry of isa.def:
// its API name, the engines that may run it, its operands (name, role, the memories and dtypes
// each accepts, its shape relative to another operand) and its attributes (name, kind, storage
// slot). The rest derives from the entries: the Op enum, the verifier's per-operand rules
// (Program::add), Program::dump(), the compile-time named accessors (isa::Fields) the executor,
// verifier and cost model use, the Python-side tables (isa_table() in the binding, read by
// python/nki/_tracer.py), and the dispatch to each instruction's check, cost and execute
// functions (isa::check::<Id>, isa::cost::<Id>, isa::exec::<Id>).
// Thread-safety: everything here is immutable.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "alu.h"
#include "dtype.h"

namespace neuron::nki {

enum class Mem : uint8_t { Hbm, Sbuf, Psum };
enum class Engine : uint8_t { Tensor, Vector, Scalar, GpSimd, Dma, Sync, Count };
constexpr int kNumEngines = static_cast<int>(Engine::Count);

// Control registers of the reduce commands (nki.isa.reduce_cmd).
enum class ReduceCmd : uint8_t { Idle, Reset, Reduce, ResetReduce, LoadReduce, Count };

std::string_view mem_name(Mem m);        // "HBM", "SBUF", "PSUM"
std::string_view engine_name(Engine e);  // "Tensor", "Vector", ...
std::string_view reduce_cmd_name(ReduceCmd c);

// Storage of one instruction (Instr in program.h): operands, integer and float attribute slots.
constexpr int kMaxApDims = 6;
constexpr int kMaxOperands = 5;
constexpr int kNumInts = 12;
constexpr int kNumFloats = 4;
constexpr int kMaxAttrs = 10;

// The opcodes, in isa.def order (the serialized form stores these numbers).
enum class Op : uint8_t {
#define NKI_INSTR(Id, ...) Id,
#include "isa.def"
#undef NKI_INSTR
  Count,
};
constexpr int kNumOps = static_cast<int>(Op::Count);

class Program;
struct Instr;
struct InstrCost;
struct CostParams;
namespace detail {
struct Ctx;
}

namespace isa {

class Checker;
struct CostCtx;
using CheckFn = void (*)(const Checker&);
using CostFn = void (*)(const CostCtx&, InstrCost&);
using ExecFn = void (*)(detail::Ctx&);

// Every instruction has an execute and a cost function; a custom check is optional (an entry
// names it with .check(&check::<Id>)).
#define NKI_INSTR(Id, ...) void Id(detail::Ctx&);
namespace exec {
#include "isa.def"
}
#undef NKI_INSTR
#define NKI_INSTR(Id, ...) void Id(const CostCtx&, InstrCost&);
namespace cost {
#include "isa.def"
}
#undef NKI_INSTR
#define NKI_INSTR(Id, ...) void Id(const Checker&);
namespace check {
#include "isa.def"
}
#undef NKI_INSTR

// Sets of memories, engines and dtypes (bit i = enumerator i).
constexpr uint8_t kHbm = 1, kSbuf = 2, kPsum = 4;
constexpr uint8_t kOnChip = kSbuf | kPsum, kNotPsum = kHbm | kSbuf, kAnyMem = 7;
constexpr uint8_t engine_bit(Engine e) { return static_cast<uint8_t>(1u << static_cast<int>(e)); }
constexpr uint8_t kTensorEngine = engine_bit(Engine::Tensor);
constexpr uint8_t kVectorEngine = engine_bit(Engine::Vector);
constexpr uint8_t kScalarEngine = engine_bit(Engine::Scalar);
constexpr uint8_t kGpSimdEngine = engine_bit(Engine::GpSimd);
constexpr uint8_t kDmaEngine = engine_bit(Engine::Dma);
constexpr uint8_t kSyncEngine = engine_bit(Engine::Sync);
constexpr uint8_t kComputeEngines = kVectorEngine | kScalarEngine | kGpSimdEngine;

using DtSet = uint32_t;
constexpr DtSet dts() { return 0; }
template <typename... T>
constexpr DtSet dts(DT first, T... rest) {
  return (DtSet{1} << static_cast<int>(first)) | dts(rest...);
}
constexpr DtSet kAllDtypes = (DtSet{1} << kNumDTypes) - 1;
constexpr DtSet kPackedDtypes = dts(DT::F8E5M2x4, DT::F8E4M3FNx4, DT::F4E2M1FNx4);
constexpr DtSet kUnpackedDtypes = kAllDtypes & ~kPackedDtypes;
constexpr bool dt_in(DtSet s, DT t) { return (s >> static_cast<int>(t)) & 1; }

using AluSet = uint32_t;
constexpr AluSet alus() { return 0; }
template <typename... T>
constexpr AluSet alus(Alu first, T... rest) {
  return (AluSet{1} << static_cast<int>(first)) | alus(rest...);
}
constexpr AluSet kAllAlu = (AluSet{1} << static_cast<int>(Alu::Count)) - 1;
constexpr AluSet kBitvecAlu = alus(Alu::BitAnd, Alu::BitOr, Alu::BitXor, Alu::Shl, Alu::Shr);
constexpr AluSet kArithAlu = kAllAlu & ~kBitvecAlu;

// What an operand is to its instruction. Dst is the primary result (read too where the
// instruction accumulates or predicates), Out a secondary result (reduce_res), Src an input.
enum class Role : uint8_t { Dst, Src, Out };
// An operand's shape relative to another operand `ref`.
enum class ShapeRule : uint8_t {
  None,
  Same,       // same partitions and elements per partition
  SameParts,  // same partitions
  Vector,     // [P(ref), 1]: one element per partition
};

struct Operand {
  std::string_view name;
  Role role = Role::Src;
  bool required = true;
  uint8_t mem = kAnyMem;
  std::string_view mem_rule;  // rule text when the memory is not accepted ("" = generic)
  DtSet dtypes = kAllDtypes;
  std::string_view dtype_rule;  // rule text when the dtype is not accepted ("" = packed types)
  ShapeRule shape = ShapeRule::None;
  std::string_view ref_name;
  int8_t ref = -1;                   // index of ref_name (resolved by the entry)
  bool partition_broadcast = false;  // partition step 0 allowed (a DMA source)

  constexpr Operand optional() const {
    return with([](Operand& o) { o.required = false; });
  }
  constexpr Operand onchip() const { return in(kOnChip, ""); }
  constexpr Operand in(uint8_t m, std::string_view rule) const {
    return with([&](Operand& o) {
      o.mem = m;
      o.mem_rule = rule;
    });
  }
  constexpr Operand not_packed() const {
    return with([](Operand& o) { o.dtypes = kUnpackedDtypes; });
  }
  constexpr Operand dtypes_in(DtSet s, std::string_view rule) const {
    return with([&](Operand& o) {
      o.dtypes = s;
      o.dtype_rule = rule;
    });
  }
  constexpr Operand same_as(std::string_view r) const { return shaped(ShapeRule::Same, r); }
  constexpr Operand same_parts_as(std::string_view r) const {
    return shaped(ShapeRule::SameParts, r);
  }
  // A [partition, 1] operand (on chip) broadcast along the free dimension of `r`.
  constexpr Operand vector_of(std::string_view r) const {
    return shaped(ShapeRule::Vector, r).onchip();
  }
  constexpr Operand broadcast_partitions() const {
    return with([](Operand& o) { o.partition_broadcast = true; });
  }
  constexpr bool writes() const { return role != Role::Src; }

 private:
  template <typename F>
  constexpr Operand with(F f) const {
    Operand o = *this;
    f(o);
    return o;
  }
  constexpr Operand shaped(ShapeRule s, std::string_view r) const {
    return with([&](Operand& o) {
      o.shape = s;
      o.ref_name = r;
    });
  }
};
constexpr Operand dst(std::string_view n) {
  Operand o;
  o.name = n;
  o.role = Role::Dst;
  return o;
}
constexpr Operand src(std::string_view n) {
  Operand o;
  o.name = n;
  return o;
}
constexpr Operand out(std::string_view n) {
  Operand o;
  o.name = n;
  o.role = Role::Out;
  return o;
}

enum class AttrKind : uint8_t {
  Int,        // any integer (optionally in [lo, hi])
  Bool,       // 0 or 1
  Alu,        // an ALU operator (nl.add, ...)
  AluOrNone,  // an ALU operator or -1 (none)
  Act,        // an activation function (nl.exp, ...)
  ReduceCmd,  // nki.isa.reduce_cmd
  Reg,        // a register
  RegOrNone,  // a register or -1 (use the immediate next to it)
  Jump,       // an instruction index (loop structure, filled in by Program::add)
  Float,      // a floating-point immediate (stored in the f slots)
};
std::string_view attr_kind_name(AttrKind k);

struct Attr {
  std::string_view name;
  AttrKind kind = AttrKind::Int;
  int8_t count = 1;  // consecutive slots (a pattern of [step, num] pairs)
  int8_t slot = -1;  // first i[] slot (f[] for Float), assigned by the entry
  int64_t lo = INT64_MIN, hi = INT64_MAX;
  AluSet allowed = kAllAlu;  // Alu / AluOrNone: accepted operators
  std::string_view msg;      // when the operator is not accepted: "{name}"/"{value}" template
  std::string_view rule;

  constexpr Attr range(int64_t l, int64_t h) const {
    Attr a = *this;
    a.lo = l;
    a.hi = h;
    return a;
  }
  constexpr Attr allow(AluSet s, std::string_view m, std::string_view r) const {
    Attr a = *this;
    a.allowed = s;
    a.msg = m;
    a.rule = r;
    return a;
  }
  constexpr Attr times(int n) const {
    Attr a = *this;
    a.count = static_cast<int8_t>(n);
    return a;
  }
  constexpr bool is_float() const { return kind == AttrKind::Float; }
};
constexpr Attr attr(std::string_view n, AttrKind k) {
  Attr a;
  a.name = n;
  a.kind = k;
  return a;
}
constexpr Attr integer(std::string_view n) { return attr(n, AttrKind::Int); }
constexpr Attr flag(std::string_view n) { return attr(n, AttrKind::Bool); }
constexpr Attr alu(std::string_view n) { return attr(n, AttrKind::Alu); }
constexpr Attr alu_or_none(std::string_view n) { return attr(n, AttrKind::AluOrNone); }
constexpr Attr act(std::string_view n) { return attr(n, AttrKind::Act); }
constexpr Attr reduce_cmd(std::string_view n) { return attr(n, AttrKind::ReduceCmd); }
constexpr Attr reg(std::string_view n) { return attr(n, AttrKind::Reg); }
constexpr Attr reg_or_none(std::string_view n) { return attr(n, AttrKind::RegOrNone); }
constexpr Attr jump(std::string_view n) { return attr(n, AttrKind::Jump); }
constexpr Attr imm(std::string_view n) { return attr(n, AttrKind::Float); }

// One instruction. Operand k of a declared list is Instr::ap[k]; attributes take consecutive
// i[] slots (f[] for Float) in declaration order.
struct InstrDef {
  Op op = Op::Count;
  std::string_view id;   // "TensorTensor" (the Op enumerator, the Python-side key)
  std::string_view api;  // "nki.isa.tensor_tensor" (error messages, dumps, profiles)
  uint8_t engines = 0;
  std::array<Operand, kMaxOperands> operands{};
  int8_t num_operands = 0;
  std::array<Attr, kMaxAttrs> attrs{};
  int8_t num_attrs = 0;
  // Two operands that may not both be in PSUM (-1: none), and the rule.
  int8_t psum_a = -1, psum_b = -1;
  std::string_view psum_names[2];
  std::string_view psum_rule;
  int min_nc_version = 0;  // the NeuronCore generation that introduced it
  std::string_view version_rule;
  bool any_partition_start = false;  // not bound to the compute engines' 32-partition quadrants
  bool control = false;              // loop structure, run by the interpreter itself
  CheckFn check = nullptr;
  CostFn cost = nullptr;
  ExecFn exec = nullptr;

  constexpr InstrDef(std::string_view api_name, uint8_t engine_set)
      : api(api_name), engines(engine_set) {}

  template <typename... T>
  constexpr InstrDef operands_(T... ops) const {
    InstrDef d = *this;
    const Operand list[] = {ops...};
    if (sizeof...(T) > kMaxOperands) throw "too many operands";
    for (const Operand& o : list) d.operands[d.num_operands++] = o;
    return d;
  }
  template <typename... T>
  constexpr InstrDef attrs_(T... as) const {
    InstrDef d = *this;
    const Attr list[] = {as...};
    if (sizeof...(T) > kMaxAttrs) throw "too many attributes";
    for (const Attr& a : list) d.attrs[d.num_attrs++] = a;
    return d;
  }
  constexpr InstrDef not_both_psum(std::string_view a, std::string_view b,
                                   std::string_view rule) const {
    InstrDef d = *this;
    d.psum_names[0] = a;
    d.psum_names[1] = b;
    d.psum_rule = rule;
    return d;
  }
  constexpr InstrDef since(int nc_version, std::string_view rule) const {
    InstrDef d = *this;
    d.min_nc_version = nc_version;
    d.version_rule = rule;
    return d;
  }
  constexpr InstrDef any_partitions() const {
    InstrDef d = *this;
    d.any_partition_start = true;
    return d;
  }
  constexpr InstrDef loop_control() const {
    InstrDef d = *this;
    d.control = true;
    return d;
  }
  constexpr InstrDef check_with(CheckFn f) const {
    InstrDef d = *this;
    d.check = f;
    return d;
  }

  constexpr int operand_index(std::string_view n) const {
    for (int k = 0; k < num_operands; ++k)
      if (operands[k].name == n) return k;
    return -1;
  }
  constexpr int attr_index(std::string_view n) const {
    for (int k = 0; k < num_attrs; ++k)
      if (attrs[k].name == n) return k;
    return -1;
  }

  // Completes an entry: its opcode and functions, resolved operand references, attribute
  // slots. A bad entry (unknown name, too many slots) fails to compile.
  constexpr InstrDef bind(Op o, std::string_view ident, CostFn c, ExecFn e) const {
    InstrDef d = *this;
    d.op = o;
    d.id = ident;
    d.cost = c;
    d.exec = e;
    for (int k = 0; k < d.num_operands; ++k) {
      Operand& x = d.operands[k];
      if (!x.ref_name.empty()) {
        x.ref = static_cast<int8_t>(operand_index(x.ref_name));
        if (x.ref < 0) throw "operand refers to an unknown operand";
      }
      for (int j = 0; j < k; ++j)
        if (d.operands[j].name == x.name) throw "duplicate operand name";
    }
    if (!d.psum_names[0].empty()) {
      d.psum_a = static_cast<int8_t>(operand_index(d.psum_names[0]));
      d.psum_b = static_cast<int8_t>(operand_index(d.psum_names[1]));
      if (d.psum_a < 0 || d.psum_b < 0) throw "not_both_psum names an unknown operand";
    }
    int ni = 0, nf = 0;
    for (int k = 0; k < d.num_attrs; ++k) {
      Attr& a = d.attrs[k];
      int& next = a.is_float() ? nf : ni;
      a.slot = static_cast<int8_t>(next);
      next += a.count;
      for (int j = 0; j < k; ++j)
        if (d.attrs[j].name == a.name) throw "duplicate attribute name";
      if (operand_index(a.name) >= 0) throw "attribute and operand share a name";
    }
    if (ni > kNumInts || nf > kNumFloats) throw "attributes exceed the instruction's slots";
    return d;
  }
};

// Compute engines address partitions in quadrants of 32 (DMA is not restricted): an access
// of `num` partitions may start at partition 0 when it spans more than 64, at 0 or 64 when it
// spans more than 32, else at any multiple of 32.
constexpr bool engines_can_start(int64_t first_partition, int64_t num) {
  if (num > 64) return first_partition == 0;
  if (num > 32) return first_partition == 0 || first_partition == 64;
  return first_partition % 32 == 0;
}

// The table, indexed by Op.
inline constexpr InstrDef kInstrs[] = {
#define NKI_INSTR(Id, ...) (__VA_ARGS__).bind(Op::Id, #Id, &cost::Id, &exec::Id),
#include "isa.def"
#undef NKI_INSTR
};
static_assert(std::size(kInstrs) == kNumOps);

constexpr const InstrDef& def(Op op) { return kInstrs[static_cast<int>(op)]; }

// Compile-time names: Fields<Op::X>::k<"data1"> is the operand index, slot<"op"> the slot of
// an attribute; an unknown name does not compile.
template <size_t N>
struct Name {
  char s[N]{};
  consteval Name(const char (&v)[N]) {
    for (size_t i = 0; i < N; ++i) s[i] = v[i];
  }
  constexpr std::string_view view() const { return {s, N - 1}; }
};

consteval int operand_of(Op op, std::string_view n) {
  const int k = def(op).operand_index(n);
  if (k < 0) throw "unknown operand name";
  return k;
}
consteval const Attr& attr_of(Op op, std::string_view n) {
  const int k = def(op).attr_index(n);
  if (k < 0) throw "unknown attribute name";
  return def(op).attrs[k];
}

}  // namespace isa

// "nki.isa.nc_matmul", ...
inline std::string_view op_name(Op op) {
  return static_cast<int>(op) < kNumOps ? isa::def(op).api : std::string_view("nki.isa.<invalid>");
}

}  // namespace neuron::nki
