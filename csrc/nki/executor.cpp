#include "executor.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <new>

#include "exec_internal.h"
#include "runtime/interrupt.h"
#include "runtime/trace.h"

namespace neuron::nki {

namespace {

constexpr size_t kHuge = size_t{2} << 20;

uint8_t* alloc_onchip(size_t bytes) {
  const size_t rounded = (bytes + kHuge - 1) / kHuge * kHuge;
  void* p = std::aligned_alloc(kHuge, rounded);
  if (!p) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
  madvise(p, rounded, MADV_HUGEPAGE);
#endif
  std::memset(p, 0, rounded);
  return static_cast<uint8_t*>(p);
}

}  // namespace

void CoreState::Free::operator()(uint8_t* p) const { std::free(p); }

CoreState::CoreState(const Target& t)
    : target_(t),
      sbuf_bytes_(static_cast<size_t>(Program::sbuf_pitch(t) * t.partitions)),
      psum_bytes_(static_cast<size_t>(Program::psum_pitch(t) * t.partitions)) {
  sbuf_.reset(alloc_onchip(sbuf_bytes_));
  psum_.reset(alloc_onchip(psum_bytes_));
}

void CoreState::enable_shadow() {
  sbuf_def_.assign(sbuf_bytes_, 0);
  psum_def_.assign(psum_bytes_, 0);
}
void CoreState::disable_shadow() {
  std::vector<uint8_t>().swap(sbuf_def_);
  std::vector<uint8_t>().swap(psum_def_);
}

namespace {

// Released CoreStates kept for reuse: allocating and faulting in 28 MiB per kernel call would
// dominate small kernels. Guarded by its mutex; at most kKeep idle states.
class CorePool {
 public:
  static CorePool& get() {
    static CorePool pool;
    return pool;
  }
  std::shared_ptr<CoreState> acquire(const Target& t) {
    std::unique_ptr<CoreState> s;
    {
      std::lock_guard<std::mutex> g(mu_);
      for (auto it = idle_.begin(); it != idle_.end(); ++it) {
        const Target& o = (*it)->target();
        if (o.sbuf_bytes_per_partition == t.sbuf_bytes_per_partition &&
            o.psum_bytes_per_partition == t.psum_bytes_per_partition &&
            o.partitions == t.partitions) {
          s = std::move(*it);
          idle_.erase(it);
          break;
        }
      }
    }
    if (!s) s = std::make_unique<CoreState>(t);
    return std::shared_ptr<CoreState>(s.release(), [this](CoreState* p) { release(p); });
  }

