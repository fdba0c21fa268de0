#include "program.h"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <sstream>

#include "error.h"
#include "verify.h"

namespace neuron::nki {

namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "(";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + (s.size() == 1 ? ",)" : ")");
}

int64_t align_up(int64_t v, int64_t a) { return (v + a - 1) / a * a; }

bool is_onchip(Mem m) { return m != Mem::Hbm; }

// Writes and reads plain values for serialize/deserialize.
struct Writer {
  std::string out;
  template <typename T>
  void put(const T& v) {
    out.append(reinterpret_cast<const char*>(&v), sizeof(T));
  }
  void put_str(const std::string& s) {
    put<uint32_t>(static_cast<uint32_t>(s.size()));
    out.append(s);
  }
};
struct Reader {
  std::string_view in;
  size_t pos = 0;
  template <typename T>
  T get() {
    if (pos + sizeof(T) > in.size())
      throw NkiError("validation", "nki trace cache", "", "truncated program", "");
    T v;
    std::memcpy(&v, in.data() + pos, sizeof(T));
    pos += sizeof(T);
    return v;
  }
  std::string get_str() {
    const auto n = get<uint32_t>();
    if (pos + n > in.size())
      throw NkiError("validation", "nki trace cache", "", "truncated program", "");
    std::string s(in.substr(pos, n));
    pos += n;
    return s;
  }
};

// Field by field (no struct padding in the bytes: identical programs serialize identically).
void put_target(Writer& w, const Target& t) {
  w.put<int32_t>(t.nc_version);
  w.put<int64_t>(t.sbuf_bytes_per_partition);
  w.put<int64_t>(t.psum_bytes_per_partition);
  w.put<int32_t>(t.psum_banks);
  w.put<int32_t>(t.partitions);
}
Target get_target(Reader& r) {
  Target t;
  t.nc_version = r.get<int32_t>();
  t.sbuf_bytes_per_partition = r.get<int64_t>();
  t.psum_bytes_per_partition = r.get<int64_t>();
  t.psum_banks = r.get<int32_t>();
  t.partitions = r.get<int32_t>();
  if (t.partitions <= 0 || t.partitions > 128 || t.psum_banks <= 0 ||
      t.sbuf_bytes_per_partition <= 0 || t.psum_bytes_per_partition <= 0)
    throw NkiError("validation", "nki trace cache", "", "corrupt target record", "");
  return t;
}
void put_instr(Writer& w, const Instr& in) {
  w.put<uint8_t>(static_cast<uint8_t>(in.op));
  w.put<uint8_t>(static_cast<uint8_t>(in.engine));
  w.put<uint8_t>(in.nap);
  for (int k = 0; k < in.nap; ++k) {
    const Ap& a = in.ap[k];
    w.put<int32_t>(a.buf);
    w.put<uint8_t>(static_cast<uint8_t>(a.dtype));
    w.put<int8_t>(a.ndim);
    w.put<int16_t>(a.reg);
    w.put<int64_t>(a.offset);
    w.put<int64_t>(a.reg_scale);
    for (int d = 0; d < a.ndim && d < kMaxApDims; ++d) {
      w.put<int64_t>(a.step[d]);
      w.put<int64_t>(a.num[d]);
    }
  }
  for (int64_t v : in.i) w.put<int64_t>(v);
  for (double v : in.f) w.put<double>(v);
  w.put<int32_t>(in.loc);
  w.put<int32_t>(in.api);
}
Instr get_instr(Reader& r) {
  auto corrupt = [] {
    return NkiError("validation", "nki trace cache", "", "corrupt instruction record", "");
  };
  Instr in;
  const auto op = r.get<uint8_t>(), engine = r.get<uint8_t>();
  if (op >= static_cast<uint8_t>(Op::Count) || engine >= kNumEngines) throw corrupt();
  in.op = static_cast<Op>(op);
  in.engine = static_cast<Engine>(engine);
  in.nap = r.get<uint8_t>();
  if (in.nap > kMaxOperands) throw corrupt();
  for (int k = 0; k < in.nap; ++k) {
    Ap& a = in.ap[k];
    a.buf = r.get<int32_t>();
    const auto dt = r.get<uint8_t>();
    a.ndim = r.get<int8_t>();
    if (dt >= kNumDTypes || a.ndim < 0 || a.ndim > kMaxApDims) throw corrupt();
    a.dtype = static_cast<DT>(dt);
    a.reg = r.get<int16_t>();
    a.offset = r.get<int64_t>();
    a.reg_scale = r.get<int64_t>();
    for (int d = 0; d < a.ndim; ++d) {
      a.step[d] = r.get<int64_t>();
      a.num[d] = r.get<int64_t>();
    }
  }
  for (auto& v : in.i) v = r.get<int64_t>();
  for (auto& v : in.f) v = r.get<double>();
  in.loc = r.get<int32_t>();
  in.api = r.get<int32_t>();
  return in;
}

}  // namespace

