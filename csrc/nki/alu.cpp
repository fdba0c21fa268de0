#include "alu.h"

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace neuron::nki {
namespace {

constexpr std::string_view kAluNames[] = {
    "bypass",      "add",        "subtract",    "multiply",    "divide",     "maximum",
    "minimum",     "abs_max",    "abs_min",     "power",       "mod",        "fmod",
    "equal",       "not_equal",  "less",        "less_equal",  "greater",    "greater_equal",
    "logical_and", "logical_or", "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor",
    "left_shift",  "right_shift", "abs",        "square",      "relu",        "rsqrt",
    "reciprocal"};
static_assert(std::size(kAluNames) == static_cast<size_t>(Alu::Count));

constexpr std::string_view kActNames[] = {"copy",
                                          "exp",
                                          "log",
                                          "sqrt",
                                          "rsqrt",
                                          "tanh",
                                          "sigmoid",
                                          "relu",
                                          "gelu",
                                          "gelu_apprx_tanh",
                                          "gelu_apprx_sigmoid",
                                          "gelu_dx",
                                          "gelu_apprx_sigmoid_dx",
                                          "silu",
                                          "silu_dx",
                                          "softplus",
                                          "mish",
                                          "erf",
                                          "erf_dx",
                                          "reciprocal",
                                          "sin",
                                          "cos",
                                          "tan",
                                          "arctan",
                                          "square",
                                          "abs",
                                          "sign",
                                          "negative",
                                          "ceil",
                                          "floor",
                                          "trunc",
                                          "logical_not",
                                          "invert"};
static_assert(std::size(kActNames) == static_cast<size_t>(Act::Count));

inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
inline float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kInvSqrt2 = 0.7071067811865476f;
constexpr float kInvSqrt2Pi = 0.3989422804014327f;

inline float fmod_floor(float a, float b) {
  const float r = std::fmod(a, b);
  return (r != 0.0f && ((r < 0.0f) != (b < 0.0f))) ? r + b : r;
}

inline float apply(Alu op, float a, float b) {
  switch (op) {
    case Alu::Bypass:
      return a;
    case Alu::Add:
      return a + b;
    case Alu::Subtract:
      return a - b;
    case Alu::Multiply:
      return a * b;
    case Alu::Divide:
      return a / b;
    case Alu::Max:
      return std::isnan(a) || std::isnan(b) ? std::numeric_limits<float>::quiet_NaN()
                                            : (a > b ? a : b);
    case Alu::Min:
      return std::isnan(a) || std::isnan(b) ? std::numeric_limits<float>::quiet_NaN()
                                            : (a < b ? a : b);
    case Alu::AbsMax:
      return std::fmax(std::fabs(a), std::fabs(b));
    case Alu::AbsMin:
      return std::fmin(std::fabs(a), std::fabs(b));
    case Alu::Pow:
      return std::pow(a, b);
    case Alu::Mod:
      return fmod_floor(a, b);
    case Alu::Fmod:
      return std::fmod(a, b);
    case Alu::Eq:
      return a == b ? 1.0f : 0.0f;
    case Alu::Ne:
      return a != b ? 1.0f : 0.0f;
    case Alu::Lt:
      return a < b ? 1.0f : 0.0f;
    case Alu::Le:
      return a <= b ? 1.0f : 0.0f;
    case Alu::Gt:
      return a > b ? 1.0f : 0.0f;
    case Alu::Ge:
      return a >= b ? 1.0f : 0.0f;
    case Alu::LogicalAnd:
      return (a != 0.0f && b != 0.0f) ? 1.0f : 0.0f;
    case Alu::LogicalOr:
      return (a != 0.0f || b != 0.0f) ? 1.0f : 0.0f;
    case Alu::LogicalXor:
      return ((a != 0.0f) != (b != 0.0f)) ? 1.0f : 0.0f;
    case Alu::Abs:
      return std::fabs(a);
    case Alu::Square:
      return a * a;
    case Alu::Relu:
      return a > 0.0f ? a : 0.0f;
    case Alu::Rsqrt:
      return 1.0f / std::sqrt(a);
    case Alu::Reciprocal:
      return 1.0f / a;
    default:
      return static_cast<float>(alu_ss_i(op, static_cast<int64_t>(a), static_cast<int64_t>(b)));
  }
}

// Tight loops for the common operators (vectorised by the compiler); the rest go through
// the scalar switch.
// Elementwise loops: `o` may alias `a` or `b` element for element (in-place instructions),
// which is no loop-carried dependence, so vectorisation is safe (ivdep).
template <typename F>
inline void loop_vv(const float* a, const float* b, float* o, int64_t n, F f) {
#pragma GCC ivdep
  for (int64_t i = 0; i < n; ++i) o[i] = f(a[i], b[i]);
}
template <typename F>
inline void loop_vs(const float* a, float s, float* o, int64_t n, F f) {
#pragma GCC ivdep
  for (int64_t i = 0; i < n; ++i) o[i] = f(a[i], s);
}

float act(Act op, float x) {
  switch (op) {
    case Act::Copy:
      return x;
    case Act::Exp:
      return std::exp(x);
    case Act::Log:
      return std::log(x);
    case Act::Sqrt:
      return std::sqrt(x);
    case Act::Rsqrt:
      return 1.0f / std::sqrt(x);
    case Act::Tanh:
      return std::tanh(x);
    case Act::Sigmoid:
      return sigmoid(x);
    case Act::Relu:
      return x > 0.0f ? x : 0.0f;
    case Act::Gelu:
      return 0.5f * x * (1.0f + std::erf(x * kInvSqrt2));
    case Act::GeluTanh:
      return 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * (x + 0.044715f * x * x * x)));
    case Act::GeluSigmoid:
      return x * sigmoid(1.702f * x);
    case Act::GeluDx:
      return 0.5f * (1.0f + std::erf(x * kInvSqrt2)) + x * kInvSqrt2Pi * std::exp(-0.5f * x * x);
    case Act::GeluSigmoidDx: {
      const float s = sigmoid(1.702f * x);
      return s + 1.702f * x * s * (1.0f - s);
    }
    case Act::Silu:
      return x * sigmoid(x);
    case Act::SiluDx: {
      const float s = sigmoid(x);
      return s * (1.0f + x * (1.0f - s));
    }
    case Act::Softplus:
      return softplus(x);
    case Act::Mish:
      return x * std::tanh(softplus(x));
    case Act::Erf:
      return std::erf(x);
    case Act::ErfDx:
      return 1.1283791670955126f * std::exp(-x * x);
    case Act::Reciprocal:
      return 1.0f / x;
    case Act::Sin:
      return std::sin(x);
    case Act::Cos:
      return std::cos(x);
    case Act::Tan:
      return std::tan(x);
    case Act::Arctan:
      return std::atan(x);
    case Act::Square:
      return x * x;
    case Act::Abs:
      return std::fabs(x);
    case Act::Sign:
      return x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : 0.0f);
    case Act::Negative:
      return -x;
    case Act::Ceil:
      return std::ceil(x);
    case Act::Floor:
      return std::floor(x);
    case Act::Trunc:
      return std::trunc(x);
    case Act::LogicalNot:
      return x == 0.0f ? 1.0f : 0.0f;
    case Act::Invert:
      return static_cast<float>(~static_cast<int64_t>(x));
    case Act::Count:
      break;
  }
  return x;
}

}  // namespace

