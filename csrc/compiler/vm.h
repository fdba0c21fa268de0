// The fused-kernel VM: a register machine over tiles of fp32 (and int64) values. A Kernel
// iterates a domain [outer..., inner...]; every (row, chunk) of the inner extent runs the
// instruction list over vector registers of `chunk` elements (small enough to stay in L1/L2)
// and per-row scalar registers. Loads and stores take arbitrary strides (0 = broadcast),
// masks (cat/pad) and convert from/to any storage dtype. Reductions accumulate over the
// inner extent into scalar registers. The per-op inner loops live in vm_loops.h.
// Thread-safety: run() may be called concurrently (scratch registers are per thread).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bytes.h"
#include "kernels/dtype.h"

namespace neuron::cc::vm {

using kernels::DType;

enum class Opc : uint8_t {
#define VMOP(name, cls) name,
#include "vm_ops.def"
#undef VMOP
  kCount
};
constexpr int kNumOpc = static_cast<int>(Opc::kCount);
const char* opc_name(Opc op);

// Register operand: bit 15 = int64 file, bit 14 = scalar (one value per row), low bits = index.
constexpr uint16_t kIntReg = 0x8000;
constexpr uint16_t kScalarReg = 0x4000;
constexpr uint16_t kRegIndexMask = 0x3fff;
inline bool reg_is_int(uint16_t r) { return (r & kIntReg) != 0; }
inline bool reg_is_scalar(uint16_t r) { return (r & kScalarReg) != 0; }
inline uint16_t reg_index(uint16_t r) { return r & kRegIndexMask; }
inline uint16_t make_reg(bool is_int, bool scalar, int index) {
  return static_cast<uint16_t>((is_int ? kIntReg : 0) | (scalar ? kScalarReg : 0) |
                               (index & kRegIndexMask));
}

struct Instr {
  Opc op = Opc::Copy;
  uint16_t dst = 0, a = 0, b = 0, c = 0;
  int32_t aux = 0;   // Load/Store: operand index; Iota: domain dim
  int64_t lo = 0;    // IConst value; Iota start
  int64_t hi = 0;    // Iota step
  double imm = 0.0;  // Const value
};

// Valid index range [lo, hi) of one domain dim for a masked operand (cat/pad); reads outside
// return 0 without touching memory.
struct Mask {
  int32_t dim = 0;
  int64_t lo = 0, hi = 0;
};

struct Operand {
  DType dtype = DType::Float32;
  std::vector<int64_t> strides;  // per domain dim, elements
  int64_t offset = 0;            // elements from the operand's base pointer
  std::vector<Mask> masks;
};

struct Kernel {
  std::vector<int64_t> shape;  // the domain
  int n_inner = 1;             // trailing dims forming a row
  bool full_row = false;       // run each row as one chunk (vector ops use reduction results)
  int64_t chunk = 2048;        // elements per chunk otherwise
  std::vector<Operand> operands;
  std::vector<Instr> pre;   // once per row, before the chunks (reduction init)
  std::vector<Instr> body;  // per chunk
  std::vector<Instr> post;  // once per row, after the chunks (finalize, scalar stores)
  int nf_vec = 0, ni_vec = 0, nf_sc = 0, ni_sc = 0;

  int64_t rows() const;
  int64_t row_len() const;
};

// Runs rows [row_begin, row_end) (row_end < 0: all) with operand i at bases[i]. Parallel over
// the host pool unless called from inside a parallel region. Throws ExecError on integer
// division by zero.
void run(const Kernel& k, char* const* bases, int64_t row_begin = 0, int64_t row_end = -1);

// Checks register indices/operands so a corrupted program cannot index out of bounds.
void validate(const Kernel& k);

void serialize(const Kernel& k, ByteWriter& w);
Kernel deserialize(ByteReader& r);
std::string disassemble(const Kernel& k, int indent = 0);

}  // namespace neuron::cc::vm