std::string_view mem_name(Mem m) {
  switch (m) {
    case Mem::Hbm:
      return "HBM";
    case Mem::Sbuf:
      return "SBUF";
    case Mem::Psum:
      return "PSUM";
  }
  return "?";
}

std::string_view engine_name(Engine e) {
  switch (e) {
    case Engine::Tensor:
      return "Tensor";
    case Engine::Vector:
      return "Vector";
    case Engine::Scalar:
      return "Scalar";
    case Engine::GpSimd:
      return "GpSimd";
    case Engine::Dma:
      return "DMA";
    case Engine::Sync:
      return "Sync";
    case Engine::Count:
      break;
  }
  return "?";
}

std::string_view reduce_cmd_name(ReduceCmd c) {
  static constexpr std::string_view kNames[] = {"idle", "reset", "reduce", "reset_reduce",
                                                "load_reduce"};
  static_assert(std::size(kNames) == static_cast<size_t>(ReduceCmd::Count));
  const auto i = static_cast<size_t>(c);
  return i < std::size(kNames) ? kNames[i] : std::string_view("?");
}

namespace isa {
std::string_view attr_kind_name(AttrKind k) {
  static constexpr std::string_view kNames[] = {"int",  "bool",       "alu", "alu_or_none",
                                                "act",  "reduce_cmd", "reg", "reg_or_none",
                                                "jump", "float"};
  return kNames[static_cast<int>(k)];
}
}  // namespace isa

int64_t Ap::numel() const {
  int64_t n = 1;
  for (int d = 0; d < ndim; ++d) n *= num[d];
  return n;
}
int64_t Ap::free_size() const {
  int64_t n = 1;
  for (int d = 1; d < ndim; ++d) n *= num[d];
  return n;
}

int32_t Program::intern(const std::string& s) {
  auto it = string_index_.find(s);
  if (it != string_index_.end()) return it->second;
  const auto idx = static_cast<int32_t>(strings_.size());
  strings_.push_back(s);
  string_index_.emplace(s, idx);
  return idx;
}

const std::string& Program::str(int32_t idx) const {
  static const std::string empty;
  return idx >= 0 && idx < static_cast<int32_t>(strings_.size()) ? strings_[idx] : empty;
}

std::string Program::location(const Instr& in) const { return str(in.loc); }

std::string Program::instr_name(const Instr& in) const {
  std::string n(op_name(in.op));
  if (in.api >= 0) n += " (from " + str(in.api) + ")";
  return n;
}

void Program::fail(const Instr& in, const std::string& msg, const std::string& rule) const {
  throw NkiError("validation", instr_name(in), location(in), msg, rule);
}

