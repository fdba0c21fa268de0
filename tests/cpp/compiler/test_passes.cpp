// Pass behaviour on tiny graphs: each pass changes exactly what it promises.
#include <fstream>

#include "compiler/lower.h"
#include "compiler/passes.h"
#include "compiler/verifier.h"
#include "test_util.h"

namespace neuron::cc::test {
namespace {

Attrs A(std::initializer_list<std::pair<std::string, AttrValue>> kv) {
  Attrs a;
  for (const auto& [k, v] : kv) a.set(k, v);
  return a;
}
TensorType F32(Shape s) { return TensorType{DType::Float32, std::move(s)}; }
int count(const Graph& g, Op op) {
  int c = 0;
  for (const Node& n : g.nodes) c += n.op == op;
  return c;
}

TEST(CompilerPasses, DceRemovesUnusedNodes) {
  Graph g;
  const int x = g.add_input(F32({4}));
  g.add1(Op::exp, {x});  // dead
  g.set_outputs({g.add1(Op::neg, {x})});
  EXPECT_EQ(dce(g).changed, 1);
  EXPECT_EQ(g.nodes.size(), 1u);
  verify(g);
}

TEST(CompilerPasses, CseMergesIdenticalNodesAndConstants) {
  Graph g;
  const int x = g.add_input(F32({4}));
  const int a = g.add1(Op::mul, {x, g.scalar(2.0, DType::Float32)});
  const int b = g.add1(Op::mul, {x, g.scalar(2.0, DType::Float32)});
  const int c = g.add1(Op::mul, {x, g.scalar(3.0, DType::Float32)});
  g.set_outputs({g.add1(Op::add, {a, b}), c});
  cse(g);
  dce(g);
  EXPECT_EQ(count(g, Op::mul), 2);
  EXPECT_EQ(count(g, Op::constant), 2);
  verify(g);
}

TEST(CompilerPasses, CanonicalizeDropsNoOpsAndMergesViewChains) {
  Graph g;
  const int x = g.add_input(F32({2, 3, 4}));
  int y = g.add1(Op::reshape, {x}, A({{"shape", std::vector<int64_t>{6, 4}}}));
  y = g.add1(Op::reshape, {y}, A({{"shape", std::vector<int64_t>{24}}}));
  int p = g.add1(Op::permute, {x}, A({{"perm", std::vector<int64_t>{1, 0, 2}}}));
  p = g.add1(Op::permute, {p}, A({{"perm", std::vector<int64_t>{1, 0, 2}}}));  // back to identity
  const int c = g.add1(Op::cast, {p}, A({{"dtype", static_cast<int64_t>(DType::Float32)}}));
  g.set_outputs({y, g.add1(Op::exp, {c})});
  canonicalize(g);
  verify(g);
  EXPECT_EQ(count(g, Op::reshape), 1);
  EXPECT_EQ(count(g, Op::permute), 0);
  EXPECT_EQ(count(g, Op::cast), 0);
  EXPECT_EQ(g.nodes.back().inputs[0], x);
}

TEST(CompilerPasses, ConstantFoldingEvaluatesConstantSubgraphs) {
  Graph g;
  const int x = g.add_input(F32({3, 3}));
  // A causal mask from iota: computed once at compile time.
  const int r = g.add1(Op::iota, {},
                       A({{"shape", std::vector<int64_t>{3, 3}},
                          {"dim", int64_t{0}},
                          {"dtype", static_cast<int64_t>(DType::Int64)}}));
  const int cidx = g.add1(Op::iota, {},
                          A({{"shape", std::vector<int64_t>{3, 3}},
                             {"dim", int64_t{1}},
                             {"dtype", static_cast<int64_t>(DType::Int64)}}));
  const int m = g.add1(Op::where, {g.add1(Op::le, {cidx, r}), g.scalar(0.0, DType::Float32),
                                   g.scalar(-INFINITY, DType::Float32)});
  g.set_outputs({g.add1(Op::add, {x, m})});
  EXPECT_EQ(fold_constants(g).changed, 1);
  verify(g);
  ASSERT_EQ(count(g, Op::iota), 0);
  ASSERT_EQ(g.blobs.size(), 1u);
  std::vector<HostTensor> in = {random_tensor(F32({3, 3}), 1)};
  auto out = compile_and_run(g, in);
  EXPECT_EQ(out[0].v[1], -INFINITY);
  EXPECT_EQ(out[0].v[3], in[0].v[3]);
}

TEST(CompilerPasses, FusionGroupsChainsAndKeepsDenseOpsApart) {
  Graph g;
  const int x = g.add_input(F32({8, 16}));
  const int w = g.add_input(F32({16, 16}));
  int y = g.add1(Op::exp, {x});
  y = g.add1(Op::mul, {y, g.scalar(0.5, DType::Float32)});
  const int s =
      g.add1(Op::sum, {y}, A({{"dims", std::vector<int64_t>{1}}, {"keepdim", int64_t{1}}}));
  y = g.add1(Op::div, {y, s});
  const int z = g.add1(Op::matmul, {y, w});
  g.set_outputs({g.add1(Op::tanh, {z})});
  fuse_elementwise(g);
  verify(g, "after fusion");
  EXPECT_EQ(count(g, Op::fused), 2);  // exp*0.5/sum, then tanh
  EXPECT_EQ(count(g, Op::matmul), 1);
  fuse_gemm_epilogue(g);
  verify(g, "after epilogue fusion");
  EXPECT_EQ(count(g, Op::matmul), 0);  // tanh became the GEMM's epilogue
  int gemm = 0;
  for (const Node& n : g.nodes) gemm += n.op == Op::fused && n.attrs.has("gemm");
  EXPECT_EQ(gemm, 1);
}

TEST(CompilerPasses, MemoryPlanReusesArenaSpace) {
  // A chain of dense ops: each intermediate dies after the next step, so two buffers alternate.
  Graph g;
  const int x = g.add_input(F32({64, 64}));
  int y = x;
  for (int i = 0; i < 6; ++i) y = g.add1(Op::matmul, {y, x});
  g.set_outputs({y});
  CompileOptions o;
  Compiled c = compile(g, o);
  const int64_t one = 64 * 64 * 4;
  EXPECT_EQ(c.program.arena_bytes, 2 * one) << c.plan;
  std::vector<HostTensor> in = {random_tensor(F32({64, 64}), 3, -0.2, 0.2)};
  auto want = reference(g, in);
  auto got = run_program(c.program, in);
  expect_close(got[0], want[0], 1e-4, 1e-6);
}

TEST(CompilerPasses, InPlaceElementwiseMutation) {
  // buf <- buf * 0.9 + x (an optimizer-style update) writes the input directly.
  Graph g;
  const int buf = g.add_input(F32({5, 7}));
  const int x = g.add_input(F32({5, 7}));
  const int upd = g.add1(Op::add, {g.add1(Op::mul, {buf, g.scalar(0.9, DType::Float32)}), x});
  g.mutations.push_back(Mutation{0, upd});
  g.set_outputs(
      {g.add1(Op::sum, {upd}, A({{"dims", std::vector<int64_t>{}}, {"keepdim", int64_t{0}}}))});
  Compiled c = compile(g, CompileOptions{});
  for (const Step& s : c.program.steps) EXPECT_NE(s.kind, StepKind::Copy) << describe(c.program);
  std::vector<HostTensor> in = {random_tensor(F32({5, 7}), 1), random_tensor(F32({5, 7}), 2)};
  std::vector<HostTensor> ref_in = in;
  auto want = reference(g, ref_in);
  auto got = run_program(c.program, in);
  expect_close(got[0], want[0], 1e-5, 1e-5);
  expect_close(in[0], ref_in[0], 1e-6, 1e-6, "mutated buffer");
}

TEST(CompilerPasses, DumpsIrAfterEveryPass) {
  const std::string dir = ::testing::TempDir() + "/cc_dumps";
  Graph g;
  const int x = g.add_input(F32({4}));
  g.set_outputs({g.add1(Op::exp, {x})});
  CompileOptions o;
  o.dump_dir = dir;
  Compiled c = compile(g, o);
  EXPECT_FALSE(c.passes.empty());
  std::ifstream f(dir + "/00-input.ir");
  EXPECT_TRUE(f.good());
  std::ifstream p(dir + "/program.txt");
  EXPECT_TRUE(p.good());
}

}  // namespace
}  // namespace neuron::cc::test
