// The math the engines apply: binary ALU operators (nl.add, nl.maximum, nl.bitwise_and, ...)
// as used by tensor_tensor / tensor_scalar / tensor_reduce, and the Scalar Engine activation
// functions (nl.exp, nl.gelu, ...). Arithmetic runs in fp32 like the engines; the bitvec
// operators and the 32-bit integer path run on int64 values.
#pragma once

#include <cstdint>
#include <string_view>

namespace neuron::nki {

enum class Alu : uint8_t {
  Bypass,  // returns the first operand
  Add,
  Subtract,
  Multiply,
  Divide,
  Max,
  Min,
  AbsMax,
  AbsMin,
  Pow,
  Mod,
  Fmod,
  Eq,
  Ne,
  Lt,
  Le,
  Gt,
  Ge,
  LogicalAnd,
  LogicalOr,
  LogicalXor,
  BitAnd,
  BitOr,
  BitXor,
  Shl,
  Shr,
  // Unary operators (the ISA's "arithmetic unary" ALU operators, nl.abs as an op0 of
  // tensor_scalar): the result depends on the first operand only; the second is ignored.
  Abs,
  Square,
  Relu,
  Rsqrt,
  Reciprocal,
  Count,
};

enum class Act : uint8_t {
  Copy,
  Exp,
  Log,
  Sqrt,
  Rsqrt,
  Tanh,
  Sigmoid,
  Relu,
  Gelu,
  GeluTanh,
  GeluSigmoid,
  GeluDx,
  GeluSigmoidDx,
  Silu,
  SiluDx,
  Softplus,
  Mish,
  Erf,
  ErfDx,
  Reciprocal,
  Sin,
  Cos,
  Tan,
  Arctan,
  Square,
  Abs,
  Sign,
  Negative,
  Ceil,
  Floor,
  Trunc,
  LogicalNot,
  Invert,  // bitwise not (integer path only)
  Count,
};

std::string_view alu_name(Alu op);
std::string_view act_name(Act op);

bool alu_is_bitvec(Alu op);        // operates on bit patterns (integers only)
bool alu_is_reduction_op(Alu op);  // allowed as tensor_reduce / partition reduce operator
float alu_identity(Alu op);        // neutral element of a reduction operator

// out[i] = a[i] op b[i]
void alu_vv(Alu op, const float* a, const float* b, float* out, int64_t n);
// out[i] = reverse ? (s op a[i]) : (a[i] op s)
void alu_vs(Alu op, const float* a, float s, bool reverse, float* out, int64_t n);
float alu_ss(Alu op, float a, float b);
// Integer path.
void alu_vv_i(Alu op, const int64_t* a, const int64_t* b, int64_t* out, int64_t n);
void alu_vs_i(Alu op, const int64_t* a, int64_t s, bool reverse, int64_t* out, int64_t n);
int64_t alu_ss_i(Alu op, int64_t a, int64_t b);

// out[i] = f(in[i]) (in fp32); Invert is not valid here (integer path: act_apply_i).
void act_apply(Act op, const float* in, float* out, int64_t n);
void act_apply_i(Act op, const int64_t* in, int64_t* out, int64_t n);
bool act_is_integer_only(Act op);

}  // namespace neuron::nki
