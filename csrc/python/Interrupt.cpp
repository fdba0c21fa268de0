#include "Interrupt.h"

#include <pybind11/pybind11.h>

#include "runtime/interrupt.h"

namespace py = pybind11;

namespace neuron::pyglue {
namespace {

// The exception Python's signal handler raised, taken by the poll on this thread.
thread_local PyObject* t_type = nullptr;
thread_local PyObject* t_value = nullptr;
thread_local PyObject* t_tb = nullptr;

bool finalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing();
#else
  return _Py_IsFinalizing();
#endif
}

// Runs Python's pending signal handlers (only the main thread has any); the default SIGINT
// handler raises KeyboardInterrupt, which is kept for set_interrupt_error().
bool python_poll() {
  if (!Py_IsInitialized() || finalizing()) return false;
  const PyGILState_STATE st = PyGILState_Ensure();
  bool hit = false;
  if (PyErr_CheckSignals() != 0) {
    hit = true;
    Py_XDECREF(t_type);
    Py_XDECREF(t_value);
    Py_XDECREF(t_tb);
    PyErr_Fetch(&t_type, &t_value, &t_tb);
  }
  PyGILState_Release(st);
  return hit;
}

}  // namespace

void install_interrupt_poll() { rt::set_interrupt_poll(&python_poll); }

void set_interrupt_error(const std::string& what) {
  PyObject *type = t_type, *value = t_value, *tb = t_tb;
  t_type = t_value = t_tb = nullptr;
  if (type != nullptr && !PyErr_GivenExceptionMatches(type, PyExc_KeyboardInterrupt)) {
    PyErr_Restore(type, value, tb);  // a user handler's own exception
    return;
  }
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(tb);
  PyErr_SetString(PyExc_KeyboardInterrupt, what.c_str());
}

void raise_interrupt(const std::string& what) {
  py::gil_scoped_acquire gil;
  set_interrupt_error(what);
  throw py::error_already_set();
}

}  // namespace neuron::pyglue