int32_t Program::add_buffer(Buffer b) {
  auto bad = [&](const std::string& msg, const std::string& rule) {
    throw NkiError("validation", "nki.language.ndarray", str(b.loc), msg, rule);
  };
  if (b.shape.empty() && b.mem != Mem::Hbm) bad("on-chip tensors need at least one dimension", "");
  b.numel = 1;
  for (int64_t s : b.shape) {
    if (s <= 0)
      bad("tensor '" + b.name + "' has shape " + shape_str(b.shape) +
              " with a non-positive dimension",
          "tensor dimensions must be positive");
    b.numel *= s;
  }
  const int64_t es = dt_size(b.dtype);
  if (is_onchip(b.mem)) {
    b.partitions = b.shape[0];
    b.free_elems = b.numel / b.partitions;
    b.bytes_per_partition = b.free_elems * es;
    b.total_bytes = b.bytes_per_partition * b.partitions;
    const std::string mem(mem_name(b.mem));
    if (b.partitions > target_.partitions)
      bad(mem + " tensor '" + b.name + "' of shape " + shape_str(b.shape) +
              " has partition dimension " + std::to_string(b.partitions) + " > " +
              std::to_string(target_.partitions),
          "partition dimension (dim 0) <= 128 (nl.tile_size.pmax)");
    const int64_t cap =
        b.mem == Mem::Sbuf ? target_.sbuf_bytes_per_partition : target_.psum_bytes_per_partition;
    if (b.bytes_per_partition > cap)
      bad(mem + " tensor '" + b.name + "' of shape " + shape_str(b.shape) + " needs " +
              std::to_string(b.bytes_per_partition) + " bytes per partition > " +
              std::to_string(cap),
          mem + " capacity per partition (" + std::to_string(cap) + " bytes)");
    if (b.fixed_offset >= 0) {
      if (b.fixed_partition < 0 || b.fixed_partition + b.partitions > target_.partitions)
        bad("address=(" + std::to_string(b.fixed_partition) + ", " +
                std::to_string(b.fixed_offset) + ") puts partitions outside [0, 128)",
            "manual placement must stay inside the partitions");
      if (b.fixed_offset + b.bytes_per_partition > cap)
        bad("address=(" + std::to_string(b.fixed_partition) + ", " +
                std::to_string(b.fixed_offset) + ") with " + std::to_string(b.bytes_per_partition) +
                " bytes per partition ends past " + std::to_string(cap),
            mem + " capacity per partition (" + std::to_string(cap) + " bytes)");
      // A PSUM tensor of at most one bank lies inside one bank (a block placed at a byte
      // offset of its bank by psum.alloc / psum.mod_alloc); a larger one starts at a bank.
      const int64_t bank = target_.psum_bank_bytes(), in_bank = b.fixed_offset % bank;
      if (b.mem == Mem::Psum && (b.bytes_per_partition <= bank
                                     ? in_bank + b.bytes_per_partition > bank
                                     : in_bank != 0))
        bad("PSUM tensor '" + b.name + "' at byte offset " + std::to_string(b.fixed_offset) +
                " with " + std::to_string(b.bytes_per_partition) + " bytes per partition " +
                (b.bytes_per_partition <= bank ? "crosses a bank boundary"
                                               : "does not start on a bank boundary"),
            "a PSUM tensor of at most 2 KiB per partition lies inside one bank; a larger one "
            "starts at a 2 KiB bank boundary");
    }
  } else {
    b.partitions = 0;
    b.free_elems = b.numel;
    b.total_bytes = b.numel * es;
    b.slot = num_slots_++;
  }
  buffers_.push_back(std::move(b));
  return static_cast<int32_t>(buffers_.size() - 1);
}

int32_t Program::add_register() { return num_regs_++; }

void Program::patch(int32_t idx, int k, int64_t value) {
  instrs_.at(static_cast<size_t>(idx)).i.at(k) = value;
}

void Program::pop_last() {
  if (finalized_ || instrs_.empty() || instrs_.back().def().control)
    throw NkiError("validation", "nki tracer", "", "cannot take back the last instruction", "");
  instrs_.pop_back();
}

