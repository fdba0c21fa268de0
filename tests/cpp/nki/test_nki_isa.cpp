// The instruction table (isa.def): its entries are complete, the rules it declares are the
// ones the verifier applies (with the declared rule text), and dumps print attributes by name.
#include <gtest/gtest.h>

#include <string>

#include "nki/error.h"
#include "nki/isa.h"
#include "nki/program.h"

namespace nki = neuron::nki;
using nki::Ap;
using nki::DT;
using nki::Instr;
using nki::Op;

namespace {

Ap tile(int32_t buf, DT dt, int64_t P, int64_t F) {
  Ap a;
  a.buf = buf;
  a.dtype = dt;
  a.ndim = 2;
  a.step = {F, 1};
  a.num = {P, F};
  return a;
}

int32_t sbuf(nki::Program& p, DT dt, int64_t P, int64_t F, const std::string& name,
             nki::Mem m = nki::Mem::Sbuf) {
  nki::Buffer b;
  b.mem = m;
  b.dtype = dt;
  b.shape = {P, F};
  b.name = name;
  return p.add_buffer(std::move(b));
}

Instr make(nki::Program& p, Op op, nki::Engine e, std::initializer_list<Ap> aps) {
  Instr in;
  in.op = op;
  in.engine = e;
  for (const Ap& a : aps) in.ap[in.nap++] = a;
  in.loc = p.intern("kernel.py:9");
  return in;
}

std::string error_of(nki::Program& p, const Instr& in) {
  try {
    p.add(in);
  } catch (const nki::NkiError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(NkiIsa, EveryOpcodeHasOneCompleteEntry) {
  for (int i = 0; i < nki::kNumOps; ++i) {
    const auto& d = nki::isa::kInstrs[i];
    EXPECT_EQ(static_cast<int>(d.op), i) << d.id;
    EXPECT_FALSE(d.id.empty());
    EXPECT_EQ(d.api.substr(0, 4), "nki.") << d.id;
    EXPECT_NE(d.engines, 0) << d.id;
    EXPECT_NE(d.exec, nullptr) << d.id;
    EXPECT_NE(d.cost, nullptr) << d.id;
    int ints = 0, floats = 0;
    for (int k = 0; k < d.num_attrs; ++k) {
      const auto& a = d.attrs[k];
      (a.is_float() ? floats : ints) += a.count;
      EXPECT_GE(a.slot, 0) << d.id << "." << a.name;
    }
    EXPECT_LE(ints, nki::kNumInts) << d.id;
    EXPECT_LE(floats, nki::kNumFloats) << d.id;
    for (int k = 0; k < d.num_operands; ++k) {
      if (!d.operands[k].ref_name.empty()) {
        EXPECT_GE(d.operands[k].ref, 0) << d.id;
      }
    }
  }
  // Names resolve at compile time.
  static_assert(nki::isa::Fields<Op::TensorScalar>::k<"operand1"> == 3);
  static_assert(nki::isa::Fields<Op::TensorScalar>::slot<"imm1"> == 1);
  static_assert(nki::isa::Fields<Op::Iota>::slot<"offset"> == 9);
}

TEST(NkiIsa, DumpPrintsOperandsAndAttributesByName) {
  nki::Program p(nki::Target{});
  const int a = sbuf(p, DT::Float32, 128, 4, "a");
  const int b = sbuf(p, DT::Float32, 128, 4, "b");
  Instr e = make(p, Op::Activation, nki::Engine::Scalar,
                 {tile(b, DT::Float32, 128, 4), tile(a, DT::Float32, 128, 4)});
  e.i[nki::isa::Fields<Op::Activation>::slot<"op">] = static_cast<int64_t>(nki::Act::Exp);
  e.i[nki::isa::Fields<Op::Activation>::slot<"reduce_op">] = -1;
  e.f[nki::isa::Fields<Op::Activation>::slot<"scale_imm">] = 2.5;
  Instr t = e;
  t.i[nki::isa::Fields<Op::Activation>::slot<"op">] = static_cast<int64_t>(nki::Act::Tanh);
  p.add(e);
  p.add(t);
  const std::string d = p.dump();
  EXPECT_NE(d.find("0: nki.isa.activation [Scalar] dst=b@SBUF"), std::string::npos) << d;
  EXPECT_NE(d.find(" data=a@SBUF"), std::string::npos) << d;
  EXPECT_NE(d.find("op=exp reduce_op=none reduce_cmd=idle scale_imm=2.5 bias_imm=0"),
            std::string::npos)
      << d;
  EXPECT_NE(d.find("op=tanh"), std::string::npos) << d;
  EXPECT_NE(d.find("# kernel.py:9"), std::string::npos) << d;
}

TEST(NkiIsa, DeclaredOperandRulesCarryTheirRuleText) {
  nki::Program p(nki::Target{});
  const int x = sbuf(p, DT::Float32, 128, 4, "x");
  const int y = sbuf(p, DT::Float32, 128, 4, "y");
  const int ps = sbuf(p, DT::Float32, 128, 4, "ps", nki::Mem::Psum);
  const int i32 = sbuf(p, DT::Int32, 128, 1, "i32");
  // Memory: the declared rule of the operand.
  Instr m = make(
      p, Op::Matmul, nki::Engine::Tensor,
      {tile(x, DT::Float32, 128, 4), tile(x, DT::Float32, 128, 4), tile(y, DT::Float32, 128, 4)});
  std::string msg = error_of(p, m);
  EXPECT_NE(msg.find("dst 'x' is in SBUF"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[rule: nc_matmul writes its result to PSUM]"), std::string::npos) << msg;
  // Dtype: activation bias.
  Instr a = make(
      p, Op::Activation, nki::Engine::Scalar,
      {tile(y, DT::Float32, 128, 4), tile(x, DT::Float32, 128, 4), tile(i32, DT::Int32, 128, 1)});
  a.i[nki::isa::Fields<Op::Activation>::slot<"reduce_op">] = -1;
  msg = error_of(p, a);
  EXPECT_NE(msg.find("bias has dtype int32"), std::string::npos) << msg;
  EXPECT_NE(msg.find("activation bias is float32, bfloat16 or float16"), std::string::npos) << msg;
  // Shape relative to another operand.
  const int small = sbuf(p, DT::Float32, 64, 4, "small");
  Instr tt = make(p, Op::TensorTensor, nki::Engine::Vector,
                  {tile(y, DT::Float32, 128, 4), tile(x, DT::Float32, 128, 4),
                   tile(small, DT::Float32, 64, 4)});
  msg = error_of(p, tt);
  EXPECT_NE(msg.find("data1 has 128 partitions but data2 has 64"), std::string::npos) << msg;
  // Two operands that may not both be in PSUM.
  Instr pp = make(
      p, Op::TensorTensor, nki::Engine::Vector,
      {tile(y, DT::Float32, 128, 4), tile(ps, DT::Float32, 128, 4), tile(ps, DT::Float32, 128, 4)});
  msg = error_of(p, pp);
  EXPECT_NE(msg.find("are both in PSUM [rule: tensor_tensor inputs cannot both be in PSUM]"),
            std::string::npos)
      << msg;
  // Engines: nc_matmul only runs on the Tensor Engine.
  Instr ve = make(
      p, Op::Matmul, nki::Engine::Vector,
      {tile(ps, DT::Float32, 4, 4), tile(x, DT::Float32, 128, 4), tile(y, DT::Float32, 128, 4)});
  msg = error_of(p, ve);
  EXPECT_NE(msg.find("engine Vector cannot run it [rule: nc_matmul runs on the Tensor Engine]"),
            std::string::npos)
      << msg;
  // Attributes: an operator outside the declared set, and a non-boolean flag.
  const int v = sbuf(p, DT::Float32, 128, 1, "v");
  Instr r2 = make(p, Op::TensorScalarReduce, nki::Engine::Vector,
                  {tile(y, DT::Float32, 128, 4), tile(x, DT::Float32, 128, 4), Ap{},
                   tile(v, DT::Float32, 128, 1)});
  r2.i[nki::isa::Fields<Op::TensorScalarReduce>::slot<"reduce_op">] =
      static_cast<int64_t>(nki::Alu::Divide);
  msg = error_of(p, r2);
  EXPECT_NE(msg.find("reduce_op divide [rule: tensor_scalar_reduce reduces with add"),
            std::string::npos)
      << msg;
  r2.i[nki::isa::Fields<Op::TensorScalarReduce>::slot<"reduce_op">] =
      static_cast<int64_t>(nki::Alu::Add);
  r2.i[nki::isa::Fields<Op::TensorScalarReduce>::slot<"negate">] = 7;
  msg = error_of(p, r2);
  EXPECT_NE(msg.find("negate is 7 [rule: negate is a boolean]"), std::string::npos) << msg;
  // A missing required operand is named.
  Instr miss = make(p, Op::TensorTensor, nki::Engine::Vector,
                    {tile(y, DT::Float32, 128, 4), tile(x, DT::Float32, 128, 4)});
  msg = error_of(p, miss);
  EXPECT_NE(msg.find("missing operand data2"), std::string::npos) << msg;
}
