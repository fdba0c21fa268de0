// The device hooks of PyTorch's autograd profiler (torch.autograd.profiler.profile(
// use_device="neuron"), also what the legacy profiler and record_function use): an event per
// range recorded on the current stream of the current device, device time = the elapsed time
// between two events once both completed, like CUDA's stubs. Without them every op under the
// profiler logs "PrivateUse1 used in profiler but not enabled" and times come out garbage.
#include <c10/util/ApproximateClock.h>
#include <torch/csrc/profiler/stubs/base.h>

#include <memory>

#include "torch/Common.h"
#include "runtime/event.h"
#include "runtime/runtime.h"

namespace neuron::torch_glue {
namespace {

struct NeuronProfilerStubs final : torch::profiler::impl::ProfilerStubs {
  void record(c10::DeviceIndex* device, torch::profiler::impl::ProfilerVoidEventStub* event,
              int64_t* cpu_ns) const override {
    const int index = rt::current_device();
    if (device) *device = static_cast<c10::DeviceIndex>(index);
    auto ev = std::make_shared<rt::Event>(/*enable_timing=*/true);
    if (cpu_ns) *cpu_ns = c10::getTime();
    translate_errors([&] { ev->record(current_stream(static_cast<c10::DeviceIndex>(index))); });
    *event = std::move(ev);
  }

  // Microseconds between the two events (PyTorch's profiler unit for device time).
  float elapsed(const torch::profiler::impl::ProfilerVoidEventStub* event,
                const torch::profiler::impl::ProfilerVoidEventStub* event2) const override {
    const auto* a = static_cast<const rt::Event*>(event->get());
    const auto* b = static_cast<const rt::Event*>(event2->get());
    return translate_errors([&] {
      a->synchronize();
      b->synchronize();
      return static_cast<float>(a->elapsed_ms(*b) * 1000.0);
    });
  }

  void mark(const char*) const override {}
  void rangePush(const char*) const override {}
  void rangePop() const override {}
  bool enabled() const override { return true; }

  void onEachDevice(std::function<void(int)> op) const override {
    const int prev = rt::current_device();
    const int n = static_cast<int>(rt::Runtime::get().device_count());
    for (int i = 0; i < n; ++i) {
      rt::set_current_device(i);
      op(i);
    }
    rt::set_current_device(prev);
  }

  void synchronize() const override {
    translate_errors([] {
      const int n = static_cast<int>(rt::Runtime::get().device_count());
      for (int i = 0; i < n; ++i) rt_device(static_cast<c10::DeviceIndex>(i)).synchronize();
    });
  }
};

const int kRegistered = [] {
  static NeuronProfilerStubs stubs;
  torch::profiler::impl::registerPrivateUse1Methods(&stubs);
  return 0;
}();

}  // namespace
}  // namespace neuron::torch_glue