void Program::add(const Instr& in_) {
  if (finalized_)
    throw NkiError("validation", instr_name(in_), location(in_), "program already finalized", "");
  Instr in = in_;
  if (in.op >= Op::Count) fail(in, "invalid opcode", "");
  if (in.nap > kMaxOperands) fail(in, "too many operands", "");
  isa::Checker(*this, in).run();
  const int32_t idx = size();
  switch (in.op) {
    case Op::LoopBegin:
    case Op::WhileBegin:
      open_loops_.push_back(idx);
      dynamic_ = true;
      recheck_ = true;
      break;
    case Op::LoopEnd:
    case Op::WhileEnd: {
      const Op want = in.op == Op::LoopEnd ? Op::LoopBegin : Op::WhileBegin;
      if (open_loops_.empty() || instrs_[open_loops_.back()].op != want)
        fail(in, "loop end without a matching begin", "");
      const int32_t begin = open_loops_.back();
      open_loops_.pop_back();
      static_assert(isa::Fields<Op::LoopEnd>::slot<"begin"> ==
                    isa::Fields<Op::WhileEnd>::slot<"begin">);
      in.i[isa::Fields<Op::LoopEnd>::slot<"begin">] = begin;
      instrs_[begin].i[in.op == Op::LoopEnd ? isa::Fields<Op::LoopBegin>::slot<"end">
                                            : isa::Fields<Op::WhileBegin>::slot<"end">] = idx;
      break;
    }
    case Op::DmaIndirect:
    case Op::DmaComputeIndirect: {
      // Which bytes a scatter (or a gather that skips bad indices) writes depends on the
      // index values of each run.
      using F = isa::Fields<Op::DmaIndirect>;
      using G = isa::Fields<Op::DmaComputeIndirect>;
      static_assert(F::slot<"indirect"> == G::slot<"indirect"> &&
                    F::slot<"oob_mode"> == G::slot<"oob_mode">);
      const F f{in};
      if (f.i<"indirect">() != 0 || f.i<"oob_mode">() == 1) recheck_ = true;
      break;
    }
    default:
      break;
  }
  for (int k = 0; k < in.nap; ++k) {
    if (!in.ap[k].present()) continue;
    if (in.ap[k].reg >= 0) {
      dynamic_ = true;
      // A data-dependent address into on-chip or kernel-written HBM memory can touch different
      // (maybe never-written) bytes on every run; into kernel inputs it cannot.
      const Buffer& b = buffers_[in.ap[k].buf];
      if (b.mem != Mem::Hbm || !b.is_input) recheck_ = true;
    }
    if (in.def().operands[k].writes()) buffers_[in.ap[k].buf].written = true;
  }
  instrs_.push_back(in);
}

// ---------------------------------------------------------------------------------------------
// Liveness and placement

