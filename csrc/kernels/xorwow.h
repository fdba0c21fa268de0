// XORWOW (Marsaglia, "Xorshift RNGs", Journal of Statistical Software 8(14), 2003, section 3.1):
// a xorshift generator on five 32-bit words x, y, z, w, v plus a Weyl sequence d (step 362437);
// each step returns v + d. Stateful, unlike the counter-based Philox of random.h: this is the
// generator of the NeuronCore engines (nisa.rng, rand2, dropout), whose state the kernels read
// and write (nisa.rand_get_state / rand_set_state), so one generator's state is exactly its six
// words, in the order x, y, z, w, v, d.
// Thread-safety: a state is mutated by every draw; distinct states are independent.
#pragma once

#include <cstdint>

namespace neuron::kernels {

constexpr int kXorwowWords = 6;
constexpr uint32_t kXorwowWeyl = 362437u;

// One step of the generator at `s` (kXorwowWords words): advances it and returns the output.
inline uint32_t xorwow_next(uint32_t* s) {
  const uint32_t t = s[0] ^ (s[0] >> 2);
  s[0] = s[1];
  s[1] = s[2];
  s[2] = s[3];
  s[3] = s[4];
  s[4] = (s[4] ^ (s[4] << 4)) ^ (t ^ (t << 1));
  s[5] += kXorwowWeyl;
  return s[4] + s[5];
}

// n outputs into out, drawn in turn from `gens` generators stored one after the other at
// `states` (out[j] is the next output of generator j % gens).
void xorwow_fill(uint32_t* states, int gens, uint32_t* out, int64_t n);

// The state a 64-bit key expands to: word k is the high half of splitmix64(key + k *
// 0x9E3779B97F4A7C15) (random.h), i.e. the k-th output of a splitmix64 stream started at the
// key; if x..v all come out zero (a xorshift state that never leaves zero), x is set to 1.
void xorwow_seed(uint64_t key, uint32_t* state);

// The 24 high bits of an output as a float in [0, 1): (r >> 8) * 2^-24 (exact in fp32).
inline float xorwow_unit(uint32_t r) { return static_cast<float>(r >> 8) * 0x1p-24f; }

}  // namespace neuron::kernels
