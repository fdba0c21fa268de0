"""Every hardware rule the NeuronCore model checks, broken once: the error must name the
instruction, the rule, the offending values and the kernel source line (file:line)."""

from __future__ import annotations

import inspect
import os

import nki
import nki.isa as nisa
import nki.language as nl
import numpy as np
import pytest
import torch
from nki import NkiValidationError

THIS = os.path.basename(__file__)


def line_of(func, marker: str) -> int:
    lines, start = inspect.getsourcelines(func)
    for i, text in enumerate(lines):
        if marker in text:
            return start + i
    raise AssertionError(f"marker {marker!r} not found")


def expect(kernel, args, *fragments, marker: str, instruction: str | None = None, kind="validation"):
    with pytest.raises(NkiValidationError) as ei:
        kernel(*args)
    err = ei.value
    msg = str(err)
    line = line_of(kernel.func if hasattr(kernel, "func") else kernel, marker)
    assert f"{THIS}:{line}" in msg, msg
    assert err.location.endswith(f"{THIS}:{line}"), err.location
    assert err.kind == kind, err.kind
    if kind == "validation":
        assert "[rule: " in msg and err.rule, msg
    if instruction:
        assert err.instruction.startswith(instruction), err.instruction
    for f in fragments:
        assert f in msg, f"{f!r} not in {msg!r}"
    return err


X = np.zeros((128, 64), np.float32)


def test_partition_dimension_limit_on_allocation():
    @nki.jit
    def k(x):
        t = nl.ndarray((256, 64), nl.float32, buffer=nl.sbuf)  # MARK
        return t

    expect(
        k,
        (X,),
        "partition dimension 256 > 128",
        "nl.tile_size.pmax",
        marker="# MARK",
        instruction="nki.language.ndarray",
    )


