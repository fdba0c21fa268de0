// The NeuronCore model without Python: programs built by hand, executed on host arrays and
// compared with plain loops; hardware-rule violations; uninitialized reads; serialization;
// the cost model.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <random>
#include <thread>

#include "nki/cost_model.h"
#include "nki/device_time.h"
#include "nki/error.h"
#include "nki/executor.h"
#include "nki/launch.h"
#include "nki/program.h"
#include "runtime/error.h"
#include "runtime/interrupt.h"

namespace nki = neuron::nki;
using nki::Ap;
using nki::DT;
using nki::Instr;
using nki::Op;

namespace {

Ap ap(int32_t buf, DT dt, int64_t off, std::initializer_list<std::pair<int64_t, int64_t>> dims) {
  Ap a;
  a.buf = buf;
  a.dtype = dt;
  a.offset = off;
  for (auto [s, n] : dims) {
    a.step[a.ndim] = s;
    a.num[a.ndim] = n;
    ++a.ndim;
  }
  return a;
}

int32_t buffer(nki::Program& p, nki::Mem m, DT dt, std::vector<int64_t> shape,
               const std::string& name, bool input = false) {
  nki::Buffer b;
  b.mem = m;
  b.dtype = dt;
  b.shape = std::move(shape);
  b.name = name;
  b.is_input = input;
  b.loc = p.intern("kernel.py:" + std::to_string(10 + p.buffers().size()));
  return p.add_buffer(std::move(b));
}

Instr instr(nki::Program& p, Op op, nki::Engine e, std::initializer_list<Ap> aps, int line) {
  Instr in;
  in.op = op;
  in.engine = e;
  for (const Ap& a : aps) in.ap[in.nap++] = a;
  in.loc = p.intern("kernel.py:" + std::to_string(line));
  return in;
}

nki::Binding bind(std::vector<float>& v) {
  nki::Binding b;
  b.data = reinterpret_cast<uint8_t*>(v.data());
  b.bytes = static_cast<int64_t>(v.size() * 4);
  return b;
}

std::vector<float> randn(size_t n, unsigned seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

// dst[P, F] = a + b through SBUF, the quickstart kernel.
std::shared_ptr<nki::Program> add_program(int64_t P, int64_t F, DT tile_dt) {
  auto p = std::make_shared<nki::Program>(nki::Target{});
  const int a = buffer(*p, nki::Mem::Hbm, DT::Float32, {P, F}, "a", true);
  const int b = buffer(*p, nki::Mem::Hbm, DT::Float32, {P, F}, "b", true);
  const int c = buffer(*p, nki::Mem::Hbm, DT::Float32, {P, F}, "c");
  const int ta = buffer(*p, nki::Mem::Sbuf, tile_dt, {P, F}, "a_tile");
  const int tb = buffer(*p, nki::Mem::Sbuf, tile_dt, {P, F}, "b_tile");
  const int tc = buffer(*p, nki::Mem::Sbuf, tile_dt, {P, F}, "c_tile");
  auto full = [&](int buf, DT dt) { return ap(buf, dt, 0, {{F, P}, {1, F}}); };
  p->add(instr(*p, Op::DmaCopy, nki::Engine::Dma, {full(ta, tile_dt), full(a, DT::Float32)}, 20));
  p->add(instr(*p, Op::DmaCopy, nki::Engine::Dma, {full(tb, tile_dt), full(b, DT::Float32)}, 21));
  Instr tt = instr(*p, Op::TensorTensor, nki::Engine::Vector,
                   {full(tc, tile_dt), full(ta, tile_dt), full(tb, tile_dt)}, 22);
  tt.i[0] = static_cast<int64_t>(nki::Alu::Add);
  p->add(tt);
  p->add(instr(*p, Op::DmaCopy, nki::Engine::Dma, {full(c, DT::Float32), full(tc, tile_dt)}, 23));
  p->finalize();
  return p;
}

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const nki::NkiError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(NkiCore, TensorAddFp32IsExact) {
  auto prog = add_program(128, 512, DT::Float32);
  auto a = randn(128 * 512, 1), b = randn(128 * 512, 2);
  std::vector<float> c(a.size(), -1.0f);
  auto core = nki::acquire_core(prog->target());
  nki::ExecOptions opt;
  opt.check_uninit = true;
  nki::execute(*prog, *core, {bind(a), bind(b), bind(c)}, opt, nullptr);
  for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(c[i], a[i] + b[i]) << i;
}

TEST(NkiCore, Bf16TilesRoundLikeHardware) {
  auto prog = add_program(64, 100, DT::BFloat16);
  std::vector<float> a(6400, 1.0f), b(6400, 1.0f / 512), c(6400);
  auto core = nki::acquire_core(prog->target());
  nki::execute(*prog, *core, {bind(a), bind(b), bind(c)}, {}, nullptr);
  // 1 + 2^-9 is not representable in bf16 (8 mantissa bits): rounds to 1.
  for (float x : c) ASSERT_EQ(x, 1.0f);
}

TEST(NkiCore, MatmulMatchesLoops) {
  for (DT dt : {DT::Float32, DT::BFloat16}) {
    const int64_t K = 96, M = 80, N = 300;
    auto p = std::make_shared<nki::Program>(nki::Target{});
    const int lhsT = buffer(*p, nki::Mem::Hbm, DT::Float32, {K, M}, "lhsT", true);
    const int rhs = buffer(*p, nki::Mem::Hbm, DT::Float32, {K, N}, "rhs", true);
    const int out = buffer(*p, nki::Mem::Hbm, DT::Float32, {M, N}, "out");
    const int s = buffer(*p, nki::Mem::Sbuf, dt, {K, M}, "s");
    const int m = buffer(*p, nki::Mem::Sbuf, dt, {K, N}, "m");
    const int ps = buffer(*p, nki::Mem::Psum, DT::Float32, {M, N}, "ps");
    const int r = buffer(*p, nki::Mem::Sbuf, DT::Float32, {M, N}, "r");
    p->add(instr(*p, Op::DmaCopy, nki::Engine::Dma,
                 {ap(s, dt, 0, {{M, K}, {1, M}}), ap(lhsT, DT::Float32, 0, {{M, K}, {1, M}})}, 1));
    p->add(instr(*p, Op::DmaCopy, nki::Engine::Dma,
                 {ap(m, dt, 0, {{N, K}, {1, N}}), ap(rhs, DT::Float32, 0, {{N, K}, {1, N}})}, 2));
    p->add(instr(*p, Op::Matmul, nki::Engine::Tensor,
                 {ap(ps, DT::Float32, 0, {{N, M}, {1, N}}), ap(s, dt, 0, {{M, K}, {1, M}}),
                  ap(m, dt, 0, {{N, K}, {1, N}})},
                 3));
    p->add(instr(
        *p, Op::TensorCopy, nki::Engine::Vector,
        {ap(r, DT::Float32, 0, {{N, M}, {1, N}}), ap(ps, DT::Float32, 0, {{N, M}, {1, N}})}, 4));
    p->add(instr(
        *p, Op::DmaCopy, nki::Engine::Dma,
        {ap(out, DT::Float32, 0, {{N, M}, {1, N}}), ap(r, DT::Float32, 0, {{N, M}, {1, N}})}, 5));
    p->finalize();
    auto A = randn(static_cast<size_t>(K * M), 3), B = randn(static_cast<size_t>(K * N), 4);
    std::vector<float> C(static_cast<size_t>(M * N));
    auto core = nki::acquire_core(p->target());
    nki::ExecOptions opt;
    opt.check_uninit = true;
    nki::execute(*p, *core, {bind(A), bind(B), bind(C)}, opt, nullptr);
    auto round = [&](float x) {
      return dt == DT::BFloat16 ? static_cast<float>(neuron::kernels::bf16(x)) : x;
    };
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double ref = 0;
        for (int64_t k = 0; k < K; ++k)
          ref += static_cast<double>(round(A[k * M + i])) * round(B[k * N + j]);
        ASSERT_NEAR(C[i * N + j], ref, 1e-4 * (1 + std::fabs(ref))) << i << "," << j;
      }
  }
}

TEST(NkiCore, PartitionLimitNamesRuleValuesAndLocation) {
  nki::Program p(nki::Target{});
  nki::Buffer b;
  b.mem = nki::Mem::Sbuf;
  b.shape = {256, 4};
  b.name = "big";
  b.loc = p.intern("k.py:7");
  const std::string msg = error_of([&] { p.add_buffer(b); });
  EXPECT_NE(msg.find("partition dimension 256 > 128"), std::string::npos) << msg;
  EXPECT_NE(msg.find("k.py:7"), std::string::npos) << msg;
  EXPECT_NE(msg.find("rule:"), std::string::npos) << msg;
}

TEST(NkiCore, MatmulMovingFreeSizeLimit) {
  nki::Program p(nki::Target{});
  const int s = buffer(p, nki::Mem::Sbuf, DT::BFloat16, {128, 128}, "s");
  const int m = buffer(p, nki::Mem::Sbuf, DT::BFloat16, {128, 1024}, "m");
  const int ps = buffer(p, nki::Mem::Psum, DT::Float32, {128, 1024}, "ps");
  Instr in = instr(p, Op::Matmul, nki::Engine::Tensor,
                   {ap(ps, DT::Float32, 0, {{1024, 128}, {1, 1024}}),
                    ap(s, DT::BFloat16, 0, {{128, 128}, {1, 128}}),
                    ap(m, DT::BFloat16, 0, {{1024, 128}, {1, 1024}})},
                   42);
  const std::string msg = error_of([&] { p.add(in); });
  EXPECT_NE(msg.find("nki.isa.nc_matmul at kernel.py:42"), std::string::npos) << msg;
  EXPECT_NE(msg.find("moving free size 1024 exceeds maximum 512"), std::string::npos) << msg;
}

TEST(NkiCore, SbufCapacityExceeded) {
  nki::Program p(nki::Target{});
  const int h = buffer(p, nki::Mem::Hbm, DT::Float32, {128, 40000}, "x", true);
  std::vector<int> tiles;
  for (int i = 0; i < 2; ++i)
    tiles.push_back(buffer(p, nki::Mem::Sbuf, DT::Float32, {128, 40000}, "t" + std::to_string(i)));
  for (int t : tiles)
    p.add(instr(p, Op::DmaCopy, nki::Engine::Dma,
                {ap(t, DT::Float32, 0, {{40000, 128}, {1, 40000}}),
                 ap(h, DT::Float32, 0, {{40000, 128}, {1, 40000}})},
                30 + t));
  // Both tiles are read at the end, so both are live together: 2 x 160000 B > 229376 B.
  p.add(instr(p, Op::TensorCopy, nki::Engine::Vector,
              {ap(tiles[0], DT::Float32, 0, {{40000, 128}, {1, 40000}}),
               ap(tiles[1], DT::Float32, 0, {{40000, 128}, {1, 40000}})},
              50));
  const std::string msg = error_of([&] { p.finalize(); });
  EXPECT_NE(msg.find("SBUF capacity exceeded"), std::string::npos) << msg;
  EXPECT_NE(msg.find("229376"), std::string::npos) << msg;
}

// Where a tensor of fewer partitions may start follows its partition count (the architecture
// guide's start_partition rule): 33..64 partitions at 0 or 64, at most 32 at any quadrant.
TEST(NkiCore, SbufStartPartitionFollowsPartitionCount) {
  nki::Program p(nki::Target{});
  const int64_t n = 200 * 1024 / 4;  // 200 KiB per partition: two never share a partition
  const int a = buffer(p, nki::Mem::Sbuf, DT::Float32, {32, n}, "a");
  const int b = buffer(p, nki::Mem::Sbuf, DT::Float32, {64, n}, "b");
  const int c = buffer(p, nki::Mem::Sbuf, DT::Float32, {32, n}, "c");
  int line = 40;
  for (auto [t, parts] : {std::pair{a, 32}, {b, 64}, {c, 32}}) {
    Instr m = instr(p, Op::Memset, nki::Engine::Vector,
                    {ap(t, DT::Float32, 0, {{n, parts}, {1, n}})}, line++);
    p.add(m);
  }
  // All three are read at the end, so all are live together.
  p.add(instr(p, Op::TensorTensor, nki::Engine::Vector,
              {ap(a, DT::Float32, 0, {{n, 32}, {1, 64}}), ap(b, DT::Float32, 0, {{n, 32}, {1, 64}}),
               ap(c, DT::Float32, 0, {{n, 32}, {1, 64}})},
              50));
  p.finalize();
  EXPECT_EQ(p.buffers()[a].part0, 0);
  EXPECT_EQ(p.buffers()[b].part0, 64);  // not 32: a 64-partition tensor starts at 0 or 64
  EXPECT_EQ(p.buffers()[c].part0, 32);
}

// A tensor that fits on every partition but finds no byte range free on all the partitions it
// needs is refused as such, with what the busiest partition needs (not the sum over all).
TEST(NkiCore, SbufFragmentationIsReportedAsSuch) {
  nki::Program p(nki::Target{});
  constexpr int64_t kKiB = 1024 / 4;  // fp32 elements per KiB
  const int g = buffer(p, nki::Mem::Sbuf, DT::Float32, {128, 60 * kKiB}, "g");
  const int lo = buffer(p, nki::Mem::Sbuf, DT::Float32, {64, 100 * kKiB}, "lo");
  const int hi = buffer(p, nki::Mem::Sbuf, DT::Float32, {64, 150 * kKiB}, "hi");
  const int all = buffer(p, nki::Mem::Sbuf, DT::Float32, {128, 64 * kKiB}, "all");
  auto tile = [](int t, int64_t parts, int64_t f, int64_t pitch) {
    return ap(t, DT::Float32, 0, {{pitch, parts}, {1, f}});
  };
  p.add(instr(p, Op::Memset, nki::Engine::Vector, {tile(g, 128, 60 * kKiB, 60 * kKiB)}, 40));
  // lo after g on partitions [0, 64); hi does not fit there and goes to [64, 128) after g.
  p.add(instr(p, Op::Memset, nki::Engine::Vector, {tile(lo, 64, 100 * kKiB, 100 * kKiB)}, 41));
  p.add(instr(p, Op::Memset, nki::Engine::Vector, {tile(hi, 64, 150 * kKiB, 150 * kKiB)}, 42));
  p.add(instr(p, Op::TensorCopy, nki::Engine::Vector,
              {tile(lo, 64, 64, 100 * kKiB), tile(g, 64, 64, 60 * kKiB)}, 43));
  // g is dead: 164 KiB / 214 KiB per partition are needed, but the 64 KiB of `all` are free
  // at the same bytes of every partition nowhere.
  p.add(instr(p, Op::TensorCopy, nki::Engine::Vector,
              {tile(all, 64, 64, 64 * kKiB), tile(hi, 64, 64, 150 * kKiB)}, 44));
  p.add(instr(p, Op::TensorCopy, nki::Engine::Vector,
              {tile(lo, 64, 64, 100 * kKiB), tile(all, 64, 64, 64 * kKiB)}, 45));
  const std::string msg = error_of([&] { p.finalize(); });
  EXPECT_NE(msg.find("SBUF capacity exceeded when tensor 'all'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("no 65536 bytes are free at the same offset on every partition"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("at most 219136 of 229376 bytes per partition"), std::string::npos) << msg;
}

TEST(NkiCore, UninitializedReadReachingHbmIsReported) {
  auto p = std::make_shared<nki::Program>(nki::Target{});
  const int out = buffer(*p, nki::Mem::Hbm, DT::Float32, {128, 8}, "out");
  const int t = buffer(*p, nki::Mem::Sbuf, DT::Float32, {128, 8}, "never_written");
  const int u = buffer(*p, nki::Mem::Sbuf, DT::Float32, {128, 8}, "u");
  Instr sc = instr(
      *p, Op::TensorScalar, nki::Engine::Vector,
      {ap(u, DT::Float32, 0, {{8, 128}, {1, 8}}), ap(t, DT::Float32, 0, {{8, 128}, {1, 8}})}, 61);
  sc.i[0] = static_cast<int64_t>(nki::Alu::Multiply);
  sc.i[1] = -1;
  sc.f[0] = 2.0;
  p->add(sc);
  p->add(instr(
      *p, Op::DmaCopy, nki::Engine::Dma,
      {ap(out, DT::Float32, 0, {{8, 128}, {1, 8}}), ap(u, DT::Float32, 0, {{8, 128}, {1, 8}})},
      62));
  p->finalize();
  std::vector<float> o(1024);
  auto core = nki::acquire_core(p->target());
  nki::ExecOptions opt;
  opt.check_uninit = true;
  nki::Binding b = bind(o);
  std::vector<uint8_t> def(o.size() * 4, 0);
  b.def = def.data();
  b.name = "out";
  const std::string msg = error_of([&] { nki::execute(*p, *core, {b}, opt, nullptr); });
  EXPECT_NE(msg.find("uninitialized"), std::string::npos) << msg;
  EXPECT_NE(msg.find("kernel.py:62"), std::string::npos) << msg;
  EXPECT_NE(msg.find("never_written"), std::string::npos) << msg;
  EXPECT_NE(msg.find("kernel.py:61"), std::string::npos) << msg;
}

TEST(NkiCore, SerializeRoundTrip) {
  auto prog = add_program(32, 16, DT::Float32);
  const std::string bytes = prog->serialize();
  auto back = nki::Program::deserialize(bytes);
  EXPECT_EQ(back->dump(), prog->dump());
  std::string bad = bytes;
  bad.resize(bad.size() - 5);
  EXPECT_NE(error_of([&] { nki::Program::deserialize(bad); }).find("truncated"), std::string::npos);
}

TEST(NkiCore, CostModelMatmulNearPeak) {
  // 16 back-to-back 128x128x512 bf16 matmuls: 512 cycles each at 2.4 GHz.
  auto p = std::make_shared<nki::Program>(nki::Target{});
  const int s = buffer(*p, nki::Mem::Sbuf, DT::BFloat16, {128, 128}, "s");
  const int m = buffer(*p, nki::Mem::Sbuf, DT::BFloat16, {128, 512}, "m");
  const int ps = buffer(*p, nki::Mem::Psum, DT::Float32, {128, 512}, "ps");
  Instr ms = instr(*p, Op::Memset, nki::Engine::Vector,
                   {ap(s, DT::BFloat16, 0, {{128, 128}, {1, 128}})}, 1);
  p->add(ms);
  p->add(instr(*p, Op::Memset, nki::Engine::Vector,
               {ap(m, DT::BFloat16, 0, {{512, 128}, {1, 512}})}, 2));
  for (int k = 0; k < 16; ++k) {
    Instr mm = instr(*p, Op::Matmul, nki::Engine::Tensor,
                     {ap(ps, DT::Float32, 0, {{512, 128}, {1, 512}}),
                      ap(s, DT::BFloat16, 0, {{128, 128}, {1, 128}}),
                      ap(m, DT::BFloat16, 0, {{512, 128}, {1, 512}})},
                     3);
    mm.i[0] = k > 0;
    p->add(mm);
  }
  p->finalize();
  const auto params = nki::CostParams::for_version(3);
  const auto est = nki::estimate(*p, nullptr, params, 1000);
  const double mm_ns = 512 / 2.4;
  EXPECT_NEAR(est.busy_ns[static_cast<int>(nki::Engine::Tensor)], 16 * mm_ns, 1e-6);
  EXPECT_GE(est.total_ns, 16 * mm_ns);
  EXPECT_NEAR(est.flops, 16 * 2.0 * 128 * 128 * 512, 1);
  const std::string json = nki::timeline_json(*p, est, 0, "nc0", 0);
  EXPECT_NE(json.find("\"nc_matmul\""), std::string::npos);
}

TEST(NkiCore, RuntimeLoopUsesRegisterOffsets) {
  // for i in range(4): out[i*32:(i+1)*32] = x[i*32:(i+1)*32] * 3, as one runtime loop.
  auto p = std::make_shared<nki::Program>(nki::Target{});
  const int x = buffer(*p, nki::Mem::Hbm, DT::Float32, {128, 16}, "x", true);
  const int out = buffer(*p, nki::Mem::Hbm, DT::Float32, {128, 16}, "out");
  const int t = buffer(*p, nki::Mem::Sbuf, DT::Float32, {32, 16}, "t");
  const int r = p->add_register();
  Instr lb;
  lb.op = Op::LoopBegin;
  lb.engine = nki::Engine::Sync;
  lb.i = {r, -1, 0, -1, 4, 1, -1};
  p->add(lb);
  Ap src = ap(x, DT::Float32, 0, {{16, 32}, {1, 16}});
  src.reg = static_cast<int16_t>(r);
  src.reg_scale = 32 * 16;
  p->add(instr(*p, Op::DmaCopy, nki::Engine::Dma, {ap(t, DT::Float32, 0, {{16, 32}, {1, 16}}), src},
               71));
  Instr sc = instr(
      *p, Op::TensorScalar, nki::Engine::Vector,
      {ap(t, DT::Float32, 0, {{16, 32}, {1, 16}}), ap(t, DT::Float32, 0, {{16, 32}, {1, 16}})}, 72);
  sc.i[0] = static_cast<int64_t>(nki::Alu::Multiply);
  sc.i[1] = -1;
  sc.f[0] = 3.0;
  p->add(sc);
  Ap dst = ap(out, DT::Float32, 0, {{16, 32}, {1, 16}});
  dst.reg = static_cast<int16_t>(r);
  dst.reg_scale = 32 * 16;
  p->add(instr(*p, Op::DmaCopy, nki::Engine::Dma, {dst, ap(t, DT::Float32, 0, {{16, 32}, {1, 16}})},
               73));
  Instr le;
  le.op = Op::LoopEnd;
  le.engine = nki::Engine::Sync;
  p->add(le);
  p->finalize();
  auto X = randn(128 * 16, 9);
  std::vector<float> O(X.size());
  auto core = nki::acquire_core(p->target());
  nki::ExecOptions opt;
  opt.record_trace = true;
  nki::ExecReport rep;
  nki::execute(*p, *core, {bind(X), bind(O)}, opt, &rep);
  for (size_t i = 0; i < X.size(); ++i) ASSERT_EQ(O[i], 3 * X[i]);
  EXPECT_EQ(rep.instructions, 12);
  const auto est = nki::estimate(*p, &rep.trace, nki::CostParams::for_version(3), 100);
  EXPECT_EQ(est.instructions, 12);
  EXPECT_EQ(est.hbm_read_bytes, 128 * 16 * 4);
  // Its definedness depends on the trip count: checked on every run (eager and compiled).
  EXPECT_TRUE(p->needs_recheck());
  EXPECT_TRUE(nki::want_check(nki::CheckPolicy::First, true, {p.get()}));
  EXPECT_FALSE(nki::want_check(nki::CheckPolicy::Never, false, {p.get()}));
}

TEST(NkiCore, StaticProgramIsCheckedOnItsFirstRunOnly) {
  auto p = std::make_shared<nki::Program>(nki::Target{});
  const int x = buffer(*p, nki::Mem::Hbm, DT::Float32, {32, 16}, "x", true);
  const int out = buffer(*p, nki::Mem::Hbm, DT::Float32, {32, 16}, "out");
  const int t = buffer(*p, nki::Mem::Sbuf, DT::Float32, {32, 16}, "t");
  p->add(instr(*p, Op::DmaCopy, nki::Engine::Dma,
               {ap(t, DT::Float32, 0, {{16, 32}, {1, 16}}), ap(x, DT::Float32, 0, {{16, 32}, {1, 16}})}, 1));
  p->add(instr(*p, Op::DmaCopy, nki::Engine::Dma,
               {ap(out, DT::Float32, 0, {{16, 32}, {1, 16}}), ap(t, DT::Float32, 0, {{16, 32}, {1, 16}})}, 2));
  p->finalize();
  EXPECT_FALSE(p->needs_recheck());
  EXPECT_TRUE(nki::want_check(nki::CheckPolicy::First, false, {p.get()}));
  EXPECT_FALSE(nki::want_check(nki::CheckPolicy::First, true, {p.get()}));
  EXPECT_TRUE(nki::want_check(nki::CheckPolicy::Always, true, {p.get()}));
}

TEST(NkiDtype, SmallFloatsRoundToNearestEven) {
  // fp8 e4m3 (IEEE-like, bias 7): max finite 240, overflow to inf, NaN kept.
  EXPECT_EQ(nki::f8e4m3_to_f32(nki::f32_to_f8e4m3(1.0625f)), 1.0f);  // tie -> even mantissa
  EXPECT_EQ(nki::f8e4m3_to_f32(nki::f32_to_f8e4m3(1.1875f)), 1.25f);
  EXPECT_EQ(nki::f8e4m3_to_f32(nki::f32_to_f8e4m3(240.0f)), 240.0f);
  EXPECT_TRUE(std::isinf(nki::f8e4m3_to_f32(nki::f32_to_f8e4m3(250.0f))));
  EXPECT_TRUE(std::isnan(nki::f8e4m3_to_f32(nki::f32_to_f8e4m3(NAN))));
  EXPECT_EQ(nki::f8e4m3_to_f32(nki::f32_to_f8e4m3(std::ldexp(1.0f, -9))),
            std::ldexp(1.0f, -9));  // min subnormal
  // e8m0: powers of two only, nearest by value.
  EXPECT_EQ(nki::f8e8m0_to_f32(nki::f32_to_f8e8m0(3.0f)), 2.0f);
  EXPECT_EQ(nki::f8e8m0_to_f32(nki::f32_to_f8e8m0(3.5f)), 4.0f);
  EXPECT_EQ(nki::f8e8m0_to_f32(nki::f32_to_f8e8m0(0.25f)), 0.25f);
  // tf32 keeps 10 mantissa bits.
  EXPECT_EQ(nki::round_tf32(1.0f + std::ldexp(1.0f, -11)), 1.0f);
  EXPECT_EQ(nki::round_tf32(1.0f + std::ldexp(1.0f, -10)), 1.0f + std::ldexp(1.0f, -10));
  // Integer stores saturate and round to nearest even.
  uint8_t b[4];
  nki::from_f32(DT::Int8, 300.0f, b);
  EXPECT_EQ(static_cast<int8_t>(b[0]), 127);
  nki::from_f32(DT::Int8, 2.5f, b);
  EXPECT_EQ(static_cast<int8_t>(b[0]), 2);
  nki::from_f32(DT::UInt8, -3.0f, b);
  EXPECT_EQ(b[0], 0);
}

TEST(NkiCore, PsumCapacityCountsBanks) {
  nki::Program p(nki::Target{});
  std::vector<int> tiles;
  for (int i = 0; i < 9; ++i)
    tiles.push_back(buffer(p, nki::Mem::Psum, DT::Float32, {128, 100}, "ps" + std::to_string(i)));
  for (int t : tiles)
    p.add(instr(p, Op::Memset, nki::Engine::Vector, {ap(t, DT::Float32, 0, {{100, 128}, {1, 100}})},
                80));
  for (int t : tiles)
    p.add(instr(p, Op::TensorCopy, nki::Engine::Vector,
                {ap(tiles[0], DT::Float32, 0, {{100, 128}, {1, 100}}),
                 ap(t, DT::Float32, 0, {{100, 128}, {1, 100}})},
                81));
  // 400 B per partition each, but PSUM tensors are placed on 2 KiB banks: the 9th does not fit.
  const std::string msg = error_of([&] { p.finalize(); });
  EXPECT_NE(msg.find("PSUM capacity exceeded"), std::string::npos) << msg;
  EXPECT_NE(msg.find("(9 of 8 banks)"), std::string::npos) << msg;
}

TEST(NkiCore, GpSimdCannotReachPsum) {
  nki::Program p(nki::Target{});
  const int ps = buffer(p, nki::Mem::Psum, DT::Int32, {128, 16}, "ps");
  Instr in =
      instr(p, Op::Iota, nki::Engine::GpSimd, {ap(ps, DT::Int32, 0, {{16, 128}, {1, 16}})}, 90);
  in.i[0] = 1;
  in.i[1] = 1;
  in.i[2] = 16;
  const std::string msg = error_of([&] { p.add(in); });
  EXPECT_NE(msg.find("GpSimd Engine cannot access"), std::string::npos) << msg;
}

namespace {

// for i in range(trip): (nothing) -- a runtime loop with an empty body.
std::shared_ptr<nki::Program> empty_loop(int64_t trip) {
  auto p = std::make_shared<nki::Program>(nki::Target{});
  const int r = p->add_register();
  Instr lb;
  lb.op = Op::LoopBegin;
  lb.engine = nki::Engine::Sync;
  lb.i = {r, -1, 0, -1, trip, 1, -1};
  lb.loc = p->intern("spin.py:7");
  p->add(lb);
  Instr le;
  le.op = Op::LoopEnd;
  le.engine = nki::Engine::Sync;
  le.loc = lb.loc;
  p->add(le);
  p->finalize();
  return p;
}

struct EnvVar {
  const char* name;
  EnvVar(const char* n, const char* v) : name(n) { setenv(n, v, 1); }
  ~EnvVar() { unsetenv(name); }
};

}  // namespace

TEST(NkiLimits, RunawayLoopFailsNamingTheLoopAndTheVariable) {
  EXPECT_EQ(nki::ExecOptions{}.max_loop_iterations, int64_t{1} << 24);
  unsetenv("NEURON_EMU_NKI_MAX_LOOP_ITERATIONS");
  EXPECT_EQ(nki::max_loop_iterations_from_env(), int64_t{1} << 24);
  auto p = empty_loop(int64_t{1} << 40);
  auto core = nki::acquire_core(p->target());
  nki::ExecOptions opt;
  opt.max_loop_iterations = 1000;
  try {
    nki::execute(*p, *core, {}, opt, nullptr);
    FAIL() << "no error";
  } catch (const nki::NkiError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("spin.py:7"), std::string::npos) << msg;
    EXPECT_NE(msg.find("ran more than 1000 iterations"), std::string::npos) << msg;
    EXPECT_NE(msg.find("raise NEURON_EMU_NKI_MAX_LOOP_ITERATIONS (now 1000)"), std::string::npos)
        << msg;
  }
}

TEST(NkiLimits, BadLimitAndCheckValuesNameTheVariable) {
  for (const char* bad : {"-5", "abc", "0"}) {
    EnvVar env("NEURON_EMU_NKI_MAX_LOOP_ITERATIONS", bad);
    try {
      nki::max_loop_iterations_from_env();
      FAIL() << bad << " accepted";
    } catch (const neuron::rt::ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("NEURON_EMU_NKI_MAX_LOOP_ITERATIONS=") + bad),
                std::string::npos);
    }
  }
  {
    EnvVar env("NEURON_EMU_NKI_CHECK", "bogus");
    EXPECT_THROW(nki::check_policy_from_env(), neuron::rt::ConfigError);
  }
  for (auto [v, want] : {std::pair{"always", nki::CheckPolicy::Always}, {"never", nki::CheckPolicy::Never},
                         {"first", nki::CheckPolicy::First}, {" Off ", nki::CheckPolicy::Never}}) {
    EnvVar env("NEURON_EMU_NKI_CHECK", v);
    EXPECT_EQ(nki::check_policy_from_env(), want) << v;
  }
}

