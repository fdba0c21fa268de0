#include "blas.h"

#include <dlfcn.h>

#include <cstdlib>
#include <string>

namespace neuron::kernels::blas {
namespace {

Functions resolve() {
  Functions f;
  const char* off = std::getenv("NEURON_EMU_DISABLE_BLAS");
  if (off && std::string(off) == "1") return f;
  void* handle = dlopen("libtorch_cpu.so", RTLD_NOW | RTLD_NOLOAD);
  std::string source = "libtorch_cpu.so (loaded)";
  if (!handle) {
    if (const char* lib = std::getenv("NEURON_EMU_BLAS_LIB")) {
      handle = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
      source = lib;
    }
  }
#ifdef NEURON_EMU_TORCH_LIB_DIR
  if (!handle) {
    source = std::string(NEURON_EMU_TORCH_LIB_DIR) + "/libtorch_cpu.so";
    handle = dlopen(source.c_str(), RTLD_NOW | RTLD_LOCAL);
  }
#endif
  if (!handle) return f;
  f.sgemm = reinterpret_cast<sgemm_fn>(dlsym(handle, "sgemm_"));
  f.dgemm = reinterpret_cast<dgemm_fn>(dlsym(handle, "dgemm_"));
  f.gemm_bf16 = reinterpret_cast<gemm16_fn>(dlsym(handle, "gemm_bf16bf16f32"));
  f.gemm_f16 = reinterpret_cast<gemm16_fn>(dlsym(handle, "gemm_f16f16f32"));
  f.set_num_threads_local = reinterpret_cast<set_threads_fn>(dlsym(handle, "MKL_Set_Num_Threads_Local"));
  static std::string kept;
  kept = source;
  f.source = kept.c_str();
  return f;
}

}  // namespace

const Functions& functions() {
  static const Functions f = resolve();
  return f;
}

}  // namespace neuron::kernels::blas