def test_partition_dimension_limit_on_access():
    @nki.jit
    def k(x):
        out = nl.ndarray((256, 8), nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((128, 16), nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=t, value=0.0)
        nisa.dma_copy(dst=out, src=t.ap(pattern=[[8, 256], [1, 8]]))  # MARK
        return out

    expect(
        k,
        (X,),
        "partition dimension 256 exceeds maximum 128",
        marker="# MARK",
        instruction="nki.isa.dma_copy",
    )


def test_matmul_stationary_free_size_limit():
    def k2(x):
        s = nl.zeros((128, 256), nl.bfloat16)
        m = nl.zeros((128, 256), nl.bfloat16)
        ps = nl.ndarray((128, 256), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=ps, stationary=s, moving=m)  # MARK

    kern = nki.jit(k2)
    expect(
        kern,
        (X,),
        "stationary free size 256 exceeds maximum 128",
        "128x128",
        marker="# MARK",
        instruction="nki.isa.nc_matmul",
    )


def test_matmul_moving_free_size_limit():
    @nki.jit
    def k(x):
        s = nl.zeros((128, 128), nl.bfloat16)
        m = nl.zeros((128, 1024), nl.bfloat16)
        ps = nl.ndarray((128, 1024), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=ps, stationary=s, moving=m)  # MARK

    expect(k, (X,), "moving free size 1024 exceeds maximum 512", "gemm_moving_fmax", marker="# MARK")


def test_nl_matmul_limits_point_at_the_language_call():
    @nki.jit
    def k(x):
        a = nl.zeros((128, 128), nl.float32)
        b = nl.zeros((128, 1024), nl.float32)
        r = nl.matmul(a, b, transpose_x=True)  # MARK
        return r

    err = expect(k, (X,), "moving free size 1024", marker="# MARK")
    assert "from nki.language.matmul" in err.instruction


def test_matmul_output_within_one_psum_bank():
    @nki.jit
    def k(x):
        s = nl.zeros((128, 128), nl.bfloat16)
        m = nl.zeros((128, 512), nl.bfloat16)
        ps = nl.ndarray((128, 1024), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=ps[:, 256:768], stationary=s, moving=m)  # MARK

    expect(
        k, (X,), "crossing a 2 KiB PSUM bank boundary", "bytes 1024..3071", "one PSUM bank", marker="# MARK"
    )


def test_psum_capacity_in_banks():
    @nki.jit
    def k(x):
        tiles = []
        for i in range(9):
            t = nl.ndarray((128, 512), nl.float32, buffer=nl.psum)
            nisa.memset(dst=t, value=0.0)  # MARK
            tiles.append(t)
        acc = nl.zeros((128, 512), nl.float32)
        for t in tiles:  # all nine are live until here
            nisa.tensor_tensor(dst=acc, data1=acc, data2=t, op=nl.add)

    expect(k, (X,), "PSUM capacity exceeded", "(9 of 8 banks)", "16384", marker="# MARK")


def test_sbuf_capacity():
    @nki.jit
    def k(x):
        a = nl.ndarray((128, 40000), nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=a, value=1.0)
        b = nl.ndarray((128, 40000), nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=b, value=2.0)  # MARK
        nisa.tensor_tensor(dst=a, data1=a, data2=b, op=nl.add)

    err = expect(
        k,
        (X,),
        "SBUF capacity exceeded",
        "live tensors need 320000 bytes per partition",
        "229376",
        marker="# MARK",
    )
    assert "live: 'sbuf_0' 160000 B" in str(err)


def test_sbuf_capacity_follows_the_target():
    # NeuronCore-v2 (Trn1) has 192 KiB per partition.
    @nki.jit
    def k(x):
        nl.ndarray((128, 50000), nl.float32, buffer=nl.sbuf)  # MARK

    os.environ["NEURON_PLATFORM_TARGET_OVERRIDE"] = "trn1"
    try:
        expect(k, (X,), "needs 200000 bytes per partition > 196608", marker="# MARK")
    finally:
        del os.environ["NEURON_PLATFORM_TARGET_OVERRIDE"]


def test_overlap_of_live_manually_placed_tensors():
    @nki.jit
    def k(x):
        a = nl.ndarray((128, 256), nl.float32, buffer=nl.sbuf, address=(0, 0))
        b = nl.ndarray((128, 256), nl.float32, buffer=nl.sbuf, address=(0, 512))
        nisa.memset(dst=a, value=0.0)
        nisa.memset(dst=b, value=0.0)  # MARK
        nisa.tensor_tensor(dst=a, data1=a, data2=b, op=nl.add)

    expect(k, (X,), "overlaps live tensor 'sbuf_0'", "bytes [512, 1536)", "do not overlap", marker="# MARK")


def test_manually_placed_tensors_on_disjoint_partitions_share_bytes():
    # Tensors placed at the same byte offset on disjoint partition ranges are distinct memory:
    # each starts at its own partition (it used to alias partition 0 onwards).
    @nki.jit
    def k(x):
        out = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
        a = nl.ndarray((64, 64), nl.float32, buffer=nl.sbuf, address=(0, 0))
        b = nl.ndarray((64, 64), nl.float32, buffer=nl.sbuf, address=(64, 0))
        nisa.dma_copy(dst=a, src=x[0:64, :])
        nisa.dma_copy(dst=b, src=x[64:128, :])
        nisa.tensor_scalar(dst=b, data=b, op0=nl.multiply, operand0=2.0)
        nisa.dma_copy(dst=out[0:64, :], src=a)
        nisa.dma_copy(dst=out[64:128, :], src=b)
        return out

    x = np.arange(128 * 64, dtype=np.float32).reshape(128, 64)
    want = x.copy()
    want[64:] *= 2.0
    np.testing.assert_array_equal(np.asarray(k(x)), want)


def test_sbuf_tensors_on_disjoint_partition_ranges_share_capacity():
    # Five live (64, 48 KiB) tensors do not fit on one partition range (240 KiB per partition of
    # 224 KiB), but the fifth fits beside the others on partitions [64, 128).
    @nki.jit
    def k(x):
        out = nl.ndarray((320, 64), nl.float32, buffer=nl.shared_hbm)
        n = 48 * 1024 // 4
        tiles = [nl.ndarray((64, n), nl.float32, buffer=nl.sbuf) for _ in range(5)]
        for i, t in enumerate(tiles):
            nisa.memset(dst=t, value=float(i + 1))
        for i, t in enumerate(tiles):
            nisa.tensor_scalar(dst=t[:, 0:64], data=t[:, 0:64], op0=nl.multiply, operand0=2.0)
            nisa.dma_copy(dst=out[i * 64 : (i + 1) * 64, :], src=t[:, 0:64])
        return out

    y = np.asarray(k(X))
    want = np.repeat(np.arange(1, 6, dtype=np.float32) * 2.0, 64)[:, None] * np.ones((1, 64), np.float32)
    np.testing.assert_array_equal(y, want)


def test_psum_manual_placement_on_bank_boundary():
    # A PSUM tensor of at most one bank lies inside one (it may start inside it: psum.alloc
    # places tiles at byte offsets of a bank); a larger one starts at a bank boundary.
    @nki.jit
    def k(x):
        t = nl.ndarray((128, 512), nl.float32, buffer=nl.psum, address=(0, 1024))  # MARK
        return t

    expect(k, (X,), "byte offset 1024 with 2048 bytes per partition crosses a bank boundary", marker="# MARK")

    @nki.jit
    def k2(x):
        t = nl.ndarray((128, 1024), nl.float32, buffer=nl.psum, address=(0, 1024))  # MARK
        return t

    expect(k2, (X,), "byte offset 1024 with 4096 bytes per partition does not start on a bank boundary",
           marker="# MARK")


def test_matmul_dtype_rules():
    @nki.jit
    def k(x):
        s = nl.zeros((128, 128), nl.int32)
        m = nl.zeros((128, 128), nl.int32)
        ps = nl.ndarray((128, 128), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=ps, stationary=s, moving=m)  # MARK

    expect(k, (X,), "stationary has dtype int32", "float8_e4m3/float8_e5m2/bfloat16", marker="# MARK")

    @nki.jit
    def k2(x):
        s = nl.zeros((128, 128), nl.float32)
        m = nl.zeros((128, 128), nl.bfloat16)
        ps = nl.ndarray((128, 128), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=ps, stationary=s, moving=m)  # MARK

    expect(k2, (X,), "stationary is float32 but moving is bfloat16", marker="# MARK")


def test_matmul_buffer_rules():
    @nki.jit
    def k(x):
        s = nl.zeros((128, 128), nl.float32, buffer=nl.psum)
        m = nl.zeros((128, 128), nl.float32)
        ps = nl.ndarray((128, 128), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=ps, stationary=s, moving=m)  # MARK

    expect(
        k,
        (X,),
        "stationary",
        "is in PSUM, not SBUF",
        "reads stationary and moving from SBUF",
        marker="# MARK",
    )

    @nki.jit
    def k2(x):
        s = nl.zeros((128, 128), nl.float32)
        dst = nl.ndarray((128, 128), nl.float32, buffer=nl.sbuf)
        nisa.nc_matmul(dst=dst, stationary=s, moving=s)  # MARK

    expect(k2, (X,), "writes its result to PSUM", marker="# MARK")


def test_dma_cannot_touch_psum():
    @nki.jit
    def k(x):
        ps = nl.zeros((128, 64), nl.float32, buffer=nl.psum)
        out = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=ps)  # MARK
        return out

    expect(k, (X,), "src 'psum_0' is in PSUM", "DMA cannot access PSUM", marker="# MARK")


