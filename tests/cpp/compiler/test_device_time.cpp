// The estimated Trainium2 time of a compiled program equals the model's formula: one launch,
// then per kernel a boundary plus max(HBM bytes / bandwidth, matmul FLOPs / peak).
#include <gtest/gtest.h>

#include "compiler/device_time.h"
#include "test_util.h"

namespace neuron::cc::test {
namespace {

TEST(DeviceTime, CompiledMatmulChainIsOneLaunchPlusItsKernels) {
  Graph g;
  const int x = g.add_input(TensorType{DType::BFloat16, {64, 256}});
  const int w = g.add_input(TensorType{DType::BFloat16, {256, 512}});
  const int b = g.add_input(TensorType{DType::BFloat16, {512}});
  const int y = g.add1(Op::matmul, {x, w});
  const int z = g.add1(Op::tanh, {g.add1(Op::add, {y, b})});
  g.set_outputs({g.add1(Op::mul, {z, z})});
  const Compiled c = compile(g, CompileOptions{});
  const nki::DeviceTimeParams p = nki::DeviceTimeParams::for_target(3, 2, 4);
  const ProgramTime t = estimate_program(c.program, p);
  ASSERT_EQ(t.steps.size(), c.program.steps.size());
  double sum = p.neff_launch_ns;
  bool saw_gemm = false;
  for (const StepTime& s : t.steps) {
    double bytes = 0;
    for (const TensorDesc& d : c.program.steps[&s - t.steps.data()].tensors) {
      double n = 1;
      for (int64_t v : d.sizes) n *= static_cast<double>(v);
      bytes += n * static_cast<double>(kernels::element_size(d.dtype));
    }
    EXPECT_DOUBLE_EQ(s.work.hbm_bytes, bytes);
    if (s.kind == StepKind::Gemm) {
      saw_gemm = true;
      EXPECT_DOUBLE_EQ(s.work.flops_bf16, 2.0 * 64 * 256 * 512);
    }
    const double roof = std::max(bytes / (362.5 * 2), (s.work.flops_bf16) / (79e3 * 2));
    EXPECT_DOUBLE_EQ(s.ns, p.kernel_boundary_ns + roof);
    sum += s.ns;
  }
  EXPECT_TRUE(saw_gemm) << describe(c.program);
  EXPECT_DOUBLE_EQ(t.total_ns, sum);
  // The epilogue fuses: fewer kernels than the graph's four ops.
  EXPECT_LT(c.program.steps.size(), 4u) << describe(c.program);
}

TEST(DeviceTime, EagerFallbackAndCollectiveFormulas) {
  const nki::DeviceTimeParams p = nki::DeviceTimeParams::for_target(3, 2, 4);
  const nki::WorkCost add{3.0 * 4096 * 2, 0, 0};  // a + b -> c, 4096 bf16 each
  EXPECT_DOUBLE_EQ(nki::eager_op_ns(add, p), p.eager_launch_ns + add.hbm_bytes / 725.0);
  EXPECT_DOUBLE_EQ(nki::fallback_ns(1000, 8, 1008, p),
                   2 * p.host_wake_ns + 2 * p.pcie_latency_ns + 1008 / p.pcie_bytes_per_ns +
                       p.host_op_ns + 1008 / p.host_bytes_per_ns);
  // all_reduce of 1 MiB over 4 ranks: 2 * 3 ring steps of 256 KiB at the chip's NeuronLink
  // share of one logical core (1280 / 4 B/ns).
  EXPECT_DOUBLE_EQ(nki::collective_ns(nki::Collective::AllReduce, 1 << 20, 4, p),
                   6 * (p.collective_step_ns + (1 << 18) / 320.0));
  EXPECT_EQ(nki::collective_ns(nki::Collective::AllReduce, 1 << 20, 1, p), 0);
  // An NKI kernel inside a program waits one cross-engine semaphore latency ([BW], the DMA
  // fixed cost), not a kernel boundary.
  EXPECT_DOUBLE_EQ(p.nki_handoff_ns, p.core.dma_fixed_ns);
  EXPECT_DOUBLE_EQ(p.nki_handoff_ns, 1300.0);
  EXPECT_LT(p.nki_handoff_ns, p.kernel_boundary_ns);
}

}  // namespace
}  // namespace neuron::cc::test