std::string_view alu_name(Alu op) { return kAluNames[static_cast<int>(op)]; }
std::string_view act_name(Act op) { return kActNames[static_cast<int>(op)]; }


bool alu_is_bitvec(Alu op) {
  return op == Alu::BitAnd || op == Alu::BitOr || op == Alu::BitXor || op == Alu::Shl ||
         op == Alu::Shr;
}
bool alu_is_reduction_op(Alu op) {
  switch (op) {
    case Alu::Add:
    case Alu::Subtract:
    case Alu::Multiply:
    case Alu::Max:
    case Alu::Min:
    case Alu::AbsMax:
    case Alu::AbsMin:
    case Alu::BitAnd:
    case Alu::BitOr:
    case Alu::BitXor:
    case Alu::LogicalAnd:
    case Alu::LogicalOr:
      return true;
    default:
      return false;
  }
}
float alu_identity(Alu op) {
  switch (op) {
    case Alu::Multiply:
    case Alu::LogicalAnd:
      return 1.0f;
    case Alu::Max:
      return -std::numeric_limits<float>::infinity();
    case Alu::Min:
      return std::numeric_limits<float>::infinity();
    case Alu::AbsMin:
      return std::numeric_limits<float>::infinity();
    case Alu::BitAnd:
      return -1.0f;  // all bits set
    default:
      return 0.0f;
  }
}

