// The VM's inner loops: math (the eager kernels' own loops) against libm and bit for bit
// against the eager kernels, conversions and the GEMV micro-kernel against a plain dot product.
#include <cmath>
#include <cstring>
#include <random>
#include <utility>

#include "compiler/vm_loops.h"
#include "kernels/elementwise.h"
#include "test_util.h"

namespace neuron::cc::test {
namespace {

using vm::Opc;

double ulp_err(float got, double want) {
  if (std::isnan(want)) return std::isnan(got) ? 0 : 1e9;
  if (std::isinf(want)) return got == want ? 0 : 1e9;
  const double ulp = std::max<double>(
      std::fabs(std::nextafter(static_cast<float>(want), INFINITY) - static_cast<float>(want)),
      1e-45);
  return std::fabs(got - want) / ulp;
}

void check_unary(const vm::LoopTable& L, Opc op, double (*ref)(double), double lo, double hi,
                 double max_ulp, double abs_tol = 0) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<float> x(4099), y(4099);
  for (auto& v : x) v = static_cast<float>(d(rng));
  x[0] = 0.0f;
  L.funary[static_cast<int>(op)](y.data(), x.data(), static_cast<int64_t>(x.size()));
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double want = ref(x[i]);
    if (abs_tol > 0 && std::fabs(y[i] - want) <= abs_tol) continue;
    worst = std::max(worst, ulp_err(y[i], want));
  }
  EXPECT_LE(worst, max_ulp) << L.isa << " " << vm::opc_name(op);
}

void check_table(const vm::LoopTable& L) {
  check_unary(
      L, Opc::Exp, [](double v) { return std::exp(v); }, -87, 88, 4);
  check_unary(
      L, Opc::Log, [](double v) { return std::log(v); }, 1e-30, 1e30, 4);
  check_unary(
      L, Opc::Tanh, [](double v) { return std::tanh(v); }, -10, 10, 8);
  check_unary(
      L, Opc::Sigmoid, [](double v) { return 1 / (1 + std::exp(-v)); }, -30, 30, 8);
  check_unary(
      L, Opc::Erf, [](double v) { return std::erf(v); }, -5, 5, 16, 2e-7);
  check_unary(
      L, Opc::Sin, [](double v) { return std::sin(v); }, -100, 100, 4, 1e-7);
  check_unary(
      L, Opc::Cos, [](double v) { return std::cos(v); }, -100, 100, 4, 1e-7);
  check_unary(
      L, Opc::Silu, [](double v) { return v / (1 + std::exp(-v)); }, -20, 20, 8, 1e-7);
  check_unary(
      L, Opc::Gelu, [](double v) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); }, -6, 6,
      16, 2e-6);  // the eager GELU's erf is within 4e-7 absolute (kernels/simd/vmath.h)
}

TEST(CompilerVm, MathIsAccurateGeneric) { check_table(vm::loops_generic()); }

TEST(CompilerVm, MathIsAccurateAvx2) {
  const vm::LoopTable* t = vm::loops_avx2();
  if (!t) GTEST_SKIP() << "no AVX2 on this CPU";
  check_table(*t);
}

