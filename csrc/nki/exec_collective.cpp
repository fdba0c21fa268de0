// nki.collectives: the ranks of a replica group exchange tensors. A rank is a logical core of
// the job: this process's rank in the process group whose rt::KernelLink is registered, or
// rank 0 of a world of one without a link. Each rank packs its source (row-major, the
// operand's access-pattern shape), the ranks exchange the packed bytes over the link (which
// first compares their descriptors, so mismatched calls fail naming both ranks), and each
// rank assembles its destination: reductions with kernels::collective_reduce in group order,
// so every rank gets the same bits.
#include <cstring>
#include <string>
#include <vector>

#include "collective.h"
#include "exec_internal.h"
#include "isa.h"
#include "kernels/collective_reduce.h"
#include "rendezvous.h"
#include "runtime/kernel_link.h"

namespace neuron::nki::isa::exec {
using namespace detail;

namespace {

struct World {
  std::shared_ptr<rt::KernelLink> link;
  int rank = 0, size = 1;
};

World world_of(Ctx& c) {
  World w;
  w.link = rt::kernel_link();
  if (w.link) {
    w.rank = w.link->rank();
    w.size = w.link->size();
  }
  return w;
}

// A contiguous row-major view of `like`'s shape over `data`.
View packed(const View& like, uint8_t* data) {
  View v = like;
  v.base = data;
  v.def = nullptr;
  int64_t st = v.es;
  for (int d = v.ndim - 1; d >= 0; --d) {
    v.stride[static_cast<size_t>(d)] = st;
    st *= v.num[static_cast<size_t>(d)];
  }
  return v;
}

std::string pack(Ctx& c, int k, const View& s) {
  std::string out(static_cast<size_t>(s.numel() * s.es), '\0');
  int64_t first_bad = -1;
  const int64_t bad = copy_view(packed(s, reinterpret_cast<uint8_t*>(out.data())), s, &first_bad);
  if (bad && c.check) {
    c.note_undefined(k);
    c.fail("uninitialized",
           "sends " + std::to_string(bad) + " element(s) derived from uninitialized memory (first at "
               "flat element " + std::to_string(first_bad) + ")" + c.undefined_origin(),
           "kernels read only memory they have written");
  }
  return out;
}

void unpack(const View& d, std::string& bytes) {
  int64_t first_bad = -1;
  copy_view(d, packed(d, reinterpret_cast<uint8_t*>(bytes.data())), &first_bad);
}

kernels::DType kernel_dtype(Ctx& c, DT t) {
  switch (t) {
    case DT::Int8: return kernels::DType::Int8;
    case DT::Int16: return kernels::DType::Int16;
    case DT::Int32: return kernels::DType::Int32;
    case DT::UInt8: return kernels::DType::UInt8;
    case DT::UInt16: return kernels::DType::UInt16;
    case DT::UInt32: return kernels::DType::UInt32;
    case DT::Float16: return kernels::DType::Float16;
    case DT::BFloat16: return kernels::DType::BFloat16;
    case DT::Float32: return kernels::DType::Float32;
    case DT::F8E4M3FN: return kernels::DType::Float8_e4m3fn;
    case DT::F8E5M2: return kernels::DType::Float8_e5m2;
    default:
      c.fail("unsupported", "reduces " + std::string(dt_name(t)) + " data",
             "collective reductions take integer, float32, float16, bfloat16, float8_e4m3fn or "
             "float8_e5m2 tensors");
  }
}

kernels::CollectiveOp kernel_op(Alu op) {
  return op == Alu::Max ? kernels::CollectiveOp::Max
                        : op == Alu::Min ? kernels::CollectiveOp::Min : kernels::CollectiveOp::Sum;
}

const char* kind_name(coll::Kind k) {
  switch (k) {
    case coll::Kind::AllReduce: return "all_reduce";
    case coll::Kind::AllGather: return "all_gather";
    case coll::Kind::ReduceScatter: return "reduce_scatter";
    case coll::Kind::AllToAll: return "all_to_all";
    case coll::Kind::Permute: return "collective_permute";
    case coll::Kind::Ring: return "collective_permute_implicit";
    case coll::Kind::RingReduce: return "collective_permute_implicit_reduce";
  }
  return "collective";
}

coll::Info info(Ctx& c) {
  try {
    return coll::info_of(c.prog, c.in());
  } catch (const std::invalid_argument& e) {
    c.fail("runtime", e.what(), "replica groups name each rank once, in groups of one size");
  }
}

// This rank's replica group (members in order) and its index in it; checks every named rank
// exists in the world.
std::pair<std::vector<int>, int> my_group(Ctx& c, const coll::Info& x, const World& w) {
  auto check = [&](int r) {
    if (r >= w.size)
      c.fail("runtime",
             "names rank " + std::to_string(r) + " but the job has " + std::to_string(w.size) +
                 " rank(s)" +
                 (w.link ? std::string() : std::string(" (no neuron process group: a world of one)")),
             "replica groups name ranks of the process group (torchrun with the neuron backend)");
  };
  for (const auto& g : x.groups)
    for (int r : g) check(r);
  for (const auto& [s, t] : x.pairs) {
    check(s);
    check(t);
  }
  if (x.kind == coll::Kind::Permute) return {{}, -1};
  auto gj = coll::group_of(x.groups, w.rank);
  if (gj.second < 0)
    c.fail("runtime",
           "rank " + std::to_string(w.rank) + " is in none of the replica groups " +
               coll::groups_text(x.groups),
           "every rank that runs a collective is in one of its replica groups");
  return gj;
}

// Every rank's packed contribution, by rank (only the group's entries are meaningful).
std::vector<std::string> exchange(Ctx& c, const World& w, const coll::Info& x, const View& s,
                                  std::string mine) {
  if (!w.link) return {std::move(mine)};
  rt::CollectiveDesc desc;
  // The kind, replica groups (or pairs) and kernel line are compared as the op's name.
  desc.op = std::string("nki.collectives.") + kind_name(x.kind) + " over " +
            (x.kind == coll::Kind::Permute ? coll::pairs_text(x.pairs) : coll::groups_text(x.groups)) + " at " +
            c.prog.location(c.in());
  desc.dtype = std::string(dt_name(s.dtype));
  desc.reduce = x.kind == coll::Kind::AllReduce || x.kind == coll::Kind::ReduceScatter ||
                        x.kind == coll::Kind::RingReduce
                    ? std::string(x.op == Alu::Max ? "max" : x.op == Alu::Min ? "min" : "add")
                    : std::string();
  for (int d = 0; d < s.ndim; ++d) desc.shape.push_back(s.num[static_cast<size_t>(d)]);
  desc.numel = static_cast<uint64_t>(s.numel());
  desc.tensors = 1;
  desc.bytes = mine.size();
  // At LNC>1 the physical cores of this rank take turns on the link (core s meets core s).
  CoreGroup* g = c.opt.group && c.opt.group->size() > 1 ? c.opt.group : nullptr;
  if (g) {
    desc.op += " (physical core " + std::to_string(c.opt.rank) + ")";
    g->take_turn(c.opt.rank, {c.prog.instr_name(c.in()), c.prog.location(c.in())});
  }
  struct Pass {
    CoreGroup* g;
    int rank;
    ~Pass() {
      if (g) g->end_turn(rank);
    }
  } pass{g, c.opt.rank};
  try {
    return w.link->all_gather(desc, mine);
  } catch (const std::exception& e) {
    c.fail("runtime", e.what(),
           "the ranks of a replica group make the same collective calls (a rank that fails or exits "
           "fails its peers)");
  }
}

// Splits the packed row-major tensor of shape `v` along `dim` into n chunks (n divides num[dim]):
// the byte ranges of chunk i are `outer` runs of `run` bytes at i*run + o*n*run.
struct Split {
  int64_t outer = 1, run = 0;
};
Split split_of(Ctx& c, const View& v, int dim, int64_t n, const char* what) {
  if (dim >= v.ndim)
    c.fail("runtime", std::string(what) + " along dimension " + std::to_string(dim) + " of a " +
                          std::to_string(v.ndim) + "-d tile",
           "collective_dim names a dimension of the tensors");
  if (v.num[static_cast<size_t>(dim)] % n)
    c.fail("runtime",
           std::string(what) + " splits dimension " + std::to_string(dim) + " (size " +
               std::to_string(v.num[static_cast<size_t>(dim)]) + ") over " + std::to_string(n) + " ranks",
           "the collective dimension is a multiple of the number of ranks in the group");
  Split sp;
  for (int d = 0; d < dim; ++d) sp.outer *= v.num[static_cast<size_t>(d)];
  sp.run = v.es * v.num[static_cast<size_t>(dim)] / n;
  for (int d = dim + 1; d < v.ndim; ++d) sp.run *= v.num[static_cast<size_t>(d)];
  return sp;
}
// Copies chunk `from_i` of the split `fs` of `src` into chunk `to_i` of the split `ts` of `dst`.
void move_chunk(std::string& dst, const Split& ts, int64_t to_i, int64_t tn, const std::string& src,
                const Split& fs, int64_t from_i, int64_t fn) {
  for (int64_t o = 0; o < ts.outer; ++o)
    std::memcpy(dst.data() + (o * tn + to_i) * ts.run, src.data() + (o * fn + from_i) * fs.run,
                static_cast<size_t>(ts.run));
}

void same_size(Ctx& c, const View& d, const View& s, int64_t dn, int64_t sn, const char* what) {
  if (d.dtype != s.dtype || d.numel() * sn != s.numel() * dn)
    c.fail("runtime",
           std::string(what) + " of a " + shape_str(s) + " src into a " + shape_str(d) + " dst",
           "the dst of a collective has the src's dtype and the size its kind gives it");
}

void reduce_into(Ctx& c, std::string& out, const std::vector<const void*>& parts, int64_t n, DT t,
                 Alu op) {
  try {
    kernels::collective_reduce(out.data(), parts, n, kernel_dtype(c, t), kernel_op(op));
  } catch (const std::invalid_argument& e) {
    c.fail("unsupported", e.what(), "collective reductions take numeric tensors");
  }
}

void run(Ctx& c) {
  const coll::Info x = info(c);
  const World w = world_of(c);
  const auto [group, me] = my_group(c, x, w);
  View d, s, s1;
  make_view(c, x.dst, d);
  make_view(c, x.src, s);
  std::string mine = pack(c, x.src, s);
  if (x.kind == coll::Kind::RingReduce) {
    make_view(c, x.src1, s1);
    if (s1.dtype != s.dtype || s1.numel() != s.numel())
      c.fail("runtime", "reduces a " + shape_str(s) + " src with a " + shape_str(s1) + " src1",
             "the two sources of collective_permute_implicit_reduce have one shape and dtype");
    const std::string other = pack(c, x.src1, s1);
    reduce_into(c, mine, {mine.data(), other.data()}, s.numel(), s.dtype, x.op);
  }
  const std::vector<std::string> all = exchange(c, w, x, s, std::move(mine));
  auto of = [&](int r) -> const std::string& { return all[static_cast<size_t>(w.link ? r : 0)]; };
  const int64_t n = static_cast<int64_t>(group.size());
  std::string out;
  switch (x.kind) {
    case coll::Kind::AllReduce: {
      same_size(c, d, s, 1, 1, "all_reduce");
      std::vector<const void*> parts;
      for (int r : group) parts.push_back(of(r).data());
      out.resize(of(group[0]).size());
      reduce_into(c, out, parts, s.numel(), s.dtype, x.op);
      break;
    }
    case coll::Kind::AllGather: {
      same_size(c, d, s, n, 1, "all_gather");
      const Split ds = split_of(c, d, x.dim, n, "all_gather");
      const Split ss = split_of(c, s, x.dim, 1, "all_gather");
      if (ds.run != ss.run || ds.outer != ss.outer)
        c.fail("runtime", "gathers " + shape_str(s) + " tiles of " + std::to_string(n) + " ranks into a " +
                              shape_str(d) + " dst along dimension " + std::to_string(x.dim),
               "the dst of all_gather is the src with its collective dimension times the ranks");
      out.resize(static_cast<size_t>(d.numel() * d.es));
      for (int64_t i = 0; i < n; ++i) move_chunk(out, ds, i, n, of(group[static_cast<size_t>(i)]), ss, 0, 1);
      break;
    }
    case coll::Kind::ReduceScatter: {
      same_size(c, d, s, 1, n, "reduce_scatter");
      const Split ss = split_of(c, s, x.dim, n, "reduce_scatter");
      const Split ds = split_of(c, d, x.dim, 1, "reduce_scatter");
      if (ds.run != ss.run || ds.outer != ss.outer)
        c.fail("runtime", "scatters a " + shape_str(s) + " src over " + std::to_string(n) + " ranks into a " +
                              shape_str(d) + " dst along dimension " + std::to_string(x.dim),
               "the dst of reduce_scatter is the src with its collective dimension divided by the ranks");
      std::vector<std::string> mine_parts(static_cast<size_t>(n));
      std::vector<const void*> parts;
      for (int64_t i = 0; i < n; ++i) {
        auto& p = mine_parts[static_cast<size_t>(i)];
        p.resize(static_cast<size_t>(d.numel() * d.es));
        move_chunk(p, ds, 0, 1, of(group[static_cast<size_t>(i)]), ss, me, n);
        parts.push_back(p.data());
      }
      out.resize(static_cast<size_t>(d.numel() * d.es));
      reduce_into(c, out, parts, d.numel(), d.dtype, x.op);
      break;
    }
    case coll::Kind::AllToAll: {
      same_size(c, d, s, 1, 1, "all_to_all");
      const Split ss = split_of(c, s, x.dim, n, "all_to_all");
      const Split ds = split_of(c, d, x.dim, n, "all_to_all");
      if (ds.run != ss.run || ds.outer != ss.outer)
        c.fail("runtime", "exchanges a " + shape_str(s) + " src into a " + shape_str(d) + " dst",
               "the src and dst of all_to_all have one shape");
      out.resize(static_cast<size_t>(d.numel() * d.es));
      for (int64_t i = 0; i < n; ++i) move_chunk(out, ds, i, n, of(group[static_cast<size_t>(i)]), ss, me, n);
      break;
    }
    case coll::Kind::Permute: {
      same_size(c, d, s, 1, 1, "collective_permute");
      for (const auto& [from, to] : x.pairs)
        if (to == w.rank) out = of(from);
      if (out.empty()) return;  // not a target: dst keeps its contents
      break;
    }
    case coll::Kind::Ring:
    case coll::Kind::RingReduce: {
      same_size(c, d, s, 1, 1, kind_name(x.kind));
      out = of(group[static_cast<size_t>((me + n - 1) % n)]);
      break;
    }
  }
  unpack(d, out);
}

}  // namespace

void AllReduce(Ctx& c) { run(c); }
void AllGather(Ctx& c) { run(c); }
void ReduceScatter(Ctx& c) { run(c); }
void AllToAll(Ctx& c) { run(c); }
void CollectivePermute(Ctx& c) { run(c); }
void PermuteImplicit(Ctx& c) { run(c); }
void PermuteImplicitReduce(Ctx& c) { run(c); }

// rank_id(): this rank. In a ring of `groups`: the rank whose data this rank holds after
// `iteration` (+ register iteration_reg) steps.
void RankId(Ctx& c) {
  const Fields<Op::RankId> f{c.in()};
  const World w = world_of(c);
  int64_t v = w.rank;
  const int64_t g = f.i<"groups">();
  if (g >= 0) {
    std::vector<std::vector<int>> groups;
    try {
      groups = coll::parse_groups(c.prog.str(static_cast<int32_t>(g)));
    } catch (const std::invalid_argument& e) {
      c.fail("runtime", e.what(), "replica groups name each rank once, in groups of one size");
    }
    int64_t step = f.i<"iteration">();
    if (f.i<"iteration_reg">() >= 0) step += c.core.regs[static_cast<size_t>(f.i<"iteration_reg">())];
    v = coll::ring_rank(groups, w.rank, step);
    if (v < 0)
      c.fail("runtime",
             "rank " + std::to_string(w.rank) + " is in none of the replica groups " + coll::groups_text(groups),
             "every rank that runs a collective is in one of its replica groups");
  }
  c.core.regs[static_cast<size_t>(f.i<"reg">())] = static_cast<int32_t>(v);
}

}  // namespace neuron::nki::isa::exec
