// A traced NKI kernel: its tensors (HBM arguments and scratch, SBUF and PSUM tiles), its ISA
// instructions over access patterns, and the kernel source locations they came from. The
// Python tracer builds it instruction by instruction; add() checks every hardware rule of the
// instruction as its isa.def entry declares them (so a violation surfaces at the kernel line
// that caused it), finalize() runs liveness analysis and places every SBUF/PSUM tensor
// (capacity and overlap checks), and the executor (executor.h) replays the result as often as
// needed.
// Thread-safety: building is single-threaded; a finalized Program is immutable and may be
// executed concurrently from several threads.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "alu.h"
#include "dtype.h"
#include "isa.h"

namespace neuron::nki {

// An access pattern into one tensor: element `offset` of the flattened tensor plus
// [step, num] pairs (outermost first). On SBUF/PSUM the first pair is the partition dimension
// and its step is the tensor's elements per partition. `reg` >= 0 adds reg_scale * value of
// that register to the offset at run time (scalar_offset / dynamic slices).
struct Ap {
  int32_t buf = -1;  // tensor index; -1 means "operand absent"
  DT dtype = DT::Float32;
  int8_t ndim = 0;
  int16_t reg = -1;
  int64_t offset = 0;
  int64_t reg_scale = 0;
  std::array<int64_t, kMaxApDims> step{};
  std::array<int64_t, kMaxApDims> num{};

  bool present() const { return buf >= 0; }
  int64_t numel() const;
  int64_t free_size() const;  // product of num[1..]
};

// One instruction: ap[k] is operand k of its isa.def entry, i[] and f[] hold the attributes in
// the slots the entry assigns (isa::Fields names them).
struct Instr {
  Op op = Op::Count;
  Engine engine = Engine::Vector;
  uint8_t nap = 0;
  std::array<Ap, kMaxOperands> ap{};
  std::array<int64_t, kNumInts> i{};
  std::array<double, kNumFloats> f{};
  int32_t loc = -1;  // index into Program::strings (kernel file:line)
  int32_t api = -1;  // index into Program::strings (the nki.language API that emitted it), or -1

  const isa::InstrDef& def() const { return isa::def(op); }
};

namespace isa {

// Named access to the fields of an instruction of opcode O, resolved at compile time:
//   isa::Fields<Op::TensorScalar> f{in};  f.ap<"data">(), f.has<"operand0">(), f.alu<"op0">(),
//   f.flag<"reverse0">(), f.imm<"imm0">(), f.i<"pattern">(3);  Fields<O>::k<"data"> = index.
template <Op O>
struct Fields {
  const Instr& in;

  template <Name N>
  static constexpr int k = operand_of(O, N.view());
  template <Name N>
  static constexpr int slot = attr_of(O, N.view()).slot;

