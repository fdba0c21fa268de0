#include "DeviceTime.h"

#include "Common.h"
#include "runtime/device_clock.h"
#include "runtime/runtime.h"

namespace neuron::torch_glue {

const nki::DeviceTimeParams& device_time_params() {
  static const nki::DeviceTimeParams params = [] {
    const rt::Topology& topo = translate_errors([]() -> const rt::Topology& {
      return rt::Runtime::get().topology();
    });
    nki::DeviceTimeParams p = nki::DeviceTimeParams::for_target(
        topo.profile.nc_version, topo.lnc, topo.logical_cores_per_device);
    rt::ClockParams cp = rt::DeviceClock::get().params();
    cp.host_wake_ns = p.host_wake_ns;
    rt::DeviceClock::get().set_params(cp);
    return p;
  }();
  return params;
}

void launch_op(c10::DeviceIndex device, const char* name, rt::TaskFn fn,
               const nki::WorkCost& work) {
  launch_est(device, name, std::move(fn), nki::eager_op_ns(work, device_time_params()));
}

void launch_est(c10::DeviceIndex device, const char* name, rt::TaskFn fn, double est_ns) {
  translate_errors([&] { current_stream(device).launch(name, std::move(fn), est_ns); });
}

}  // namespace neuron::torch_glue
