"""The warm-call fast path of nki.jit (python/nki/_jit.py _fast_key / _FastEntry): a call is keyed
by its argument structure and goes straight to the launch, but it must never take a stale or
foreign trace. Every key component is changed here between warm calls and must retrace (or
take the trace made for that value), with the right numbers."""

from __future__ import annotations

import enum

import nki
import nki.isa as nisa
import nki.language as nl
import numpy as np
import pytest
import torch

NEURON = torch.device("neuron")


@nki.jit
def sub(a, b):
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    x = nl.load(a)
    y = nl.load(b)
    nisa.tensor_tensor(dst=x, data1=x, data2=y, op=nl.subtract)
    nl.store(out, x)
    return out


def _fresh(func):
    """A kernel with its own caches (the module-level one is shared by the tests)."""
    return nki.jit(func.func)


def _no_full_path(k):
    """Makes the full argument path of `k` fail: later calls must take the fast path."""

    def fail(*a, **kw):
        raise AssertionError("the call took the full path")

    k._specialize = fail


def _warm(k, *args, **kwargs):
    """Three calls: the first traces, the second fills the fast path, the third takes it."""
    for _ in range(3):
        out = k(*args, **kwargs)
    return out


@pytest.mark.parametrize("where", ["numpy", "cpu", "neuron"])
def test_fast_path_hits_and_binds_arguments_in_order(where):
    k = _fresh(sub)
    a = np.arange(32, dtype=np.float32).reshape(8, 4)
    b = np.full((8, 4), 3.0, np.float32)
    if where != "numpy":
        a, b = torch.from_numpy(a), torch.from_numpy(b)
        if where == "neuron":
            a, b = a.to(NEURON), b.to(NEURON)
    conv = (lambda t: t) if where == "numpy" else (lambda t: t.cpu().numpy())
    ref = conv(a) - conv(b)
    np.testing.assert_array_equal(conv(_warm(k, a, b)), ref)
    info = k.cache_info()
    assert info["traces"] == 1 and info["memory_hits"] == 2
    assert len(k._shared["fast"]) == 1
    full = k._specialize
    _no_full_path(k)
    np.testing.assert_array_equal(conv(k(a, b)), ref)
    k._specialize = full
    # Swapped arguments, keywords in either order: the same trace, bound by name.
    np.testing.assert_array_equal(conv(_warm(k, b, a)), -ref)
    np.testing.assert_array_equal(conv(_warm(k, b=b, a=a)), ref)
    np.testing.assert_array_equal(conv(_warm(k, a=b, b=a)), -ref)
    np.testing.assert_array_equal(conv(_warm(k, b, b=a)), -ref)
    assert k.cache_info()["traces"] == 1


def test_shapes_dtypes_strides_and_devices_are_keyed():
    k = _fresh(sub)
    a = torch.arange(32, dtype=torch.float32).reshape(8, 4)
    b = torch.ones(8, 4)
    _warm(k, a, b)
    out = _warm(k, a[:4], b[:4])  # new shape
    torch.testing.assert_close(out, a[:4] - 1, rtol=0, atol=0)
    out = _warm(k, a.to(torch.int32), b.to(torch.int32))  # new dtype
    assert out.dtype == torch.int32
    torch.testing.assert_close(out, (a - 1).to(torch.int32), rtol=0, atol=0)
    at = a.reshape(4, 8).t()  # same shape and dtype, not contiguous
    out = _warm(k, at, b)
    torch.testing.assert_close(out, at - 1, rtol=0, atol=0)
    assert k.cache_info()["traces"] == 3  # strides change no trace, only the launch
    out = _warm(k, a.to(NEURON), b.to(NEURON))  # a device: the same trace, another launch
    assert out.device.type == "neuron"
    torch.testing.assert_close(out.cpu(), a - 1, rtol=0, atol=0)
    with pytest.raises(ValueError, match="mix"):
        k(a.to(NEURON), b)  # the full path's checks still run for a new structure
    assert k.cache_info()["traces"] == 3


class Mode(enum.Enum):
    ADD = 1
    MUL = 2


@nki.jit
def scaled(x, c, mode=Mode.ADD, flag=False):
    out = nl.ndarray(x.shape, nl.float32, buffer=nl.shared_hbm)
    t = nl.load(x)
    v = nl.add(t, c) if mode is Mode.ADD else nl.multiply(t, c)
    if flag:
        v = nl.multiply(v, 10.0)
    if isinstance(c, bool):
        v = nl.multiply(v, -1.0)
    nl.store(out, v)
    return out