 private:
  static constexpr size_t kKeep = 4;
  void release(CoreState* p) {
    p->disable_shadow();
    std::lock_guard<std::mutex> g(mu_);
    if (idle_.size() < kKeep) {
      idle_.emplace_back(p);
    } else {
      delete p;
    }
  }
  std::mutex mu_;
  std::vector<std::unique_ptr<CoreState>> idle_;
};

}  // namespace

std::shared_ptr<CoreState> acquire_core(const Target& t) { return CorePool::get().acquire(t); }

namespace detail {

Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

namespace {

constexpr size_t kMaxUndefinedReads = 1 << 16;

Footprint footprint(const View& v) {
  Footprint f;
  f.def = v.def;
  f.es = v.es;
  f.ndim = v.ndim;
  f.stride = v.stride;
  f.num = v.num;
  return f;
}

// Calls fn(shadow of element) for every element of f, in order, until fn returns true.
template <typename Fn>
bool any_element(const Footprint& f, Fn&& fn) {
  if (!f.def || f.ndim == 0) return f.def && fn(f.def);
  for (int d = 0; d < f.ndim; ++d)
    if (f.num[static_cast<size_t>(d)] <= 0) return false;
  std::array<int64_t, kMaxApDims> i{};
  for (;;) {
    const uint8_t* p = f.def;
    for (size_t d = 0; d < static_cast<size_t>(f.ndim); ++d) p += i[d] * f.stride[d];
    if (fn(p)) return true;
    size_t d = static_cast<size_t>(f.ndim);
    while (d > 0 && ++i[d - 1] == f.num[d - 1]) i[--d] = 0;
    if (d == 0) return false;
  }
}

}  // namespace

int64_t Footprint::numel() const {
  int64_t n = 1;
  for (int d = 0; d < ndim; ++d) n *= num[static_cast<size_t>(d)];
  return def ? n : 0;
}

int64_t Footprint::index_of(const uint8_t* p) const {
  if (!def) return -1;
  // Bounds first; then, for nested strides (each dimension steps over the whole extent of
  // the ones inside it: every on-chip tile and most views), the digits of p's offset.
  const uint8_t* lo = def;
  int64_t span = es;
  struct D {
    int64_t stride, num;
    int dim;
    bool neg;
  };
  std::array<D, kMaxApDims> dims{};
  int nd = 0;
  for (int d = 0; d < ndim; ++d) {
    int64_t st = stride[static_cast<size_t>(d)], n = num[static_cast<size_t>(d)];
    if (n <= 0) return -1;
    if (n == 1 || st == 0) continue;
    if (st < 0) lo += (n - 1) * st;
    span += (n - 1) * (st < 0 ? -st : st);
    dims[static_cast<size_t>(nd++)] = {st < 0 ? -st : st, n, d, st < 0};
  }
  if (p < lo || p >= lo + span) return -1;
  for (size_t a = 1; a < static_cast<size_t>(nd); ++a)  // largest stride first (<= 6 of them)
    for (size_t b = a; b > 0 && dims[b - 1].stride < dims[b].stride; --b)
      std::swap(dims[b - 1], dims[b]);
  bool nested = true;
  int64_t inner = es;
  for (int d = nd - 1; d >= 0; --d) {
    nested &= dims[static_cast<size_t>(d)].stride >= inner;
    inner += (dims[static_cast<size_t>(d)].num - 1) * dims[static_cast<size_t>(d)].stride;
  }
  if (nested) {
    std::array<int64_t, kMaxApDims> ix{};
    int64_t rem = p - lo;
    for (int d = 0; d < nd; ++d) {
      const D& x = dims[static_cast<size_t>(d)];
      const int64_t i = std::min(rem / x.stride, x.num - 1);
      rem -= i * x.stride;
      ix[static_cast<size_t>(x.dim)] = x.neg ? x.num - 1 - i : i;
    }
    if (rem >= es) return -1;
    int64_t flat = 0;
    for (size_t d = 0; d < static_cast<size_t>(ndim); ++d) flat = flat * num[d] + ix[d];
    return flat;
  }
  int64_t flat = 0, found = -1;
  any_element(*this, [&](const uint8_t* e) {
    if (p >= e && p < e + es) found = flat;
    ++flat;
    return found >= 0;
  });
  return found;
}

const uint8_t* Footprint::at_index(int64_t i) const {
  const uint8_t* p = def;
  for (int d = ndim - 1; d >= 0; --d) {
    const int64_t n = num[static_cast<size_t>(d)];
    p += (i % n) * stride[static_cast<size_t>(d)];
    i /= n;
  }
  return p;
}

const uint8_t* Footprint::first_undefined() const {
  const uint8_t* found = nullptr;
  any_element(*this, [&](const uint8_t* e) {
    for (int b = 0; b < es; ++b)
      if (!e[b]) {
        found = e + b;
        return true;
      }
    return false;
  });
  return found;
}

void Ctx::note_undefined(int k) {
  std::lock_guard<std::mutex> g(undef_mu);
  const int64_t key = static_cast<int64_t>(pc) * kMaxOperands + k;
  auto it = undef_index.find(key);
  if (it == undef_index.end()) {
    if (undef_reads.size() >= kMaxUndefinedReads) return;
    it = undef_index.emplace(key, undef_reads.size()).first;
    undef_reads.emplace_back();
  }
  UndefinedRead& r = undef_reads[it->second];
  r.seq = undef_seq++;
  r.pc = pc;
  r.k = k;
  r.at = nullptr;
  r.reads.clear();
  r.writes.clear();
  const Instr& i = in();
  // The hint k first, then the other inputs: which of them hold never-written bytes.
  for (int j = -1; j < i.nap; ++j) {
    const int o = j < 0 ? k : j;
    if ((j >= 0 && o == k) || !has(o) || (o != k && i.def().operands[o].writes())) continue;
    View v;
    if (!make_view(*this, o, v) || !v.def) continue;
    const Footprint f = footprint(v);
    const uint8_t* at = f.first_undefined();
    if (!at) continue;
    if (!r.at) {
      r.k = o;
      r.at = at;
    }
    r.reads.emplace_back(o, f);
  }
  for (int w = 0; w < i.nap; ++w) {
    if (!has(w) || !i.def().operands[w].writes()) continue;
    View wv;
    if (make_view(*this, w, wv) && wv.def) r.writes.push_back(footprint(wv));
  }
  if (first_undef_pc < 0) {
    first_undef_pc = pc;
    first_undef_what = describe_read(pc, r.k);
  }
  last_undef = static_cast<int64_t>(it->second);
}

std::string Ctx::describe_read(int32_t at_pc, int k) const {
  const Instr& i = prog.instrs()[static_cast<size_t>(at_pc)];
  const Buffer& b = prog.buffers()[i.ap[k].buf];
  const char* how = " reading ";
  if (i.op == Op::Matmul && k == isa::Fields<Op::Matmul>::k<"dst">) how = " accumulating onto ";
  if (i.op == Op::CopyPredicated && k == isa::Fields<Op::CopyPredicated>::k<"dst">)
    how = " keeping never-written elements of ";
  return prog.instr_name(i) + " at " + prog.location(i) + how + std::string(mem_name(b.mem)) +
         " tensor '" + b.name + "' (allocated at " + prog.str(b.loc) + ")";
}

std::string Ctx::undefined_origin() const {
  if (first_undef_pc < 0) return "";
  if (last_undef < 0) return "; the first read of never-written memory was " + first_undef_what;
  // Back from the offending read: the latest earlier instruction that wrote the never-written
  // byte it read took it from never-written memory itself (or from values derived from it):
  // from the same element of an input of its shape that is still never-written, else from its
  // first never-written input byte. The first one without such a writer read memory nothing
  // had written.
  const UndefinedRead* cur = &undef_reads[static_cast<size_t>(last_undef)];
  int blamed = cur->k;
  const uint8_t* at = cur->at;
  int hops = 0;
  while (at && hops < 100000) {
    const UndefinedRead* best = nullptr;
    int64_t idx = -1, n = 0;
    for (const UndefinedRead& r : undef_reads) {
      if (r.seq >= cur->seq || (best && r.seq <= best->seq)) continue;
      for (const Footprint& f : r.writes) {
        const int64_t x = f.index_of(at);
        if (x < 0) continue;
        best = &r;
        idx = x;
        n = f.numel();
        break;
      }
    }
    if (!best) break;
    cur = best;
    blamed = cur->k;
    at = cur->at;
    for (const auto& [k, f] : cur->reads) {
      if (f.numel() != n) continue;
      const uint8_t* e = f.at_index(idx);
      const uint8_t* bad = nullptr;
      for (int b = 0; b < f.es && !bad; ++b)
        if (!e[b]) bad = e + b;
      if (bad) {
        blamed = k;
        at = bad;
        break;
      }
    }
    ++hops;
  }
  std::string s =
      "; the never-written memory they derive from was read by " + describe_read(cur->pc, blamed);
  if (hops > 1) s += " and passed on by " + std::to_string(hops - 1) + " instruction(s) in between";
  return s;
}

void plan_view(Ctx& c, const PlanView& p, View& v) {
  v.dtype = p.dtype;
  v.es = dt_size(p.dtype);
  v.ndim = p.ndim;
  v.mem = p.mem;
  for (int d = 0; d < p.ndim; ++d) {
    v.stride[d] = p.stride[d];
    v.num[d] = p.num[d];
  }
  switch (p.mem) {
    case Mem::Hbm: {
      const Binding& b = c.bind[static_cast<size_t>(p.slot)];
      v.base = b.data + p.off;
      v.def = b.def ? b.def + p.off : nullptr;
      break;
    }
    case Mem::Sbuf:
      v.base = c.core.sbuf() + p.off;
      v.def = nullptr;  // planned runs are unchecked
      break;
    case Mem::Psum:
      v.base = c.core.psum() + p.off;
      v.def = nullptr;
      break;
  }
}

bool make_view(Ctx& c, int k, View& v) {
  if (const PlanView* pv = c.planned()) {
    plan_view(c, pv[k], v);
    return true;
  }
  const int32_t alt = c.plan ? c.plan->alt[static_cast<size_t>(c.pc)] : -1;
  const Phys& ph = alt >= 0 ? c.plan->alt_phys[static_cast<size_t>(alt)][k] : c.prog.phys()[c.pc][k];
  const Ap& a = c.in().ap[k];
  v.dtype = ph.dtype;
  v.es = dt_size(ph.dtype);
  v.ndim = ph.ndim;
  v.mem = ph.mem;
  v.stride = ph.stride;
  v.num = ph.num;
  int64_t off = ph.byte_off;
  if (ph.reg >= 0) {
    const int64_t delta = c.core.regs[ph.reg] * a.reg_scale;
    c.dyn[k] = delta;
    bool ok = ph.lo + delta >= 0 && ph.hi + delta < ph.limit;
    if (ok && ph.mem != Mem::Hbm) {
      const int64_t e = ph.elem_off + delta;
      const int64_t p0 = e / ph.fa, f0 = e % ph.fa;
      const int64_t parts = ph.limit / ph.fa;
      ok = f0 + ph.flo >= 0 && f0 + ph.fhi < ph.fa &&
           p0 + (ph.stride[0] ? ph.num[0] - 1 : 0) < parts;
      off = p0 * ph.pitch + ph.addr + f0 * v.es;
    } else if (ok) {
      off = ph.byte_off + delta * v.es;
    }
    if (!ok) {
      if (c.in().op == Op::DmaCopy && isa::Fields<Op::DmaCopy>{c.in()}.i<"oob_mode">() == 1)
        return false;  // oob_mode=skip
      const Buffer& b = c.prog.buffers()[a.buf];
      c.fail("runtime",
             "dynamic offset (register value " + std::to_string(c.core.regs[ph.reg]) +
                 ") moves the access of '" + b.name + "' outside the tensor",
             "accesses stay inside the tensor");
    }
  }
  switch (ph.mem) {
    case Mem::Hbm: {
      const Binding& b = c.bind[static_cast<size_t>(ph.slot)];
      v.base = b.data + off;
      v.def = b.def ? b.def + off : nullptr;
      break;
    }
    case Mem::Sbuf:
      v.base = c.core.sbuf() + off;
      v.def = c.check ? c.core.sbuf_def() + off : nullptr;
      break;
    case Mem::Psum:
      v.base = c.core.psum() + off;
      v.def = c.check ? c.core.psum_def() + off : nullptr;
      break;
  }
  return true;
}

void collapse_free(View& v) {
  if (v.ndim <= 2) return;
  int out = 2;
  for (int d = 2; d < v.ndim; ++d) {
    if (v.stride[out - 1] == v.stride[d] * v.num[d] && out - 1 >= 1) {
      v.num[out - 1] *= v.num[d];
      v.stride[out - 1] = v.stride[d];
    } else {
      v.num[out] = v.num[d];
      v.stride[out] = v.stride[d];
      ++out;
    }
  }
  v.ndim = out;
}

}  // namespace detail

namespace isa::exec {
using namespace detail;

void RegMove(Ctx& c) {
  const Fields<Op::RegMove> f{c.in()};
  auto& regs = c.core.regs;
  regs[f.i<"dst">()] = f.i<"src">() >= 0 ? regs[f.i<"src">()] : static_cast<int32_t>(f.i<"imm">());
}

void RegLoad(Ctx& c) {
  using FX = Fields<Op::RegLoad>;
  View v;
  make_view(c, FX::k<"src">, v);
  int64_t val = 0;
  load_i64(v.dtype, v.base, v.es, 1, &val);
  if (v.def) {
    uint8_t ok = 1;
    for (int b = 0; b < v.es; ++b) ok &= v.def[b];
    if (!ok) {
      c.note_undefined(FX::k<"src">);
      c.fail("uninitialized", "loads a register from never-written memory" + c.undefined_origin(),
             "kernels read only memory they have written");
    }
  }
  c.core.regs[FX{c.in()}.i<"reg">()] = static_cast<int32_t>(val);
}

void RegStore(Ctx& c) {
  using FX = Fields<Op::RegStore>;
  View v;
  make_view(c, FX::k<"dst">, v);
  const int64_t val = c.core.regs[FX{c.in()}.i<"reg">()];
  store_i64(v.dtype, v.base, v.es, 1, &val);
  if (v.def) std::memset(v.def, 1, static_cast<size_t>(v.es));
}

// Loop structure is interpreted by execute() itself.
[[noreturn]] void control(Ctx& c) { c.fail("runtime", "loop control outside the interpreter", ""); }
void LoopBegin(Ctx& c) { control(c); }
void LoopEnd(Ctx& c) { control(c); }
void WhileBegin(Ctx& c) { control(c); }
void WhileEnd(Ctx& c) { control(c); }

}  // namespace isa::exec

namespace {

// A plan reads some inputs in place: valid for this launch unless one of them shares memory
// with an HBM tensor written while it is read in place (the caller passed the same memory
// twice).
bool plan_applies(const Plan& plan, const std::vector<Binding>& bindings) {
  for (const auto& [r, w] : plan.hazards) {
    const Binding& a = bindings[static_cast<size_t>(r)];
    const Binding& b = bindings[static_cast<size_t>(w)];
    if (a.data < b.data + b.bytes && b.data < a.data + a.bytes) return false;
  }
  return true;
}

}  // namespace

void execute(const Program& prog, CoreState& core, const std::vector<Binding>& bindings,
             const ExecOptions& opt, ExecReport* report) {
  using namespace detail;
  if (!prog.finalized())
    throw NkiError("runtime", "nki executor", "", "program is not finalized", "");
  if (static_cast<int>(bindings.size()) < prog.num_slots())
    throw NkiError("runtime", "nki executor", "",
                   "program needs " + std::to_string(prog.num_slots()) + " HBM tensors, got " +
                       std::to_string(bindings.size()),
                   "");
  for (const Buffer& b : prog.buffers()) {
    if (b.mem != Mem::Hbm) continue;
    const Binding& bd = bindings[static_cast<size_t>(b.slot)];
    if (!bd.data || bd.bytes < b.total_bytes)
      throw NkiError("runtime", "nki executor", prog.str(b.loc),
                     "HBM tensor '" + b.name + "' needs " + std::to_string(b.total_bytes) +
                         " bytes, bound " + std::to_string(bd.bytes),
                     "");
  }
  const Target& t = prog.target();
  const Target& ct = core.target();
  if (ct.sbuf_bytes_per_partition != t.sbuf_bytes_per_partition ||
      ct.psum_bytes_per_partition != t.psum_bytes_per_partition)
    throw NkiError("runtime", "nki executor", "", "core state does not match the program's target",
                   "");
  core.regs.assign(static_cast<size_t>(prog.num_registers()), 0);
  std::fill(std::begin(core.act_acc), std::end(core.act_acc), 0.0f);
  std::fill(std::begin(core.act_acc_def), std::end(core.act_acc_def), uint8_t{1});
  std::fill(std::begin(core.sel_acc), std::end(core.sel_acc), 0.0f);
  std::fill(std::begin(core.sel_acc_def), std::end(core.sel_acc_def), uint8_t{1});
  if (opt.reset_rng) core.rng.reset(opt.rank);
  if (opt.check_uninit) core.enable_shadow();

  Ctx c(prog, core, bindings, opt);
  c.check = opt.check_uninit;
  if (!opt.check_uninit && !opt.record_trace && opt.use_plan && !prog.plan().empty() &&
      plan_applies(prog.plan(), bindings))
    c.plan = &prog.plan();
  const auto& instrs = prog.instrs();
  const auto n = static_cast<int32_t>(instrs.size());
  std::vector<int64_t> upper;  // per LoopBegin: the bound evaluated at loop entry
  if (prog.dynamic()) upper.assign(instrs.size(), 0);
  int64_t iterations = 0, executed = 0;
  const uint64_t epoch = rt::interrupt_epoch();
  int64_t next_poll_ns = 0;
  auto count_iteration = [&] {
    if (++iterations > opt.max_loop_iterations)
      c.fail("runtime",
             "runtime loops ran more than " + std::to_string(opt.max_loop_iterations) +
                 " iterations in one launch (a loop that never ends?); if the kernel is meant to "
                 "run longer, raise NEURON_EMU_NKI_MAX_LOOP_ITERATIONS (now " +
                 std::to_string(opt.max_loop_iterations) + ")",
             "NEURON_EMU_NKI_MAX_LOOP_ITERATIONS");
    // Ctrl-C: a launch on a stream worker sees the epoch move (the host's wait was
    // interrupted); a run on the caller's thread asks the poll itself, every 50 ms at most.
    if ((iterations & 1023) == 0) [[unlikely]] {
      bool stop = rt::interrupt_epoch() != epoch;
      if (!stop) {
        const int64_t now = rt::now_ns();
        if (now >= next_poll_ns) {
          next_poll_ns = now + 50'000'000;
          stop = rt::poll_interrupt();
        }
      }
      if (stop)
        c.fail("interrupted",
               "interrupted (Ctrl-C) after " + std::to_string(iterations) +
                   " runtime loop iterations; the kernel's outputs are incomplete",
               "");
    }
  };
  // One straight-line instruction at c.pc (an elided DMA does nothing); advances c.pc.
  auto step = [&] {
    const Instr& in = instrs[c.pc];
    if (c.plan && c.pc + 1 < n) {
      // The next instruction's records are not in cache in a long program (~0.8 KB each):
      // fetch the lines it reads (opcode, attributes, resolved operands) while this one runs.
      const Instr& nx = instrs[c.pc + 1];
      __builtin_prefetch(&nx.op);
      __builtin_prefetch(&nx.i[0]);
      __builtin_prefetch(&nx.i[kNumInts - 1]);
      __builtin_prefetch(&nx.f[kNumFloats - 1]);
      const int32_t at = c.plan->view_at[static_cast<size_t>(c.pc + 1)];
      if (at >= 0) {
        const size_t end = std::min(c.plan->views.size(), static_cast<size_t>(at) + 3);
        for (size_t k = static_cast<size_t>(at); k < end; ++k)
          __builtin_prefetch(&c.plan->views[k]);
      }
    }
    if (!(c.plan && c.plan->skip[static_cast<size_t>(c.pc)])) {
      c.dyn.fill(0);
      in.def().exec(c);
      if (report && opt.record_trace) report->trace.push_back(ExecRecord{c.pc, c.dyn});
    }
    ++c.pc;
  };
  auto& regs = core.regs;
  using isa::Fields;
  const int64_t sbuf_pitch = Program::sbuf_pitch(t), psum_pitch = Program::psum_pitch(t);
  while (c.pc < n) {
    const Instr& in = instrs[c.pc];
    if (c.check) {  // tensors that become live here start uninitialized
      const auto [b0, b1] = prog.births(c.pc);
      for (const int32_t* bi = b0; bi != b1; ++bi) {
        const Buffer& b = prog.buffers()[static_cast<size_t>(*bi)];
        const bool sb = b.mem == Mem::Sbuf;
        uint8_t* def = sb ? core.sbuf_def() : core.psum_def();
        const int64_t pitch = sb ? sbuf_pitch : psum_pitch;
        if (!def || b.addr < 0) continue;
        for (int64_t p = b.part0; p < b.part0 + b.partitions; ++p)
          std::memset(def + p * pitch + b.addr, 0, static_cast<size_t>(b.bytes_per_partition));
      }
    }
    switch (in.op) {
      case Op::LoopBegin: {
        const Fields<Op::LoopBegin> f{in};
        const int64_t lo = f.i<"lower_reg">() >= 0 ? regs[f.i<"lower_reg">()] : f.i<"lower">();
        const int64_t hi = f.i<"upper_reg">() >= 0 ? regs[f.i<"upper_reg">()] : f.i<"upper">();
        upper[c.pc] = hi;
        regs[f.i<"iterator">()] = lo;
        c.pc = lo < hi ? c.pc + 1 : static_cast<int32_t>(f.i<"end">()) + 1;
        continue;
      }
      case Op::LoopEnd: {
        const auto begin = static_cast<int32_t>(Fields<Op::LoopEnd>{in}.i<"begin">());
        const Fields<Op::LoopBegin> b{instrs[begin]};
        regs[b.i<"iterator">()] += b.i<"step">();
        count_iteration();
        c.pc = regs[b.i<"iterator">()] < upper[begin] ? begin + 1 : c.pc + 1;
        continue;
      }
      case Op::WhileBegin: {
        const Fields<Op::WhileBegin> f{in};
        c.pc = regs[f.i<"condition">()] != 0 ? c.pc + 1 : static_cast<int32_t>(f.i<"end">()) + 1;
        continue;
      }
      case Op::WhileEnd: {
        const Fields<Op::WhileEnd> f{in};
        const auto begin = static_cast<int32_t>(f.i<"begin">());
        const Fields<Op::WhileBegin> b{instrs[begin]};
        regs[b.i<"condition">()] = regs[f.i<"next_condition">()];
        count_iteration();
        c.pc = regs[b.i<"condition">()] != 0 ? begin + 1 : c.pc + 1;
        continue;
      }
      default:
        break;
    }
    if (const int32_t f = c.plan ? c.plan->fused_at[static_cast<size_t>(c.pc)] : -1; f >= 0) {
      const FusedRun& r = c.plan->fused_runs[static_cast<size_t>(f)];
      fused_run(c, r);
      executed += r.end - c.pc;
      c.pc = r.end;
      continue;
    }
    if (c.plan && c.plan->matmul_run[static_cast<size_t>(c.pc)] > 1) {
      const int32_t span = c.plan->matmul_run[static_cast<size_t>(c.pc)];
      if (matmul_run(c, span, std::function<void()>(step))) {
        executed += span;
        c.pc += span;
        continue;
      }
    }
    step();
    ++executed;
  }
  if (report) report->instructions += executed;
  if (opt.check_uninit) core.disable_shadow();
}

}  // namespace neuron::nki