TEST(NkiLimits, InterruptStopsARunningKernel) {
  auto p = empty_loop(int64_t{1} << 40);
  std::exception_ptr err;
  std::atomic<bool> done{false};
  std::thread worker([&] {
    try {
      auto core = nki::acquire_core(p->target());
      nki::ExecOptions opt;
      opt.max_loop_iterations = int64_t{1} << 50;
      nki::execute(*p, *core, {}, opt, nullptr);
    } catch (...) {
      err = std::current_exception();
    }
    done = true;
  });
  // What an interrupted host wait does; repeated in case the kernel had not started yet.
  while (!done) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    neuron::rt::request_interrupt();
  }
  worker.join();
  ASSERT_TRUE(err);
  try {
    std::rethrow_exception(err);
  } catch (const nki::NkiError& e) {
    EXPECT_EQ(e.kind(), "interrupted");
    EXPECT_NE(std::string(e.what()).find("interrupted (Ctrl-C)"), std::string::npos) << e.what();
  }
}

// ---------------------------------------------------------------------------------------------
// LNC=2 launches: the instances of a grid run at the same time (one per physical core of the
// logical core), meet at core_barrier and exchange tiles with sendrecv; a rendezvous that
// cannot complete fails as a deadlock; the cost model synchronises their timelines.