def test_dma_element_counts_must_match():
    @nki.jit
    def k(x):
        t = nl.ndarray((128, 32), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)  # MARK

    expect(
        k,
        (X,),
        "src has shape (128, 64) (8192 elements) but dst has shape (128, 32) (4096 elements)",
        marker="# MARK",
    )


def test_tensor_tensor_inputs_not_both_in_psum():
    @nki.jit
    def k(x):
        a = nl.zeros((128, 64), nl.float32, buffer=nl.psum)
        b = nl.zeros((128, 64), nl.float32, buffer=nl.psum)
        c = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=c, data1=a, data2=b, op=nl.add)  # MARK

    expect(k, (X,), "are both in PSUM", marker="# MARK")


def test_partition_mismatch_in_isa_calls_and_broadcast_in_language_ops():
    @nki.jit
    def k(x):
        a = nl.zeros((128, 64), nl.float32)
        b = nl.zeros((64, 64), nl.float32)
        c = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=c, data1=a, data2=b, op=nl.add)  # MARK

    expect(k, (X,), "data1 has 128 partitions but data2 has 64", marker="# MARK")

    # Language ops broadcast a one-partition operand (the SDK docs' nl.add example), through a
    # DMA: the engines themselves never read across partitions.
    @nki.jit
    def k2(x):
        a = nl.full((128, 64), 2.0, nl.float32)
        b = nl.full((1, 64), 3.0, nl.float32)
        out = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
        nl.store(out, a + b)
        return out

    np.testing.assert_array_equal(k2(X), np.full((128, 64), 5.0, np.float32))

    @nki.jit
    def k3(x):
        a = nl.zeros((128, 64), nl.float32)
        b = nl.zeros((64, 64), nl.float32)
        return a + b

    with pytest.raises(ValueError, match="not broadcastable"):
        k3(X)


