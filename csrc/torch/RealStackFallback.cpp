#include "RealStackFallback.h"

#include <c10/util/Exception.h>

#include <atomic>
#include <cstdlib>
#include <string>

namespace neuron::torch_glue {
namespace {

// -1: not read yet; 0: native; 1: real.
std::atomic<int> g_mirror{-1};

int from_env() {
  const char* v = std::getenv("NEURON_EMU_FALLBACK_MODEL");
  if (!v || !*v) return 1;
  const std::string s(v);
  if (s == "real") return 1;
  if (s == "native") return 0;
  TORCH_CHECK(false, "NEURON_EMU_FALLBACK_MODEL=", s,
              ": expected real (ops the real torch-neuronx runs on the CPU fall back here too) "
              "or native (use neuron-emu's kernels for them)");
}

}  // namespace

bool mirror_real_stack_fallback() {
  int v = g_mirror.load(std::memory_order_relaxed);
  if (v < 0) {
    v = from_env();
    g_mirror.store(v, std::memory_order_relaxed);
  }
  return v == 1;
}

void set_mirror_real_stack_fallback(bool on) { g_mirror.store(on ? 1 : 0, std::memory_order_relaxed); }

}  // namespace neuron::torch_glue