float alu_ss(Alu op, float a, float b) { return apply(op, a, b); }

void alu_vv(Alu op, const float* a, const float* b, float* o, int64_t n) {
  switch (op) {
    case Alu::Add:
      return loop_vv(a, b, o, n, [](float x, float y) { return x + y; });
    case Alu::Subtract:
      return loop_vv(a, b, o, n, [](float x, float y) { return x - y; });
    case Alu::Multiply:
      return loop_vv(a, b, o, n, [](float x, float y) { return x * y; });
    case Alu::Divide:
      return loop_vv(a, b, o, n, [](float x, float y) { return x / y; });
    case Alu::Max:
      return loop_vv(a, b, o, n, [](float x, float y) { return x > y || x != x ? x : y; });
    case Alu::Min:
      return loop_vv(a, b, o, n, [](float x, float y) { return x < y || x != x ? x : y; });
    default:
      for (int64_t i = 0; i < n; ++i) o[i] = apply(op, a[i], b[i]);
  }
}

void alu_vs(Alu op, const float* a, float s, bool reverse, float* o, int64_t n) {
  if (!reverse) {
    switch (op) {
      case Alu::Add:
        return loop_vs(a, s, o, n, [](float x, float y) { return x + y; });
      case Alu::Subtract:
        return loop_vs(a, s, o, n, [](float x, float y) { return x - y; });
      case Alu::Multiply:
        return loop_vs(a, s, o, n, [](float x, float y) { return x * y; });
      case Alu::Divide:
        return loop_vs(a, s, o, n, [](float x, float y) { return x / y; });
      case Alu::Max:
        return loop_vs(a, s, o, n, [](float x, float y) { return x > y || x != x ? x : y; });
      case Alu::Min:
        return loop_vs(a, s, o, n, [](float x, float y) { return x < y || x != x ? x : y; });
      case Alu::Bypass:
        if (o != a) loop_vs(a, s, o, n, [](float x, float) { return x; });
        return;
      default:
        for (int64_t i = 0; i < n; ++i) o[i] = apply(op, a[i], s);
        return;
    }
  }
  switch (op) {
    case Alu::Subtract:
      return loop_vs(a, s, o, n, [](float x, float y) { return y - x; });
    case Alu::Divide:
      return loop_vs(a, s, o, n, [](float x, float y) { return y / x; });
    case Alu::Add:
      return loop_vs(a, s, o, n, [](float x, float y) { return y + x; });
    case Alu::Multiply:
      return loop_vs(a, s, o, n, [](float x, float y) { return y * x; });
    default:
      for (int64_t i = 0; i < n; ++i) o[i] = apply(op, s, a[i]);
  }
}