def test_scalar_types_values_enums_and_defaults_are_keyed():
    k = _fresh(scaled)
    x = np.full((4, 4), 2.0, np.float32)
    assert _warm(k, x, 3.0)[0, 0] == 5.0
    assert _warm(k, x, 4.0)[0, 0] == 6.0
    assert _warm(k, x, 3.0, Mode.MUL)[0, 0] == 6.0
    assert _warm(k, x, 3.0, mode=Mode.MUL, flag=True)[0, 0] == 60.0
    assert _warm(k, x, 1)[0, 0] == 3.0
    assert _warm(k, x, True)[0, 0] == -3.0  # True == 1, but another type: another trace
    assert _warm(k, x, 1.0)[0, 0] == 3.0
    traces = k.cache_info()["traces"]
    assert _warm(k, x, 3.0, Mode.ADD, False)[0, 0] == 5.0  # the defaults, passed: same trace
    assert k.cache_info()["traces"] == traces


SHIFT = 1.0


def test_a_changed_global_is_seen_by_warm_calls():
    global SHIFT

    @nki.jit
    def k(x):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.add(nl.load(x), SHIFT))
        return out

    x = np.zeros((4, 4), np.float32)
    try:
        assert _warm(k, x)[0, 0] == 1.0
        SHIFT = 5.0
        assert k(x)[0, 0] == 5.0 and k(x)[0, 0] == 5.0
        SHIFT = 1.0
        assert k(x)[0, 0] == 1.0 and k(x)[0, 0] == 1.0
        assert k.cache_info()["traces"] == 2
    finally:
        SHIFT = 1.0


def test_a_changed_closure_value_is_seen_by_warm_calls():
    scale = [2.0]

    def make():
        s = scale[0]

        @nki.jit
        def k(x):
            out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
            nl.store(out, nl.multiply(nl.load(x), s))
            return out

        return k

    x = np.ones((4, 4), np.float32)
    k2 = make()
    assert _warm(k2, x)[0, 0] == 2.0
    scale[0] = 3.0
    k3 = make()  # a new kernel object: its own caches
    assert _warm(k3, x)[0, 0] == 3.0 and _warm(k2, x)[0, 0] == 2.0


HELPER_FACTOR = 2.0


def _helper(t):
    return nl.multiply(t, HELPER_FACTOR)


def test_a_global_read_by_a_helper_is_seen_by_warm_calls():
    global HELPER_FACTOR

    @nki.jit
    def k(x):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        nl.store(out, _helper(nl.load(x)))
        return out

    x = np.ones((4, 4), np.float32)
    try:
        assert _warm(k, x)[0, 0] == 2.0
        HELPER_FACTOR = 7.0
        assert k(x)[0, 0] == 7.0
    finally:
        HELPER_FACTOR = 2.0


@nki.jit
def sbuf_size(x):
    """Writes the platform's SBUF bytes per partition (a trace-time constant)."""
    out = nl.ndarray(x.shape, nl.float32, buffer=nl.shared_hbm)
    nl.store(out, nl.add(nl.multiply(nl.load(x), 0.0), float(nl.tile_size.total_available_sbuf_size)))
    return out


def test_platform_target_and_topology_environment_are_keyed(monkeypatch):
    if not hasattr(nl.tile_size, "total_available_sbuf_size"):
        pytest.skip("no nl.tile_size.total_available_sbuf_size")
    k = _fresh(sbuf_size)
    x = np.ones((2, 2), np.float32)
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn1")
    trn1 = _warm(k, x)[0, 0]
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn3")
    trn3 = _warm(k, x)[0, 0]
    assert trn1 != trn3
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn1")
    assert k(x)[0, 0] == trn1
    assert k.cache_info()["traces"] == 2
    monkeypatch.delenv("NEURON_PLATFORM_TARGET_OVERRIDE")
    monkeypatch.setenv("NEURON_LOGICAL_NC_CONFIG", "1")
    _warm(k, x)
    traces = k.cache_info()["traces"]
    monkeypatch.setenv("NEURON_LOGICAL_NC_CONFIG", "2")
    k(x)
    assert k.cache_info()["traces"] == traces + 1  # the LNC is part of the target


def test_disabled_compile_cache_traces_every_warm_call(monkeypatch):
    k = _fresh(sub)
    a = np.ones((4, 4), np.float32)
    _warm(k, a, a)
    monkeypatch.setenv("NKI_DISABLE_COMPILE_CACHE", "1")
    _warm(k, a, a)
    assert k.cache_info()["traces"] == 1 + 3


def test_cache_clear_empties_the_fast_path():
    k = _fresh(sub)
    a = np.ones((4, 4), np.float32)
    _warm(k, a, a)
    k.cache_clear()
    assert not k._shared["fast"]
    k(a, a)
    assert k.cache_info()["traces"] == 2


def test_grids_are_keyed():
    @nki.jit
    def k(x):
        i = nl.program_id(0)
        nl.store(x[i : i + 1, :], nl.add(nl.load(x[i : i + 1, :]), 1.0))
        return x

    x = np.zeros((4, 4), np.float32)
    _warm(k[4], x)
    assert (x == 3.0).all()
    _warm(k[2], x)
    assert (x[:2] == 6.0).all() and (x[2:] == 3.0).all()


