// The VM's inner loops: polynomial math against libm, the generic and AVX2 tables against
// each other, conversions and the GEMV micro-kernel against a plain dot product.
#include <cmath>
#include <random>

#include "compiler/vm_loops.h"
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
      16, 1e-7);
}

TEST(CompilerVm, MathIsAccurateGeneric) { check_table(vm::loops_generic()); }

TEST(CompilerVm, MathIsAccurateAvx2) {
  const vm::LoopTable* t = vm::loops_avx2();
  if (!t) GTEST_SKIP() << "no AVX2 on this CPU";
  check_table(*t);
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
  EXPECT_EQ(y[6], 0.0f);
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
