// Python binding of the neuron c10d backend, registered on demand (after torch.distributed
// has registered c10d::Backend with pybind).
#include <pybind11/chrono.h>
#include <torch/csrc/utils/pybind.h>

#include "ProcessGroupNeuron.h"

namespace py = pybind11;

namespace neuron::torch_glue {

void bind_distributed(py::module_& m) {
  static bool done = false;
  if (done) return;
  py::class_<ProcessGroupNeuron, c10d::Backend, c10::intrusive_ptr<ProcessGroupNeuron>>(m, "_ProcessGroupNeuron")
      .def(py::init([](const std::string& prefix, int rank, int size, std::chrono::milliseconds timeout) {
             return c10::make_intrusive<ProcessGroupNeuron>(prefix, rank, size, timeout);
           }),
           py::arg("prefix"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
           py::call_guard<py::gil_scoped_release>());
  done = true;
}

}  // namespace neuron::torch_glue