// The VM's transcendental ops are the eager elementwise kernels' loops: same bits as
// kernels::elementwise on the same fp32 data (odd length: vector tails too).
TEST(CompilerVm, MathIsTheEagerKernelsBitForBit) {
  const vm::LoopTable& L = vm::loops();
  const std::pair<Opc, kernels::EwOp> ops[] = {
      {Opc::Exp, kernels::EwOp::Exp},         {Opc::Log, kernels::EwOp::Log},
      {Opc::Tanh, kernels::EwOp::Tanh},       {Opc::Sigmoid, kernels::EwOp::Sigmoid},
      {Opc::Erf, kernels::EwOp::Erf},         {Opc::Gelu, kernels::EwOp::Gelu},
      {Opc::GeluTanh, kernels::EwOp::GeluTanh}, {Opc::Silu, kernels::EwOp::Silu},
      {Opc::Sin, kernels::EwOp::Sin},         {Opc::Expm1, kernels::EwOp::Expm1},
      {Opc::Log1p, kernels::EwOp::Log1p}};
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> d(-9, 9);
  std::vector<float> x(1027), got(x.size()), want(x.size());
  for (auto& v : x) v = d(rng);
  for (const auto& [opc, ew] : ops) {
    L.funary[static_cast<int>(opc)](got.data(), x.data(), static_cast<int64_t>(x.size()));
    kernels::TensorRef r[2];
    for (int k = 0; k < 2; ++k) {
      r[k].data = k == 0 ? want.data() : x.data();
      r[k].dtype = kernels::DType::Float32;
      r[k].ndim = 1;
      r[k].sizes[0] = static_cast<int64_t>(x.size());
      r[k].strides[0] = 1;
    }
    kernels::elementwise(ew, kernels::DType::Float32, kernels::EwParams{}, r, 2);
    int diff = 0;
    for (size_t i = 0; i < x.size(); ++i)
      diff += std::memcmp(&got[i], &want[i], 4) != 0 && !(std::isnan(got[i]) && std::isnan(want[i]));
    EXPECT_EQ(diff, 0) << vm::opc_name(opc);
  }
}

TEST(CompilerVm, SpecialValues) {
  const vm::LoopTable& L = vm::loops();
  std::vector<float> x = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 100.0f, -100.0f}, y(x.size());
  L.funary[static_cast<int>(Opc::Exp)](y.data(), x.data(), static_cast<int64_t>(x.size()));
  EXPECT_TRUE(std::isnan(y[0]));
  EXPECT_EQ(y[1], INFINITY);
  EXPECT_EQ(y[2], 0.0f);
  EXPECT_EQ(y[3], 1.0f);
  EXPECT_EQ(y[5], INFINITY);
  EXPECT_NEAR(y[6], 3.7835e-44f, 3e-45f);  // e^-100 is subnormal, not flushed
  L.funary[static_cast<int>(Opc::Log)](y.data(), x.data(), static_cast<int64_t>(x.size()));
  EXPECT_TRUE(std::isnan(y[0]));
  EXPECT_EQ(y[1], INFINITY);
  EXPECT_TRUE(std::isnan(y[2]));
  EXPECT_EQ(y[3], -INFINITY);
  L.funary[static_cast<int>(Opc::Relu)](y.data(), x.data(), static_cast<int64_t>(x.size()));
  EXPECT_TRUE(std::isnan(y[0]));  // relu(NaN) stays NaN, like ATen
  std::vector<float> a = {1, NAN, 3}, b = {2, 2, NAN}, m(3);
  L.fbinary[static_cast<int>(Opc::Max)](m.data(), a.data(), b.data(), 3, 0);
  EXPECT_EQ(m[0], 2);
  EXPECT_TRUE(std::isnan(m[1]) && std::isnan(m[2]));
  EXPECT_TRUE(std::isnan(L.rmax(a.data(), 3)));
}

TEST(CompilerVm, Bf16AndF16ConversionsRoundToNearestEven) {
  const vm::LoopTable& L = vm::loops();
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> d(-1000, 1000);
  std::vector<float> x(1001), back(1001);
  std::vector<uint16_t> h(1001);
  for (auto& v : x) v = d(rng);
  for (DType t : {DType::BFloat16, DType::Float16}) {
    L.store[static_cast<int>(t)](reinterpret_cast<char*>(h.data()), 2, x.data(), 1001);
    L.load[static_cast<int>(t)](back.data(), reinterpret_cast<const char*>(h.data()), 2, 1001);
    for (size_t i = 0; i < x.size(); ++i) {
      const float want = t == DType::BFloat16 ? static_cast<float>(kernels::bf16(x[i]))
                                              : static_cast<float>(kernels::f16(x[i]));
      ASSERT_EQ(back[i], want) << kernels::dtype_name(t) << " " << x[i];
    }
  }
}


}  // namespace
}  // namespace neuron::cc::test