void Program::allocate() {
  const int32_t n = size();
  for (auto& b : buffers_) b.first_use = b.last_use = -1;
  for (int32_t t = 0; t < n; ++t) {
    const Instr& in = instrs_[t];
    for (int k = 0; k < in.nap; ++k) {
      if (!in.ap[k].present()) continue;
      Buffer& b = buffers_[in.ap[k].buf];
      if (b.first_use < 0) b.first_use = t;
      b.last_use = t;
    }
  }
  // A tensor used inside a runtime loop stays live for the whole loop (later iterations reuse it).
  std::vector<std::pair<int32_t, int32_t>> loops;
  for (int32_t t = 0; t < n; ++t)
    if (instrs_[t].op == Op::LoopBegin)
      loops.emplace_back(t,
                         static_cast<int32_t>(isa::Fields<Op::LoopBegin>{instrs_[t]}.i<"end">()));
    else if (instrs_[t].op == Op::WhileBegin)
      loops.emplace_back(t,
                         static_cast<int32_t>(isa::Fields<Op::WhileBegin>{instrs_[t]}.i<"end">()));
  for (bool changed = !loops.empty(); changed;) {
    changed = false;
    for (auto& b : buffers_) {
      if (b.first_use < 0) continue;
      for (auto [s, e] : loops) {
        if (b.last_use < s || b.first_use > e) continue;
        if (b.first_use > s || b.last_use < e) {
          b.first_use = std::min(b.first_use, s);
          b.last_use = std::max(b.last_use, e);
          changed = true;
        }
      }
    }
  }

  for (Mem mem : {Mem::Sbuf, Mem::Psum}) {
    const int64_t cap =
        mem == Mem::Sbuf ? target_.sbuf_bytes_per_partition : target_.psum_bytes_per_partition;
    const int64_t align = mem == Mem::Sbuf ? 64 : target_.psum_bank_bytes();
    std::vector<int32_t> order;
    for (int32_t i = 0; i < static_cast<int32_t>(buffers_.size()); ++i)
      if (buffers_[i].mem == mem && buffers_[i].first_use >= 0) order.push_back(i);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
      return buffers_[a].first_use < buffers_[b].first_use;
    });
    std::vector<int32_t> live;
    auto extent = [&](const Buffer& b) { return align_up(b.bytes_per_partition, align); };
    auto prange = [&](const Buffer& b) {
      return std::pair<int64_t, int64_t>{b.part0, b.part0 + b.partitions};
    };
    // First fit of `b` at partitions [p0, p0 + partitions) among the live tensors that share a
    // partition with it (every live tensor when `all_partitions`).
    // Manually placed tensors: an automatic one also keeps clear of those that become live
    // later in its lifetime (their place is fixed before the program runs).
    std::vector<int32_t> fixed;
    for (int32_t i : order)
      if (buffers_[i].fixed_offset >= 0) fixed.push_back(i);
    auto first_fit = [&](const Buffer& b, const std::vector<int32_t>& live, int64_t p0,
                         bool all_partitions) {
      std::vector<std::pair<int64_t, int64_t>> used;
      for (int32_t o : live) {
        const auto [q0, q1] = prange(buffers_[o]);
        if (all_partitions || (p0 < q1 && q0 < p0 + b.partitions))
          used.emplace_back(buffers_[o].addr, buffers_[o].addr + extent(buffers_[o]));
      }
      for (int32_t o : fixed) {
        const Buffer& ob = buffers_[o];
        if (ob.last_use < b.first_use || ob.first_use > b.last_use) continue;  // never both live
        const int64_t q0 = ob.fixed_partition, q1 = q0 + ob.partitions;
        if (all_partitions || (p0 < q1 && q0 < p0 + b.partitions))
          used.emplace_back(ob.fixed_offset, ob.fixed_offset + extent(ob));
      }
      std::sort(used.begin(), used.end());
      int64_t addr = 0;
      for (auto [lo, hi] : used) {
        if (addr + extent(b) <= lo) break;
        addr = std::max(addr, align_up(hi, align));
      }
      return addr;
    };
    for (int32_t id : order) {
      Buffer& b = buffers_[id];
      std::erase_if(live, [&](int32_t o) { return buffers_[o].last_use < b.first_use; });
      const Instr& at = instrs_[b.first_use];
      const std::string mname(mem_name(mem));
      if (b.fixed_offset >= 0) {
        b.part0 = b.fixed_partition;
        // Manually placed tensors overlap only if the bytes they occupy do: the hardware
        // addresses SBUF per byte (the allocator's 64-byte rounding is a packing choice, not a
        // rule) and PSUM tensors already start at bank boundaries.
        const auto [p0, p1] = prange(b);
        for (int32_t o : live) {
          const Buffer& ob = buffers_[o];
          const auto [q0, q1] = prange(ob);
          const bool poverlap = p0 < q1 && q0 < p1;
          const bool foverlap = b.fixed_offset < ob.addr + ob.bytes_per_partition &&
                                ob.addr < b.fixed_offset + b.bytes_per_partition;
          if (poverlap && foverlap)
            throw NkiError("validation", instr_name(at), location(at),
                           mname + " tensor '" + b.name + "' (allocated at " + str(b.loc) +
                               ") placed at partitions [" + std::to_string(p0) + ", " +
                               std::to_string(p1) + ") bytes [" + std::to_string(b.fixed_offset) +
                               ", " + std::to_string(b.fixed_offset + b.bytes_per_partition) +
                               ") overlaps live tensor '" + ob.name + "' (allocated at " +
                               str(ob.loc) + ") at partitions [" + std::to_string(q0) + ", " +
                               std::to_string(q1) + ") bytes [" + std::to_string(ob.addr) + ", " +
                               std::to_string(ob.addr + ob.bytes_per_partition) + ")",
                           "live " + mname + " tensors do not overlap");
        }
        b.addr = b.fixed_offset;
      } else {
        // Tensors start at partition 0 and first fit the bytes no live tensor uses. When that
        // does not fit, a tensor of fewer partitions may start beside live tensors on other
        // partitions: SBUF is 128 partitions x bytes, and tensors on disjoint partition ranges
        // can share bytes. Where a tensor may start depends on its partition count (the
        // architecture guide's start_partition rule): 0 for more than 64 partitions, 0 or 64
        // for 33..64, a quadrant (0/32/64/96) for 32 or fewer.
        b.part0 = 0;
        int64_t addr = first_fit(b, live, 0, true);
        const int64_t quadrant = target_.partitions / 4;
        const int64_t step = b.partitions <= quadrant       ? quadrant
                             : b.partitions <= 2 * quadrant ? 2 * quadrant
                                                            : target_.partitions;
        if (addr + extent(b) > cap && mem == Mem::Sbuf && b.partitions < target_.partitions)
          for (int64_t p0 = 0; p0 + b.partitions <= target_.partitions; p0 += step) {
            const int64_t a = first_fit(b, live, p0, false);
            if (a + extent(b) <= cap) {
              addr = a;
              b.part0 = p0;
              break;
            }
          }
        if (addr + extent(b) > cap) {
          // What the busiest partition needs (tensors on other partitions do not count there).
          int64_t total = 0;
          for (int64_t p = 0; p < target_.partitions; ++p) {
            int64_t need = p < b.partitions ? extent(b) : 0;
            for (int32_t o : live) {
              const auto [q0, q1] = prange(buffers_[o]);
              if (q0 <= p && p < q1) need += extent(buffers_[o]);
            }
            total = std::max(total, need);
          }
          std::vector<int32_t> by_size = live;
          std::sort(by_size.begin(), by_size.end(), [&](int32_t x, int32_t y) {
            return extent(buffers_[x]) > extent(buffers_[y]);
          });
          std::string detail;
          for (size_t k = 0; k < by_size.size() && k < 6; ++k) {
            const Buffer& ob = buffers_[by_size[k]];
            detail += (k ? ", " : "") + std::string("'") + ob.name + "' " +
                      std::to_string(extent(ob)) + " B (" + str(ob.loc) + ")";
          }
          if (by_size.size() > 6) detail += ", ... " + std::to_string(by_size.size() - 6) + " more";
          const std::string unit = mem == Mem::Psum
                                       ? " (" + std::to_string(total / align) + " of " +
                                             std::to_string(target_.psum_banks) + " banks)"
                                       : "";
          throw NkiError("validation", instr_name(at), location(at),
                         mname + " capacity exceeded when tensor '" + b.name + "' (allocated at " +
                             str(b.loc) + ", " + std::to_string(extent(b)) +
                             " B per partition) becomes live: " +
                             (total > cap ? "live tensors need " + std::to_string(total) +
                                                " bytes per partition" + unit + " but " + mname +
                                                " has " + std::to_string(cap)
                                          : "no " + std::to_string(extent(b)) +
                                                " bytes are free at the same offset on every "
                                                "partition it needs (live tensors need at most " +
                                                std::to_string(total) + " of " +
                                                std::to_string(cap) + " bytes per partition)") +
                             (live.empty() ? "" : "; live: " + detail),
                         mname + " capacity per partition (" + std::to_string(cap) + " bytes" +
                             (mem == Mem::Psum ? ", 8 banks of 2 KiB" : "") + ")");
        }
        b.addr = addr;
      }
      live.push_back(id);
    }
  }
}

