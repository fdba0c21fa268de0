// Random numbers: nisa.rng, rand2, dropout, set_rng_seed, rand_set_state, rand_get_state on the
// core's per-lane XORWOW generators (RngState, executor.h; the generator is kernels/xorwow.h).
// An instruction on partitions [p0, p0 + P) uses lanes p0..p0 + P - 1; each partition's elements
// draw in the row-major order of its free dimensions, on Vector element j from the lane's
// generator j % 4. Partitions run in parallel: each touches only its own lane's state.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "exec_internal.h"

namespace neuron::nki {

void RngState::seed_vector(uint32_t seed) {
  for (int p = 0; p < kLanes; ++p)
    for (int g = 0; g < kVectorGens; ++g)
      kernels::xorwow_seed(
          uint64_t{seed} << 32 | uint64_t{1} << 16 | uint64_t(p) << 4 | uint64_t(g),
          vector[p] + g * kernels::kXorwowWords);
}

void RngState::apply_reset() {
  const auto core = static_cast<uint32_t>(pending_reset_);
  pending_reset_ = -1;
  seed_vector(core);
  for (int p = 0; p < kLanes; ++p)
    kernels::xorwow_seed(uint64_t{core} << 32 | uint64_t{2} << 16 | uint64_t(p) << 4, gpsimd[p]);
}

namespace detail {
namespace {

// The compute lane of row 0 of an on-chip view (its partition in SBUF/PSUM).
int64_t first_lane(Ctx& c, const View& v) {
  const Target& t = c.prog.target();
  const bool sb = v.mem == Mem::Sbuf;
  const uint8_t* base = sb ? c.core.sbuf() : c.core.psum();
  const int64_t pitch = sb ? Program::sbuf_pitch(t) : Program::psum_pitch(t);
  const int64_t lane = (v.base - base) / pitch;
  if (lane < 0 || lane + v.parts() > RngState::kLanes)
    c.fail("runtime",
           "partitions " + std::to_string(lane) + ".." + std::to_string(lane + v.parts() - 1) +
               " have no random number generators",
           "the engines have 128 compute lanes");
  return lane;
}

View operand(Ctx& c, int k) {
  View v;
  make_view(c, k, v);
  collapse_free(v);
  return v;
}

// n draws of lane `lane`'s generators on the instruction's engine into a per-thread buffer.
const uint32_t* draws(Ctx& c, int64_t lane, int64_t n) {
  thread_local std::vector<uint32_t> buf;
  if (static_cast<int64_t>(buf.size()) < n) buf.resize(static_cast<size_t>(n));
  const Engine e = c.in().engine;
  kernels::xorwow_fill(c.core.rng.lane(e, lane), RngState::gens(e), buf.data(), n);
  return buf.data();
}

void mark_defined(const View& d, int64_t p) {
  if (!d.def) return;
  Scratch& sc = scratch();
  const int64_t F = d.free();
  uint8_t* df = sc.db(5, F);
  std::fill(df, df + F, uint8_t{1});
  store_def_row(d, p, df);
}

// The element of a [1, 1] or [P, k] source as raw 32-bit words; never-written data is an error
// (it would seed the generators with garbage).
void read_words(Ctx& c, int k, const View& v, int64_t p, uint32_t* out, const char* what) {
  gather_bytes(v, p, reinterpret_cast<uint8_t*>(out));
  if (!v.def) return;
  Scratch& sc = scratch();
  uint8_t* df = sc.db(5, v.free());
  load_def_row(v, p, df);
  if (!all_defined(df, v.free())) {
    c.note_undefined(k);
    c.fail("uninitialized", std::string(what) + " from never-written memory" + c.undefined_origin(),
           "kernels read only memory they have written");
  }
}

}  // namespace
}  // namespace detail

namespace isa::exec {
using namespace detail;

void Rng(Ctx& c) {
  c.core.rng.use();
  const View d = operand(c, Fields<Op::Rng>::k<"dst">);
  const int64_t F = d.free(), l0 = first_lane(c, d);
  for_partitions(d.parts(), F, [&](int64_t p) {
    const uint32_t* r = draws(c, l0 + p, F);
    // 32 random bits per element; narrower dtypes keep the low bits (little-endian: the first
    // bytes of each word).
    if (d.es == 4) {
      scatter_bytes(d, p, reinterpret_cast<const uint8_t*>(r));
    } else {
      Scratch& sc = scratch();
      uint8_t* b = sc.db(0, F * d.es);
      for (int64_t i = 0; i < F; ++i) std::memcpy(b + i * d.es, r + i, static_cast<size_t>(d.es));
      scatter_bytes(d, p, b);
    }
    mark_defined(d, p);
  });
}

void Rand2(Ctx& c) {
  c.core.rng.use();
  using FX = Fields<Op::Rand2>;
  const FX f{c.in()};
  const View d = operand(c, FX::k<"dst">);
  const bool vlo = c.has(FX::k<"min_vec">), vhi = c.has(FX::k<"max_vec">);
  View lo, hi;
  if (vlo) lo = operand(c, FX::k<"min_vec">);
  if (vhi) hi = operand(c, FX::k<"max_vec">);
  const int64_t F = d.free(), l0 = first_lane(c, d);
  for_partitions(d.parts(), F, [&](int64_t p) {
    auto bound = [&](bool vec, const View& v, double imm, uint8_t& ok) {
      if (!vec) return static_cast<float>(imm);
      float x;
      load_f32(v.dtype, v.base + p * v.stride[0], v.es, 1, &x);
      if (v.def)
        for (int b = 0; b < v.es; ++b) ok &= v.def[p * v.stride[0] + b];
      return x;
    };
    uint8_t ok = 1;
    const float a = bound(vlo, lo, f.imm<"min">(), ok), b = bound(vhi, hi, f.imm<"max">(), ok);
    const uint32_t* r = draws(c, l0 + p, F);
    Scratch& sc = scratch();
    float* x = sc.fb(0, F);
    const float span = b - a;
    for (int64_t i = 0; i < F; ++i) x[i] = a + kernels::xorwow_unit(r[i]) * span;
    store_row(d, p, x);
    if (d.def) {
      if (!ok) c.note_undefined(vlo ? FX::k<"min_vec"> : FX::k<"max_vec">);
      uint8_t* df = sc.db(0, F);
      std::fill(df, df + F, ok);
      store_def_row(d, p, df);
    }
  });
}

void Dropout(Ctx& c) {
  c.core.rng.use();
  using FX = Fields<Op::Dropout>;
  const FX f{c.in()};
  const View d = operand(c, FX::k<"dst">), a = operand(c, FX::k<"data">);
  const bool vec = c.has(FX::k<"prob">);
  View pv;
  if (vec) pv = operand(c, FX::k<"prob">);
  const int64_t F = a.free(), l0 = first_lane(c, d);
  const int es = a.es;
  for_partitions(a.parts(), F, [&](int64_t p) {
    float prob = static_cast<float>(f.imm<"prob_imm">());
    uint8_t ok = 1;
    if (vec) {
      load_f32(pv.dtype, pv.base + p * pv.stride[0], pv.es, 1, &prob);
      if (pv.def)
        for (int b = 0; b < pv.es; ++b) ok &= pv.def[p * pv.stride[0] + b];
    }
    Scratch& sc = scratch();
    uint8_t* x = sc.db(0, F * es);
    gather_bytes(a, p, x);
    uint8_t* df = c.check ? sc.db(1, F) : nullptr;
    if (df) load_def_row(a, p, df);
    const uint32_t* r = draws(c, l0 + p, F);
    // Dropped elements get zero bits (0 in every dtype); branch-free, one element-sized word at
    // a time.
    auto zero_dropped = [&](auto word) {
      using W = decltype(word);
      for (int64_t i = 0; i < F; ++i) {
        W v;
        std::memcpy(&v, x + i * sizeof(W), sizeof(W));
        v = kernels::xorwow_unit(r[i]) < prob ? W{0} : v;
        std::memcpy(x + i * sizeof(W), &v, sizeof(W));
      }
    };
    if (es == 4) {
      zero_dropped(uint32_t{});
    } else if (es == 2) {
      zero_dropped(uint16_t{});
    } else {
      zero_dropped(uint8_t{});
    }
    bool undefined = !ok;
    if (df)
      for (int64_t i = 0; i < F; ++i) {
        if (kernels::xorwow_unit(r[i]) < prob) {
          df[i] = ok;
        } else {
          undefined |= !df[i];
          df[i] &= ok;
        }
      }
    scatter_bytes(d, p, x);
    if (df) {
      if (undefined) c.note_undefined(ok ? FX::k<"data"> : FX::k<"prob">);
      store_def_row(d, p, df);
    }
  });
}

void SetRngSeed(Ctx& c) {
  c.core.rng.use();  // GpSimd keeps the launch's default state
  const View s = operand(c, Fields<Op::SetRngSeed>::k<"src_seeds">);
  uint32_t seed = 0;
  read_words(c, 0, s, 0, &seed, "set_rng_seed seeds the Vector Engine's generators");
  c.core.rng.seed_vector(seed);
}

void RandSetState(Ctx& c) {
  c.core.rng.use();
  const View s = operand(c, Fields<Op::RandSetState>::k<"src_seeds">);
  const Engine e = c.in().engine;
  const int64_t l0 = first_lane(c, s);
  for (int64_t p = 0; p < s.parts(); ++p)  // the check made the row exactly one lane's state
    read_words(c, 0, s, p, c.core.rng.lane(e, l0 + p), "rand_set_state loads the generator state");
}

void RandGetState(Ctx& c) {
  c.core.rng.use();
  const View d = operand(c, Fields<Op::RandGetState>::k<"dst">);
  const Engine e = c.in().engine;
  const int64_t l0 = first_lane(c, d);
  for (int64_t p = 0; p < d.parts(); ++p) {
    scatter_bytes(d, p, reinterpret_cast<const uint8_t*>(c.core.rng.lane(e, l0 + p)));
    mark_defined(d, p);
  }
}

}  // namespace isa::exec
}  // namespace neuron::nki