  template <Name N>
  const Ap& ap() const {
    return in.ap[k<N>];
  }
  template <Name N>
  bool has() const {
    return k<N> < in.nap && in.ap[k<N>].buf >= 0;
  }
  template <Name N>
  int64_t i(int j = 0) const {
    static_assert(!attr_of(O, N.view()).is_float(), "a Float attribute: use imm<>()");
    return in.i[slot<N> + j];
  }
  template <Name N>
  bool flag() const {
    return i<N>() != 0;
  }
  template <Name N>
  Alu alu() const {
    return static_cast<Alu>(i<N>());
  }
  template <Name N>
  Act act() const {
    return static_cast<Act>(i<N>());
  }
  template <Name N>
  ReduceCmd cmd() const {
    return static_cast<ReduceCmd>(i<N>());
  }
  template <Name N>
  double imm() const {
    static_assert(attr_of(O, N.view()).is_float(), "not a Float attribute: use i<>()");
    return in.f[slot<N>];
  }
};

}  // namespace isa

struct Buffer {
  Mem mem = Mem::Sbuf;
  DT dtype = DT::Float32;
  std::vector<int64_t> shape;
  std::string name;
  int32_t loc = -1;
  bool is_input = false;         // HBM kernel argument (initialized by the caller)
  int32_t slot = -1;             // HBM: index of its binding
  int32_t fixed_partition = -1;  // manual placement (nl.ndarray(address=...))
  int64_t fixed_offset = -1;
  // Derived when the buffer is added.
  int64_t numel = 0;
  int64_t partitions = 0;  // on-chip: shape[0]
  int64_t free_elems = 0;  // on-chip: elements per partition
  int64_t bytes_per_partition = 0;
  int64_t total_bytes = 0;
  // Set by finalize().
  int64_t addr = -1;  // on-chip: byte offset inside each partition
  int64_t part0 = 0;  // on-chip: first partition it occupies
  int32_t first_use = -1, last_use = -1;
  bool written = false;  // some instruction writes it
};

// The machine a program was traced for.
struct Target {
  int nc_version = 3;
  int64_t sbuf_bytes_per_partition = 224 * 1024;
  int64_t psum_bytes_per_partition = 16 * 1024;
  int psum_banks = 8;
  int partitions = 128;
  int64_t psum_bank_bytes() const { return psum_bytes_per_partition / psum_banks; }
};

// The physical form of an operand used by the executor: base memory, byte offset and byte
// strides of every dimension (the partition dimension's stride is the physical partition
// pitch on chip).
struct Phys {
  Mem mem = Mem::Sbuf;
  DT dtype = DT::Float32;
  int32_t slot = -1;  // HBM
  int8_t ndim = 0;
  int16_t reg = -1;
  int64_t byte_off = 0;  // from the start of SBUF/PSUM/the HBM binding
  int64_t reg_scale_bytes = 0;
  std::array<int64_t, kMaxApDims> stride{};  // bytes
  std::array<int64_t, kMaxApDims> num{};
  int64_t lo = 0, hi = 0;  // flat element range of the buffer touched (static part)
  // For dynamic (register) offsets: the static element offset, the view's elements per
  // partition and element count, the tensor's placement, the free-dim extent per partition.
  int64_t elem_off = 0, fa = 0, limit = 0, addr = 0, pitch = 0, flo = 0, fhi = 0;
  int32_t buf = -1;
};

// The execution plan of a finalized program for unchecked runs, built once by finalize():
// DMA elision. An HBM->SBUF copy of a kernel input whose tile is read only by thin-operand
// matmuls (decode GEMVs) before it is overwritten or the program ends, and which nothing writes
// between the copy and those reads, is skipped; those matmul operands read the HBM tensor in
// place (often transposed) instead. The readers compute exactly what they computed from the
// SBUF copy. Checked runs and traced runs (cost model) never use the plan; a launch where an
// in-place input shares memory with a tensor written while it is read in place (a hazard)
// falls back to the full program.
// Matmul runs: thin-operand matmuls (they read SBUF or HBM and write PSUM, so their GEMVs are
// independent) large enough to share over the host threads, consecutive or separated by
// instructions that write only on-chip memory the run's later matmuls do not read, run as one
// parallel job of GEMVs; then their stores and the instructions between them run in program
// order.
// An operand of the execution plan resolved once (what make_view computes for a static access
// pattern, without its base address): one cache line, so a planned instruction reads its
// operands from a few adjacent lines instead of its Instr and Phys records (~1.7 KB).
struct PlanView {
  int64_t off = 0;  // bytes from the start of SBUF/PSUM or of the HBM binding
  int32_t slot = -1;
  Mem mem = Mem::Sbuf;
  DT dtype = DT::Float32;
  int8_t ndim = 0;
  bool present = false;
  std::array<int32_t, kMaxApDims> stride{};  // bytes
  std::array<int32_t, kMaxApDims> num{};
};

// A fused run (Plan::fused_runs): consecutive fp32 elementwise instructions (tensor_scalar,
// tensor_tensor, tensor_copy) on the same partitions, run block of partitions by block of
// partitions on dense copies of their operands ("registers": each distinct access pattern of
// the run, loaded on first read, stored once after the block if written). Exact because every
// instruction of the run reads and writes only partition p of its operands for its row p, and
// two different access patterns of a run never share a byte.
struct FusedReg {
  PlanView view;
  int64_t free = 0;  // elements per partition
};
struct FusedRun {
  static constexpr int kMaxRegs = 16;
  int32_t end = 0;               // instructions [start, end)
  int32_t reg0 = 0, nregs = 0;   // into Plan::fused_regs
  int32_t op0 = 0;               // into Plan::fused_ops: one entry per instruction of the run
  int64_t parts = 0;
};

struct Plan {
  std::vector<uint8_t> skip;  // per instruction: an elided DMA
  std::vector<int32_t> alt;   // per instruction: index into alt_phys (-1: the program's operands)
  std::vector<std::array<Phys, kMaxOperands>> alt_phys;
  // (HBM slot read in place, slot written while it is): the launch must not alias them.
  std::vector<std::pair<int32_t, int32_t>> hazards;
  std::vector<int32_t> matmul_run;  // per instruction: instructions spanned by the run it starts
  std::vector<uint8_t> run_member;  // per instruction: a matmul whose GEMV its run computes
  // per instruction: index in `views` of its operand 0 (then one entry per operand up to nap),
  // -1 when an operand has a dynamic offset or does not fit a PlanView (make_view resolves it)
  std::vector<int32_t> view_at;
  std::vector<PlanView> views;
  std::vector<int32_t> fused_at;  // per instruction: the fused run starting here (-1: none)
  std::vector<FusedRun> fused_runs;
  std::vector<FusedReg> fused_regs;
  std::vector<std::array<int8_t, kMaxOperands>> fused_ops;  // register of each operand (-1: absent)
  int64_t fused = 0;  // instructions inside fused runs
  int64_t elided = 0;               // DMAs skipped
  int64_t redirected = 0;           // operands reading HBM in place
  int64_t runs = 0;                 // matmul runs