namespace {

constexpr int64_t P = 128, F = 32;

Ap full(int32_t buf, int64_t off = 0) { return ap(buf, DT::Float32, off, {{F, P}, {1, F}}); }

Instr sendrecv(nki::Program& p, int32_t dst, int32_t src, int to, int from, int line) {
  using FX = nki::isa::Fields<Op::SendRecv>;
  Instr in = instr(p, Op::SendRecv, nki::Engine::Dma, {full(dst), full(src)}, line);
  in.i[FX::slot<"send_to_rank">] = to;
  in.i[FX::slot<"recv_from_rank">] = from;
  return in;
}

// Instance r: out[r] = the a[1 - r] tile, moved between the cores by sendrecv (exchange) or
// only its own tile when `exchange` is false.
std::shared_ptr<nki::Program> swap_program(int r, bool exchange) {
  auto p = std::make_shared<nki::Program>(nki::Target{});
  const int a = buffer(*p, nki::Mem::Hbm, DT::Float32, {2, P, F}, "a", true);
  const int out = buffer(*p, nki::Mem::Hbm, DT::Float32, {2, P, F}, "out");
  const int mine = buffer(*p, nki::Mem::Sbuf, DT::Float32, {P, F}, "mine");
  const int theirs = buffer(*p, nki::Mem::Sbuf, DT::Float32, {P, F}, "theirs");
  p->add(instr(*p, Op::DmaCopy, nki::Engine::Dma, {full(mine), full(a, r * P * F)}, 10));
  if (exchange) {
    p->add(sendrecv(*p, theirs, mine, 1 - r, 1 - r, 11));
    p->add(instr(*p, Op::DmaCopy, nki::Engine::Dma, {full(out, r * P * F), full(theirs)}, 12));
  } else {
    p->add(instr(*p, Op::DmaCopy, nki::Engine::Dma, {full(out, r * P * F), full(mine)}, 12));
  }
  p->finalize();
  return p;
}

std::vector<std::vector<nki::HbmArg>> args_for(std::vector<float>& a, std::vector<float>& out,
                                               int n) {
  std::vector<std::vector<nki::HbmArg>> args;
  for (int i = 0; i < n; ++i)
    args.push_back({nki::HbmArg{reinterpret_cast<uint8_t*>(a.data()),
                                static_cast<int64_t>(a.size() * 4), "a", true, false},
                    nki::HbmArg{reinterpret_cast<uint8_t*>(out.data()),
                                static_cast<int64_t>(out.size() * 4), "out", false, false}});
  return args;
}

}  // namespace

