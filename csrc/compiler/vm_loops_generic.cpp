// The portable build of the VM loops (vm_loops.h) and the run-time choice of loop table.
#define VM_LOOPS_IMPL
#define VM_LOOPS_NS generic
#define VM_LOOPS_ISA "generic"
#include "kernels/simd.h"
#include "vm_loops.h"

namespace neuron::cc::vm {

namespace avx2 {
const LoopTable& table();
}

const LoopTable& loops_generic() { return generic::table(); }

const LoopTable* loops_avx2() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                         __builtin_cpu_supports("f16c");
  return ok ? &avx2::table() : nullptr;
#else
  return nullptr;
#endif
}

const LoopTable& loops() {
  static const LoopTable* chosen = [] {
    if (kernels::simd_level() == kernels::SimdLevel::Portable) return &loops_generic();
    const LoopTable* a = loops_avx2();
    return a ? a : &loops_generic();
  }();
  return *chosen;
}

}  // namespace neuron::cc::vm