def test_bitvec_operator_needs_integers():
    @nki.jit
    def k(x):
        a = nl.zeros((128, 64), nl.float32)
        nisa.tensor_tensor(dst=a, data1=a, data2=a, op=nl.bitwise_and)  # MARK

    expect(k, (X,), "bitvec operator bitwise_and needs integer dtypes, got float32", marker="# MARK")


def test_activation_reduce_op_must_be_add():
    @nki.jit
    def k(x):
        a = nl.zeros((128, 64), nl.float32)
        r = nl.ndarray((128, 1), nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=a, op=nl.exp, data=a, reduce_op=nl.maximum, reduce_res=r)  # MARK

    expect(k, (X,), "reduce_op is maximum", "can only sum", marker="# MARK")


def test_gpsimd_cannot_access_psum():
    @nki.jit
    def k(x):
        t = nl.ndarray((128, 64), nl.int32, buffer=nl.psum)
        nisa.iota(dst=t, pattern=[[1, 64]], offset=0)  # MARK

    expect(k, (X,), "is in PSUM, which the GpSimd Engine cannot access", marker="# MARK")


def test_vector_transpose_limit():
    @nki.jit
    def k(x):
        a = nl.zeros((64, 64), nl.float32)
        b = nl.ndarray((64, 64), nl.float32, buffer=nl.sbuf)
        nisa.nc_transpose(dst=b, data=a, engine=nisa.vector_engine)  # MARK

    expect(k, (X,), "data has shape (64, 64)", "at most 32x32", marker="# MARK")


def test_tensor_engine_transpose_limit():
    @nki.jit
    def k(x):
        nl.ndarray((256, 128), nl.float32, buffer=nl.psum)  # MARK

    expect(k, (X,), "partition dimension 256 > 128", marker="# MARK")

    @nki.jit
    def k2(x):
        a = nl.zeros((64, 256), nl.float32)
        b = nl.ndarray((128, 64), nl.float32, buffer=nl.psum)
        nisa.nc_transpose(dst=b, data=a, engine=nisa.tensor_engine)  # MARK

    expect(k2, (X,), "data free size 256 exceeds maximum 128", marker="# MARK")


def test_reduce_over_partition_axis_rejected():
    @nki.jit
    def k(x):
        a = nl.zeros((128, 64), nl.float32)
        return nl.sum(a, axis=0)  # MARK

    expect(k, (X,), "axis includes 0, the partition dimension", marker="# MARK")


def test_compute_engine_start_partition_quadrants():
    @nki.jit
    def k(x):
        a = nl.zeros((128, 64), nl.float32)
        nisa.tensor_scalar(dst=a[1:2], data=a[1:2], op0=nl.add, operand0=1.0)  # MARK

    expect(k, (X,), "starts at partition 1 with 1 partitions", "multiple of 32", marker="# MARK")


def test_access_outside_the_tensor():
    @nki.jit
    def k(x):
        t = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=t.ap(pattern=[[64, 128], [1, 80]]), value=0.0)  # MARK

    expect(k, (X,), "accesses elements 0..79 of each partition, which holds 64", marker="# MARK")


def test_dynamic_offset_out_of_bounds_is_a_runtime_error():
    @nki.jit
    def k(x):
        out = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)

        def body(i):
            t = nl.ndarray((64, 64), nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=x[nl.ds(i * 64, 64), :])  # MARK
            nisa.dma_copy(dst=out[0:64, :], src=t)

        nl.fori_loop(0, 3, body)  # the third iteration reads rows 128..191
        return out

    expect(k, (X,), "register value 2", "outside the tensor", marker="# MARK", kind="runtime")


# ---------------------------------------------------------------------------------------------
# Uninitialized memory


@nki.jit
def reads_garbage(x):
    out = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)  # never written
    u = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=u, data=t, op0=nl.multiply, operand0=2.0)  # READ
    nisa.dma_copy(dst=out, src=u)  # MARK
    return out


def test_uninitialized_read_reaching_hbm_is_reported():
    err = expect(
        reads_garbage,
        (X,),
        "derived from uninitialized SBUF/PSUM memory",
        "to HBM tensor",
        marker="# MARK",
        kind="uninitialized",
    )
    read = line_of(reads_garbage.func, "# READ")
    assert f"{THIS}:{read} reading SBUF tensor 'sbuf_1'" in str(err)


def test_uninitialized_read_on_device_surfaces_at_synchronize():
    reads_garbage.cache_clear()
    x = torch.zeros(128, 64, device="neuron")
    reads_garbage(x)  # queued
    with pytest.raises(RuntimeError, match="uninitialized SBUF/PSUM memory"):
        torch.neuron.synchronize()