void Program::resolve() {
  phys_.assign(instrs_.size(), {});
  for (size_t t = 0; t < instrs_.size(); ++t) {
    const Instr& in = instrs_[t];
    for (int k = 0; k < in.nap; ++k) {
      const Ap& a = in.ap[k];
      if (!a.present()) continue;
      const Buffer& b = buffers_[a.buf];
      Phys& p = phys_[t][k];
      const int64_t es = dt_size(a.dtype);
      p.mem = b.mem;
      p.dtype = a.dtype;
      p.ndim = a.ndim;
      p.reg = a.reg;
      p.slot = b.slot;
      for (int d = 0; d < a.ndim; ++d) p.num[d] = a.num[d];
      if (b.mem == Mem::Hbm) {
        p.byte_off = a.offset * es;
        p.reg_scale_bytes = a.reg_scale * es;
        for (int d = 0; d < a.ndim; ++d) p.stride[d] = a.step[d] * es;
      } else {
        const int64_t pitch = b.mem == Mem::Sbuf ? sbuf_pitch(target_) : psum_pitch(target_);
        const int64_t fa = b.bytes_per_partition / es;
        const int64_t p0 = a.offset / fa, f0 = a.offset % fa;
        // A manually placed tensor (address=(partition, offset)) starts at its partition: tensors
        // on disjoint partition ranges may share byte offsets.
        const int64_t base = b.part0 * pitch + b.addr;
        p.byte_off = p0 * pitch + base + f0 * es;
        p.stride[0] = a.step[0] == 0 ? 0 : pitch;
        for (int d = 1; d < a.ndim; ++d) p.stride[d] = a.step[d] * es;
        // Dynamic offsets are re-split into partition and free parts at run time.
        p.reg_scale_bytes = a.reg_scale;  // in elements for on-chip operands
      }
      int64_t lo = a.offset, hi = a.offset;
      for (int d = 0; d < a.ndim; ++d) {
        const int64_t ext = a.step[d] * (a.num[d] - 1);
        (ext < 0 ? lo : hi) += ext;
      }
      p.lo = lo;
      p.hi = hi;
      p.buf = a.buf;
      p.elem_off = a.offset;
      p.limit = b.total_bytes / es;
      if (b.mem != Mem::Hbm) {
        p.fa = b.bytes_per_partition / es;
        p.pitch = b.mem == Mem::Sbuf ? sbuf_pitch(target_) : psum_pitch(target_);
        p.addr = b.part0 * p.pitch + b.addr;
        for (int d = 1; d < a.ndim; ++d) {
          const int64_t ext = a.step[d] * (a.num[d] - 1);
          (ext < 0 ? p.flo : p.fhi) += ext;
        }
      }
    }
  }
}

