"""What a framework registers with nki: nki imports no framework, a framework that runs NKI
kernels on its device tensors registers itself when it loads (torch_neuronx does, for the
``neuron`` device).

* its package directory: frames there are not kernel code (the source locations of
  instructions skip them; the trace cache treats its files as library code, hashed but not
  keyed by value);
* the launcher of kernels whose arguments are its device tensors:
  ``launch(programs, bindings, device_index, name, check, max_iterations, check_state)`` queues
  the traced programs (nki._nki_native Programs) with the per-instance binding lists (device
  addresses) on the device's current stream; ``check_state`` (a nki._nki_native CheckState or
  None) is marked passed when a checked run completed without error;
* optionally a launch template class, which the warm-call fast path of nki.jit builds once per
  trace and call structure: ``template(programs, slots, consts, shared, scratch, device, name)``
  with per instance the slot list ``(pool, index, bytes, name, is_input, scratch)`` (pool 0 =
  argument, 1 = shared output, 2 = scratch buffer, 3 = constant address), ``shared`` the
  outputs' (shape, framework dtype), ``scratch`` the scratch buffers' byte sizes; its
  ``launch(args, check, check_state)`` allocates the outputs and scratch, queues the launch like
  the launcher, and returns the shared outputs.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from ._core import core

_launchers: dict[str, Callable] = {}
_templates: dict[str, Callable] = {}


def register(
    device_type: str,
    *,
    package_dir: str | None = None,
    launch: Callable | None = None,
    launch_template: Callable | None = None,
) -> None:
    """Registers a framework's device (``"neuron"``): its package directory and its launcher."""
    from . import _deps, _tracer

    if package_dir is not None:
        d = os.path.abspath(package_dir)
        _tracer.add_library_dir(d)
        _deps.add_library_dir(d)
    if launch is not None:
        # The launcher takes nki._nki_native programs: load the native core now, so that its
        # translation of NKI errors (nki.NkiValidationError) covers the framework's calls too.
        core()
        _launchers[device_type] = launch
    if launch_template is not None:
        _templates[device_type] = launch_template


def launcher(device_type: str) -> Callable:
    """The launcher registered for `device_type` (raises when no framework registered one)."""
    fn = _launchers.get(device_type)
    if fn is None:
        raise RuntimeError(
            f"nki: no framework registered a launcher for {device_type!r} tensors "
            "(torch_neuronx registers the 'neuron' device when it is imported)"
        )
    return fn


def launch_template(device_type: str) -> Callable | None:
    """The launch template class registered for `device_type` (None: launch through the
    launcher)."""
    return _templates.get(device_type)
