// Elementwise kernels: out = op(inputs...) over operands that share one shape (inputs broadcast
// through zero strides), with arbitrary strides and per-operand dtypes. The op computes in
// `compute` (ATen's common dtype; 16-bit floats compute in fp32, integers in their own width);
// inputs are converted when loaded and the result when stored, so type promotion, mixed-dtype
// out= tensors and CPU "wrapped number" scalars need no extra copies.
// Runs on the calling thread (a stream worker), parallel over the host pool for large inputs.
#pragma once

#include <cstdint>

#include "tensor_ref.h"

namespace neuron::kernels {

// X(name, arity). Scalar parameters (EwParams) are listed next to each op as p.f[k] (floating
// value) / p.i[k] (integral value of the same parameter); the glue fills both.
#define NEURON_EW_OPS(X)                                                                \
  /* arithmetic */                                                                      \
  X(Add, 2) /* a + alpha*b; alpha = p[0] */                                             \
  X(Mul, 2)                                                                             \
  X(Div, 2)       /* true division */                                                   \
  X(DivTrunc, 2)  /* rounding_mode="trunc"; p.i[3]: round quotient to 1 bf16, 2 fp16 */ \
  X(DivFloor, 2)  /* rounding_mode="floor", floor_divide */                             \
  X(Remainder, 2) /* Python-style modulus (sign of the divisor) */                      \
  X(Fmod, 2)      /* C-style modulus (sign of the dividend) */                          \
  X(Pow, 2)                                                                             \
  X(PowScalar, 1) /* a ** p[0] */                                                       \
  X(Atan2, 2)                                                                           \
  X(Hypot, 2)                                                                           \
  X(Copysign, 2)                                                                        \
  X(Maximum, 2) /* NaN-propagating */                                                   \
  X(Minimum, 2)                                                                         \
  X(Fmax, 2) /* NaN-ignoring */                                                         \
  X(Fmin, 2)                                                                            \
  X(Lerp, 2) /* weight = p[0] */                                                        \
  X(LerpTensor, 3)                                                                      \
  X(Addcmul, 3) /* a + value * b * c; value = p[0] */                                   \
  X(Addcdiv, 3) /* a + value * b / c */                                                 \
  X(Where, 3)   /* cond ? a : b (cond is bool) */                                       \
  /* comparison and logic: the output buffer is bool */                                 \
  X(Eq, 2)                                                                              \
  X(Ne, 2)                                                                              \
  X(Lt, 2)                                                                              \
  X(Le, 2)                                                                              \
  X(Gt, 2)                                                                              \
  X(Ge, 2)                                                                              \
  X(LogicalAnd, 2)                                                                      \
  X(LogicalOr, 2)                                                                       \
  X(LogicalXor, 2)                                                                      \
  X(LogicalNot, 1)                                                                      \
  X(IsNan, 1)                                                                           \
  X(IsInf, 1)                                                                           \
  X(IsFinite, 1)                                                                        \
  X(IsPosInf, 1)                                                                        \
  X(IsNegInf, 1)                                                                        \
  X(Signbit, 1)                                                                         \
  /* bitwise (integral and bool) */                                                     \
  X(BitAnd, 2)                                                                          \
  X(BitOr, 2)                                                                           \
  X(BitXor, 2)                                                                          \
  X(BitNot, 1)                                                                          \
  X(Shl, 2)                                                                             \
  X(Shr, 2)                                                                             \
  /* unary math */                                                                      \
  X(Neg, 1)                                                                             \
  X(Abs, 1)                                                                             \
  X(Sign, 1)                                                                            \
  X(Sqrt, 1)                                                                            \
  X(Rsqrt, 1)                                                                           \
  X(Reciprocal, 1)                                                                      \
  X(Exp, 1)                                                                             \
  X(Exp2, 1)                                                                            \
  X(Expm1, 1)                                                                           \
  X(Log, 1)                                                                             \
  X(Log2, 1)                                                                            \
  X(Log10, 1)                                                                           \
  X(Log1p, 1)                                                                           \
  X(Sin, 1)                                                                             \
  X(Cos, 1)                                                                             \
  X(Tan, 1)                                                                             \
  X(Asin, 1)                                                                            \
  X(Acos, 1)                                                                            \
  X(Atan, 1)                                                                            \
  X(Sinh, 1)                                                                            \
  X(Cosh, 1)                                                                            \
  X(Tanh, 1)                                                                            \
  X(Asinh, 1)                                                                           \
  X(Acosh, 1)                                                                           \
  X(Atanh, 1)                                                                           \
  X(Erf, 1)                                                                             \
  X(Erfc, 1)                                                                            \
  X(Erfinv, 1)                                                                          \
  X(Lgamma, 1)                                                                          \
  X(Floor, 1)                                                                           \
  X(Ceil, 1)                                                                            \
  X(Round, 1)         /* half to even */                                                \
  X(RoundDecimals, 1) /* decimals = p.i[0] */                                           \
  X(Trunc, 1)                                                                           \
  X(Frac, 1)                                                                            \
  X(NanToNum, 1)    /* nan = p[0], posinf = p[1], neginf = p[2] */                      \
  X(Clamp, 1)       /* lower = p[0] if p.i[2], upper = p[1] if p.i[3] */                \
  X(ClampTensor, 3) /* a, lower, upper */                                               \
  /* activations and their backward */                                                  \
  X(Relu, 1)                                                                            \
  X(Threshold, 2) /* a <= p[0] ? p[1] : b */                                            \
  X(Sigmoid, 1)                                                                         \
  X(SigmoidBackward, 2) /* grad, output */                                              \
  X(TanhBackward, 2)    /* grad, output */                                              \
  X(Gelu, 1)                                                                            \
  X(GeluTanh, 1)                                                                        \
  X(GeluBackward, 2) /* grad, input */                                                  \
  X(GeluTanhBackward, 2)                                                                \
  X(Silu, 1)                                                                            \
  X(SiluBackward, 2)                                                                    \
  X(Mish, 1)                                                                            \
  X(MishBackward, 2)                                                                    \
  X(Softplus, 1) /* beta = p[0], threshold = p[1] */                                    \
  X(SoftplusBackward, 2)                                                                \
  X(Elu, 1)               /* negcoef = p[0], poscoef = p[1], negiptcoef = p[2] */       \
  X(EluBackward, 2)       /* same, is_result = p.i[3]; grad, input-or-result */         \
  X(LeakyRelu, 1)         /* slope = p[0] */                                            \
  X(LeakyReluBackward, 2) /* input, grad */                                             \
  X(Hardswish, 1)                                                                       \
  X(HardswishBackward, 2)                                                               \
  X(Hardsigmoid, 1)                                                                     \
  X(HardsigmoidBackward, 2)                                                             \
  X(HardtanhBackward, 2) /* min = p[0], max = p[1]; grad, input */                      \
  X(Hardshrink, 1)       /* lambda = p[0] */                                            \
  X(Softshrink, 1)                                                                      \
  X(ShrinkBackward, 2) /* grad, input; lambda = p[0] */                                 \
  X(LogSigmoid, 1)                                                                      \
  X(ExpNegAbs, 1)          /* exp(-|a|): log_sigmoid's buffer */                        \
  X(LogSigmoidBackward, 3) /* input, buffer, grad */                                    \
  /* more math */                                                                       \
  X(Xlogy, 2)                                                                           \
  X(Xlog1py, 2)                                                                         \
  X(Logit, 1)         /* eps = p[0] when p.i[1] != 0 */                                 \
  X(LogitBackward, 2) /* grad, input; same eps */                                       \
  X(Sinc, 1)                                                                            \
  X(Heaviside, 2)                                                                       \
  X(Logaddexp, 2)                                                                       \
  X(Logaddexp2, 2)                                                                      \
  X(Nextafter, 2)                                                                       \
  X(Gcd, 2)                                                                             \
  X(Lcm, 2)                                                                             \
  X(Angle, 1)

enum class EwOp : uint16_t {
#define NEURON_EW_ENUM(name, arity) name,
  NEURON_EW_OPS(NEURON_EW_ENUM)
#undef NEURON_EW_ENUM
      kCount
};

struct EwParams {
  double f[4] = {};
  int64_t i[4] = {};
};

int ew_arity(EwOp op);
const char* ew_name(EwOp op);

// True when `op` has a kernel for `compute`: bool, the signed integers and uint8 compute in
// their own type, bf16/fp16/fp32 in fp32, fp64 in fp64; other dtypes are not supported.
bool elementwise_supports(EwOp op, DType compute);

// operands[0] is the output, then ew_arity(op) inputs; all with operands[0]'s ndim and sizes.
// Throws std::invalid_argument for unsupported combinations and std::domain_error for an
// integer division by zero.
void elementwise(EwOp op, DType compute, const EwParams& p, const TensorRef* operands,
                 int num_operands);

// The routine the eager op runs for one chunk of contiguous fp32 operands: out[i] = op(in[0][i],
// ...) for i < n (out may alias an input). For fused loops of other layers (the compiler's VM)
// that must give the eager op's bits: `avx2` picks the AVX2 clone (only after simd_level()
// returned Avx2), else the portable one. nullptr when `op` does not compute fp32 -> fp32.
using EwF32Fn = void (*)(const EwParams& p, void* out, const void* const* in, int64_t n);
EwF32Fn ew_f32_kernel(EwOp op, bool avx2);

}  // namespace neuron::kernels
