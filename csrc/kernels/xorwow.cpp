#include "xorwow.h"

#include "random.h"

namespace neuron::kernels {

namespace {

// G generators stepped together, word by word in locals (no aliasing with `out`): for G = 4 the
// step is four independent lanes the compiler turns into one SSE vector.
template <int G>
void fill_group(uint32_t* states, uint32_t* out, int64_t n) {
  uint32_t w[kXorwowWords][G];
  for (int g = 0; g < G; ++g)
    for (int k = 0; k < kXorwowWords; ++k) w[k][g] = states[g * kXorwowWords + k];
  const int64_t full = n / G * G;
  auto step = [&](uint32_t* r) {
    for (int g = 0; g < G; ++g) {
      const uint32_t t = w[0][g] ^ (w[0][g] >> 2);
      w[0][g] = w[1][g];
      w[1][g] = w[2][g];
      w[2][g] = w[3][g];
      w[3][g] = w[4][g];
      w[4][g] = (w[4][g] ^ (w[4][g] << 4)) ^ (t ^ (t << 1));
      w[5][g] += kXorwowWeyl;
      r[g] = w[4][g] + w[5][g];
    }
  };
  for (int64_t j = 0; j < full; j += G) step(out + j);
  if (full < n) {  // the first n - full generators take one more step
    uint32_t r[G];
    uint32_t keep[kXorwowWords][G];
    for (int k = 0; k < kXorwowWords; ++k)
      for (int g = 0; g < G; ++g) keep[k][g] = w[k][g];
    step(r);
    for (int g = 0; g < G; ++g) {
      if (full + g < n) {
        out[full + g] = r[g];
      } else {
        for (int k = 0; k < kXorwowWords; ++k) w[k][g] = keep[k][g];
      }
    }
  }
  for (int g = 0; g < G; ++g)
    for (int k = 0; k < kXorwowWords; ++k) states[g * kXorwowWords + k] = w[k][g];
}

}  // namespace

void xorwow_fill(uint32_t* states, int gens, uint32_t* out, int64_t n) {
  if (gens == 1) {
    fill_group<1>(states, out, n);
  } else if (gens == 4) {
    fill_group<4>(states, out, n);
  } else {
    for (int64_t j = 0; j < n; ++j)
      out[j] = xorwow_next(states + static_cast<int64_t>(j % gens) * kXorwowWords);
  }
}

void xorwow_seed(uint64_t key, uint32_t* state) {
  constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;  // splitmix64's stream increment
  for (int k = 0; k < kXorwowWords; ++k)
    state[k] = static_cast<uint32_t>(splitmix64(key + static_cast<uint64_t>(k) * kGolden) >> 32);
  if ((state[0] | state[1] | state[2] | state[3] | state[4]) == 0) state[0] = 1;
}

}  // namespace neuron::kernels