TEST(NkiLnc, SendRecvSwapsTilesBetweenConcurrentInstances) {
  std::vector<float> a(2 * P * F), out(2 * P * F, 0.0f);
  std::mt19937 g(3);
  std::normal_distribution<float> d;
  for (auto& x : a) x = d(g);
  auto p0 = swap_program(0, true), p1 = swap_program(1, true);
  for (bool check : {false, true}) {
    nki::LaunchOptions opt;
    opt.physical_cores = 2;
    opt.check_uninit = check;
    nki::run_launch({p0.get(), p1.get()}, args_for(a, out, 2), opt);
    for (int64_t i = 0; i < P * F; ++i) {
      ASSERT_EQ(out[static_cast<size_t>(i)], a[static_cast<size_t>(P * F + i)]);
      ASSERT_EQ(out[static_cast<size_t>(P * F + i)], a[static_cast<size_t>(i)]);
    }
  }
}

TEST(NkiLnc, APeerThatNeverArrivesIsADeadlockNamingBothCores) {
  std::vector<float> a(2 * P * F, 1.0f), out(2 * P * F, 0.0f);
  auto p0 = swap_program(0, false), p1 = swap_program(1, true);
  nki::LaunchOptions opt;
  opt.physical_cores = 2;
  try {
    nki::run_launch({p0.get(), p1.get()}, args_for(a, out, 2), opt);
    FAIL() << "expected a deadlock";
  } catch (const nki::NkiError& e) {
    const std::string m = e.what();
    EXPECT_EQ(e.kind(), "deadlock");
    EXPECT_NE(m.find("core 0 has finished its program"), std::string::npos) << m;
    EXPECT_NE(m.find("core 1 waits in nki.isa.sendrecv at kernel.py:11 for the tile of rank 0"),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("(grid instance 1 of 2)"), std::string::npos) << m;
  }
}

