// End-to-end: tiny graphs built in C++, compiled, run on host buffers, compared with the
// reference interpreter. Tolerances: fp32 kernels use polynomial exp/log/tanh/erf (a few ulp)
// and a different summation order than the double-precision reference: rtol 2e-5.
#include <algorithm>
#include <tuple>

#include "kernels/attention.h"
#include "kernels/reduce.h"
#include "test_util.h"

namespace neuron::cc::test {
namespace {

Attrs A(std::initializer_list<std::pair<std::string, AttrValue>> kv) {
  Attrs a;
  for (const auto& [k, v] : kv) a.set(k, v);
  return a;
}
TensorType F32(Shape s) { return TensorType{DType::Float32, std::move(s)}; }

void check(const Graph& g, std::vector<HostTensor> inputs, double rtol = 2e-5, double atol = 1e-6,
           int opt = 2) {
  std::vector<HostTensor> in_ref = inputs;
  auto want = reference(g, in_ref);
  Compiled c;
  auto got = compile_and_run(g, inputs, opt, &c);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    expect_close(got[i], want[i], rtol, atol, "output " + std::to_string(i) + "\n" + c.final_ir);
  for (const Mutation& m : g.mutations)
    expect_close(inputs[static_cast<size_t>(m.input_index)],
                 in_ref[static_cast<size_t>(m.input_index)], rtol, atol, "mutated input");
}

TEST(CompilerExec, ElementwiseBroadcastChain) {
  Graph g;
  const int x = g.add_input(F32({4, 8}));
  const int b = g.add_input(F32({8}));
  const int c = g.add_input(F32({4, 1}));
  int y = g.add1(Op::add, {x, b});
  y = g.add1(Op::mul, {y, c});
  y = g.add1(Op::tanh, {y});
  const int z = g.add1(Op::gelu, {g.add1(Op::sub, {y, g.scalar(0.5, DType::Float32)})});
  g.set_outputs({z, y});
  check(g,
        {random_tensor(F32({4, 8}), 1), random_tensor(F32({8}), 2), random_tensor(F32({4, 1}), 3)});
}

TEST(CompilerExec, ElementwiseOpsAgreeWithReference) {
  for (Op op : {Op::exp, Op::log, Op::sqrt, Op::sigmoid, Op::silu, Op::erf, Op::sin, Op::cos,
                Op::tanh, Op::gelu_tanh, Op::rsqrt, Op::abs, Op::floor, Op::round}) {
    Graph g;
    const int x = g.add_input(F32({3, 67}));
    int in = x;
    if (op == Op::log || op == Op::sqrt || op == Op::rsqrt) in = g.add1(Op::abs, {x});
    g.set_outputs({g.add1(op, {in})});
    SCOPED_TRACE(op_name(op));
    check(g, {random_tensor(F32({3, 67}), 7, -6, 6)}, 3e-6, 2e-7);
  }
}

TEST(CompilerExec, SoftmaxRunsTheKernelAndAComposedLayerNormFusesIntoOneKernel) {
  Graph g;
  const int x = g.add_input(F32({5, 33}));
  const int w = g.add_input(F32({33}));
  const int sm = g.add1(Op::softmax, {x}, A({{"dim", int64_t{-1}}}));
  const int mean =
      g.add1(Op::mean, {x}, A({{"dims", std::vector<int64_t>{1}}, {"keepdim", int64_t{1}}}));
  const int d = g.add1(Op::sub, {x, mean});
  const int var = g.add1(Op::mean, {g.add1(Op::mul, {d, d})},
                         A({{"dims", std::vector<int64_t>{1}}, {"keepdim", int64_t{1}}}));
  const int r = g.add1(Op::rsqrt, {g.add1(Op::add, {var, g.scalar(1e-5, DType::Float32)})});
  const int ln = g.add1(Op::mul, {g.add1(Op::mul, {d, r}), w});
  g.set_outputs({sm, ln});
  check(g, {random_tensor(F32({5, 33}), 11), random_tensor(F32({33}), 12)});
  Compiled c;
  std::vector<HostTensor> in = {random_tensor(F32({5, 33}), 11), random_tensor(F32({33}), 12)};
  compile_and_run(g, in, 2, &c);
  ASSERT_EQ(c.program.steps.size(), 2u) << describe(c.program);
  int softmax = 0, fused = 0;
  for (const Step& s : c.program.steps) {
    softmax += s.kind == StepKind::Softmax;
    fused += s.kind == StepKind::Fused;
  }
  EXPECT_EQ(softmax, 1);  // kernels::softmax_forward, the eager op's routine
  EXPECT_EQ(fused, 1);
}

TEST(CompilerExec, ReductionsOverLeadingAndAllDims) {
  Graph g;
  const int x = g.add_input(F32({6, 4, 5}));
  g.set_outputs(
      {g.add1(Op::sum, {x}, A({{"dims", std::vector<int64_t>{0}}, {"keepdim", int64_t{0}}})),
       g.add1(Op::amax, {x}, A({{"dims", std::vector<int64_t>{0, 2}}, {"keepdim", int64_t{1}}})),
       g.add1(Op::sum, {x}, A({{"dims", std::vector<int64_t>{}}, {"keepdim", int64_t{0}}})),
       g.add1(Op::argmax, {x}, A({{"dims", std::vector<int64_t>{2}}, {"keepdim", int64_t{0}}}))});
  check(g, {random_tensor(F32({6, 4, 5}), 5)});
}

TEST(CompilerExec, ColumnReductionsRunTheEagerReductionKernel) {
  // A Linear's bias gradient: sum over the batch rows of an elementwise result. The product is
  // one fused kernel over the contiguous domain, the sum one kernels::reduce call (what eager
  // `sum(dim=0)` runs), so the result is eager's bit for bit.
  Graph g;
  const int x = g.add_input(F32({64, 40}));
  const int y = g.add_input(F32({64, 40}));
  const int prod = g.add1(Op::mul, {x, g.add1(Op::tanh, {y})});
  const int col =
      g.add1(Op::sum, {prod}, A({{"dims", std::vector<int64_t>{0}}, {"keepdim", int64_t{0}}}));
  const int mx =
      g.add1(Op::amax, {x}, A({{"dims", std::vector<int64_t>{0}}, {"keepdim", int64_t{1}}}));
  g.set_outputs({prod, col, mx});
  std::vector<HostTensor> in = {random_tensor(F32({64, 40}), 21), random_tensor(F32({64, 40}), 22)};
  check(g, in);
  Compiled c;
  std::vector<HostTensor> in2 = in;
  auto got = compile_and_run(g, in2, 2, &c);
  int reduce = 0, fused = 0;
  for (const Step& s : c.program.steps) {
    reduce += s.kind == StepKind::Reduce;
    fused += s.kind == StepKind::Fused;
  }
  EXPECT_EQ(reduce, 2) << describe(c.program);
  EXPECT_EQ(fused, 1) << describe(c.program);
  // Bitwise against the kernel on the compiled product.
  std::vector<float> p(64 * 40), want(40);
  for (size_t i = 0; i < p.size(); ++i) p[i] = static_cast<float>(got[0].v[i]);
  kernels::TensorRef pin, pout;
  pin.data = p.data();
  pin.dtype = kernels::DType::Float32;
  pin.ndim = 2;
  pin.sizes[0] = 64;
  pin.sizes[1] = 40;
  pin.strides[0] = 40;
  pin.strides[1] = 1;
  pout = pin;
  pout.data = want.data();
  pout.sizes[0] = 1;
  pout.strides[0] = 0;
  kernels::reduce(kernels::ReduceOp::Sum, kernels::DType::Float32, {}, pin, &pout, 1);
  for (size_t j = 0; j < want.size(); ++j)
    EXPECT_EQ(static_cast<float>(got[1].v[j]), want[j]) << "column " << j;
}

int count_steps(const Program& p, StepKind kind) {
  return static_cast<int>(
      std::count_if(p.steps.begin(), p.steps.end(), [&](const Step& s) { return s.kind == kind; }));
}

TEST(CompilerExec, OutputsThatAreViewsOfInputsAreNotCopied) {
  // AOT's forward graphs return the transposed weight (and the input) for the backward: they
  // alias the inputs instead of being copied. A view of a mutated input is still copied.
  Graph g;
  const int x = g.add_input(F32({8, 16}));
  const int w = g.add_input(F32({16, 12}));
  const int buf = g.add_input(F32({4, 6}));
  const int wt = g.add1(Op::permute, {w}, A({{"perm", std::vector<int64_t>{1, 0}}}));
  const int row = g.add1(Op::slice, {x}, A({{"dim", int64_t{0}}, {"start", int64_t{2}},
                                            {"end", int64_t{5}}, {"step", int64_t{1}}}));
  const int bt = g.add1(Op::permute, {buf}, A({{"perm", std::vector<int64_t>{1, 0}}}));
  const int y = g.add1(Op::matmul, {x, w});
  const int yt = g.add1(Op::reshape, {y}, A({{"shape", std::vector<int64_t>{2, 4, 12}}}));
  const int nb = g.add1(Op::add, {buf, g.scalar(1.0, DType::Float32)});
  g.set_outputs({y, wt, x, row, bt, yt});
  g.values[static_cast<size_t>(wt)].strides = {1, 12};
  g.values[static_cast<size_t>(row)].strides = {16, 1};
  g.values[static_cast<size_t>(bt)].strides = {1, 6};
  g.mutations.push_back(Mutation{2, nb});
  std::vector<HostTensor> in = {random_tensor(F32({8, 16}), 31), random_tensor(F32({16, 12}), 32),
                                random_tensor(F32({4, 6}), 33)};
  check(g, in);
  Compiled c;
  compile_and_run(g, in, 2, &c);
  std::vector<std::tuple<int32_t, int32_t, bool>> aliases;
  for (const OutputAlias& a : c.program.output_aliases)
    aliases.push_back({a.output, a.input, a.of_output});
  std::sort(aliases.begin(), aliases.end());
  const std::vector<std::tuple<int32_t, int32_t, bool>> want = {
      {1, 1, false}, {2, 0, false}, {3, 0, false}, {5, 0, true}};  // 5: a reshape of output 0
  EXPECT_EQ(aliases, want) << describe(c.program);
  for (const OutputAlias& a : c.program.output_aliases)
    if (a.output == 3) {
      EXPECT_EQ(a.offset, 32);
    }
  int copies = 0;
  for (const Step& s : c.program.steps) copies += s.kind == StepKind::Copy;
  // The old value of the mutated input is returned (through a transpose): it is copied out and
  // the mutation is written back at the end instead of in place.
  EXPECT_EQ(copies, 2) << describe(c.program);
  // The format keeps the aliases; validation refuses one of a written input.
  ByteWriter bw;
  serialize(c.program, bw);
  ByteReader r(bw.buffer().data(), bw.size(), "program");
  EXPECT_EQ(deserialize_program(r).output_aliases.size(), 4u);
  Program bad = c.program;
  for (OutputAlias& a : bad.output_aliases)
    if (!a.of_output) a.input = 2;
  EXPECT_THROW(validate(bad), NeffError);
  bad = c.program;
  for (OutputAlias& a : bad.output_aliases)
    if (a.of_output) a.input = 1;  // output 1 is an alias itself
  EXPECT_THROW(validate(bad), NeffError);
  bad = c.program;
  bad.output_aliases[0].offset = 1000;
  EXPECT_THROW(validate(bad), NeffError);
}

TEST(CompilerExec, SumOfSlicesScatteredIntoZerosIsACat) {
  // The backward of q, k, v split from one packed projection: three slice_scatters into zeros,
  // added. It becomes one fused cat (no zero fill, scatter or add steps).
  Graph g;
  const int a = g.add_input(F32({1, 4, 6}));
  const int b = g.add_input(F32({2, 4, 6}));
  const int c = g.add_input(F32({1, 4, 6}));
  const int zero = g.add1(Op::expand, {g.scalar(0.0, DType::Float32)},
                          A({{"shape", std::vector<int64_t>{4, 4, 6}}}));
  auto scatter = [&](int src, int64_t start, int64_t end) {
    return g.add1(Op::slice_scatter, {zero, src},
                  A({{"dim", int64_t{0}}, {"start", start}, {"end", end}, {"step", int64_t{1}}}));
  };
  const int s = g.add1(Op::add, {g.add1(Op::add, {scatter(c, 3, 4), scatter(a, 0, 1)}),
                                 scatter(b, 1, 3)});
  g.set_outputs({g.add1(Op::mul, {s, g.scalar(2.0, DType::Float32)})});
  std::vector<HostTensor> in = {random_tensor(F32({1, 4, 6}), 41), random_tensor(F32({2, 4, 6}), 42),
                                random_tensor(F32({1, 4, 6}), 43)};
  Compiled cp;
  std::vector<HostTensor> in2 = in;
  auto got = compile_and_run(g, in2, 2, &cp);
  ASSERT_EQ(cp.program.steps.size(), 1u) << describe(cp.program);
  EXPECT_EQ(cp.program.steps[0].kind, StepKind::Fused);
  std::vector<double> want;  // rows 0 (a), 1-2 (b), 3 (c), doubled
  for (const HostTensor* t : {&in[0], &in[1], &in[2]})
    for (double v : t->v) want.push_back(2.0 * v);
  ASSERT_EQ(got[0].v.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(got[0].v[i], want[i]) << i;
  // Pieces that leave a gap stay scatters.
  Graph h;
  const int x = h.add_input(F32({1, 4, 6}));
  const int z = h.add1(Op::expand, {h.scalar(0.0, DType::Float32)},
                       A({{"shape", std::vector<int64_t>{3, 4, 6}}}));
  auto sc = [&](int64_t start) {
    return h.add1(Op::slice_scatter, {z, x},
                  A({{"dim", int64_t{0}}, {"start", start}, {"end", start + 1}, {"step", int64_t{1}}}));
  };
  h.set_outputs({h.add1(Op::add, {sc(0), sc(2)})});
  std::vector<HostTensor> hin = {random_tensor(F32({1, 4, 6}), 44)};
  Compiled ch;
  auto hgot = compile_and_run(h, hin, 2, &ch);
  int scatters = 0;
  for (const Step& st : ch.program.steps) scatters += st.kind == StepKind::SliceScatter;
  EXPECT_EQ(scatters, 2) << describe(ch.program);
  for (size_t i = 0; i < 24; ++i) {
    EXPECT_EQ(hgot[0].v[i], hin[0].v[i]);
    EXPECT_EQ(hgot[0].v[24 + i], 0.0);
    EXPECT_EQ(hgot[0].v[48 + i], hin[0].v[i]);
  }
}

TEST(CompilerExec, AReshapedViewSeenByTwoGemmsIsCopiedOnce) {
  // A backward GEMM pair reads reshape(permute(g)) and its transpose: one copy of the reshape,
  // the transpose a strided operand of the second GEMM.
  Graph g;
  const int x = g.add_input(F32({2, 3, 4}));
  const int w = g.add_input(F32({4, 5}));
  const int y = g.add_input(F32({6, 7}));
  const int p = g.add1(Op::permute, {x}, A({{"perm", std::vector<int64_t>{1, 0, 2}}}));
  const int r = g.add1(Op::reshape, {p}, A({{"shape", std::vector<int64_t>{6, 4}}}));
  const int rt = g.add1(Op::permute, {r}, A({{"perm", std::vector<int64_t>{1, 0}}}));
  g.set_outputs({g.add1(Op::matmul, {r, w}), g.add1(Op::matmul, {rt, y})});
  std::vector<HostTensor> in = {random_tensor(F32({2, 3, 4}), 51), random_tensor(F32({4, 5}), 52),
                                random_tensor(F32({6, 7}), 53)};
  check(g, in);
  Compiled c;
  compile_and_run(g, in, 2, &c);
  EXPECT_EQ(count_steps(c.program, StepKind::Fused), 1) << describe(c.program);
  EXPECT_EQ(count_steps(c.program, StepKind::Gemm), 2) << describe(c.program);
}

TEST(CompilerExec, ReturnedReshapesAreComputedInTheOutputs) {
  // AOT's training forward returns the values its backward needs, often as reshapes of values
  // other steps also read: the layer norm's output reshaped to [rows, dim] (it also feeds the
  // next GEMM), the attention output permuted and reshaped for the projection GEMM. Both are
  // computed straight into the output buffers: no copy step at the end.
  Graph g;
  const int x = g.add_input(F32({2, 3, 4}));
  const int w = g.add_input(F32({4, 5}));
  const int h = g.add_input(F32({2, 3, 4}));
  const int v = g.add1(Op::mul, {x, g.scalar(2.0, DType::Float32)});
  const int rows = g.add1(Op::reshape, {v}, A({{"shape", std::vector<int64_t>{6, 4}}}));
  const int y = g.add1(Op::matmul, {rows, w});
  const int y2 = g.add1(Op::add, {v, g.scalar(1.0, DType::Float32)});
  const int p = g.add1(Op::permute, {h}, A({{"perm", std::vector<int64_t>{1, 0, 2}}}));
  const int pr = g.add1(Op::reshape, {p}, A({{"shape", std::vector<int64_t>{6, 4}}}));
  const int z = g.add1(Op::matmul, {pr, w});
  g.set_outputs({y, rows, y2, pr, z});
  std::vector<HostTensor> in = {random_tensor(F32({2, 3, 4}), 54), random_tensor(F32({4, 5}), 55),
                                random_tensor(F32({2, 3, 4}), 56)};
  check(g, in);
  Compiled c;
  compile_and_run(g, in, 2, &c);
  EXPECT_EQ(count_steps(c.program, StepKind::Copy), 0) << describe(c.program);
  // 2x and +1 (one kernel), and the permuted copy the second GEMM reads.
  EXPECT_EQ(count_steps(c.program, StepKind::Fused), 2) << describe(c.program);
}

TEST(CompilerExec, LongRowReductionIsChunked) {
  Graph g;
  const int x = g.add_input(F32({2, 20000}));
  g.set_outputs({g.add1(Op::sum, {g.add1(Op::mul, {x, x})},
                        A({{"dims", std::vector<int64_t>{1}}, {"keepdim", int64_t{0}}}))});
  check(g, {random_tensor(F32({2, 20000}), 9)}, 1e-5, 1e-4);
}

TEST(CompilerExec, PermuteReshapeChainsRefineTheDomain) {
  Graph g;
  const int x = g.add_input(F32({2, 3, 4}));
  const int p = g.add1(Op::permute, {x}, A({{"perm", std::vector<int64_t>{2, 0, 1}}}));
  const int e = g.add1(Op::exp, {p});
  const int r = g.add1(Op::reshape, {e}, A({{"shape", std::vector<int64_t>{4, 6}}}));
  const int t = g.add1(Op::permute, {r}, A({{"perm", std::vector<int64_t>{1, 0}}}));
  const int r2 = g.add1(Op::reshape, {t}, A({{"shape", std::vector<int64_t>{24}}}));
  g.set_outputs({g.add1(Op::add, {r2, g.scalar(1.0, DType::Float32)})});
  check(g, {random_tensor(F32({2, 3, 4}), 4)});
}

TEST(CompilerExec, RotaryEmbeddingWithCatIsOneKernel) {
  Graph g;
  const int q = g.add_input(F32({1, 2, 3, 8}));
  const int cs = g.add_input(F32({3, 8}));
  const int sn = g.add_input(F32({3, 8}));
  const int hi = g.add1(
      Op::slice, {q},
      A({{"dim", int64_t{3}}, {"start", int64_t{4}}, {"end", int64_t{8}}, {"step", int64_t{1}}}));
  const int lo = g.add1(
      Op::slice, {q},
      A({{"dim", int64_t{3}}, {"start", int64_t{0}}, {"end", int64_t{4}}, {"step", int64_t{1}}}));
  const int rot = g.add1(Op::cat, {g.add1(Op::neg, {hi}), lo}, A({{"dim", int64_t{-1}}}));
  const int out = g.add1(Op::add, {g.add1(Op::mul, {q, cs}), g.add1(Op::mul, {rot, sn})});
  g.set_outputs({out});
  check(g, {random_tensor(F32({1, 2, 3, 8}), 1), random_tensor(F32({3, 8}), 2),
            random_tensor(F32({3, 8}), 3)});
  Compiled c;
  std::vector<HostTensor> in = {random_tensor(F32({1, 2, 3, 8}), 1), random_tensor(F32({3, 8}), 2),
                                random_tensor(F32({3, 8}), 3)};
  compile_and_run(g, in, 2, &c);
  EXPECT_EQ(c.program.steps.size(), 1u) << describe(c.program);
}

TEST(CompilerExec, PadWithValue) {
  Graph g;
  const int x = g.add_input(F32({3, 4}));
  g.set_outputs({g.add1(Op::pad, {g.add1(Op::exp, {x})},
                        A({{"pads", std::vector<int64_t>{1, 2, 0, 1}}, {"value", -1.5}}))});
  check(g, {random_tensor(F32({3, 4}), 8)});
}

TEST(CompilerExec, IotaComparisonMask) {
  Graph g;
  const int pos = g.add_input(TensorType{DType::Int64, {1}});
  const int ar = g.add1(Op::iota, {},
                        A({{"shape", std::vector<int64_t>{1, 6}},
                           {"dim", int64_t{1}},
                           {"dtype", static_cast<int64_t>(DType::Int64)}}));
  const int pr = g.add1(Op::reshape, {pos}, A({{"shape", std::vector<int64_t>{1, 1}}}));
  const int le = g.add1(Op::le, {ar, pr});
  const int m =
      g.add1(Op::where, {le, g.scalar(0.0, DType::Float32), g.scalar(-INFINITY, DType::Float32)});
  g.set_outputs({m});
  HostTensor p{TensorType{DType::Int64, {1}}, {3}};
  check(g, {p});
}

TEST(CompilerExec, MatmulWithBiasEpilogue) {
  Graph g;
  const int x = g.add_input(F32({5, 16}));
  const int w = g.add_input(F32({12, 16}));
  const int b = g.add_input(F32({12}));
  const int wt = g.add1(Op::permute, {w}, A({{"perm", std::vector<int64_t>{1, 0}}}));
  const int y = g.add1(Op::matmul, {x, wt});
  g.set_outputs({g.add1(Op::relu, {g.add1(Op::add, {y, b})})});
  check(g,
        {random_tensor(F32({5, 16}), 1), random_tensor(F32({12, 16}), 2),
         random_tensor(F32({12}), 3)},
        1e-5, 1e-5);
  Compiled c;
  std::vector<HostTensor> in = {random_tensor(F32({5, 16}), 1), random_tensor(F32({12, 16}), 2),
                                random_tensor(F32({12}), 3)};
  compile_and_run(g, in, 2, &c);
  ASSERT_EQ(c.program.steps.size(), 1u) << describe(c.program);
  EXPECT_EQ(c.program.steps[0].kind, StepKind::Gemm);
  EXPECT_TRUE(c.program.steps[0].kernel != nullptr);
}

TEST(CompilerExec, BatchedMatmulBf16) {
  Graph g;
  const TensorType at{DType::BFloat16, {3, 2, 8}}, bt{DType::BFloat16, {3, 8, 5}};
  const int a = g.add_input(at);
  const int b = g.add_input(bt);
  g.set_outputs({g.add1(Op::matmul, {a, b})});
  // bf16 output: one rounding of an fp32 accumulation; the reference rounds the exact sum.
  check(g, {random_tensor(at, 3), random_tensor(bt, 4)}, 1e-2, 1e-2);
}

TEST(CompilerExec, AttentionPatternFusesAndMatches) {
  // scores = (q @ k^T) / 2 + mask ; softmax ; @ v, written with 3-D batch matmuls.
  Graph g;
  const int B = 1, H = 2, S = 5, D = 4;
  const int q = g.add_input(F32({B, H, S, D}));
  const int k = g.add_input(F32({B, H, S, D}));
  const int v = g.add_input(F32({B, H, S, D}));
  const int mask = g.add_input(F32({1, 1, S, S}));
  const int q3 = g.add1(Op::reshape, {q}, A({{"shape", std::vector<int64_t>{B * H, S, D}}}));
  const int kt = g.add1(Op::permute, {k}, A({{"perm", std::vector<int64_t>{0, 1, 3, 2}}}));
  const int k3 = g.add1(Op::reshape, {kt}, A({{"shape", std::vector<int64_t>{B * H, D, S}}}));
  const int s3 = g.add1(Op::matmul, {q3, k3});
  const int s4 = g.add1(Op::reshape, {s3}, A({{"shape", std::vector<int64_t>{B, H, S, S}}}));
  const int sc = g.add1(Op::add, {g.add1(Op::div, {s4, g.scalar(2.0, DType::Float32)}), mask});
  const int p = g.add1(Op::softmax, {sc}, A({{"dim", int64_t{-1}}}));
  const int p3 = g.add1(Op::reshape, {p}, A({{"shape", std::vector<int64_t>{B * H, S, S}}}));
  const int v3 = g.add1(Op::reshape, {v}, A({{"shape", std::vector<int64_t>{B * H, S, D}}}));
  const int o3 = g.add1(Op::matmul, {p3, v3});
  g.set_outputs({g.add1(Op::reshape, {o3}, A({{"shape", std::vector<int64_t>{B, H, S, D}}}))});
  HostTensor m{F32({1, 1, S, S}), std::vector<double>(S * S, 0.0)};
  for (int i = 0; i < S; ++i)
    for (int j = i + 1; j < S; ++j) m.v[static_cast<size_t>(i * S + j)] = -INFINITY;
  std::vector<HostTensor> in = {random_tensor(F32({B, H, S, D}), 1),
                                random_tensor(F32({B, H, S, D}), 2),
                                random_tensor(F32({B, H, S, D}), 3), m};
  check(g, in, 1e-5, 1e-6);
  Compiled c;
  compile_and_run(g, in, 2, &c);
  ASSERT_EQ(c.program.steps.size(), 1u) << c.final_ir;
  EXPECT_EQ(c.program.steps[0].kind, StepKind::Attention);
}

// The attention steps are the kernels' attention (one implementation): a compiled forward with
// its log-sum-exp and the backward give bitwise what kernels::attention_* give on the same data.
TEST(CompilerExec, AttentionStepsAreTheKernelsAttentionBitwise) {
  const int64_t B = 1, Hq = 4, Hkv = 2, S = 5, L = 7, D = 8;
  Graph g;
  const int q = g.add_input(F32({B, Hq, S, D}));
  const int k = g.add_input(F32({B, Hkv, L, D}));
  const int v = g.add_input(F32({B, Hkv, L, D}));
  const int dout = g.add_input(F32({B, Hq, S, D}));
  const auto fw = g.add(Op::attention, {q, k, v},
                        A({{"scale", 0.3}, {"causal", int64_t{1}}, {"zero_masked_rows", int64_t{1}},
                           {"lse", int64_t{1}}}));
  ASSERT_EQ(fw.size(), 2u);
  const auto bw = g.add(Op::attention_backward, {dout, q, k, v, fw[0], fw[1]},
                        A({{"scale", 0.3}, {"causal", int64_t{1}}}));
  g.set_outputs({fw[0], fw[1], bw[0], bw[1], bw[2]});
  std::vector<HostTensor> in = {random_tensor(F32({B, Hq, S, D}), 1),
                                random_tensor(F32({B, Hkv, L, D}), 2),
                                random_tensor(F32({B, Hkv, L, D}), 3),
                                random_tensor(F32({B, Hq, S, D}), 4)};
  Compiled c;
  const auto got = compile_and_run(g, in, 2, &c);
  std::vector<StepKind> kinds;
  for (const auto& st : c.program.steps) kinds.push_back(st.kind);
  EXPECT_NE(std::find(kinds.begin(), kinds.end(), StepKind::AttentionBackward), kinds.end());

  auto f32 = [](const HostTensor& h) { return std::vector<float>(h.v.begin(), h.v.end()); };
  std::vector<float> fq = f32(in[0]), fk = f32(in[1]), fv = f32(in[2]), fd = f32(in[3]);
  kernels::AttentionArgs a;
  a.B = B, a.Hq = Hq, a.Hkv = Hkv, a.Lq = S, a.Lk = L, a.D = D, a.Dv = D;
  a.q = fq.data(), a.k = fk.data(), a.v = fv.data();
  const int64_t qs[4] = {Hq * S * D, S * D, D, 1}, ks[4] = {Hkv * L * D, L * D, D, 1};
  std::copy(qs, qs + 4, a.q_s);
  std::copy(ks, ks + 4, a.k_s);
  std::copy(ks, ks + 4, a.v_s);
  a.causal = true;
  a.scale = 0.3;
  std::vector<float> out(fq.size()), lse(static_cast<size_t>(B * Hq * S));
  const int64_t ls[3] = {Hq * S, S, 1};
  kernels::attention_forward(a, out.data(), qs, lse.data(), ls);
  std::vector<float> dq(fq.size()), dk(fk.size()), dv(fv.size());
  kernels::AttentionGrads gr;
  gr.dout = fd.data(), gr.out = out.data(), gr.lse = lse.data();
  std::copy(qs, qs + 4, gr.dout_s);
  std::copy(qs, qs + 4, gr.out_s);
  std::copy(ls, ls + 3, gr.lse_s);
  gr.dq = dq.data(), gr.dk = dk.data(), gr.dv = dv.data();
  std::copy(qs, qs + 4, gr.dq_s);
  std::copy(ks, ks + 4, gr.dk_s);
  std::copy(ks, ks + 4, gr.dv_s);
  kernels::attention_backward(a, gr);
  const std::vector<float>* want[] = {&out, &lse, &dq, &dk, &dv};
  for (size_t o = 0; o < 5; ++o) {
    ASSERT_EQ(got[o].v.size(), want[o]->size()) << o;
    for (size_t i = 0; i < want[o]->size(); ++i)
      ASSERT_EQ(static_cast<float>(got[o].v[i]), (*want[o])[i]) << "output " << o << " element " << i;
  }
}

TEST(CompilerExec, KvCacheUpdateIsInPlace) {
  // cache = index_put(cache, [None, None, pos], new) ; out = sum(cache) ; cache is mutated.
  Graph g;
  const int cache = g.add_input(F32({1, 2, 6, 4}));
  const int pos = g.add_input(TensorType{DType::Int64, {1}});
  const int nw = g.add_input(F32({1, 2, 1, 4}));
  Node n;
  n.op = Op::index_put;
  n.inputs = {cache, nw, -1, -1, pos};
  n.outputs = {g.add_value(F32({1, 2, 6, 4}))};
  g.nodes.push_back(n);
  const int upd = n.outputs[0];
  g.set_outputs(
      {g.add1(Op::sum, {upd}, A({{"dims", std::vector<int64_t>{2}}, {"keepdim", int64_t{0}}}))});
  g.mutations.push_back(Mutation{0, upd});
  HostTensor p{TensorType{DType::Int64, {1}}, {4}};
  check(g, {random_tensor(F32({1, 2, 6, 4}), 1), p, random_tensor(F32({1, 2, 1, 4}), 2)});
  Compiled c;
  std::vector<HostTensor> in = {random_tensor(F32({1, 2, 6, 4}), 1), p,
                                random_tensor(F32({1, 2, 1, 4}), 2)};
  compile_and_run(g, in, 2, &c);
  for (const Step& s : c.program.steps)
    EXPECT_NE(s.kind, StepKind::Copy) << "the cache update must not copy the cache";
  ASSERT_EQ(c.program.mutated_inputs, std::vector<int>{0});
}

TEST(CompilerExec, IndexOutOfRangeIsAnError) {
  Graph g;
  const int w = g.add_input(F32({10, 4}));
  const int ids = g.add_input(TensorType{DType::Int64, {3}});
  Node n;
  n.op = Op::index;
  n.inputs = {w, ids};
  n.outputs = {g.add_value(F32({3, 4}))};
  g.nodes.push_back(n);
  g.set_outputs({n.outputs[0]});
  std::vector<HostTensor> in = {random_tensor(F32({10, 4}), 1),
                                HostTensor{TensorType{DType::Int64, {3}}, {1, 12, 3}}};
  try {
    compile_and_run(g, in);
    FAIL() << "expected an error";
  } catch (const ExecError& e) {
    EXPECT_NE(std::string(e.what()).find("index 12 is out of bounds for dimension 0 with size 10"),
              std::string::npos)
        << e.what();
  }
}

TEST(CompilerExec, Bf16ElementwiseRoundsPerOp) {
  Graph g;
  const TensorType t{DType::BFloat16, {4, 9}};
  const int x = g.add_input(t);
  const int y = g.add_input(t);
  g.set_outputs({g.add1(Op::mul, {g.add1(Op::add, {x, y}), g.add1(Op::silu, {y})})});
  check(g, {random_tensor(t, 1), random_tensor(t, 2)}, 8e-3, 1e-3);
}

TEST(CompilerExec, OptLevelZeroStillCorrect) {
  Graph g;
  const int x = g.add_input(F32({4, 8}));
  const int y = g.add1(Op::softmax, {g.add1(Op::exp, {x})}, A({{"dim", int64_t{0}}}));
  g.set_outputs({y});
  check(g, {random_tensor(F32({4, 8}), 1)}, 2e-5, 1e-6, 0);
}

}  // namespace
}  // namespace neuron::cc::test