  bool empty() const { return elided == 0 && runs == 0 && views.empty(); }
};

class Program {
 public:
  static constexpr int kFormatVersion = 2;
  // Physical partition pitch in bytes: the capacity plus one cache line, so that consecutive
  // partitions do not alias in the host caches.
  static int64_t sbuf_pitch(const Target& t) { return t.sbuf_bytes_per_partition + 64; }
  static int64_t psum_pitch(const Target& t) { return t.psum_bytes_per_partition + 64; }

  explicit Program(Target target) : target_(target) {}

  const Target& target() const { return target_; }
  const std::vector<Buffer>& buffers() const { return buffers_; }
  const std::vector<Instr>& instrs() const { return instrs_; }
  const std::vector<std::string>& strings() const { return strings_; }
  int num_registers() const { return num_regs_; }
  int num_slots() const { return num_slots_; }
  bool finalized() const { return finalized_; }
  bool dynamic() const { return dynamic_; }  // has runtime loops or register offsets
  // Whether the uninitialized-memory check must run on every execution: runtime loops, or
  // register offsets into SBUF/PSUM or kernel-created HBM tensors. (Register offsets into
  // kernel inputs only, e.g. a KV-cache row, read and write the same definedness every run.)
  bool needs_recheck() const { return recheck_; }
  const std::vector<std::array<Phys, kMaxOperands>>& phys() const { return phys_; }
  const Plan& plan() const { return plan_; }

  // Interns a string (location or API name) and returns its index.
  int32_t intern(const std::string& s);
  const std::string& str(int32_t idx) const;
  std::string location(const Instr& in) const;    // "file:line" or ""
  std::string instr_name(const Instr& in) const;  // "nki.isa.x (from nki.language.y)"

  // Adds a tensor; validates shape/dtype/buffer rules. Returns its index.
  int32_t add_buffer(Buffer b);
  // Allocates a register (its initial value is 0).
  int32_t add_register();
  // Appends an instruction after checking every hardware rule (throws NkiError).
  void add(const Instr& in);
  // Takes back the last instruction (the tracer re-emits a matmul into the PSUM tile a `+=`
  // accumulates into). Not loop control; the flags it set (buffers written, dynamic) stay:
  // they are conservative.
  void pop_last();
  bool buffer_written(int32_t buf) const {
    return buf >= 0 && buf < static_cast<int32_t>(buffers_.size()) &&
           buffers_[static_cast<size_t>(buf)].written;
  }
  // Number of instructions so far (the index the next add() gets).
  int32_t size() const { return static_cast<int32_t>(instrs_.size()); }
  // Patches integer slot `k` of instruction `idx` (loop jump targets).
  void patch(int32_t idx, int k, int64_t value);

  // Liveness, SBUF/PSUM placement and operand resolution. Throws NkiError on capacity or
  // overlap violations and on unbalanced loops.
  void finalize();

  // Binary form with a format version; deserialize() re-validates every instruction.
  std::string serialize() const;
  static std::shared_ptr<Program> deserialize(std::string_view bytes);

  // Human-readable listing (one instruction per line), for debugging and tests.
  std::string dump() const;

  // On-chip tensors placed by the allocator whose live range begins at instruction `pc`
  // (finalize()): the checker forgets what their bytes held before (a new tensor is
  // uninitialized even where a dead one was written). Manually placed tensors are left out:
  // kernels may alias them on purpose.
  std::pair<const int32_t*, const int32_t*> births(int32_t pc) const {
    const int32_t* b = birth_buf_.data();
    return {b + birth_off_[static_cast<size_t>(pc)], b + birth_off_[static_cast<size_t>(pc) + 1]};
  }

  // Throws NkiError(kind "validation") for `in` (used by the checks).
  [[noreturn]] void fail(const Instr& in, const std::string& msg, const std::string& rule) const;

 private:
  void allocate();
  void index_births();
  void resolve();
  void build_plan();           // plan.cpp
  void plan_straight_line();   // plan.cpp: DMA elision and matmul runs

  Target target_;
  std::vector<Buffer> buffers_;
  std::vector<Instr> instrs_;
  std::vector<int32_t> birth_off_, birth_buf_;  // births(pc), CSR
  std::vector<std::string> strings_;
  std::unordered_map<std::string, int32_t> string_index_;
  std::vector<std::array<Phys, kMaxOperands>> phys_;
  Plan plan_;
  std::vector<int32_t> open_loops_;  // indices of unmatched LoopBegin/WhileBegin
  int num_regs_ = 0;
  int num_slots_ = 0;
  bool finalized_ = false;
  bool dynamic_ = false;
  bool recheck_ = false;
};

}  // namespace neuron::nki
