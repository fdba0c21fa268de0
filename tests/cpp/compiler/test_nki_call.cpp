// NKI calls inside compiled programs (compiler/nki_call.h): plan encoding (deterministic,
// checksummed, validated), and graphs with an "nki" custom node compiled and run on host
// buffers - several launches, scratch, a strided input staged, an in-place mutation, and an
// NKI error reported through the compiled program.
#include <cstring>

#include "compiler/dense.h"
#include "compiler/device_time.h"
#include "compiler/error.h"
#include "compiler/nki_call.h"
#include "nki/error.h"
#include "nki/program.h"
#include "test_util.h"

namespace neuron::cc::test {
namespace {

namespace nc = nki_call;
namespace nk = neuron::nki;

nk::Ap ap(int32_t buf, int64_t P, int64_t F) {
  nk::Ap a;
  a.buf = buf;
  a.dtype = nk::DT::Float32;
  a.ndim = 2;
  a.step[0] = F;
  a.num[0] = P;
  a.step[1] = 1;
  a.num[1] = F;
  return a;
}

int32_t buffer(nk::Program& p, nk::Mem m, std::vector<int64_t> shape, const std::string& name,
               bool input) {
  nk::Buffer b;
  b.mem = m;
  b.dtype = nk::DT::Float32;
  b.shape = std::move(shape);
  b.name = name;
  b.is_input = input;
  b.loc = p.intern("kernels.py:" + std::to_string(10 + p.buffers().size()));
  return p.add_buffer(std::move(b));
}

nk::Instr instr(nk::Program& p, nk::Op op, nk::Engine e, std::initializer_list<nk::Ap> aps,
                int line) {
  nk::Instr in;
  in.op = op;
  in.engine = e;
  for (const nk::Ap& a : aps) in.ap[in.nap++] = a;
  in.loc = p.intern("kernels.py:" + std::to_string(line));
  return in;
}

// c = a + b on [P, F] fp32 HBM tensors (slots a, b, c). With `skip_load_b`, the b tile is never
// written: the kernel reads uninitialized SBUF.
std::string add_program(int64_t P, int64_t F, bool skip_load_b = false) {
  nk::Program p(nk::Target{});
  const int a = buffer(p, nk::Mem::Hbm, {P, F}, "a", true);
  const int b = buffer(p, nk::Mem::Hbm, {P, F}, "b", true);
  const int c = buffer(p, nk::Mem::Hbm, {P, F}, "c", false);
  const int ta = buffer(p, nk::Mem::Sbuf, {P, F}, "ta", false);
  const int tb = buffer(p, nk::Mem::Sbuf, {P, F}, "tb", false);
  const int tc = buffer(p, nk::Mem::Sbuf, {P, F}, "tc", false);
  p.add(instr(p, nk::Op::DmaCopy, nk::Engine::Dma, {ap(ta, P, F), ap(a, P, F)}, 20));
  if (!skip_load_b)
    p.add(instr(p, nk::Op::DmaCopy, nk::Engine::Dma, {ap(tb, P, F), ap(b, P, F)}, 21));
  nk::Instr tt = instr(p, nk::Op::TensorTensor, nk::Engine::Vector,
                       {ap(tc, P, F), ap(ta, P, F), ap(tb, P, F)}, 22);
  tt.i[0] = static_cast<int64_t>(nk::Alu::Add);
  p.add(tt);
  p.add(instr(p, nk::Op::DmaCopy, nk::Engine::Dma, {ap(c, P, F), ap(tc, P, F)}, 23));
  p.finalize();
  return p.serialize();
}

nc::Root io_root(nc::RootKind k, int32_t index, int64_t numel, const std::string& name) {
  nc::Root r;
  r.kind = k;
  r.index = index;
  r.dtype = DType::Float32;
  r.numel = numel;
  r.bytes = numel * 4;
  r.name = name;
  return r;
}

nc::Root scratch_root(int64_t offset, int64_t bytes) {
  nc::Root r;
  r.kind = nc::RootKind::Scratch;
  r.offset = offset;
  r.bytes = bytes;
  r.name = "tmp";
  return r;
}

nc::Op launch(int32_t program, std::vector<std::tuple<int32_t, int64_t, bool>> args) {
  nc::Op o;
  o.kind = nc::OpKind::Launch;
  o.kernel = "add_kernel";
  o.programs = {program};
  std::vector<nc::Arg> inst;
  for (auto [root, bytes, in] : args) inst.push_back(nc::Arg{root, 0, bytes, "t", in, false});
  o.args.push_back(std::move(inst));
  return o;
}

// out = (z + y) + y with the intermediate in scratch: two launches of one program.
nc::Plan two_adds(int64_t P, int64_t F) {
  const int64_t n = P * F;
  nc::Plan p;
  p.op = "test::two_adds";
  p.n_inputs = 2;
  p.n_outputs = 2;
  p.scratch_output = 1;
  p.scratch_bytes = n * 4;
  p.roots = {io_root(nc::RootKind::Input, 0, n, "z"), io_root(nc::RootKind::Input, 1, n, "y"),
             io_root(nc::RootKind::Output, 0, n, "out"), scratch_root(0, n * 4)};
  p.programs = {add_program(P, F)};
  p.ops = {launch(0, {{0, n * 4, true}, {1, n * 4, true}, {3, n * 4, false}}),
           launch(0, {{3, n * 4, true}, {1, n * 4, true}, {2, n * 4, false}})};
  return p;
}

TEST(NkiCall, EncodingIsDeterministicAndRoundTrips) {
  const nc::Plan p = two_adds(128, 64);
  const std::string a = nc::encode(p), b = nc::encode(p);
  EXPECT_EQ(a, b);
  const nc::Plan q = nc::decode(a);
  EXPECT_EQ(q.op, p.op);
  ASSERT_EQ(q.ops.size(), 2u);
  EXPECT_EQ(q.ops[1].args[0][2].root, 2);
  EXPECT_EQ(nc::encode(q), a);
  EXPECT_NE(nc::describe(a).find("launch add_kernel"), std::string::npos);
}

TEST(NkiCall, CorruptedOrMalformedPayloadsAreRejected) {
  const std::string good = nc::encode(two_adds(128, 64));
  std::string flipped = good;
  flipped[flipped.size() / 2] ^= 0x20;
  EXPECT_THROW(nc::decode(flipped), NeffError);
  EXPECT_THROW(nc::decode(good.substr(0, good.size() - 7)), NeffError);
  std::string version = good;
  version[8] = 99;
  try {
    nc::decode(version);
    FAIL() << "accepted a foreign version";
  } catch (const NeffError& e) {
    EXPECT_NE(std::string(e.what()).find("format version 99"), std::string::npos) << e.what();
  }
  nc::Plan p = two_adds(128, 64);
  p.ops[0].args[0][0].bytes += 4;  // one element past the input
  try {
    nc::encode(p);
    FAIL() << "accepted an argument outside its root";
  } catch (const NeffError& e) {
    EXPECT_NE(std::string(e.what()).find("exceeds root 'z'"), std::string::npos) << e.what();
  }
  p = two_adds(128, 64);
  p.ops[1].programs = {3};
  EXPECT_THROW(nc::encode(p), NeffError);
}

// A graph: z = x + y (fused kernel), then the NKI node on (z, y); `perm` feeds x transposed.
Graph nki_graph(const std::string& payload, int64_t P, int64_t F, bool permuted_input) {
  Graph g;
  const int x = g.add_input(TensorType{DType::Float32, permuted_input ? Shape{F, P} : Shape{P, F}});
  const int y = g.add_input(TensorType{DType::Float32, {P, F}});
  Attrs pa;
  pa.set("perm", std::vector<int64_t>{1, 0});
  const int xv = permuted_input ? g.add1(Op::permute, {x}, pa) : x;
  Attrs a;
  a.set("target", std::string(nc::kTarget));
  a.set("payload", payload);
  a.set("name", std::string("test::two_adds"));
  auto outs =
      g.add_typed(Op::custom, {xv, y}, a,
                  {TensorType{DType::Float32, {P, F}}, TensorType{DType::UInt8, {P * F * 4}}});
  g.set_outputs({g.add1(Op::mul, {outs[0], g.scalar(2.0, DType::Float32)})});
  return g;
}

TEST(NkiCall, CompiledGraphRunsTwoLaunches) {
  nc::register_kernel();
  const int64_t P = 128, F = 64;
  for (bool permuted : {false, true}) {
    Graph g = nki_graph(nc::encode(two_adds(P, F)), P, F, permuted);
    std::vector<HostTensor> in = {
        random_tensor(TensorType{DType::Float32, permuted ? Shape{F, P} : Shape{P, F}}, 1),
        random_tensor(TensorType{DType::Float32, {P, F}}, 2)};
    const std::vector<HostTensor> keep = in;
    Compiled c;
    auto out = compile_and_run(g, in, 2, &c);
    ASSERT_EQ(out.size(), 1u);
    // The transposed input reaches the node as a strided view (the kernel stages it).
    const std::vector<int64_t> strides =
        permuted ? std::vector<int64_t>{1, P} : std::vector<int64_t>{F, 1};
    for (const Step& s : c.program.steps)
      if (s.kind == StepKind::Custom) {
        EXPECT_EQ(s.tensors[0].strides, strides);
      }
    for (int64_t i = 0; i < P; ++i)
      for (int64_t j = 0; j < F; ++j) {
        const float xv =
            static_cast<float>(keep[0].v[static_cast<size_t>(permuted ? j * P + i : i * F + j)]);
        const float yv = static_cast<float>(keep[1].v[static_cast<size_t>(i * F + j)]);
        const float want = ((xv + yv) + yv) * 2.0f;
        ASSERT_EQ(static_cast<float>(out[0].v[static_cast<size_t>(i * F + j)]), want)
            << "permuted=" << permuted << " at " << i << "," << j;
      }
  }
}

TEST(NkiCall, ProgramValidationChecksThePlan) {
  const int64_t P = 32, F = 16;
  Graph g = nki_graph(nc::encode(two_adds(P, F)), P, F, false);
  Compiled c = compile(g, CompileOptions{});
  validate(c.program);
  Step* step = nullptr;
  for (Step& s : c.program.steps)
    if (s.kind == StepKind::Custom) step = &s;
  ASSERT_NE(step, nullptr);
  Program bad = c.program;
  for (Step& s : bad.steps)
    if (s.kind == StepKind::Custom) s.payload[s.payload.size() - 3] ^= 1;
  EXPECT_THROW(validate(bad), NeffError);
  bad = c.program;
  for (Step& s : bad.steps)
    if (s.kind == StepKind::Custom) s.ints[0] = 1;  // the plan takes 2 inputs
  try {
    validate(bad);
    FAIL() << "accepted a plan for another node";
  } catch (const NeffError& e) {
    EXPECT_NE(std::string(e.what()).find("takes 2 inputs"), std::string::npos) << e.what();
  }
}

TEST(NkiCall, MutatedInputIsWrittenInPlace) {
  nc::register_kernel();
  const int64_t P = 64, F = 32, n = P * F;
  // acc <- acc + x: output 0 starts as a copy of input 0 (skipped when the compiler places it
  // in the input itself), then the kernel reads and writes it.
  nc::Plan p;
  p.op = "test::accumulate";
  p.n_inputs = 2;
  p.n_outputs = 1;
  p.roots = {io_root(nc::RootKind::Input, 0, n, "acc"), io_root(nc::RootKind::Input, 1, n, "x"),
             io_root(nc::RootKind::Output, 0, n, "new acc")};
  p.programs = {add_program(P, F)};
  nc::Op copy;
  copy.kind = nc::OpKind::Copy;
  copy.dst = nc::View{2, DType::Float32, 0, {n}, {1}};
  copy.src = nc::View{0, DType::Float32, 0, {n}, {1}};
  p.ops = {copy, launch(0, {{2, n * 4, true}, {1, n * 4, true}, {2, n * 4, false}})};
  Graph g;
  const int acc = g.add_input(TensorType{DType::Float32, {P, F}});
  const int x = g.add_input(TensorType{DType::Float32, {P, F}});
  Attrs a;
  a.set("target", std::string(nc::kTarget));
  a.set("payload", nc::encode(p));
  a.set("inplace", std::vector<int64_t>{0});
  auto outs = g.add_typed(Op::custom, {acc, x}, a, {TensorType{DType::Float32, {P, F}}});
  g.mutations.push_back(Mutation{0, outs[0]});
  g.set_outputs({g.add1(Op::neg, {x})});
  std::vector<HostTensor> in = {random_tensor(TensorType{DType::Float32, {P, F}}, 3),
                                random_tensor(TensorType{DType::Float32, {P, F}}, 4)};
  const std::vector<HostTensor> keep = in;
  Compiled c;
  compile_and_run(g, in, 2, &c);
  EXPECT_NE(c.plan.find("writes its input in place"), std::string::npos) << c.plan;
  for (size_t i = 0; i < static_cast<size_t>(n); ++i)
    ASSERT_EQ(static_cast<float>(in[0].v[i]),
              static_cast<float>(keep[0].v[i]) + static_cast<float>(keep[1].v[i]));
}

// acc <- acc + x as an NKI plan: output 0 starts as a copy of input 0, then the kernel reads
// and writes it.
nc::Plan accumulate_plan(int64_t P, int64_t F) {
  const int64_t n = P * F;
  nc::Plan p;
  p.op = "test::accumulate";
  p.n_inputs = 2;
  p.n_outputs = 1;
  p.roots = {io_root(nc::RootKind::Input, 0, n, "acc"), io_root(nc::RootKind::Input, 1, n, "x"),
             io_root(nc::RootKind::Output, 0, n, "new acc")};
  p.programs = {add_program(P, F)};
  nc::Op copy;
  copy.kind = nc::OpKind::Copy;
  copy.dst = nc::View{2, DType::Float32, 0, {n}, {1}};
  copy.src = nc::View{0, DType::Float32, 0, {n}, {1}};
  p.ops = {copy, launch(0, {{2, n * 4, true}, {1, n * 4, true}, {2, n * 4, false}})};
  return p;
}

TEST(NkiCall, ChainOfNkiOpsMutatingOneInputRunsInPlaceAndItsCopiesCostNothing) {
  nc::register_kernel();
  const int64_t P = 64, F = 32, n = P * F;
  // Two NKI ops update the same input one after the other (a KV cache written layer by layer
  // by attention kernels): both write the input itself, and no copy is left at the end.
  const std::string payload = nc::encode(accumulate_plan(P, F));
  Graph g;
  const TensorType t{DType::Float32, {P, F}};
  const int acc = g.add_input(t);
  const int x = g.add_input(t);
  Attrs a;
  a.set("target", std::string(nc::kTarget));
  a.set("payload", payload);
  a.set("inplace", std::vector<int64_t>{0});
  const int v1 = g.add_typed(Op::custom, {acc, x}, a, {t})[0];
  const int v2 = g.add_typed(Op::custom, {v1, x}, a, {t})[0];
  g.mutations.push_back(Mutation{0, v2});
  g.set_outputs({g.add1(Op::neg, {x})});
  std::vector<HostTensor> in = {random_tensor(t, 7), random_tensor(t, 8)};
  const std::vector<HostTensor> keep = in;
  Compiled c;
  compile_and_run(g, in, 2, &c);
  EXPECT_NE(c.plan.find("node #0 (custom) writes its input in place"), std::string::npos) << c.plan;
  EXPECT_NE(c.plan.find("node #1 (custom) writes its input in place"), std::string::npos) << c.plan;
  for (const Step& s : c.program.steps)
    EXPECT_EQ(s.name.find("mutation of input"), std::string::npos) << describe(c.program);
  for (size_t i = 0; i < static_cast<size_t>(n); ++i)
    ASSERT_EQ(static_cast<float>(in[0].v[i]),
              (static_cast<float>(keep[0].v[i]) + static_cast<float>(keep[1].v[i])) +
                  static_cast<float>(keep[1].v[i]));
  // The estimate: each NKI step is its hand-off plus its launch; the copy of the input into
  // the output is free because both are the same memory (without that, n floats read and
  // written at HBM bandwidth).
  const nk::DeviceTimeParams dp = nk::DeviceTimeParams::for_target(3, 2, 4);
  const ProgramTime pt = estimate_program(c.program, dp);
  const double copy_ns = 2.0 * n * 4 / dp.hbm_bytes_per_ns();
  const double with_copy = nc::estimate_ns(payload, dp);
  const double aliased = nc::estimate_ns(payload, dp, {{0, 0}});
  EXPECT_NEAR(with_copy - aliased, copy_ns, 1e-6);
  int nki_steps = 0;
  for (const StepTime& st : pt.steps) {
    if (st.kind != StepKind::Custom) continue;
    ++nki_steps;
    EXPECT_DOUBLE_EQ(st.ns, dp.nki_handoff_ns + aliased);
  }
  EXPECT_EQ(nki_steps, 2);
}

TEST(NkiCall, NkiErrorsNameTheOpKernelAndSourceLine) {
  nc::register_kernel();
  const int64_t P = 32, F = 16;
  nc::Plan p = two_adds(P, F);
  p.programs = {add_program(P, F, /*skip_load_b=*/true)};
  Graph g = nki_graph(nc::encode(p), P, F, false);
  std::vector<HostTensor> in = {random_tensor(TensorType{DType::Float32, {P, F}}, 5),
                                random_tensor(TensorType{DType::Float32, {P, F}}, 6)};
  try {
    compile_and_run(g, in);
    FAIL() << "uninitialized read not reported";
  } catch (const ExecError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("test::two_adds"), std::string::npos) << m;
    EXPECT_NE(m.find("kernel add_kernel"), std::string::npos) << m;
    EXPECT_NE(m.find("kernels.py:2"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace neuron::cc::test
