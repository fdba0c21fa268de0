#include "cpu.h"

#include <cstdlib>
#include <cstring>

namespace neuron::kernels {
namespace {

Isa detect() {
  const char* off = std::getenv("NEURON_EMU_DISABLE_SIMD");
  if (off && std::strcmp(off, "1") == 0) return Isa::Portable;
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
      __builtin_cpu_supports("f16c"))
    return Isa::Avx2;
  return Isa::Portable;
}

}  // namespace

Isa best_isa() {
  static const Isa isa = detect();
  return isa;
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Portable:
      return "portable";
    case Isa::Avx2:
      return "avx2";
  }
  return "?";
}

}  // namespace neuron::kernels
