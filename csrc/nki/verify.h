// The hardware rules of one instruction, checked when it is added to a program: first the
// rules its isa.def entry declares (engine, NeuronCore generation, every operand's access
// pattern, memory, dtype and shape, every attribute's kind and accepted values), then the
// entry's custom check (isa::check::<Id>) for rules that span operands. Every failure names
// the instruction, the kernel file:line, the values and the rule (NkiError "validation").
#pragma once

#include <initializer_list>
#include <string>

#include "program.h"

namespace neuron::nki::isa {

class Checker {
 public:
  Checker(const Program& p, const Instr& i) : prog(p), in(i), def(i.def()) {}

  // All rules of the instruction (declared ones, then the custom check).
  void run() const;

  const Program& prog;
  const Instr& in;
  const InstrDef& def;

  const Target& target() const { return prog.target(); }
  bool present(int k) const { return k < in.nap && in.ap[k].present(); }
  const Buffer& buffer(int k) const { return prog.buffers()[in.ap[k].buf]; }
  Mem mem(int k) const { return buffer(k).mem; }
  const std::string& name(int k) const { return buffer(k).name; }
  std::string role(int k) const { return std::string(def.operands[k].name); }
  int64_t P(int k) const { return in.ap[k].num[0]; }
  int64_t F(int k) const { return in.ap[k].free_size(); }
  DT dt(int k) const { return in.ap[k].dtype; }

  [[noreturn]] void fail(const std::string& msg, const std::string& rule) const {
    prog.fail(in, msg, rule);
  }
  void same_parts(int a, int b) const;
  void same_free(int a, int b) const;
  void not_packed(int k) const;
  void in_sbuf(int k, const std::string& rule) const;
  void in_psum(int k, const std::string& rule) const;
  // Bitvec operators need integer dtypes on the listed operands.
  void bitvec_ints(Alu op, std::initializer_list<int> operands) const;

 private:
  void access_pattern(int k) const;
  void memory(int k) const;
  void dtype(int k) const;
  void shape(int k, bool partitions) const;
  void attribute(const Attr& a) const;
};

}  // namespace neuron::nki::isa
