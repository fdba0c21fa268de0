#include "simd.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

namespace neuron::kernels {

namespace {

SimdLevel detect() {
#if NEURON_KERNELS_X86
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
      __builtin_cpu_supports("f16c"))
    return SimdLevel::Avx2;
#endif
  return SimdLevel::Portable;
}

SimdLevel initial_level() {
  const SimdLevel best = simd_detected();
  const char* v = std::getenv("NEURON_EMU_SIMD");
  if (!v || !*v || std::strcmp(v, "auto") == 0) return best;
  if (std::strcmp(v, "portable") == 0) return SimdLevel::Portable;
  if (std::strcmp(v, "avx2") == 0) return best;  // asking for more than the CPU has is clamped
  throw std::invalid_argument(std::string("NEURON_EMU_SIMD=") + v +
                              ": expected one of auto, portable, avx2");
}

std::atomic<int> g_level{-1};

}  // namespace

SimdLevel simd_detected() {
  static const SimdLevel level = detect();
  return level;
}

SimdLevel simd_level() {
  int v = g_level.load(std::memory_order_relaxed);
  if (v < 0) [[unlikely]] {
    v = static_cast<int>(initial_level());
    g_level.store(v, std::memory_order_relaxed);
  }
  return static_cast<SimdLevel>(v);
}

void set_simd_level(SimdLevel level) {
  const SimdLevel best = simd_detected();
  if (static_cast<int>(level) > static_cast<int>(best)) level = best;
  g_level.store(static_cast<int>(level), std::memory_order_relaxed);
}

const char* simd_level_name(SimdLevel level) {
  return level == SimdLevel::Avx2 ? "avx2" : "portable";
}

}  // namespace neuron::kernels
