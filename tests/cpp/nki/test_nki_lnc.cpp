// LNC=2 launches without Python: the instances of a grid run at the same time (one per
// physical core of the logical core), meet at core_barrier and exchange tiles with sendrecv;
// a rendezvous that cannot complete fails as a deadlock; the cost model synchronises the
// instances' timelines.
#include <gtest/gtest.h>

#include <random>

#include "nki/cost_model.h"
#include "nki/device_time.h"
#include "nki/error.h"
#include "nki/launch.h"
#include "nki/program.h"

namespace nki = neuron::nki;
using nki::Ap;
using nki::DT;
using nki::Instr;
using nki::Op;

namespace {

constexpr int64_t P = 128, F = 32;

Ap full(int32_t buf, int64_t off = 0) {
  Ap a;
  a.buf = buf;
  a.dtype = DT::Float32;
  a.offset = off;
  a.step[0] = F;
  a.num[0] = P;
  a.step[1] = 1;
  a.num[1] = F;
  a.ndim = 2;
  return a;
}

int32_t buffer(nki::Program& p, nki::Mem m, std::vector<int64_t> shape, const char* name,
               bool input = false) {
  nki::Buffer b;
  b.mem = m;
  b.dtype = DT::Float32;
  b.shape = std::move(shape);
  b.name = name;
  b.is_input = input;
  b.loc = p.intern("lnc.py:1");
  return p.add_buffer(std::move(b));
}

Instr instr(nki::Program& p, Op op, nki::Engine e, std::initializer_list<Ap> aps, int line) {
  Instr in;
  in.op = op;
  in.engine = e;
  for (const Ap& a : aps) in.ap[in.nap++] = a;
  in.loc = p.intern("lnc.py:" + std::to_string(line));
  return in;
}

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
  const int a = buffer(*p, nki::Mem::Hbm, {2, P, F}, "a", true);
  const int out = buffer(*p, nki::Mem::Hbm, {2, P, F}, "out");
  const int mine = buffer(*p, nki::Mem::Sbuf, {P, F}, "mine");
  const int theirs = buffer(*p, nki::Mem::Sbuf, {P, F}, "theirs");
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
    EXPECT_NE(m.find("core 1 waits in nki.isa.sendrecv at lnc.py:11 for the tile of rank 0"),
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