TEST(NkiLnc, OneCorePerLogicalCoreHasNoPeerToExchangeWith) {
  std::vector<float> a(2 * P * F, 1.0f), out(2 * P * F, 0.0f);
  auto p0 = swap_program(0, true), p1 = swap_program(1, true);
  nki::LaunchOptions opt;
  opt.physical_cores = 1;
  try {
    nki::run_launch({p0.get(), p1.get()}, args_for(a, out, 2), opt);
    FAIL() << "expected an error";
  } catch (const nki::NkiError& e) {
    EXPECT_NE(std::string(e.what()).find("send_to_rank 1 is not a core of this logical core"),
              std::string::npos)
        << e.what();
  }
}

TEST(NkiLnc, EstimateRunsAWaveConcurrentlyAndSynchronisesAtTheExchange) {
  auto p0 = swap_program(0, true), p1 = swap_program(1, true);
  std::vector<double> off;
  const auto est = nki::estimate_launch({p0.get(), p1.get()}, {}, 2, 0, &off);
  ASSERT_EQ(est.size(), 2u);
  EXPECT_EQ(off[0], 0.0);
  EXPECT_EQ(off[1], 0.0);  // one wave: both cores start together
  EXPECT_DOUBLE_EQ(est[0].total_ns, est[1].total_ns);
  ASSERT_EQ(est[0].rendezvous_ns.size(), 1u);
  // load, exchange, store in sequence: each at least the DMA fixed (semaphore) latency.
  const nki::CostParams cp;
  EXPECT_GE(est[0].total_ns, 3 * cp.dma_fixed_ns);
  // One physical core: two waves, one after the other.
  const auto seq = nki::estimate_launch({p0.get(), p1.get()}, {}, 1, 0, &off);
  EXPECT_DOUBLE_EQ(off[1], seq[0].total_ns);
  EXPECT_DOUBLE_EQ(nki::nki_launch_ns({p0.get(), p1.get()}, 2), est[0].total_ns);
}