int64_t alu_ss_i(Alu op, int64_t a, int64_t b) {
  switch (op) {
    case Alu::Bypass:
      return a;
    case Alu::Add:
      return a + b;
    case Alu::Subtract:
      return a - b;
    case Alu::Multiply:
      return a * b;
    case Alu::Divide:
      return b == 0 ? 0 : a / b;
    case Alu::Max:
      return a > b ? a : b;
    case Alu::Min:
      return a < b ? a : b;
    case Alu::AbsMax:
      return std::max(std::llabs(a), std::llabs(b));
    case Alu::AbsMin:
      return std::min(std::llabs(a), std::llabs(b));
    case Alu::Pow: {
      if (b < 0) return 0;
      int64_t r = 1;
      for (int64_t i = 0; i < b && i < 64; ++i) r *= a;
      return r;
    }
    case Alu::Mod: {
      if (b == 0) return 0;
      const int64_t r = a % b;
      return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
    }
    case Alu::Fmod:
      return b == 0 ? 0 : a % b;
    case Alu::Eq:
      return a == b;
    case Alu::Ne:
      return a != b;
    case Alu::Lt:
      return a < b;
    case Alu::Le:
      return a <= b;
    case Alu::Gt:
      return a > b;
    case Alu::Ge:
      return a >= b;
    case Alu::LogicalAnd:
      return a != 0 && b != 0;
    case Alu::LogicalOr:
      return a != 0 || b != 0;
    case Alu::LogicalXor:
      return (a != 0) != (b != 0);
    case Alu::BitAnd:
      return a & b;
    case Alu::BitOr:
      return a | b;
    case Alu::BitXor:
      return a ^ b;
    case Alu::Shl:
      return (b >= 0 && b < 64) ? static_cast<int64_t>(static_cast<uint64_t>(a) << b) : 0;
    case Alu::Shr:
      return (b >= 0 && b < 64) ? (a >> b) : (a < 0 ? -1 : 0);
    case Alu::Abs:
      return a < 0 ? -a : a;
    case Alu::Square:
      return a * a;
    case Alu::Relu:
      return a > 0 ? a : 0;
    case Alu::Rsqrt:
    case Alu::Reciprocal: {  // through fp32, truncated (0 where it is not finite)
      const float r = apply(op, static_cast<float>(a), 0.0f);
      return std::isfinite(r) ? static_cast<int64_t>(r) : 0;
    }
    case Alu::Count:
      break;
  }
  return a;
}

void alu_vv_i(Alu op, const int64_t* a, const int64_t* b, int64_t* o, int64_t n) {
  for (int64_t i = 0; i < n; ++i) o[i] = alu_ss_i(op, a[i], b[i]);
}
void alu_vs_i(Alu op, const int64_t* a, int64_t s, bool reverse, int64_t* o, int64_t n) {
  if (reverse) {
    for (int64_t i = 0; i < n; ++i) o[i] = alu_ss_i(op, s, a[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) o[i] = alu_ss_i(op, a[i], s);
  }
}

void act_apply(Act op, const float* in, float* out, int64_t n) {
  switch (op) {
    case Act::Copy:
      if (out != in)
        for (int64_t i = 0; i < n; ++i) out[i] = in[i];
      return;
    case Act::Exp:
      for (int64_t i = 0; i < n; ++i) out[i] = std::exp(in[i]);
      return;
    case Act::Square:
      for (int64_t i = 0; i < n; ++i) out[i] = in[i] * in[i];
      return;
    default:
      for (int64_t i = 0; i < n; ++i) out[i] = act(op, in[i]);
  }
}

bool act_is_integer_only(Act op) { return op == Act::Invert; }

void act_apply_i(Act op, const int64_t* in, int64_t* out, int64_t n) {
  switch (op) {
    case Act::Invert:
      for (int64_t i = 0; i < n; ++i) out[i] = ~in[i];
      return;
    case Act::Copy:
      for (int64_t i = 0; i < n; ++i) out[i] = in[i];
      return;
    case Act::Abs:
      for (int64_t i = 0; i < n; ++i) out[i] = std::llabs(in[i]);
      return;
    case Act::Negative:
      for (int64_t i = 0; i < n; ++i) out[i] = -in[i];
      return;
    case Act::Sign:
      for (int64_t i = 0; i < n; ++i) out[i] = (in[i] > 0) - (in[i] < 0);
      return;
    case Act::Square:
      for (int64_t i = 0; i < n; ++i) out[i] = in[i] * in[i];
      return;
    case Act::LogicalNot:
      for (int64_t i = 0; i < n; ++i) out[i] = in[i] == 0;
      return;
    default:
      for (int64_t i = 0; i < n; ++i)
        out[i] = static_cast<int64_t>(act(op, static_cast<float>(in[i])));
  }
}

}  // namespace neuron::nki
