// The arithmetic of reducing collectives: a stepwise reduction (within hosts, then across
// hosts, as the hierarchical all-reduce does) equals the one-step reduction, rounding 16-bit
// floats once.
#include <gtest/gtest.h>

#include <vector>

#include "kernels/collective_reduce.h"
#include "kernels/dispatch.h"

using namespace neuron::kernels;

namespace {

std::vector<bf16> bf16s(std::vector<float> v) {
  std::vector<bf16> out;
  for (float f : v) out.push_back(bf16(f));
  return out;
}

}  // namespace

TEST(CollectiveReduce, TwoStepsOfBf16EqualOneStepRoundedOnce) {
  // Four ranks on two hosts: 1 + 2^-8 + 2^-8 + 2^-8 is not representable after a bf16 rounding
  // of the partial sums (1 + 2^-8 rounds to 1), but it is when partials stay in fp32.
  const std::vector<std::vector<bf16>> rank = {bf16s({1.0f, 3.0f}), bf16s({0.00390625f, 1.0f}),
                                               bf16s({0.00390625f, -2.0f}), bf16s({0.00390625f, 0.5f})};
  for (CollectiveOp op : {CollectiveOp::Sum, CollectiveOp::Avg, CollectiveOp::Max, CollectiveOp::Product}) {
    std::vector<bf16> one(2);
    collective_reduce(one.data(), {rank[0].data(), rank[1].data(), rank[2].data(), rank[3].data()}, 2, DType::BFloat16,
                      op);
    ASSERT_EQ(collective_acc_dtype(DType::BFloat16), DType::Float32);
    std::vector<float> host0(2), host1(2);
    collective_reduce_step(host0.data(), DType::Float32, {rank[0].data(), rank[1].data()}, DType::BFloat16, 2, op, 0);
    collective_reduce_step(host1.data(), DType::Float32, {rank[2].data(), rank[3].data()}, DType::BFloat16, 2, op, 0);
    std::vector<bf16> two(2);
    collective_reduce_step(two.data(), DType::BFloat16, {host0.data(), host1.data()}, DType::Float32, 2, op, 4);
    for (int i = 0; i < 2; ++i) EXPECT_EQ(static_cast<float>(two[i]), static_cast<float>(one[i])) << i;
  }
}

TEST(CollectiveReduce, IntegerAverageDividesTheTotalOnce) {
  const std::vector<int32_t> a = {7, -3}, b = {8, -4}, c = {9, 0};
  std::vector<int32_t> partial(2), out(2);
  collective_reduce_step(partial.data(), DType::Int32, {a.data(), b.data()}, DType::Int32, 2, CollectiveOp::Avg, 0);
  EXPECT_EQ(partial, (std::vector<int32_t>{15, -7}));
  collective_reduce_step(out.data(), DType::Int32, {partial.data(), c.data()}, DType::Int32, 2, CollectiveOp::Avg, 3);
  EXPECT_EQ(out, (std::vector<int32_t>{8, -2}));
}

TEST(CollectiveReduce, RejectsUnrelatedDtypesAndBitwiseFloats) {
  std::vector<int32_t> i(1);
  std::vector<double> d(1);
  EXPECT_THROW(collective_reduce_step(d.data(), DType::Float64, {i.data()}, DType::Int32, 1, CollectiveOp::Sum, 0),
               std::invalid_argument);
  EXPECT_THROW(collective_reduce(d.data(), {d.data()}, 1, DType::Float64, CollectiveOp::BXor), std::invalid_argument);
}
