// The Python extension torch_neuronx._C: device queries, op tracking, generators and device
// properties for the `torch.neuron` module. Registration of the device itself happens in
// static initializers of the other files when this library loads.
#include <torch/csrc/Generator.h>
#include <torch/csrc/utils/pybind.h>

#include "Common.h"
#include "Interrupt.h"
#include "NeuronGenerator.h"
#include "NkiBindings.h"
#include "OpTracker.h"
#include "RealStackFallback.h"
#include "runtime/event.h"
#include "runtime/thread_pool.h"

#include <chrono>
#include <thread>

namespace py = pybind11;

namespace neuron::torch_glue {
void bind_distributed(py::module_& m);
void init_compiler_bindings(py::module& m);  // compiler/CompilerBindings.cpp
namespace {

template <typename F>
auto guarded(F&& fn) {
  try {
    return fn();
  } catch (const rt::BadForkError& e) {
    throw std::runtime_error(e.what());
  }
}

py::dict device_properties(int index) {
  rt::Device& dev = rt_device(static_cast<c10::DeviceIndex>(index));
  const rt::Topology& topo = rt::Runtime::get().topology();
  const rt::LogicalCore& core = dev.core();
  py::dict d;
  d["name"] = "NeuronCore-v" + std::to_string(topo.profile.nc_version) + " (" + topo.profile.name + ", LNC " +
              std::to_string(topo.lnc) + ")";
  d["total_memory"] = core.hbm_capacity;
  d["instance_type"] = topo.profile.name;
  d["nc_version"] = topo.profile.nc_version;
  d["logical_nc_config"] = topo.lnc;
  d["physical_cores"] = core.physical_count;
  d["global_core_id"] = core.global_id;
  d["neuron_device"] = core.device;
  d["sbuf_bytes"] = topo.profile.sbuf_bytes_per_partition * static_cast<uint64_t>(topo.profile.sbuf_partitions) *
                    static_cast<uint64_t>(topo.lnc);
  d["psum_bytes"] = topo.profile.psum_bytes_per_partition * 128u * static_cast<uint64_t>(topo.lnc);
  return d;
}

}  // namespace
}  // namespace neuron::torch_glue

PYBIND11_MODULE(_C, m) {
  using namespace neuron;
  using namespace neuron::torch_glue;
  m.doc() = "neuron-emu: the native part of torch_neuronx";
  install_interrupt_poll();  // Ctrl-C interrupts waits for the device
  init_compiler_bindings(m);

  m.def("_device_count", [] {
    try {
      return rt::Runtime::get().device_count();
    } catch (const rt::Error&) {
      return 0;
    }
  });
  m.def("_init", [] { translate_errors([] { rt::Runtime::get(); }); });
  m.def("_is_initialized", [] { return rt::Runtime::initialized(); });
  m.def("_is_in_bad_fork", [] { return rt::Runtime::in_bad_fork(); });
  m.def("_current_device", [] { return rt::current_device(); });
  m.def("_set_device", [](int index) {
    rt_device(static_cast<c10::DeviceIndex>(index));
    rt::set_current_device(index);
  });
  m.def(
      "_synchronize",
      [](int index) {
        py::gil_scoped_release nogil;
        translate_errors([&] {
          if (index < 0) {
            rt::Runtime::get().synchronize_all();
          } else {
            rt::Runtime::get().device(index).synchronize();
          }
        });
      },
      py::arg("device") = -1);
  m.def("_launch_blocking", [] { return rt::Runtime::get().launch_blocking(); });
  m.def("_host_threads", [] { return rt::num_threads(); });

  // Queues a task that throws `message` on the current stream of `device`, named `name`:
  // lets tests check that errors inside queued work surface at the next synchronization.
  m.def("_debug_launch_failing_task", [](int device, const std::string& name, const std::string& message) {
    launch(static_cast<c10::DeviceIndex>(device), rt::intern(name), [message] { throw std::runtime_error(message); });
  });
  // Queues a task that sleeps `ms` milliseconds (lets tests observe asynchrony).
  m.def("_debug_launch_sleep", [](int device, int ms) {
    launch(static_cast<c10::DeviceIndex>(device), "neuron::debug_sleep",
           [ms] { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); });
  });

  // Milliseconds between two recorded timing events, given their native handles
  // (torch.Event.event_id): lets torch.neuron.Event subclasses time each other.
  m.def("_event_elapsed_time", [](uintptr_t start, uintptr_t end) {
    TORCH_CHECK(start != 0 && end != 0, "elapsed_time: both events must be recorded first");
    return translate_errors([&] {
      return reinterpret_cast<rt::Event*>(start)->elapsed_ms(*reinterpret_cast<rt::Event*>(end));
    });
  });

  // Defines _ProcessGroupNeuron; call after `import torch.distributed`.
  m.def("_init_distributed", [m]() mutable { bind_distributed(m); });

  m.def("_get_fallback_ops", [] { return fallback_ops(); });
  m.def("_get_executed_ops", [] { return executed_ops(); });
  m.def("_clear_op_tracking", [] { clear_op_tracking(); });
  m.def("_set_fallback_model", [](const std::string& model) {
    TORCH_CHECK(model == "real" || model == "native",
                "fallback model must be 'real' or 'native', got '", model, "'");
    set_mirror_real_stack_fallback(model == "real");
  });
  m.def("_fallback_model", [] { return std::string(mirror_real_stack_fallback() ? "real" : "native"); });

  m.def("_default_generator", [](int index) {
    const at::Generator& g = default_generator(static_cast<c10::DeviceIndex>(index));
    return py::reinterpret_steal<py::object>(THPGenerator_initDefaultGenerator(g));
  });
  m.def("_device_properties", [](int index) { return device_properties(index); });
  register_nki(m);

  m.def("_topology", [] {
    const rt::Topology& t = rt::Runtime::get().topology();
    py::dict d;
    d["instance_type"] = t.profile.name;
    d["lnc"] = t.lnc;
    d["logical_cores_per_device"] = t.logical_cores_per_device;
    d["total_logical_cores"] = t.total_logical_cores;
    py::list visible;
    for (const auto& c : t.visible) visible.append(c.global_id);
    d["visible_cores"] = visible;
    return d;
  });
}