void Program::index_births() {
  const int32_t n = size();
  birth_off_.assign(static_cast<size_t>(n) + 2, 0);
  for (const Buffer& b : buffers_)
    if (b.mem != Mem::Hbm && b.first_use >= 0 && b.fixed_offset < 0)
      ++birth_off_[static_cast<size_t>(b.first_use) + 1];
  for (int32_t t = 0; t <= n; ++t) birth_off_[static_cast<size_t>(t) + 1] += birth_off_[static_cast<size_t>(t)];
  birth_buf_.assign(static_cast<size_t>(birth_off_[static_cast<size_t>(n)]), 0);
  std::vector<int32_t> at(birth_off_.begin(), birth_off_.end() - 1);
  for (int32_t i = 0; i < static_cast<int32_t>(buffers_.size()); ++i) {
    const Buffer& b = buffers_[static_cast<size_t>(i)];
    if (b.mem != Mem::Hbm && b.first_use >= 0 && b.fixed_offset < 0)
      birth_buf_[static_cast<size_t>(at[static_cast<size_t>(b.first_use)]++)] = i;
  }
}

void Program::finalize() {
  if (finalized_) return;
  if (!open_loops_.empty()) {
    const Instr& in = instrs_[open_loops_.back()];
    fail(in, "runtime loop was never closed", "");
  }
  allocate();
  index_births();
  resolve();
  build_plan();
  finalized_ = true;
}

// ---------------------------------------------------------------------------------------------
// Serialization

std::string Program::serialize() const {
  Writer w;
  w.out.append("NKIP", 4);
  w.put<int32_t>(kFormatVersion);
  put_target(w, target_);
  w.put<uint32_t>(static_cast<uint32_t>(strings_.size()));
  for (const auto& s : strings_) w.put_str(s);
  w.put<int32_t>(num_regs_);
  w.put<uint32_t>(static_cast<uint32_t>(buffers_.size()));
  for (const auto& b : buffers_) {
    w.put(b.mem);
    w.put(b.dtype);
    w.put<uint32_t>(static_cast<uint32_t>(b.shape.size()));
    for (int64_t s : b.shape) w.put(s);
    w.put_str(b.name);
    w.put(b.loc);
    w.put(b.is_input);
    w.put(b.fixed_partition);
    w.put(b.fixed_offset);
  }
  w.put<uint32_t>(static_cast<uint32_t>(instrs_.size()));
  for (const auto& in : instrs_) put_instr(w, in);
  return w.out;
}

