// The Python extension torch_neuronx._C: device queries, op tracking, generators and device
// properties for the `torch.neuron` module. Registration of the device itself happens in
// static initializers of the other files when this library loads.
#include <torch/csrc/Generator.h>
#include <torch/csrc/utils/pybind.h>

#include "Common.h"
#include "DeviceTime.h"
#include "NeuronGenerator.h"
#include "NkiLaunch.h"
#include "OpTracker.h"
#include "RealStackFallback.h"
#include "profiler/NeuronActivityProfiler.h"
#include "python/Interrupt.h"
#include "runtime/device_clock.h"
#include "runtime/event.h"
#include "runtime/thread_pool.h"
#include "runtime/trace.h"

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
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

// A task that holds its stream until the host opens the gate: lets tests prove that launches
// return while earlier work is still queued, without measuring time. The task gives up after
// `timeout_s` (and says so) so that a failing test cannot hang the stream forever.
struct DebugGate {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false, entered = false, timed_out = false;

  void run(double timeout_s) {
    std::unique_lock<std::mutex> lock(mu);
    entered = true;
    cv.notify_all();
    timed_out = !cv.wait_for(lock, std::chrono::duration<double>(timeout_s), [&] { return open; });
  }
  void release() {
    std::lock_guard<std::mutex> lock(mu);
    open = true;
    cv.notify_all();
  }
  // Waits until the task runs (it is at the head of its stream); false after `timeout_s`.
  bool wait_entered(double timeout_s) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, std::chrono::duration<double>(timeout_s), [&] { return entered; });
  }
};

}  // namespace
}  // namespace neuron::torch_glue

PYBIND11_MODULE(_C, m) {
  using namespace neuron;
  using namespace neuron::torch_glue;
  m.doc() = "neuron-emu: the native part of torch_neuronx";
  pyglue::install_interrupt_poll();  // Ctrl-C interrupts waits for the device
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

  // Queues a task on the current stream of `device` that blocks until the returned gate is
  // opened (or `timeout_s` passes; then `timed_out` is true).
  py::class_<DebugGate, std::shared_ptr<DebugGate>>(m, "_DebugGate")
      .def("open", [](DebugGate& g) { g.release(); })
      .def(
          "wait_entered",
          [](DebugGate& g, double timeout_s) {
            py::gil_scoped_release nogil;
            return g.wait_entered(timeout_s);
          },
          py::arg("timeout_s") = 60.0)
      .def_property_readonly("is_open", [](DebugGate& g) {
        std::lock_guard<std::mutex> lock(g.mu);
        return g.open;
      })
      .def_property_readonly("timed_out", [](DebugGate& g) {
        std::lock_guard<std::mutex> lock(g.mu);
        return g.timed_out;
      });
  m.def(
      "_debug_launch_gate",
      [](int device, double timeout_s) {
        auto gate = std::make_shared<DebugGate>();
        launch(static_cast<c10::DeviceIndex>(device), "neuron::debug_gate",
               [gate, timeout_s] { gate->run(timeout_s); });
        return gate;
      },
      py::arg("device") = 0, py::arg("timeout_s") = 60.0);

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

  // The estimated Trainium2 clock (runtime/device_clock.h): one reading, in nanoseconds.
  m.def("_device_clock", [] {
    device_time_params();  // the cost model's constants are in place before the first reading
    const rt::ClockReading r = rt::DeviceClock::get().read();
    py::dict d;
    d["est_host_ns"] = r.est_host_ns;
    d["real_ns"] = r.real_ns;
    d["device_free_ns"] = r.device_free_ns;
    d["device_busy_ns"] = r.device_busy_ns;
    d["tasks"] = r.tasks;
    d["host_waits"] = r.host_waits;
    return d;
  });
  // The last torch.profiler session's device tasks and CPU fallbacks, both clocks.
  m.def("_profiler_last_session", [] {
    py::list out;
    for (const SessionEvent& e : last_profiler_session()) {
      py::dict d;
      d["name"] = e.name;
      d["device"] = e.device;
      d["stream"] = e.stream;
      d["seq"] = e.seq;
      d["start_us"] = e.start_us;
      d["end_us"] = e.end_us;
      d["launch_us"] = e.launch_us;
      d["est_start_us"] = e.est_start_us;
      d["est_end_us"] = e.est_end_us;
      d["fallback"] = e.stream == rt::kFallbackRow;
      out.append(d);
    }
    return out;
  });
  // The cost model's constants for this topology (docs/cost-model.md, "Whole programs").
  m.def("_device_time_params", [] {
    const nki::DeviceTimeParams& p = device_time_params();
    py::dict d;
    d["eager_launch_ns"] = p.eager_launch_ns;
    d["neff_launch_ns"] = p.neff_launch_ns;
    d["kernel_boundary_ns"] = p.kernel_boundary_ns;
    d["nki_handoff_ns"] = p.nki_handoff_ns;
    d["pcie_latency_ns"] = p.pcie_latency_ns;
    d["pcie_bytes_per_ns"] = p.pcie_bytes_per_ns;
    d["host_wake_ns"] = p.host_wake_ns;
    d["host_op_ns"] = p.host_op_ns;
    d["host_bytes_per_ns"] = p.host_bytes_per_ns;
    d["hbm_bytes_per_ns"] = p.hbm_bytes_per_ns();
    d["peak_bf16_tflops"] = p.core.peak_bf16_tflops * p.lnc;
    d["peak_fp32_tflops"] = p.core.peak_fp32_tflops * p.lnc;
    d["neuronlink_bytes_per_ns"] = p.neuronlink_bytes_per_ns;
    d["collective_step_ns"] = p.collective_step_ns;
    d["logical_cores_per_device"] = p.logical_cores_per_device;
    return d;
  });

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
  register_nki_launch(m);

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
