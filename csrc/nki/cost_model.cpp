#include "cost_model.h"

#include "collective.h"
#include "device_time.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <deque>
#include <map>
#include <tuple>

namespace neuron::nki {

CostParams CostParams::for_version(int nc_version) {
  CostParams p;
  if (nc_version <= 2) {  // NeuronCore-v2 (Trn1/Inf2)
    p.tensor_ghz = 2.8;
    p.vector_ghz = 1.12;
    p.scalar_ghz = 1.4;
    p.gpsimd_ghz = 1.4;
    p.sync_ghz = 1.4;
    p.dma_bytes_per_ns = 17.0;
    p.peak_bf16_tflops = 92.0;
    p.peak_fp8_tflops = 92.0;
    p.peak_fp32_tflops = 23.0;
    p.hbm_bytes_per_ns = 410.0;  // 820 GB/s per chip / 2 NeuronCores
  }
  return p;
}

namespace {

bool is16(DT t) { return t == DT::BFloat16 || t == DT::Float16; }

// Elements of the innermost run that is contiguous in memory (on chip a run never spans
// partitions: every partition is its own descriptor).
int64_t contiguous_run(const Ap& a, bool on_chip) {
  int64_t run = 1, expect = 1;
  for (int d = a.ndim - 1; d >= (on_chip ? 1 : 0); --d) {
    if (a.num[d] == 1) continue;
    if (a.step[d] != expect) break;
    run *= a.num[d];
    expect *= a.num[d];
  }
  return run;
}

bool inner_contiguous(const Ap& a) {
  return a.ndim <= 1 || a.step[a.ndim - 1] == 1 || a.num[a.ndim - 1] == 1;
}

double cyc(double cycles, double ghz) { return cycles / ghz; }

}  // namespace

// What every cost function sees of its instruction.
namespace isa {
struct CostCtx {
  const Program& prog;
  const Instr& in;
  const CostParams& p;
  double mii;  // minimum initiation interval (cycles)
  double eg;   // clock of the issuing engine (GHz)
  int64_t N;   // free size of the main input (operand 1, else 0)
  bool v3;     // NeuronCore-v3 or newer
  Mem mem(int k) const { return prog.buffers()[in.ap[k].buf].mem; }
  bool has(int k) const { return k < in.nap && in.ap[k].present(); }
  double cycles(double n) const { return cyc(n, eg); }
  double at_least_mii(double n) const { return cyc(std::max(mii, n), eg); }
};
}  // namespace isa

namespace {
double engine_ghz(Engine e, const CostParams& p) {
  switch (e) {
    case Engine::Tensor:
      return p.tensor_ghz;
    case Engine::Vector:
      return p.vector_ghz;
    case Engine::Scalar:
      return p.scalar_ghz;
    case Engine::GpSimd:
      return p.gpsimd_ghz;
    default:
      return p.sync_ghz;
  }
}
}  // namespace

InstrCost instr_cost(const Program& prog, int32_t idx, const CostParams& p) {
  const Instr& in = prog.instrs()[idx];
  InstrCost c;
  c.engine = in.engine;
  auto has = [&](int k) { return k < in.nap && in.ap[k].present(); };
  const int64_t N =
      in.nap > 1 && has(1) ? in.ap[1].free_size() : (has(0) ? in.ap[0].free_size() : 1);
  const isa::CostCtx ctx{prog,
                         in,
                         p,
                         static_cast<double>(p.min_ii),
                         engine_ghz(in.engine, p),
                         N,
                         prog.target().nc_version >= 3};
  in.def().cost(ctx, c);
  return c;
}

// ---------------------------------------------------------------------------------------------
// Per-instruction costs (isa.def): engine occupancy from the documented formulas.

namespace isa::cost {

// A DMA transfer of src to dst: queues by partitions (or 2 KiB chunks), bytes at the
// per-queue rate plus a descriptor per contiguous run, the fixed latency on top.
static void dma_transfer(const CostCtx& x, int kd, int ks, bool transpose, InstrCost& c) {
  const CostParams& p = x.p;
  c.engine = Engine::Dma;
  const Ap &d = x.in.ap[kd], &s = x.in.ap[ks];
  const Mem dm = x.mem(kd), sm = x.mem(ks);
  const int64_t n = d.numel();
  const int64_t sb = n * dt_size(s.dtype), db = n * dt_size(d.dtype);
  if (sm == Mem::Hbm) c.hbm_read = sb;
  if (dm == Mem::Hbm) c.hbm_written = db;
  int64_t parts = 0;
  if (dm != Mem::Hbm) parts = d.num[0];
  if (sm != Mem::Hbm) parts = std::max(parts, s.step[0] == 0 ? d.num[0] : s.num[0]);
  const int64_t bytes = std::max(sb, db);
  int q = parts > 0 ? static_cast<int>((parts + p.partitions_per_dma_engine - 1) /
                                       p.partitions_per_dma_engine)
                    : static_cast<int>(std::max<int64_t>(1, bytes / 2048));
  q = std::clamp(q, 1, p.dma_engines);
  const int64_t run = std::max<int64_t>(
      1, std::min(contiguous_run(d, dm != Mem::Hbm), contiguous_run(s, sm != Mem::Hbm)));
  // A DMA transpose moves whole partition rows cooperatively (one descriptor per row).
  const double chunks = transpose ? static_cast<double>(std::max<int64_t>(parts, 1))
                                  : static_cast<double>(n) / static_cast<double>(run);
  double data =
      static_cast<double>(bytes) / q / p.dma_bytes_per_ns + chunks / q * p.dma_descriptor_ns;
  if (transpose) data /= (sm == Mem::Hbm ? 0.9 : 0.5);  // DMA transpose efficiency
  c.ns = data;
  c.queues = q;
  c.latency_ns = p.dma_fixed_ns;
}

void DmaCopy(const CostCtx& x, InstrCost& c) {
  using FX = Fields<Op::DmaCopy>;
  dma_transfer(x, FX::k<"dst">, FX::k<"src">, FX{x.in}.flag<"is_transpose">(), c);
}

// A gather/scatter: a DMA of the same bytes, one descriptor chain per index.
void DmaIndirect(const CostCtx& x, InstrCost& c) {
  using FX = Fields<Op::DmaIndirect>;
  dma_transfer(x, FX::k<"dst">, FX::k<"src">, false, c);
}

// DMA compute: every source streams through the DMA engines into the destination (one
// transfer per source, the destination written once); the fp32 arithmetic is pipelined with
// the transfer and adds no time of its own (the docs give no separate rate).
void DmaCompute(const CostCtx& x, InstrCost& c) {
  using FX = Fields<Op::DmaCompute>;
  constexpr int kd = FX::k<"dst">;
  dma_transfer(x, kd, FX::k<"src0">, false, c);
  for (int k = FX::k<"src1">; k <= FX::k<"src3">; ++k) {
    if (k >= x.in.nap || !x.in.ap[k].present()) continue;
    InstrCost one;
    dma_transfer(x, kd, k, false, one);
    c.ns += one.ns;
    c.hbm_read += one.hbm_read;
  }
}

// The read-modify-write of a gather/scatter-add: the destination entries are read too.
void DmaComputeIndirect(const CostCtx& x, InstrCost& c) {
  using FX = Fields<Op::DmaComputeIndirect>;
  InstrCost rd;
  dma_transfer(x, FX::k<"dst">, FX::k<"dst">, false, rd);
  dma_transfer(x, FX::k<"dst">, FX::k<"src">, false, c);
  c.ns += rd.ns;
  c.hbm_read += rd.hbm_read;
}

// sendrecv: the tile crosses to the peer core's memory as one DMA transfer; its fixed latency
// (dma_fixed_ns) is the cross-core semaphore hand-off. The wait for the peer is the
// scheduler's (estimate_launch synchronises the cores' timelines at the rendezvous).
void SendRecv(const CostCtx& x, InstrCost& c) {
  using FX = Fields<Op::SendRecv>;
  dma_transfer(x, FX::k<"dst">, FX::k<"src">, false, c);
}

void Matmul(const CostCtx& x, InstrCost& c) {
  const Fields<Op::Matmul> f{x.in};
  const Ap &s = f.ap<"stationary">(), &m = f.ap<"moving">();
  const bool dbl = f.i<"perf_mode">() == 1, transpose = f.flag<"is_transpose">();
  const double ns_free = static_cast<double>(s.free_size()) / (dbl ? 2 : 1);
  const double nm_free = static_cast<double>(m.free_size()) / (dbl ? 2 : 1);
  double cycles = std::max(std::min(64.0, ns_free), nm_free);
  if (s.dtype == DT::Float32) cycles *= transpose ? 2.0 : 4.0;
  c.engine = Engine::Tensor;
  c.ns = cyc(cycles, x.p.tensor_ghz);
  const double K = static_cast<double>(s.num[0]) * (dbl ? 2 : 1);
  if (!transpose) c.flops = 2.0 * ns_free * nm_free * K;
}

void Transpose(const CostCtx& x, InstrCost& c) {
  const Ap& d = Fields<Op::Transpose>{x.in}.ap<"data">();
  if (x.in.engine == Engine::Tensor) {
    c.ns = cyc(std::max<double>(static_cast<double>(d.num[0]),
                                std::min<double>(64.0, static_cast<double>(d.free_size()))),
               x.p.tensor_ghz);
  } else {
    c.ns = x.at_least_mii(static_cast<double>(x.N));
  }
}

void TensorTensor(const CostCtx& x, InstrCost& c) {
  using FX = Fields<Op::TensorTensor>;
  const FX f{x.in};
  constexpr int k1 = FX::k<"data1">, k2 = FX::k<"data2">;
  const bool one_psum = (x.mem(k1) == Mem::Psum) != (x.mem(k2) == Mem::Psum);
  const bool fast16 =
      is16(f.ap<"dst">().dtype) && is16(f.ap<"data1">().dtype) && is16(f.ap<"data2">().dtype) &&
      x.mem(k1) == Mem::Sbuf && x.mem(k2) == Mem::Sbuf &&
      (x.v3 || (inner_contiguous(f.ap<"data1">()) && inner_contiguous(f.ap<"data2">())));
  c.ns = x.at_least_mii(static_cast<double>(one_psum || fast16 ? x.N : 2 * x.N));
}

// tensor_scalar and tensor_copy: 2x/4x modes for 16-bit SBUF operands on NeuronCore-v3.
static void scalar_mode(const CostCtx& x, InstrCost& c) {
  double mode = 1;
  if (x.v3 && x.in.engine == Engine::Vector && is16(x.in.ap[0].dtype) && is16(x.in.ap[1].dtype)) {
    const bool sbuf = x.mem(0) == Mem::Sbuf && x.mem(1) == Mem::Sbuf;
    const bool contig = inner_contiguous(x.in.ap[0]) && inner_contiguous(x.in.ap[1]);
    mode = sbuf && contig ? 4 : 2;
  }
  c.ns = x.at_least_mii(static_cast<double>(x.N) / mode);
}
void TensorScalar(const CostCtx& x, InstrCost& c) {
  static_assert(Fields<Op::TensorScalar>::k<"dst"> == 0 &&
                Fields<Op::TensorScalar>::k<"data"> == 1);
  scalar_mode(x, c);
}
void TensorCopy(const CostCtx& x, InstrCost& c) {
  static_assert(Fields<Op::TensorCopy>::k<"dst"> == 0 && Fields<Op::TensorCopy>::k<"src"> == 1);
  scalar_mode(x, c);
}

void Memset(const CostCtx& x, InstrCost& c) {
  const Fields<Op::Memset> f{x.in};
  const bool fast = f.imm<"value">() == 0.0 && is16(f.ap<"dst">().dtype);
  c.ns = x.at_least_mii(static_cast<double>(x.N) / (fast ? 2 : 1));
}

void Iota(const CostCtx& x, InstrCost& c) {
  c.ns = cyc(150.0 + static_cast<double>(x.in.ap[0].free_size()), x.p.gpsimd_ghz);
}
void AffineSelect(const CostCtx& x, InstrCost& c) { Iota(x, c); }

void TensorReduce(const CostCtx& x, InstrCost& c) {
  const Fields<Op::TensorReduce> f{x.in};
  const Alu op = f.alu<"op">();
  const bool fast = f.ap<"dst">().dtype == DT::BFloat16 && f.ap<"data">().dtype == DT::BFloat16 &&
                    (op == Alu::Add || op == Alu::Max);
  c.ns = x.at_least_mii(static_cast<double>(x.N) / (fast ? 2 : 1));
}

void PartitionReduce(const CostCtx& x, InstrCost& c) {
  const Fields<Op::PartitionReduce> f{x.in};
  c.ns = cyc(150.0 + static_cast<double>(x.N) * static_cast<double>(f.ap<"data">().num[0]) / 8.0,
             x.p.gpsimd_ghz);
}

void Activation(const CostCtx& x, InstrCost& c) {
  const Fields<Op::Activation> f{x.in};
  const bool reduces = f.i<"reduce_op">() >= 0 || f.has<"reduce_res">();
  c.ns = x.cycles(std::max(x.mii, static_cast<double>(x.N)) + (reduces ? x.mii : 0.0));
}

void Reciprocal(const CostCtx& x, InstrCost& c) {
  c.ns = x.at_least_mii(static_cast<double>(x.in.engine == Engine::Vector ? 8 * x.N : x.N));
}

void TensorTensorScan(const CostCtx& x, InstrCost& c) {
  c.ns = x.at_least_mii(static_cast<double>(2 * x.N));
}

// An elementwise pass plus a reduction into the engine's registers.
static void reduce_pass(const CostCtx& x, InstrCost& c) {
  c.ns = x.cycles(std::max(x.mii, static_cast<double>(x.N)) + x.mii);
}
void TensorScalarReduce(const CostCtx& x, InstrCost& c) { reduce_pass(x, c); }
void SelectReduce(const CostCtx& x, InstrCost& c) { reduce_pass(x, c); }
void RangeSelect(const CostCtx& x, InstrCost& c) { reduce_pass(x, c); }

void ScalarTensorTensor(const CostCtx& x, InstrCost& c) {
  const Fields<Op::ScalarTensorTensor> f{x.in};
  const bool fast = f.ap<"data">().dtype == DT::BFloat16 &&
                    f.ap<"operand1">().dtype == DT::BFloat16 && f.alu<"op0">() == Alu::Subtract &&
                    f.alu<"op1">() == Alu::Multiply && x.N % 2 == 0;
  c.ns = x.at_least_mii(static_cast<double>(fast ? x.N : 2 * x.N));
}

// One pass over the input at one element per cycle.
static void one_pass(const CostCtx& x, InstrCost& c) {
  c.ns = x.at_least_mii(static_cast<double>(x.N));
}
void CopyPredicated(const CostCtx& x, InstrCost& c) { one_pass(x, c); }
void TensorScalarCumulative(const CostCtx& x, InstrCost& c) { one_pass(x, c); }
void BnStats(const CostCtx& x, InstrCost& c) { one_pass(x, c); }
void Max8(const CostCtx& x, InstrCost& c) { one_pass(x, c); }
void FindIndex8(const CostCtx& x, InstrCost& c) { one_pass(x, c); }
void MatchReplace8(const CostCtx& x, InstrCost& c) { one_pass(x, c); }
// Assumption (cost-model.md): the GpSimd fixed cost of iota plus one source element per cycle
// (the eight cores scan their rows in parallel).
void NonzeroWithCount(const CostCtx& x, InstrCost& c) {
  c.ns = cyc(150.0 + static_cast<double>(x.in.ap[Fields<Op::NonzeroWithCount>::k<"src">].free_size()),
             x.p.gpsimd_ghz);
}
// Assumption (cost-model.md): the GpSimd fixed cost of iota plus one gathered element per cycle.
void NGather(const CostCtx& x, InstrCost& c) {
  c.ns = cyc(150.0 + static_cast<double>(x.in.ap[Fields<Op::NGather>::k<"dst">].free_size()),
             x.p.gpsimd_ghz);
}
// Assumption (cost-model.md): the iota fixed cost plus one index per cycle on each GpSimd core
// (the num_elem_per_idx contiguous elements of an index are read together).
void LocalGather(const CostCtx& x, InstrCost& c) {
  const Fields<Op::LocalGather> f{x.in};
  c.ns = cyc(150.0 + static_cast<double>(f.i<"num_valid_indices">()), x.p.gpsimd_ghz);
}
// The documented estimate: 4 n + K GpSimd cycles (every 16-partition core in parallel).
void TopK(const CostCtx& x, InstrCost& c) {
  const int64_t K = x.in.ap[Fields<Op::TopK>::k<"val_dst">].free_size();
  c.ns = cyc(4.0 * static_cast<double>(Fields<Op::TopK>{x.in}.i<"n">()) + static_cast<double>(K),
             x.p.gpsimd_ghz);
}
// Assumption (cost-model.md): the iota fixed cost plus a forward and a backward scan of the ids.
void SequenceBounds(const CostCtx& x, InstrCost& c) {
  c.ns = cyc(150.0 + 2.0 * static_cast<double>(x.in.ap[Fields<Op::SequenceBounds>::k<"segment_ids">].free_size()),
             x.p.gpsimd_ghz);
}
void StreamShuffle(const CostCtx& x, InstrCost& c) { one_pass(x, c); }

void BnAggr(const CostCtx& x, InstrCost& c) {
  c.ns = x.at_least_mii(13.0 * static_cast<double>(x.N) / 3.0);
}

// Random numbers. Assumptions (cost-model.md): the Vector Engine draws one 32-bit value per lane
// per cycle before NeuronCore-v4 and four from v4 (its four generators per lane); GpSimd pays the
// iota fixed cost plus one value per cycle; moving the state is one word per cycle.
static double draws_per_cycle(const CostCtx& x) {
  return x.in.engine == Engine::Vector && x.prog.target().nc_version >= 4 ? 4.0 : 1.0;
}
static void random_pass(const CostCtx& x, int64_t n, InstrCost& c) {
  if (x.in.engine == Engine::GpSimd) {
    c.ns = cyc(150.0 + static_cast<double>(n), x.p.gpsimd_ghz);
  } else {
    c.ns = x.at_least_mii(static_cast<double>(n) / draws_per_cycle(x));
  }
}
void Rng(const CostCtx& x, InstrCost& c) { random_pass(x, x.in.ap[0].free_size(), c); }
void Rand2(const CostCtx& x, InstrCost& c) {
  random_pass(x, x.in.ap[Fields<Op::Rand2>::k<"dst">].free_size(), c);
}
void Dropout(const CostCtx& x, InstrCost& c) { random_pass(x, x.N, c); }
void SetRngSeed(const CostCtx& x, InstrCost& c) { c.ns = x.at_least_mii(1.0); }
static void state_move(const CostCtx& x, InstrCost& c) {
  const auto words = static_cast<double>(x.in.ap[0].free_size());
  c.ns = x.in.engine == Engine::GpSimd ? cyc(150.0 + words, x.p.gpsimd_ghz) : x.at_least_mii(words);
}
void RandSetState(const CostCtx& x, InstrCost& c) { state_move(x, c); }
void RandGetState(const CostCtx& x, InstrCost& c) { state_move(x, c); }

// Registers and loop control on the Sync engine.
static void sync_op(const CostCtx& x, InstrCost& c) {
  c.engine = Engine::Sync;
  c.ns = cyc(x.mii, x.p.sync_ghz);
}
void RegMove(const CostCtx& x, InstrCost& c) { sync_op(x, c); }
void RegLoad(const CostCtx& x, InstrCost& c) { sync_op(x, c); }
void RegStore(const CostCtx& x, InstrCost& c) { sync_op(x, c); }
void LoopBegin(const CostCtx& x, InstrCost& c) { sync_op(x, c); }
void LoopEnd(const CostCtx& x, InstrCost& c) { sync_op(x, c); }
void WhileBegin(const CostCtx& x, InstrCost& c) { sync_op(x, c); }
void WhileEnd(const CostCtx& x, InstrCost& c) { sync_op(x, c); }
// core_barrier: a remote semaphore update to every peer and a local wait, one cross-core
// semaphore latency (dma_fixed_ns) after the last core arrives (estimate_launch).
void CoreBarrier(const CostCtx& x, InstrCost& c) {
  c.ns = x.at_least_mii(1);
  c.latency_ns = x.p.dma_fixed_ns;
}


// nki.collectives: collective_ns (device_time.h) of the replica group's ring over NeuronLink
// for the bytes of the operand it is defined on (the src of all_reduce / reduce_scatter /
// all_to_all / permutes, the dst of all_gather); a rendezvous of the group (estimate_launch).
// The group size is the replica group's (static), whatever the job's world.
static void collective(const CostCtx& x, InstrCost& c) {
  c.engine = Engine::Sync;
  coll::Info info;
  try {
    info = coll::info_of(x.prog, x.in);
  } catch (const std::invalid_argument&) {
    c.ns = x.at_least_mii(1);
    return;
  }
  Collective k = Collective::SendRecv;
  int ko = info.src;
  switch (info.kind) {
    case coll::Kind::AllReduce: k = Collective::AllReduce; break;
    case coll::Kind::AllGather: k = Collective::AllGather; ko = info.dst; break;
    case coll::Kind::ReduceScatter: k = Collective::ReduceScatter; break;
    case coll::Kind::AllToAll: k = Collective::AllToAll; break;
    default: break;
  }
  const Ap& a = x.in.ap[ko];
  const double bytes = static_cast<double>(a.numel() * dt_size(a.dtype));
  // A logical core's share of its chip's NeuronLink, on the default layout (LNC=2, four
  // logical cores per Trainium2 chip), as for the c10d collectives.
  const DeviceTimeParams base;
  const DeviceTimeParams dp =
      DeviceTimeParams::for_target(x.prog.target().nc_version, base.lnc, base.logical_cores_per_device);
  // A permute moves each rank's tile once, the cost of one ring step of a two-rank ring.
  const double ns = k == Collective::SendRecv ? collective_ns(k, bytes, 2, dp)
                                              : collective_ns(k, bytes, std::max(1, info.ranks), dp);
  c.ns = std::max(x.at_least_mii(1), ns);
}
void AllReduce(const CostCtx& x, InstrCost& c) { collective(x, c); }
void AllGather(const CostCtx& x, InstrCost& c) { collective(x, c); }
void ReduceScatter(const CostCtx& x, InstrCost& c) { collective(x, c); }
void AllToAll(const CostCtx& x, InstrCost& c) { collective(x, c); }
void CollectivePermute(const CostCtx& x, InstrCost& c) { collective(x, c); }
void PermuteImplicit(const CostCtx& x, InstrCost& c) { collective(x, c); }
void PermuteImplicitReduce(const CostCtx& x, InstrCost& c) { collective(x, c); }
void RankId(const CostCtx& x, InstrCost& c) { sync_op(x, c); }

}  // namespace isa::cost

double Estimate::utilization(Engine e) const {
  if (total_ns <= 0) return 0.0;
  const double lanes = e == Engine::Dma ? dma_queues : 1;
  return busy_ns[static_cast<int>(e)] / (total_ns * lanes);
}

namespace {

// A rectangle of a tensor: rows (partitions on chip, leading dims in HBM) x byte columns.
struct Box {
  int64_t r0, r1, c0, c1;  // inclusive
  bool overlaps(const Box& o) const { return r0 <= o.r1 && o.r0 <= r1 && c0 <= o.c1 && o.c0 <= c1; }
};

Box box_of(const Ap& a, int64_t dyn, const Buffer& b) {
  const int64_t es = dt_size(a.dtype);
  int64_t W = b.mem == Mem::Hbm
                  ? (b.shape.empty() ? b.total_bytes : b.shape.back() * dt_size(b.dtype))
                  : b.bytes_per_partition;
  W = std::max<int64_t>(W, 1);
  const int64_t off = (a.offset + dyn) * es;
  int64_t rlo = 0, rhi = 0, clo = 0, chi = 0, flo = off, fhi = off;
  bool clean = true;
  for (int d = 0; d < a.ndim; ++d) {
    const int64_t sb = a.step[d] * es, ext = sb * (a.num[d] - 1);
    (ext < 0 ? flo : fhi) += ext;
    if (a.num[d] == 1) continue;
    if (sb % W == 0) {
      (ext < 0 ? rlo : rhi) += ext / W;
    } else {
      (ext < 0 ? clo : chi) += ext;
    }
  }
  const int64_t r0 = off / W, c0 = off % W;
  Box bx{r0 + rlo, r0 + rhi, c0 + clo, c0 + chi + es - 1};
  if (bx.c0 < 0 || bx.c1 >= W) clean = false;
  if (!clean) bx = Box{flo / W, (fhi + es - 1) / W, 0, W - 1};
  return bx;
}

// Busy intervals of one DMA engine, kept merged.
class Timeline {
 public:
  // Earliest start >= t of a gap of length d.
  double earliest(double t, double d) const {
    auto it = busy_.upper_bound(t);
    if (it != busy_.begin()) {
      auto prev = std::prev(it);
      if (prev->second > t) t = prev->second;
    }
    for (; it != busy_.end(); ++it) {
      if (t + d <= it->first) return t;
      t = std::max(t, it->second);
    }
    return t;
  }
  void insert(double s, double e) {
    auto it = busy_.lower_bound(s);
    if (it != busy_.begin()) {
      auto prev = std::prev(it);
      if (prev->second >= s) {
        s = prev->first;
        e = std::max(e, prev->second);
        it = busy_.erase(prev);
      }
    }
    while (it != busy_.end() && it->first <= e) {
      e = std::max(e, it->second);
      it = busy_.erase(it);
    }
    busy_.emplace(s, e);
  }

