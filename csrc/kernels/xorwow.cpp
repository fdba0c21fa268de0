#include "xorwow.h"

#include "random.h"

namespace neuron::kernels {

void xorwow_fill(uint32_t* states, int gens, uint32_t* out, int64_t n) {
  if (gens == 1) {
    for (int64_t j = 0; j < n; ++j) out[j] = xorwow_next(states);
    return;
  }
  for (int64_t j = 0; j < n; ++j)
    out[j] = xorwow_next(states + static_cast<int64_t>(j % gens) * kXorwowWords);
}

void xorwow_seed(uint64_t key, uint32_t* state) {
  constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;  // splitmix64's stream increment
  for (int k = 0; k < kXorwowWords; ++k)
    state[k] = static_cast<uint32_t>(splitmix64(key + static_cast<uint64_t>(k) * kGolden) >> 32);
  if ((state[0] | state[1] | state[2] | state[3] | state[4]) == 0) state[0] = 1;
}

}  // namespace neuron::kernels
