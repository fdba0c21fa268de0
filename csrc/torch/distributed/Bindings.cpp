// Python binding of the neuron c10d backend, registered on demand (after torch.distributed
// has registered c10d::Backend and c10d::Store with pybind).
#include <pybind11/chrono.h>
#include <pybind11/functional.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include "ProcessGroupNeuron.h"

namespace py = pybind11;

namespace neuron::torch_glue {

void bind_distributed(py::module_& m) {
  static bool done = false;
  if (done) return;
  py::class_<ProcessGroupNeuron, c10d::Backend, c10::intrusive_ptr<ProcessGroupNeuron>>(m, "_ProcessGroupNeuron")
      .def(py::init([](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                       std::chrono::milliseconds timeout, std::chrono::milliseconds join_timeout,
                       const std::string& group_name, ProcessGroupNeuron::GlooFactory make_gloo) {
             ProcessGroupNeuron::Options o;
             o.group_name = group_name;
             o.timeout = timeout;
             o.join_timeout = join_timeout;
             o.make_gloo = std::move(make_gloo);
             return c10::make_intrusive<ProcessGroupNeuron>(store, rank, size, std::move(o));
           }),
           py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"), py::arg("join_timeout"),
           py::arg("group_name"), py::arg("make_gloo"), py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("_hosts", &ProcessGroupNeuron::hosts)
      .def_property_readonly("_transport", &ProcessGroupNeuron::transport);
  done = true;
}

}  // namespace neuron::torch_glue
