"""Launchers of the older NKI releases and of the NKI Library's test harness, kept so real code
runs unchanged: ``nki.simulate_kernel(kernel, *args)`` and ``nki.baremetal`` (the
``neuronxcc.nki`` era) and ``nki.cpu_simulate(kernel)[lnc](**kwargs)``. All run the kernel on
the host with every check on and return numpy arrays for numpy inputs."""

from __future__ import annotations

from ._jit import Kernel
from ._profile import _as_kernel, simulate


def simulate_kernel(kernel, *args, **kwargs):
    """Runs `kernel` (optionally with a grid: ``simulate_kernel(k[2, 4], a, b)``) on the host
    with every check on and returns its outputs."""
    return simulate(kernel)(*args, **kwargs)


class _Launcher:
    """``launcher(*args)`` runs the kernel; ``launcher[grid]`` selects a launch grid."""

    def __init__(self, kernel: Kernel, what: str):
        self._kernel = kernel
        self._what = what

    @property
    def _nki_launched_kernel(self) -> Kernel:
        return self._kernel

    def __getitem__(self, grid) -> _Launcher:
        return _Launcher(self._kernel[grid], self._what)

    def __call__(self, *args, **kwargs):
        return simulate(self._kernel)(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<nki.{self._what} of {self._kernel!r}>"


def baremetal(kernel=None, *, save_neff_name=None, save_trace_name=None, additional_compile_opt=None,
              artifacts_dir=None, **options):
    """``@nki.baremetal`` / ``nki.baremetal(kernel)(*numpy_args)``: compiles and runs a kernel with
    numpy inputs and outputs, no framework (here: on the host NeuronCore model, every check on).
    The artifact options name files of the real toolchain and are accepted."""

    def wrap(k):
        return _Launcher(_as_kernel(k), "baremetal")

    return wrap(kernel) if kernel is not None else wrap


def cpu_simulate(kernel) -> _Launcher:
    """``nki.cpu_simulate(kernel)[lnc](**kwargs)``: the launcher the NKI Library's tests use; runs
    the kernel on the host with `lnc` programs (``nl.num_programs() == lnc``) and returns its
    outputs."""
    return _Launcher(_as_kernel(kernel), "cpu_simulate")
