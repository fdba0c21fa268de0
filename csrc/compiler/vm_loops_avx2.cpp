// The AVX2/FMA/F16C build of the VM loops (vm_loops.h); compiled with -mavx2 -mfma -mf16c and
// only called after loops_avx2() has checked the CPU.
#define VM_LOOPS_IMPL
#define VM_LOOPS_NS avx2
#define VM_LOOPS_ISA "avx2"
#include "vm_loops.h"