 private:
  std::map<double, double> busy_;
};

struct Access {
  Box box;
  double end;
  bool write;
};

bool writes_operand(const Instr& in, int k) {
  return k < in.def().num_operands && in.def().operands[k].writes();
}

int lane_of(Engine e) {
  switch (e) {
    case Engine::Tensor:
      return 0;
    case Engine::Vector:
      return 1;
    case Engine::Scalar:
      return 2;
    case Engine::GpSimd:
      return 3;
    default:
      return 4;
  }
}

}  // namespace

namespace {
// Collectives are rendezvous of a rank's program too: they wait for everything before them and
// nothing after them starts before they end. Their peers are other ranks' programs, which a
// launch estimate does not see; within a launch they meet nobody (no release).
bool is_rendezvous(Op op) {
  return op == Op::CoreBarrier || op == Op::SendRecv || coll::moves_data(op);
}
}  // namespace

Estimate estimate(const Program& prog, const std::vector<ExecRecord>* trace, const CostParams& p,
                  size_t max_events, const std::vector<double>* release) {
  Estimate est;
  est.dma_queues = p.dma_engines;
  const auto& instrs = prog.instrs();
  const auto& bufs = prog.buffers();
  std::vector<InstrCost> costs(instrs.size());
  std::vector<bool> have(instrs.size(), false);
  std::vector<std::deque<Access>> acc(bufs.size());
  constexpr size_t kKeep = 64;
  double lane_free[5] = {0, 0, 0, 0, 0};
  // DMA engines serve many queues round robin, so a transfer that becomes ready early is not
  // held up by one issued before it in program order: each engine keeps its busy intervals
  // and a transfer takes the earliest gap at or after its ready time.
  std::vector<Timeline> q_busy(static_cast<size_t>(p.dma_engines));
  const size_t count = trace ? trace->size() : instrs.size();
  std::vector<int> qidx(static_cast<size_t>(p.dma_engines));
  // A rendezvous with the other cores (core_barrier, sendrecv) waits for everything issued
  // before it and for its peers (`release`); nothing after it starts before it ends.
  double fence = 0;
  size_t rendezvous = 0;

  for (size_t r = 0; r < count; ++r) {
    const int32_t idx = trace ? (*trace)[r].instr : static_cast<int32_t>(r);
    const Instr& in = instrs[idx];
    if (!trace && in.def().control) continue;
    if (!have[idx]) {
      costs[idx] = instr_cost(prog, idx, p);
      have[idx] = true;
    }
    const InstrCost& c = costs[idx];
    double ready = 0;
    Box boxes[kMaxOperands];
    for (int k = 0; k < in.nap; ++k) {
      if (!in.ap[k].present()) continue;
      const int64_t dyn = trace ? (*trace)[r].dyn[k] : 0;
      boxes[k] = box_of(in.ap[k], dyn, bufs[in.ap[k].buf]);
      const bool w = writes_operand(in, k);
      for (const Access& a : acc[in.ap[k].buf])
        if ((w || a.write) && a.end > ready && a.box.overlaps(boxes[k])) ready = a.end;
    }
    const bool rv = is_rendezvous(in.op);
    if (rv) {
      ready = std::max(ready, est.total_ns);
      est.rendezvous_ns.push_back(ready);
      if (release && rendezvous < release->size()) ready = std::max(ready, (*release)[rendezvous]);
      ++rendezvous;
    }
    ready = std::max(ready, fence);
    double start, end;
    if (c.engine == Engine::Dma) {
      const double at = ready + c.latency_ns;
      std::vector<double> fits(static_cast<size_t>(p.dma_engines));
      for (int q = 0; q < p.dma_engines; ++q) {
        qidx[q] = q;
        fits[static_cast<size_t>(q)] = q_busy[static_cast<size_t>(q)].earliest(at, c.ns);
      }
      std::partial_sort(qidx.begin(), qidx.begin() + c.queues, qidx.end(), [&](int a, int b) {
        return fits[static_cast<size_t>(a)] < fits[static_cast<size_t>(b)];
      });
      start = 1e300;
      end = 0;
      for (int j = 0; j < c.queues; ++j) {
        const double s = fits[static_cast<size_t>(qidx[j])];
        const double f = s + c.ns;
        q_busy[static_cast<size_t>(qidx[j])].insert(s, f);
        start = std::min(start, s);
        end = std::max(end, f);
        if (est.events.size() < max_events) {
          est.events.push_back({idx, 5 + qidx[j], s, c.ns});
        } else if (max_events) {
          est.events_truncated = true;
        }
      }
      est.busy_ns[static_cast<int>(Engine::Dma)] += c.ns * c.queues;
    } else {
      const int lane = lane_of(c.engine);
      start = std::max(ready, lane_free[lane]);
      end = start + c.ns;
      if (rv) end += c.latency_ns;  // the peers' semaphores
      lane_free[lane] = end;
      est.busy_ns[static_cast<int>(c.engine)] += c.ns;
      if (est.events.size() < max_events) {
        est.events.push_back({idx, lane, start, c.ns});
      } else if (max_events) {
        est.events_truncated = true;
      }
    }
    (void)start;
    if (rv) fence = end;
    for (int k = 0; k < in.nap; ++k) {
      if (!in.ap[k].present()) continue;
      auto& list = acc[in.ap[k].buf];
      list.push_back({boxes[k], end, writes_operand(in, k)});
      if (list.size() > kKeep) list.pop_front();
    }
    est.total_ns = std::max(est.total_ns, end);
    est.hbm_read_bytes += c.hbm_read;
    est.hbm_write_bytes += c.hbm_written;
    est.flops += c.flops;
    ++est.instructions;
  }
  return est;
}

std::vector<Estimate> estimate_launch(const std::vector<const Program*>& progs,
                                      const std::vector<const std::vector<ExecRecord>*>& traces,
                                      int cores, size_t max_events, std::vector<double>* offsets) {
  const size_t n = progs.size();
  const size_t P = static_cast<size_t>(std::max(1, cores));
  std::vector<Estimate> out(n);
  if (offsets) offsets->assign(n, 0.0);
  auto trace_of = [&](size_t i) { return i < traces.size() ? traces[i] : nullptr; };
  double wave_start = 0;
  for (size_t w0 = 0; w0 < n; w0 += P) {
    const size_t m = std::min(P, n - w0);
    // The rendezvous of each core in order, and who meets whom: the n-th barrier of a core
    // meets the n-th barrier of each core of its mask; a sendrecv meets the sendrecv of its
    // sender (same pipe, same ordinal) and of its receiver.
    struct Rv {
      bool barrier;
      uint32_t cores;
      std::vector<std::pair<size_t, size_t>> peers;  // (core, its rendezvous index)
    };
    std::vector<std::vector<Rv>> rvs(m);
    std::map<std::tuple<size_t, size_t, int64_t, int64_t>, std::pair<size_t, size_t>> sends, recvs;
    std::vector<std::vector<size_t>> barriers(m);
    size_t total_rv = 0;
    for (size_t r = 0; r < m; ++r) {
      const Program& prog = *progs[w0 + r];
      const auto* tr = trace_of(w0 + r);
      const size_t cnt = tr ? tr->size() : prog.instrs().size();
      std::map<std::tuple<size_t, int64_t>, int64_t> nsend, nrecv;
      for (size_t k = 0; k < cnt; ++k) {
        const Instr& in = prog.instrs()[tr ? (*tr)[k].instr : static_cast<int32_t>(k)];
        if (!is_rendezvous(in.op)) continue;
        const size_t j = rvs[r].size();
        Rv v{in.op == Op::CoreBarrier, 0, {}};
        if (coll::moves_data(in.op)) {
          // A collective meets the other ranks' cores, not this launch's: no peers here.
        } else if (v.barrier) {
          v.cores = static_cast<uint32_t>(isa::Fields<Op::CoreBarrier>{in}.i<"cores">());
          barriers[r].push_back(j);
        } else {
          const isa::Fields<Op::SendRecv> f{in};
          const auto to = static_cast<size_t>(f.i<"send_to_rank">());
          const auto from = static_cast<size_t>(f.i<"recv_from_rank">());
          const int64_t pipe = f.i<"pipe_id">();
          sends[{r, to, pipe, nsend[{to, pipe}]++}] = {r, j};
          recvs[{from, r, pipe, nrecv[{from, pipe}]++}] = {r, j};
        }
        rvs[r].push_back(std::move(v));
        ++total_rv;
      }
    }
    for (const auto& [key, at] : recvs) {  // receiver at.first meets the matching sender
      auto it = sends.find(key);
      if (it == sends.end()) continue;
      rvs[at.first][at.second].peers.push_back(it->second);
      rvs[it->second.first][it->second.second].peers.push_back(at);
    }
    for (size_t r = 0; r < m; ++r)
      for (size_t b = 0; b < barriers[r].size(); ++b) {
        Rv& v = rvs[r][barriers[r][b]];
        for (size_t c = 0; c < m; ++c)
          if (c != r && (v.cores >> c & 1u) && b < barriers[c].size())
            v.peers.emplace_back(c, barriers[c][b]);
      }
    // Each core's timeline, re-scheduled until every rendezvous starts when its last
    // participant arrives (releases only grow; each round settles at least one more).
    std::vector<std::vector<double>> release(m);
    for (size_t r = 0; r < m; ++r) release[r].assign(rvs[r].size(), 0.0);
    for (size_t round = 0; round <= total_rv + 1; ++round) {
      for (size_t r = 0; r < m; ++r) {
        const Program& prog = *progs[w0 + r];
        out[w0 + r] = estimate(prog, trace_of(w0 + r),
                               CostParams::for_version(prog.target().nc_version), max_events,
                               &release[r]);
      }
      bool changed = false;
      for (size_t r = 0; r < m; ++r)
        for (size_t j = 0; j < rvs[r].size(); ++j) {
          double t = release[r][j];
          for (const auto& [c, k] : rvs[r][j].peers)
            if (k < out[w0 + c].rendezvous_ns.size())
              t = std::max(t, out[w0 + c].rendezvous_ns[k]);
          if (t > release[r][j] + 1e-6) {
            release[r][j] = t;
            changed = true;
          }
        }
      if (!changed) break;
    }
    double wave = 0;
    for (size_t r = 0; r < m; ++r) {
      if (offsets) (*offsets)[w0 + r] = wave_start;
      wave = std::max(wave, out[w0 + r].total_ns);
    }
    wave_start += wave;
  }
  return out;
}

namespace {

std::string json_escape(const std::string& s) {
  std::string o;
  o.reserve(s.size());
  for (char ch : s) {
    switch (ch) {
      case '"':
        o += "\\\"";
        break;
      case '\\':
        o += "\\\\";
        break;
      case '\n':
        o += "\\n";
        break;
      default:
        if (static_cast<unsigned char>(ch) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", ch);
          o += buf;
        } else {
          o += ch;
        }
    }
  }
  return o;
}

}  // namespace

std::string timeline_json(const Program& prog, const Estimate& est, int pid,
                          const std::string& core_name, double offset_ns) {
  std::string out;
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"name\":\"%s\"}}",
                pid, json_escape(core_name).c_str());
  out += buf;
  static const char* lanes[5] = {"Tensor Engine", "Vector Engine", "Scalar Engine", "GpSimd Engine",
                                 "Sync Engine"};
  for (int l = 0; l < 5 + est.dma_queues; ++l) {
    std::string lname = l < 5 ? lanes[l] : "DMA queue " + std::to_string(l - 5);
    std::snprintf(
        buf, sizeof buf,
        ",{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":\"%s\"}}",
        pid, l, lname.c_str());
    out += buf;
    std::snprintf(buf, sizeof buf,
                  ",{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{"
                  "\"sort_index\":%d}}",
                  pid, l, l);
    out += buf;
  }
  for (const TimelineEvent& e : est.events) {
    const Instr& in = prog.instrs()[e.instr];
    std::string name(op_name(in.op));
    if (name.rfind("nki.isa.", 0) == 0) name = name.substr(8);
    std::snprintf(buf, sizeof buf,
                  ",{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.4f,"
                  "\"dur\":%.4f,"
                  "\"args\":{\"instruction\":%d,\"source\":\"",
                  json_escape(name).c_str(), e.lane < 5 ? lanes[e.lane] : "DMA", pid, e.lane,
                  (offset_ns + e.start_ns) / 1000.0, e.dur_ns / 1000.0, e.instr);
    out += buf;
    out += json_escape(prog.location(in));
    out += "\"";
    if (in.api >= 0) out += ",\"api\":\"" + json_escape(prog.str(in.api)) + "\"";
    out += "}}";
  }
  return out;
}

}  // namespace neuron::nki
