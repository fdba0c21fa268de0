#include "DtypeContract.h"

#include <Python.h>

#include <cfloat>
#include <cmath>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <string>

#include "Common.h"
#include "runtime/env.h"
#include "runtime/error.h"

namespace neuron::torch_glue::dtype_contract {

namespace detail {

std::atomic<bool> g_warned_int64{false};
std::atomic<bool> g_warned_float64{false};

void warn_slow(at::ScalarType t) {
  std::atomic<bool>& flag = t == at::kLong ? g_warned_int64 : g_warned_float64;
  if (flag.exchange(true)) return;  // another thread won the race
  // The message lives in Python (logging); reach it through the C API so that the hot path
  // needs no binding. Skip silently while the interpreter is not running.
  if (!Py_IsInitialized() || _Py_IsFinalizing()) return;
  const PyGILState_STATE gil = PyGILState_Ensure();
  PyObject* mod = PyImport_ImportModule("torch_neuronx.python_ops.dtype_autocast");
  if (mod) {
    PyObject* r = PyObject_CallMethod(mod, "_warn_unsupported_dtype", "s",
                                      t == at::kLong ? "int64" : "float64");
    Py_XDECREF(r);
    Py_DECREF(mod);
  }
  if (PyErr_Occurred()) PyErr_WriteUnraisable(nullptr);  // a logging failure must not fail the op
  PyGILState_Release(gil);
}

}  // namespace detail

bool strict() {
  static const bool on = [] {
    try {
      return rt::getenv_bool("NEURON_EMU_STRICT_DTYPES", false);
    } catch (const rt::Error& e) {
      TORCH_CHECK(false, e.what());
    }
  }();
  return on;
}

namespace {

template <typename T, typename Check>
void walk(const kernels::TensorRef& r, Check&& bad) {
  if (r.data == nullptr) return;
  int64_t idx[kernels::kMaxDims] = {};
  const int64_t n = r.numel();
  for (int64_t k = 0; k < n; ++k) {
    int64_t off = 0;
    for (int d = 0; d < r.ndim; ++d) off += idx[d] * r.strides[d];
    const T v = static_cast<const T*>(r.data)[off];
    bad(v);
    for (int d = r.ndim - 1; d >= 0; --d) {
      if (++idx[d] < r.sizes[d]) break;
      idx[d] = 0;
    }
  }
}

void check_ref(const kernels::TensorRef& r, const char* op) {
  if (r.dtype == kernels::DType::Int64) {
    walk<int64_t>(r, [&](int64_t v) {
      if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max())
        throw std::range_error(
            rt::str(op, ": int64 value ", v,
                    " does not fit in int32, the dtype the Neuron device uses for int64 "
                    "(NEURON_EMU_STRICT_DTYPES=1)"));
    });
  } else if (r.dtype == kernels::DType::Float64) {
    walk<double>(r, [&](double v) {
      const double a = std::fabs(v);
      if (std::isfinite(v) && (a > FLT_MAX || (a != 0.0 && a < FLT_MIN)))
        throw std::range_error(
            rt::str(op, ": float64 value ", v,
                    a > FLT_MAX ? " overflows float32" : " underflows float32 (loses precision)",
                    ", the dtype the Neuron device uses for float64 (NEURON_EMU_STRICT_DTYPES=1)"));
    });
  }
}

}  // namespace

void check_values(const kernels::TensorRef& ref, const char* op) { check_ref(ref, op); }

void check_host_tensor(const at::Tensor& t, const char* op) {
  if (!t.defined() || !is_64bit(t.scalar_type()) || t.numel() == 0) return;
  TORCH_CHECK(t.device().is_cpu(), "check_host_tensor: expected a CPU tensor");
  try {
    check_ref(make_ref(t), op);
  } catch (const std::range_error& e) {
    TORCH_CHECK(false, e.what());
  }
}

}  // namespace neuron::torch_glue::dtype_contract