def test_failed_checked_run_on_device_keeps_checking():
    # A program whose checked run failed was never validated: every later call checks again
    # (the numpy path already did; on neuron tensors calls 2 and 3 returned zeros silently).
    reads_garbage.cache_clear()
    x = torch.zeros(128, 64, device="neuron")
    for _ in range(3):
        reads_garbage(x)
        with pytest.raises(RuntimeError, match="uninitialized SBUF/PSUM memory"):
            torch.neuron.synchronize()
    assert not reads_garbage.specialize(x).checked


def test_passed_checked_run_on_device_validates_the_program():
    @nki.jit
    def copies(x):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.load(x))
        return out

    x = torch.ones(128, 64, device="neuron")
    traced = copies.specialize(x)
    copies(x)
    torch.neuron.synchronize()
    assert traced.checked
    assert torch.equal(copies(x).cpu(), torch.ones(128, 64))


def test_uninitialized_psum_accumulation_is_reported():
    @nki.jit
    def k(x):
        out = nl.ndarray((128, 128), nl.float32, buffer=nl.shared_hbm)
        s = nl.zeros((128, 128), nl.float32)
        ps = nl.ndarray((128, 128), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=ps, stationary=s, moving=s, accumulate=True)  # accumulates onto garbage
        r = nl.ndarray((128, 128), nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=r, src=ps)
        nisa.dma_copy(dst=out, src=r)  # MARK
        return out

    expect(k, (X,), "uninitialized", marker="# MARK", kind="uninitialized")


def test_uninitialized_report_names_the_read_the_garbage_comes_from():
    # The kernel first computes on never-written rows that it overwrites before use (fine), then
    # accumulates onto never-written PSUM: the error names that matmul, not the first read.
    @nki.jit
    def k(x):
        out = nl.ndarray((64, 2), nl.float32, buffer=nl.shared_hbm)
        a = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=a[0:64], src=x[0:64])
        b = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=b, data=a, op0=nl.multiply, operand0=2.0)  # rows 64.. are garbage
        nisa.dma_copy(dst=b[64:128], src=x[64:128])
        ps = nl.ndarray((64, 2), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=ps[:, 0:1], stationary=b, moving=b[:, 0:1])
        nisa.nc_matmul(dst=ps[:, 1:2], stationary=b, moving=b[:, 1:2], accumulate=True)  # ORIGIN
        r = nl.ndarray((64, 2), nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=r, src=ps)
        nisa.dma_copy(dst=out, src=r)  # MARK
        return out

    err = expect(k, (X,), "derived from uninitialized", marker="# MARK", kind="uninitialized")
    origin = line_of(k.func, "# ORIGIN")
    assert f"{THIS}:{origin} accumulating onto PSUM tensor" in str(err), str(err)
    assert "passed on by 1 instruction(s)" in str(err), str(err)


def test_uninitialized_report_names_predicated_copy_keeping_garbage():
    @nki.jit
    def k(x):
        out = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
        src = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=src, src=x)
        pred = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=pred, value=0.0)
        nisa.memset(dst=pred[:, 0:32], value=1.0)
        d = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy_predicated(dst=d, src=src, predicate=pred)  # ORIGIN: columns 32.. kept
        nisa.dma_copy(dst=out, src=d)  # MARK
        return out

    err = expect(k, (X,), "derived from uninitialized", marker="# MARK", kind="uninitialized")
    origin = line_of(k.func, "# ORIGIN")
    assert f"{THIS}:{origin} keeping never-written elements of SBUF tensor" in str(err), str(err)


def test_masked_garbage_that_never_reaches_hbm_is_fine():
    # The aws RMSNorm sample computes on the rows beyond a ragged edge but stores only valid rows.
    @nki.jit
    def k(x):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        ix = nl.arange(128)[:, None]
        iy = nl.arange(x.shape[1])[None, :]
        t = nl.load(x[ix, iy], mask=(ix < x.shape[0]))
        y = nl.exp(t)  # rows >= x.shape[0] are garbage here
        nl.store(out[ix, iy], value=y, mask=(ix < x.shape[0]))
        return out

    x = np.random.randn(100, 16).astype(np.float32)
    np.testing.assert_allclose(nki.simulate(k)(x), np.exp(x), rtol=1e-6)