std::shared_ptr<Program> Program::deserialize(std::string_view bytes) {
  Reader r{bytes};
  if (bytes.size() < 8 || bytes.substr(0, 4) != "NKIP")
    throw NkiError("validation", "nki trace cache", "", "not a serialized NKI program", "");
  r.pos = 4;
  const auto version = r.get<int32_t>();
  if (version != kFormatVersion)
    throw NkiError("validation", "nki trace cache", "",
                   "program format version " + std::to_string(version) + " (expected " +
                       std::to_string(kFormatVersion) + ")",
                   "");
  auto prog = std::make_shared<Program>(get_target(r));
  const auto nstr = r.get<uint32_t>();
  for (uint32_t i = 0; i < nstr; ++i) prog->intern(r.get_str());
  const auto nregs = r.get<int32_t>();
  for (int32_t i = 0; i < nregs; ++i) prog->add_register();
  const auto nbuf = r.get<uint32_t>();
  for (uint32_t i = 0; i < nbuf; ++i) {
    Buffer b;
    b.mem = r.get<Mem>();
    b.dtype = r.get<DT>();
    if (static_cast<int>(b.mem) > 2 || static_cast<int>(b.dtype) >= kNumDTypes)
      throw NkiError("validation", "nki trace cache", "", "corrupt tensor record", "");
    const auto nd = r.get<uint32_t>();
    if (nd > 64) throw NkiError("validation", "nki trace cache", "", "corrupt tensor record", "");
    for (uint32_t d = 0; d < nd; ++d) b.shape.push_back(r.get<int64_t>());
    b.name = r.get_str();
    b.loc = r.get<int32_t>();
    b.is_input = r.get<bool>();
    b.fixed_partition = r.get<int32_t>();
    b.fixed_offset = r.get<int64_t>();
    prog->add_buffer(std::move(b));
  }
  const auto ninstr = r.get<uint32_t>();
  for (uint32_t i = 0; i < ninstr; ++i) {
    Instr in = get_instr(r);
    prog->add(in);
  }
  if (r.pos != bytes.size())
    throw NkiError("validation", "nki trace cache", "", "trailing bytes after program", "");
  prog->finalize();
  return prog;
}

namespace {

// One attribute value as dump() prints it: operators and functions by name.
std::string attr_value(const isa::Attr& a, const Instr& in) {
  using isa::AttrKind;
  if (a.is_float()) {
    char buf[32];
    const auto r = std::to_chars(buf, buf + sizeof buf, in.f[a.slot]);
    return std::string(buf, r.ptr);
  }
  std::string out;
  for (int j = 0; j < a.count; ++j) {
    const int64_t v = in.i[a.slot + j];
    if (j) out += ",";
    switch (a.kind) {
      case AttrKind::Bool:
        out += v ? "true" : "false";
        break;
      case AttrKind::AluOrNone:
        if (v < 0) {
          out += "none";
          break;
        }
        [[fallthrough]];
      case AttrKind::Alu:
        out += v >= 0 && v < static_cast<int64_t>(Alu::Count) ? alu_name(static_cast<Alu>(v))
                                                              : std::string_view("?");
        break;
      case AttrKind::Act:
        out += v >= 0 && v < static_cast<int64_t>(Act::Count) ? act_name(static_cast<Act>(v))
                                                              : std::string_view("?");
        break;
      case AttrKind::ReduceCmd:
        out += reduce_cmd_name(static_cast<ReduceCmd>(v));
        break;
      case AttrKind::RegOrNone:
        if (v < 0) {
          out += "none";
          break;
        }
        [[fallthrough]];
      case AttrKind::Reg:
        out += 'r';
        out += std::to_string(v);
        break;
      case AttrKind::Jump:
        out += '@';
        out += std::to_string(v);
        break;
      default:
        out += std::to_string(v);
    }
  }
  if (a.count > 1) out = '[' + out + ']';
  return out;
}

}  // namespace

std::string Program::dump() const {
  std::ostringstream os;
  for (size_t t = 0; t < instrs_.size(); ++t) {
    const Instr& in = instrs_[t];
    const isa::InstrDef& d = in.def();
    os << t << ": " << d.api << " [" << engine_name(in.engine) << "]";
    for (int k = 0; k < in.nap && k < d.num_operands; ++k) {
      const Ap& a = in.ap[k];
      if (!a.present()) continue;
      const Buffer& b = buffers_[a.buf];
      os << " " << d.operands[k].name << "=" << b.name << "@" << mem_name(b.mem) << ":"
         << dt_name(a.dtype) << "[off=" << a.offset;
      for (int dd = 0; dd < a.ndim; ++dd) os << " " << a.step[dd] << "x" << a.num[dd];
      if (a.reg >= 0) os << " +r" << a.reg << "*" << a.reg_scale;
      os << "]";
    }
    for (int j = 0; j < d.num_attrs; ++j)
      os << " " << d.attrs[j].name << "=" << attr_value(d.attrs[j], in);
    if (in.loc >= 0) os << "  # " << str(in.loc);
    os << "\n";
  }
  return os.str();
}

}  // namespace neuron::nki