def test_mutable_and_tensor_defaults_take_the_full_path():
    @nki.jit
    def k(x, scales=[1.0]):  # noqa: B006 - the mutable default is the point
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.multiply(nl.load(x), scales[0]))
        return out

    x = np.ones((2, 2), np.float32)
    assert _warm(k, x)[0, 0] == 1.0
    assert not k._shared["fast"]
    k.func.__defaults__[0][0] = 4.0
    assert k(x)[0, 0] == 4.0

    bias = np.full((2, 2), 2.0, np.float32)

    @nki.jit
    def kb(x, b=bias):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.add(nl.load(x), nl.load(b)))
        return out

    assert _warm(kb, x)[0, 0] == 3.0
    assert not kb._shared["fast"]


def test_written_non_contiguous_input_is_copied_back_on_warm_calls():
    @nki.jit
    def inc(x):
        nl.store(x, nl.add(nl.load(x), 1.0))
        return x

    base = np.zeros((4, 8), np.float32)
    view = base[:, ::2]
    for i in range(3):
        inc(view)
        assert (base[:, ::2] == i + 1).all() and (base[:, 1::2] == 0).all()
    tb = torch.zeros(4, 8, device=NEURON)
    for i in range(3):
        inc(tb[:, ::2])
    assert (tb[:, ::2].cpu() == 3).all() and (tb[:, 1::2].cpu() == 0).all()


def test_parameters_take_the_fast_path_like_tensors():
    k = _fresh(sub)
    w = torch.nn.Parameter(torch.arange(8.0).reshape(2, 4).to(NEURON))
    x = torch.ones(2, 4, device=NEURON)
    _warm(k, w, x)
    _no_full_path(k)
    out = k(w, x)
    torch.testing.assert_close(out.cpu(), torch.arange(8.0).reshape(2, 4) - 1, rtol=0, atol=0)
    assert not out.requires_grad


def test_grid_kernels_are_made_once_per_grid():
    k = _fresh(sub)
    assert k[2] is k[2] and k[(2,)] is k[2] and k[2] is not k[3] and k[2][4] is k[4]
    assert k[2].grid == (2,) and k[2].cache_info() == k.cache_info()


@nki.jit
def weighted_sum(xs, pairs, scale=1.0):
    """sum_i xs[i] * scale - sum over (a, b) in pairs of a - b: tensors inside a list and inside
    tuples inside a list (nkilib megakernels take per-layer weights so)."""
    out = nl.ndarray(xs[0].shape, xs[0].dtype, buffer=nl.shared_hbm)
    acc = nl.multiply(nl.load(xs[0]), scale)
    for x in xs[1:]:
        acc = nl.add(acc, nl.multiply(nl.load(x), scale))
    for a, b in pairs:
        acc = nl.subtract(acc, nl.subtract(nl.load(a), nl.load(b)))
    nl.store(out, acc)
    return out


@pytest.mark.parametrize("where", ["numpy", "neuron"])
def test_lists_and_tuples_of_tensors_take_the_fast_path(where):
    k = _fresh(weighted_sum)
    rng = np.random.default_rng(3)
    vals = [rng.standard_normal((4, 8)).astype(np.float32) for _ in range(7)]
    if where == "neuron":
        vals = [torch.from_numpy(v).to(NEURON) for v in vals]
    conv = (lambda t: t) if where == "numpy" else (lambda t: t.cpu().numpy())
    v = [conv(t) for t in vals]

    def ref(xs, pairs, scale=1.0):
        return sum(x * np.float32(scale) for x in xs) - sum(a - b for a, b in pairs)

    xs, pairs = [vals[0], vals[1], vals[2]], [(vals[3], vals[4]), (vals[5], vals[6])]
    expect = ref([v[0], v[1], v[2]], [(v[3], v[4]), (v[5], v[6])])
    np.testing.assert_allclose(conv(_warm(k, xs, pairs)), expect, rtol=1e-6, atol=1e-6)
    _no_full_path(k)
    # Other tensors in the same structure, in other positions: bound from this call's lists.
    xs2, pairs2 = [vals[6], vals[5], vals[4]], [(vals[2], vals[0]), (vals[1], vals[3])]
    np.testing.assert_allclose(
        conv(k(xs2, pairs2)), ref([v[6], v[5], v[4]], [(v[2], v[0]), (v[1], v[3])]), rtol=1e-6, atol=1e-6
    )
    # Another structure (length, list vs tuple, a scalar inside) is another key: the full path.
    for call in (
        lambda: k(xs[:2], pairs),
        lambda: k(tuple(xs), pairs),
        lambda: k(xs, [list(p) for p in pairs]),
        lambda: k(xs, pairs, 2.0),
    ):
        with pytest.raises(AssertionError, match="full path"):
            call()
    del k._specialize  # the full path again
    np.testing.assert_allclose(
        conv(_warm(k, xs[:2], pairs, 2.0)), ref([v[0], v[1]], [(v[3], v[4]), (v[5], v[6])], 2.0),
        rtol=1e-6, atol=1e-6,
    )
    assert k.cache_info()["traces"] == 2