def test_register_load_of_uninitialized_memory():
    @nki.jit
    def k(x):
        t = nl.ndarray((1, 1), nl.int32, buffer=nl.sbuf)
        r = nisa.register_alloc()
        nisa.register_load(r, t)  # MARK

    expect(k, (X,), "loads a register from never-written memory", marker="# MARK", kind="uninitialized")


def test_outputs_must_be_shared_hbm():
    @nki.jit
    def k(x):
        o = nl.ndarray(x.shape, x.dtype, buffer=nl.private_hbm)
        nl.store(o, nl.load(x))
        return o

    with pytest.raises(TypeError, match="must be allocated in nl.shared_hbm"):
        k(X)


def test_string_buffers_are_rejected():
    @nki.jit
    def k(x):
        return nl.ndarray(x.shape, x.dtype, buffer="sbuf")

    with pytest.raises(TypeError, match="strings are not accepted"):
        k(X)


# ---------------------------------------------------------------------------------------------
# Runaway kernels and bad limits


@nki.jit
def unrolls_forever(x):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    for _i in nl.affine_range(2):
        for _j in nl.sequential_range(2000):  # UNROLL
            nl.store(out, nl.load(x))
    return out


def test_trace_time_unrolling_is_capped_naming_the_loop(monkeypatch):
    from nki._tracer import DEFAULT_MAX_INSTRUCTIONS, TraceError

    assert DEFAULT_MAX_INSTRUCTIONS == 250_000
    monkeypatch.setenv("NEURON_EMU_NKI_MAX_INSTRUCTIONS", "500")
    unrolls_forever.cache_clear()
    with pytest.raises(TraceError) as ei:
        unrolls_forever(X)
    msg = str(ei.value)
    line = line_of(unrolls_forever.func, "# UNROLL")
    assert "while unrolling nl.sequential_range(0, 2000, 1) at " in msg, msg
    assert f"{THIS}:{line} (2000 iterations) inside nl.affine_range(0, 2, 1) at " in msg, msg
    assert "more than 500 instructions" in msg and "raise NEURON_EMU_NKI_MAX_INSTRUCTIONS (now 500)" in msg
    assert "nl.fori_loop" in msg


def test_bad_instruction_cap_names_the_variable(monkeypatch):
    monkeypatch.setenv("NEURON_EMU_NKI_MAX_INSTRUCTIONS", "-3")
    unrolls_forever.cache_clear()
    with pytest.raises(ValueError, match="NEURON_EMU_NKI_MAX_INSTRUCTIONS='-3': expected a positive integer"):
        unrolls_forever(X)


@nki.jit
def spins(x):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)

    def body(i):
        nl.store(out, nl.load(x))

    nl.fori_loop(0, 2**40, body)  # SPIN
    return out


@pytest.mark.parametrize("device", ["numpy", "neuron"])
def test_runaway_runtime_loop_names_the_loop_and_the_variable(monkeypatch, device):
    monkeypatch.setenv("NEURON_EMU_NKI_MAX_LOOP_ITERATIONS", "1000")
    line = line_of(spins.func, "# SPIN")
    pattern = rf"{THIS}:{line}: runtime loops ran more than 1000 iterations .*raise NEURON_EMU_NKI_MAX_LOOP_ITERATIONS \(now 1000\)"
    if device == "numpy":
        with pytest.raises(NkiValidationError, match=pattern):
            spins(X)
    else:
        spins(torch.zeros(128, 64, device="neuron"))
        with pytest.raises(RuntimeError, match=pattern):
            torch.neuron.synchronize()


@pytest.mark.parametrize("value", ["-5", "abc"])
def test_bad_loop_limit_names_the_variable(monkeypatch, value):
    monkeypatch.setenv("NEURON_EMU_NKI_MAX_LOOP_ITERATIONS", value)
    with pytest.raises(
        RuntimeError, match=f"NEURON_EMU_NKI_MAX_LOOP_ITERATIONS={value}: expected an integer"
    ):
        spins(X)
    with pytest.raises(
        RuntimeError, match=f"NEURON_EMU_NKI_MAX_LOOP_ITERATIONS={value}: expected an integer"
    ):
        spins(torch.zeros(128, 64, device="neuron"))  # at the call, not at a later synchronize


def test_bad_check_mode_names_the_variable(monkeypatch):
    monkeypatch.setenv("NEURON_EMU_NKI_CHECK", "bogus")
    with pytest.raises(RuntimeError, match="NEURON_EMU_NKI_CHECK=bogus: expected first .*always or never"):
        reads_garbage(X)
