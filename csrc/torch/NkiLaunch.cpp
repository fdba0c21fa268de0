// The launch of NKI kernels on neuron tensors (torch_neuronx._C._nki_launch): one task on the
// device's current stream per kernel call, with the arguments' device buffers bound by address
// and the launch's estimated Trainium2 time. torch_neuronx registers it with nki when it loads
// (nki never imports torch); programs, binding lists and check states are the ones
// nki._nki_native made (csrc/python: the NKI bindings without torch).
#include "NkiLaunch.h"

#include <ATen/ATen.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include <mutex>
#include <unordered_map>

#include "Common.h"
#include "DeviceTime.h"
#include "nki/device_time.h"
#include "nki/launch.h"
#include "nki/program.h"
#include "python/NkiRun.h"
#include "runtime/runtime.h"

namespace py = pybind11;

namespace neuron::torch_glue {
namespace {

using nki::Program;

// Estimated Trainium2 time of an eager NKI launch: one op launch plus the cost model's
// estimate of its grid instances, kept per program set (a kernel is estimated once).
double eager_nki_ns(const std::vector<std::shared_ptr<Program>>& progs) {
  struct Entry {
    std::vector<std::weak_ptr<Program>> progs;
    double ns;
  };
  static std::mutex mu;
  static std::unordered_map<const Program*, Entry> cache;
  const nki::DeviceTimeParams& dp = torch_glue::device_time_params();
  if (progs.empty()) return dp.eager_launch_ns;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(progs[0].get());
    if (it != cache.end() && it->second.progs.size() == progs.size()) {
      bool same = true;
      for (size_t i = 0; i < progs.size() && same; ++i)
        same = it->second.progs[i].lock() == progs[i];
      if (same) return it->second.ns;
    }
  }
  std::vector<const Program*> raw;
  for (const auto& p : progs) raw.push_back(p.get());
  const double ns = dp.eager_launch_ns + nki::nki_launch_ns(raw, dp.lnc);
  std::lock_guard<std::mutex> lock(mu);
  if (cache.size() > 4096) cache.clear();
  Entry e{{progs.begin(), progs.end()}, ns};
  cache[progs[0].get()] = std::move(e);
  return ns;
}

// What nki._jit's launch template (the warm-call fast path) hands over once per trace and call
// structure, so that a warm launch allocates the outputs and scratch, binds the addresses and
// queues the task without building or converting Python binding lists.
// slots: per instance, (pool, index, bytes, name, is_input, scratch) with pool 0 = argument
// tensor, 1 = shared output, 2 = scratch buffer, 3 = constant (index into `consts`).
// Immutable after construction; launch() needs the GIL (it is called from Python).
class LaunchTemplate {
 public:
  LaunchTemplate(std::vector<std::shared_ptr<Program>> progs, const py::list& slots,
                 std::vector<uintptr_t> consts,
                 std::vector<std::pair<std::vector<int64_t>, at::ScalarType>> shared,
                 std::vector<int64_t> scratch, int device, const std::string& name)
      : progs_(std::move(progs)),
        tpl_(slots, progs_.size(), std::move(consts), std::move(scratch)),
        shared_(std::move(shared)),
        device_(device),
        name_(rt::intern("nki::" + name)) {
    rt::Runtime::get().device(device_);  // validates the index
    est_ns_ = eager_nki_ns(progs_);
  }

  // Queues one launch on the current stream of the device; returns the shared outputs.
  std::vector<at::Tensor> launch(const std::vector<at::Tensor>& args, bool check,
                                 std::shared_ptr<pyglue::CheckState> check_state) const {
    const auto dev = c10::Device(torch_glue::kNeuron, static_cast<c10::DeviceIndex>(device_));
    std::vector<at::Tensor> shared, scratch;
    std::vector<uintptr_t> arg_ptrs, shared_ptrs, scratch_ptrs;
    for (const auto& t : args) arg_ptrs.push_back(reinterpret_cast<uintptr_t>(t.data_ptr()));
    for (const auto& [shape, dtype] : shared_) {
      shared.push_back(at::empty(shape, at::TensorOptions().dtype(dtype).device(dev)));
      shared_ptrs.push_back(reinterpret_cast<uintptr_t>(shared.back().data_ptr()));
    }
    for (int64_t n : tpl_.scratch_bytes()) {
      scratch.push_back(at::empty({n}, at::TensorOptions().dtype(at::kByte).device(dev)));
      scratch_ptrs.push_back(reinterpret_cast<uintptr_t>(scratch.back().data_ptr()));
    }
    auto binds = tpl_.bind(arg_ptrs, shared_ptrs, scratch_ptrs);
    const int64_t max_iters = nki::max_loop_iterations_from_env();
    rt::Stream& stream = rt::current_stream(device_);
    stream.launch(name_, [progs = progs_, binds = std::move(binds), check, max_iters, check_state] {
      pyglue::run_all(progs, binds, check, false, max_iters);
      if (check && check_state) check_state->passed.store(true);
    }, est_ns_);
    return shared;  // the scratch is released here, as the Python launch releases its buffers
  }

 private:
  std::vector<std::shared_ptr<Program>> progs_;
  pyglue::BindingTemplate tpl_;
  std::vector<std::pair<std::vector<int64_t>, at::ScalarType>> shared_;
  int device_;
  const char* name_;
  double est_ns_ = 0;
};

}  // namespace

void register_nki_launch(py::module_& m) {
  py::class_<LaunchTemplate>(m, "_NkiLaunchTemplate")
      .def(py::init<std::vector<std::shared_ptr<Program>>, const py::list&, std::vector<uintptr_t>,
                    std::vector<std::pair<std::vector<int64_t>, at::ScalarType>>, std::vector<int64_t>,
                    int, const std::string&>(),
           py::arg("programs"), py::arg("slots"), py::arg("consts"), py::arg("shared"),
           py::arg("scratch"), py::arg("device"), py::arg("name"))
      .def("launch", &LaunchTemplate::launch, py::arg("args"), py::arg("check"),
           py::arg("check_state") = nullptr);

  // Asynchronous execution on device memory: one task on the current stream of `device`.
  // `check_state` (optional) is marked passed when a checked run completes without error.
  m.def(
      "_nki_launch",
      [](const std::vector<std::shared_ptr<Program>>& progs, const py::list& bindings, int device,
         const std::string& name, bool check, int64_t max_iters,
         std::shared_ptr<pyglue::CheckState> check_state) {
        auto binds = pyglue::to_bindings(bindings, progs.size());
        rt::Runtime::get().device(device);  // validates the index
        // Read the environment here, so that a bad value fails the call, not the queued task.
        if (max_iters <= 0) max_iters = nki::max_loop_iterations_from_env();
        rt::Stream& stream = rt::current_stream(device);
        const double est = eager_nki_ns(progs);
        stream.launch(rt::intern("nki::" + name), [progs, binds, check, max_iters, check_state] {
          pyglue::run_all(progs, binds, check, false, max_iters);
          if (check && check_state) check_state->passed.store(true);
        }, est);
      },
      py::arg("programs"), py::arg("bindings"), py::arg("device"), py::arg("name"),
      py::arg("check"), py::arg("max_iterations") = 0, py::arg("check_state") = nullptr);
}

}  // namespace neuron::torch_glue
