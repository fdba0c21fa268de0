"""Real-world NKI code runs unchanged: the old ``neuronxcc.nki`` import path and its names, the
old calling convention of every ISA instruction (no ``dst``, positional operands, a new tile
returned, ``mask=``), ``nl.par_dim`` block dimensions, ``NKIObject`` configuration objects,
``nki.cpu_simulate(kernel)[lnc]``, compiler directives and jit options. Kernels are written
here; every result is compared with numpy (fp32: exact up to summation order, 1e-5)."""

from __future__ import annotations

import dataclasses

import nki
import nki.isa as nisa
import nki.language as nl
import numpy as np
import pytest


def _rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# ---------------------------------------------------------------------------------------------
# The old import path


def test_neuronxcc_import_path_is_nki():
    import neuronxcc.nki as old
    import neuronxcc.nki.isa as old_isa
    import neuronxcc.nki.language as old_nl
    import neuronxcc.nki.typing as old_nt
    from neuronxcc import nki as old2
    from neuronxcc.nki import baremetal, benchmark, profile, simulate_kernel  # noqa: F401

    assert old is nki and old2 is nki
    assert old_nl is nl and old_isa is nisa and old_nt is nki.typing
    from nki.isa.constants import dge_mode, oob_mode

    assert oob_mode is nisa.oob_mode and dge_mode is nisa.dge_mode
    import nki.dtype as ndt

    assert ndt.bfloat16 == nl.bfloat16 and nl.bool == nl.bool_


def test_old_tutorial_kernel_runs_through_old_names():
    import neuronxcc.nki as onki
    import neuronxcc.nki.language as onl

    @onki.jit
    def add_kernel(a, b):
        c = onl.ndarray(a.shape, dtype=a.dtype, buffer=onl.shared_hbm)
        ix = onl.program_id(0) * 128 + onl.arange(128)[:, None]
        iy = onl.arange(256)[None, :]
        onl.store(c[ix, iy], value=onl.load(a[ix, iy]) + onl.load(b[ix, iy]))
        return c

    a, b = _rand(512, 256), _rand(512, 256, seed=1)
    # spmd_dim(2, nc(2)) is one grid dimension of 4 instances
    out = onki.simulate_kernel(add_kernel[onl.spmd_dim(2, onl.nc(2))], a, b)
    np.testing.assert_allclose(out, a + b, rtol=1e-6)
    out = onki.baremetal(add_kernel)[4](a, b)
    np.testing.assert_allclose(out, a + b, rtol=1e-6)
    r = onki.benchmark(warmup=0, iters=1)(add_kernel)[4]
    r(a, b)
    assert r.benchmark_result.nc_latency.get_latency_percentile(50) > 0


def test_static_cast_rounds_host_arrays_and_tiles():
    x = np.array([1.0 + 2**-9, 3.0], dtype=np.float32)
    y = nl.static_cast(x, nl.bfloat16)
    assert str(y.dtype) == "bfloat16"
    np.testing.assert_array_equal(y.astype(np.float32), [1.0, 3.0])  # rounds to nearest even

    @nki.jit
    def cast(a):
        out = nl.ndarray(a.shape, dtype=nl.bfloat16, buffer=nl.shared_hbm)
        nl.store(out, value=nl.static_cast(nl.load(a), nl.bfloat16))
        return out

    a = _rand(128, 64)
    np.testing.assert_array_equal(cast(a).astype(np.float32), a.astype(y.dtype).astype(np.float32))


def test_cpu_simulate_launcher_with_lnc():
    @nki.jit
    def shard_scale(x, factor):
        n = nl.num_programs(0)
        rows = x.shape[0] // n
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        for j in nl.affine_range(rows // 128):
            r0 = nl.program_id(0) * rows + j * 128
            t = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=x[r0 : r0 + 128, :])
            nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=float(factor))
            nisa.dma_copy(dst=out[r0 : r0 + 128, :], src=t)
        return out

    x = _rand(256, 32)
    for lnc in (1, 2):
        out = nki.cpu_simulate(shard_scale)[lnc](x=x, factor=3)
        assert isinstance(out, np.ndarray)
        np.testing.assert_allclose(out, 3 * x, rtol=1e-6)


# ---------------------------------------------------------------------------------------------
# Old-style ISA calls: no dst, positional operands, a new tile returned


@nki.jit
def old_style_everything(a, b):
    out = nl.ndarray((11,) + a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    ta, tb = nl.load(a), nl.load(b)
    results = [
        nisa.tensor_copy(ta),
        nisa.tensor_tensor(ta, tb, nl.add),
        nisa.tensor_tensor(ta, tb, op=nl.multiply),
        nisa.tensor_scalar(ta, nl.multiply, 2.0, op1=nl.add, operand1=1.0),
        nisa.activation(nl.exp, ta, scale=0.5),
        nisa.reciprocal(nisa.activation(op=nl.exp, data=ta)),
        nisa.tensor_tensor_scan(ta, tb, 0.0, nl.multiply, nl.add),
        nisa.scalar_tensor_tensor(data=ta, op0=nl.subtract, operand0=1.0, op1=nl.multiply, operand1=tb),
    ]
    red = nisa.tensor_reduce(nl.add, ta, axis=1, keepdims=True)
    s = nl.ndarray((a.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
    act = nisa.activation_reduce(nl.square, ta, reduce_op=nl.add, reduce_res=s)
    results.append(act)
    results.append(nisa.tensor_scalar(tb, nl.add, red))  # b + rowsum(a)
    results.append(nisa.tensor_scalar(tb, nl.multiply, s))  # b * rowsum(a^2)
    for i, r in enumerate(results):
        nl.store(out[i], value=r)
    return out


def test_old_style_calls_return_new_tiles_for_every_instruction():
    a, b = _rand(128, 64) * 0.5, _rand(128, 64, seed=1) * 0.5
    got = old_style_everything(a, b)
    scan = np.zeros_like(a)
    acc = np.zeros(a.shape[0], dtype=np.float32)
    for i in range(a.shape[1]):
        acc = a[:, i] * acc + b[:, i]
        scan[:, i] = acc
    want = [
        a,
        a + b,
        a * b,
        a * 2 + 1,
        np.exp(a * 0.5),
        np.exp(-a),
        scan,
        (a - 1) * b,
        a * a,
        b + a.sum(1, keepdims=True),
        b * (a * a).sum(1, keepdims=True),
    ]
    for i, w in enumerate(want):
        np.testing.assert_allclose(got[i], w, rtol=1e-5, atol=1e-5, err_msg=f"result {i}")


def test_old_style_matmul_transpose_stats_and_partition_reduce():
    @nki.jit
    def k(x, y):
        out_mm = nl.ndarray((64, 96), dtype=nl.float32, buffer=nl.shared_hbm)
        out_t = nl.ndarray((64, 128), dtype=nl.float32, buffer=nl.shared_hbm)
        out_pr = nl.ndarray((1, 64), dtype=nl.float32, buffer=nl.shared_hbm)
        out_st = nl.ndarray((128, 2), dtype=nl.float32, buffer=nl.shared_hbm)
        tx, ty = nl.load(x), nl.load(y)
        nl.store(out_mm, value=nisa.nc_matmul(tx, ty))  # stationary, moving
        nl.store(out_t, value=nisa.nc_transpose(tx))
        nl.store(out_pr, value=nisa.tensor_partition_reduce(nl.add, tx))
        nl.store(out_st, value=nisa.bn_aggr(nisa.bn_stats(tx)))
        return out_mm, out_t, out_pr, out_st

    x, y = _rand(128, 64), _rand(128, 96, seed=2)
    mm, t, pr, st = k(x, y)
    np.testing.assert_allclose(mm, x.T @ y, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(t, x.T, rtol=1e-6)
    np.testing.assert_allclose(pr, x.sum(0, keepdims=True), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(st[:, 0], x.mean(1), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(st[:, 1], x.var(1), rtol=1e-4, atol=1e-5)


def test_old_style_mask_on_isa_calls():
    @nki.jit
    def k(x, n_valid):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        ip, jf = nl.mgrid[0:128, 0:32]
        t = nl.load(x)
        r = nl.zeros((128, 32), dtype=x.dtype, buffer=nl.sbuf)
        # only rows < n_valid are written; the others keep the zeros
        r[ip, jf] = nisa.tensor_scalar(t[ip, jf], nl.multiply, 2.0, mask=(ip < n_valid))
        skipped = nisa.tensor_copy(t, mask=False)  # masked off at compile time: never written
        del skipped
        nl.store(out, value=r)
        return out

    x = _rand(128, 32)
    got = k(x, 40)
    want = np.zeros_like(x)
    want[:40] = 2 * x[:40]
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_wrong_old_style_arity_is_a_clear_error():
    @nki.jit
    def k(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nisa.reciprocal(nl.load(x), 1, 2, 3))
        return out

    with pytest.raises(TypeError, match="reciprocal"):
        k(_rand(128, 8))


# ---------------------------------------------------------------------------------------------
# nl.par_dim: block dimensions in front of the partition dimension


def test_par_dim_blocks_are_separate_tiles():
    @nki.jit
    def blocks(x):
        nblk = x.shape[0] // 128
        t = nl.ndarray((nblk, nl.par_dim(128), x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
        assert t.shape == (nblk, 128, x.shape[1])
        for i in nl.affine_range(nblk):
            t[i] = nl.load(x[i * 128 : (i + 1) * 128, :])
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        ip, jf = nl.mgrid[0:128, 0 : x.shape[1]]
        for i in nl.affine_range(nblk):
            # block i + block (nblk - 1 - i): both are [128, F] tiles at partitions 0..127
            s = nl.add(t[i, ip, jf], t[nblk - 1 - i, ip, jf])
            nl.store(out[i * 128 + ip, jf], value=s)
        return out

    x = _rand(512, 64)
    got = blocks(x)
    xb = x.reshape(4, 128, 64)
    np.testing.assert_allclose(got, (xb + xb[::-1]).reshape(512, 64), rtol=1e-6)


def test_instructions_on_block_tensors_run_once_per_block():
    @nki.jit
    def fill(x):
        t = nl.zeros((4, nl.par_dim(128), 16), dtype=x.dtype, buffer=nl.sbuf)  # four memsets
        u = nl.ndarray((4, nl.par_dim(128), 16), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=u, data=t, op0=nl.add, operand0=nl.load(x))  # per block, x reused
        out = nl.ndarray((4, 128, 16), dtype=x.dtype, buffer=nl.shared_hbm)
        for i in nl.affine_range(4):
            nl.store(out[i], value=u[i])
        return out

    x = _rand(128, 1)
    np.testing.assert_array_equal(fill(x), np.broadcast_to(x, (4, 128, 16)))
    assert fill.specialize(x).dump().count("nki.isa.memset") == 4

    @nki.jit
    def mismatched(x):
        t = nl.zeros((4, nl.par_dim(128), 16), dtype=x.dtype, buffer=nl.sbuf)
        u = nl.ndarray((2, nl.par_dim(128), 16), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=u, src=t)
        return x

    with pytest.raises(ValueError, match="different block dimensions"):
        mismatched(x)


def test_par_dim_tensors_count_against_sbuf_per_partition():
    @nki.jit
    def too_big(x):
        # 8 blocks x 32 KiB per partition = 256 KiB > 224 KiB of a trn2 SBUF partition
        t = nl.ndarray((8, nl.par_dim(128), 8192), dtype=nl.float32, buffer=nl.sbuf)
        for i in nl.affine_range(8):
            nisa.memset(dst=t[i], value=1.0)
        out = nl.ndarray((128, 8192), dtype=nl.float32, buffer=nl.shared_hbm)
        for i in nl.affine_range(8):
            nl.store(out, value=t[i])
        return out

    with pytest.raises(nki.NkiValidationError, match="SBUF"):
        too_big(_rand(128, 4))


# ---------------------------------------------------------------------------------------------
# NKIObject configuration objects


class TileConfig(nl.NKIObject):
    rows: int = 128
    scale: float = 1.0
    add_one = False  # un-annotated attributes are fields too


@dataclasses.dataclass(frozen=True)
class FrozenConfig(nl.NKIObject):
    scale: float = 2.0


def test_nkiobject_fields_defaults_and_errors():
    c = TileConfig(scale=3.0, add_one=True)
    assert (c.rows, c.scale, c.add_one) == (128, 3.0, True)
    assert TileConfig(64).rows == 64  # annotated fields also positionally
    with pytest.raises(TypeError, match="unexpected keyword argument 'colour'"):
        TileConfig(colour=1)


def test_nkiobject_arguments_specialize_the_kernel():
    @nki.jit
    def scaled(x, cfg):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.load(x)
        t = nl.multiply(t, cfg.scale)
        if getattr(cfg, "add_one", False):
            t = nl.add(t, 1.0)
        nl.store(out, value=t)
        return out

    x = _rand(128, 16)
    np.testing.assert_allclose(scaled(x, TileConfig(scale=3.0)), 3 * x, rtol=1e-6)
    np.testing.assert_allclose(scaled(x, TileConfig(scale=3.0, add_one=True)), 3 * x + 1, rtol=1e-6)
    np.testing.assert_allclose(scaled(x, FrozenConfig()), 2 * x, rtol=1e-6)
    assert scaled.cache_info()["traces"] == 3


# ---------------------------------------------------------------------------------------------
# jit options, compiler directives, loop hints


def test_jit_options_and_compiler_directives_are_accepted():
    import nki.compiler as ncc

    @ncc.skip_middle_end_transformations
    @nki.jit(platform_target="trn2", debug_kernel=True, show_compiler_tb=True, experimental_flags="x")
    def k(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=ncc.sbuf.mod_alloc(base_addr=0, num_free_tiles=(2,)))
        for _ in nl.affine_range(1, precise_schedule=True):
            nisa.dma_copy(dst=t, src=x)
        for _ in nl.sequential_range(1, directives=ncc.multi_buffer(2)):
            with ncc.no_reorder():
                nisa.dma_copy(dst=out, src=t)
        return out

    x = _rand(128, 8)
    np.testing.assert_array_equal(k(x), x)
    with pytest.raises(ValueError, match="NEURON_PLATFORM_TARGET_OVERRIDE"):
        nki.jit(platform_target="tpu9")


def test_platform_target_selects_the_generation():
    @nki.jit(platform_target="trn1")
    def sbuf_bytes(x):
        assert nisa.get_nc_version() == nisa.nc_version.gen2
        return x

    x = _rand(4, 4)
    sbuf_bytes(x)


# ---------------------------------------------------------------------------------------------
# Reductions over non-trailing axes, access patterns with more than 6 dimensions


def test_reductions_over_non_trailing_axes():
    @nki.jit
    def reds(x):
        t = nl.load(x)  # [128, 2, 3, 4, 5]
        s = nl.sum(t, axis=[2, 4])  # -> [128, 2, 4]
        m = nl.max(t, axis=[1, 3], keepdims=True)  # -> [128, 1, 3, 1, 5]
        o1 = nl.ndarray((128, 2, 4), dtype=x.dtype, buffer=nl.shared_hbm)
        o2 = nl.ndarray((128, 1, 3, 1, 5), dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(o1, value=s)
        nl.store(o2, value=m)
        return o1, o2

    x = _rand(128, 2, 3, 4, 5)
    s, m = reds(x)
    np.testing.assert_allclose(s, x.sum(axis=(2, 4)), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(m, x.max(axis=(1, 3), keepdims=True))


def test_views_with_more_than_six_dimensions():
    @nki.jit
    def seven_d(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray((128, 2, 2, 2, 2, 2, 4), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)  # 7-D on both sides, contiguous: one 2-D pattern each
        nisa.dma_copy(dst=out, src=t)
        return out

    x = _rand(128, 2, 2, 2, 2, 2, 4)
    np.testing.assert_array_equal(seven_d(x), x)

    @nki.jit
    def seven_strided(x):
        # every other element of the innermost axis: a strided 7-D view (its steps still merge)
        out = nl.ndarray((128, 2, 2, 2, 2, 2, 2), dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.load(x[:, :, :, :, :, :, 0:4:2])
        nl.store(out, value=t)
        return out

    np.testing.assert_array_equal(seven_strided(x), x[..., 0:4:2])


def test_kernel_returns_a_reshaped_hbm_output():
    @nki.jit
    def flat_out(x):
        out = nl.ndarray((x.shape[0] * x.shape[1],), dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out.reshape(x.shape), value=nl.exp(nl.load(x)))
        return out.reshape(x.shape)

    x = _rand(128, 8)
    got = flat_out(x)
    assert got.shape == (128, 8)
    np.testing.assert_allclose(got, np.exp(x), rtol=1e-6)

    @nki.jit
    def partial(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.load(x))
        return out[0:64]

    with pytest.raises(TypeError, match="partial or reinterpreted view"):
        partial(x)


def test_kernel_returns_an_output_viewed_as_another_dtype_of_the_same_size():
    @nki.jit
    def as_int(x):
        out = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out, value=nl.load(x))
        return out.view(nl.int32).reshape((x.size,))

    x = _rand(4, 8)
    got = as_int(x)
    assert got.dtype == np.int32 and got.shape == (32,)
    np.testing.assert_array_equal(got, x.view(np.int32).reshape(-1))

    @nki.jit
    def as_bf16(x):
        out = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out, value=nl.load(x))
        return out.view(nl.bfloat16)

    with pytest.raises(TypeError, match="a view of it as a dtype of the same size"):
        as_bf16(x)


def test_fp32_constants_and_lazy_initialization():
    """Old kernels fill running maxima with nl.fp32.min and pass nl.full(lazy_initialization=)."""
    assert nl.fp32 == nl.float32 and np.float32(nl.fp32.min).view(np.uint32) == 0xFF7FFFFF

    @nki.jit
    def k(x):
        t = nl.full((4, 8), fill_value=nl.fp32.min, dtype=nl.fp32, buffer=nl.sbuf, lazy_initialization=True)
        out = nl.ndarray((4, 8), dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out, value=nl.maximum(t, nl.load(x)))
        return out

    x = _rand(4, 8)
    np.testing.assert_array_equal(k(x), x)


def test_kernel_returns_a_reshape_that_merges_dims_around_a_size_one_dim():
    """(8, 128, 4, 1, 5) returned as (1024, 4, 1, 5), as the public gen_mask_tkg does: a reshape
    of the whole tensor, whatever step its size-1 dimension carries."""

    @nki.jit
    def tiles(x):
        out = nl.ndarray((8, 128, 4, 1, 5), dtype=x.dtype, buffer=nl.shared_hbm)
        for i in nl.affine_range(8):
            t = nl.load(x[i])
            nisa.dma_copy(dst=out[i].reshape((128, 20)), src=t)
        return out.reshape((1024, 4, 1, 5))

    x = _rand(8, 128, 20)
    got = tiles(x)
    assert got.shape == (1024, 4, 1, 5)
    np.testing.assert_array_equal(got, x.reshape(1024, 4, 1, 5))


# ---------------------------------------------------------------------------------------------
# Placement rules at the hardware's byte granularity


def _placed_pair(second_offset):
    @nki.jit
    def k(x):
        a = nl.ndarray((128, 1), nl.float32, buffer=nl.sbuf, address=(0, 0))
        b = nl.ndarray((128, 1), nl.float32, buffer=nl.sbuf, address=(0, second_offset))
        nisa.dma_copy(dst=a, src=x)
        nisa.tensor_scalar(dst=b, data=a, op0=nl.add, operand0=1.0)
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nisa.tensor_tensor(dst=a, data1=a, data2=b, op=nl.add)
        nisa.dma_copy(dst=out, src=a)
        return out

    return k


def test_adjacent_manually_placed_tensors_do_not_overlap():
    x = _rand(128, 1)
    np.testing.assert_array_equal(_placed_pair(4)(x), x + (x + np.float32(1)))  # 4 bytes apart: packed


def test_overlapping_manually_placed_tensors_are_rejected():
    with pytest.raises(nki.NkiValidationError, match=r"overlaps live tensor .*bytes \[0, 4\)"):
        _placed_pair(2)(_rand(128, 1))  # 2 bytes apart: the second float shares bytes 2..3


# ---------------------------------------------------------------------------------------------
# nl.shared_constant


def test_shared_constant_from_a_npy_file(tmp_path):
    """nl.shared_constant(path) reads a .npy file (the public rotational top-k passes the path of
    a rotation matrix it saved); a file that is not an array is a clear error."""
    table = (np.arange(128 * 16, dtype=np.float32).reshape(128, 16) % 7) - 3
    path = tmp_path / "table.npy"
    np.save(path, table)

    @nki.jit
    def add_table(x, where):
        c = nl.shared_constant(where)
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.add(nl.load(x), nl.load(c)))
        return out

    x = _rand(128, 16)
    np.testing.assert_array_equal(add_table(x, str(path)), x + table)
    bad = tmp_path / "bad.npy"
    bad.write_text("not numpy")
    with pytest.raises(ValueError, match="cannot read the .npy file"):
        add_table(x, str(bad))


def test_shared_constant_tensors():
    @nki.jit
    def mix(x):
        ident = nl.shared_constant(np.identity(128, dtype=np.int8), dtype=x.dtype)
        ramp = nl.shared_constant(np.arange(x.shape[1], dtype=np.float32)[None, :].repeat(128, 0))
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        # identity^T @ x == x, plus the ramp
        mm = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=mm, stationary=nl.load(ident), moving=nl.load(x))
        nl.store(out, value=nl.add(mm, nl.load(ramp)))
        return out

    x = _rand(128, 32)
    want = x + np.arange(32, dtype=np.float32)
    np.testing.assert_allclose(mix(x), want, rtol=1e-6)
    np.testing.assert_allclose(mix(x), want, rtol=1e-6)  # second launch: same constant bytes
    import torch

    got = mix(torch.from_numpy(x))
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)
    got = mix(torch.from_numpy(x).to("neuron"))
    np.testing.assert_allclose(got.cpu().numpy(), want, rtol=1e-6)

    @nki.jit
    def writes_constant(x):
        c = nl.shared_constant(np.zeros((128, 4), dtype=np.float32))
        nisa.dma_copy(dst=c, src=x)
        return x

    with pytest.raises(ValueError, match="read-only nl.shared_constant"):
        writes_constant(_rand(128, 4))


def test_device_print_prints_at_run_time_every_execution(capfd):
    @nki.jit
    def k(x):
        t = nl.load(x)
        nl.device_print("loaded", t)
        u = nl.multiply(t, 2.0)
        nl.device_print("doubled", u)
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=u)
        return out

    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    capfd.readouterr()
    k(x)
    k(x + 1)
    got = capfd.readouterr().out.splitlines()
    assert [ln.split()[0] for ln in got if ln.strip() and not ln.startswith(" ")] == ["loaded", "doubled"] * 2
    text = "\n".join(got)
    assert "14." in text and "16." in text  # 2 * 7 in the first run, 2 * 8 in the second


# ---------------------------------------------------------------------------------------------
# What neuron-emu does not model yet fails loudly, naming the API (and the target for v4)


def test_unmodeled_apis_raise_naming_themselves():
    from nki.collectives import ReplicaGroup, all_gather_v  # noqa: F401  (the real library imports these)

    @nki.jit
    def mx(x):
        nisa.nc_matmul_mx(dst=None, stationary=None, moving=None, stationary_scale=None, moving_scale=None)
        return x

    with pytest.raises(NotImplementedError, match=r"nc_matmul_mx is a NeuronCore-v4 \(trn3\) instruction.*trn2"):
        nki.jit(platform_target="trn2")(mx.func)(_rand(4, 4))
    with pytest.raises(NotImplementedError, match="nc_matmul_mx .* not modeled"):
        nki.jit(platform_target="trn3")(mx.func)(_rand(4, 4))

    with pytest.raises(NotImplementedError, match="nki.collectives.all_gather_v"):
        all_gather_v()


# ---------------------------------------------------------------------------------------------
# ap(scalar_offset=<SBUF tensor>): the offset is a value in SBUF, read when the access runs


@nki.jit
def rows_at_sbuf_positions(table, positions):
    """Copies table row positions[0, j] into output row j, the offset coming from an SBUF
    tile (as block KV caches and MoE expert selection do), along dim 0 or through a view."""
    n, d = positions.shape[1], table.shape[1]
    out = nl.ndarray((n, d), table.dtype, buffer=nl.shared_hbm)
    pos = nl.ndarray((1, n), nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=pos, src=positions)
    for j in nl.affine_range(n):
        row = nl.ndarray((1, d), table.dtype, buffer=nl.sbuf)
        src = table.ap(pattern=[[d, 1], [1, d]], offset=0, scalar_offset=pos[0:1, j : j + 1], indirect_dim=0)
        nisa.dma_copy(dst=row, src=src)
        nisa.dma_copy(dst=out[j : j + 1, :], src=row)
    return out


def test_scalar_offset_from_sbuf_tensor():
    table = _rand(16, 8)
    for p in ([[3, 0, 15, 3]], [[7, 1, 2, 9]]):  # same trace, new runtime values
        positions = np.array(p, np.int32)
        np.testing.assert_array_equal(rows_at_sbuf_positions(table, positions), table[positions[0]])


def test_scalar_offset_tensor_must_be_one_on_chip_element():
    table, positions = _rand(16, 8), np.array([[1, 2]], np.int32)

    @nki.jit
    def two_elements(table, positions):
        out = nl.ndarray((1, 8), table.dtype, buffer=nl.shared_hbm)
        pos = nl.ndarray((1, 2), nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=pos, src=positions)
        row = nl.ndarray((1, 8), table.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=row, src=table.ap(pattern=[[8, 1], [1, 8]], offset=0, scalar_offset=pos))
        nisa.dma_copy(dst=out, src=row)
        return out

    with pytest.raises(Exception, match="one element"):
        two_elements(table, positions)

    @nki.jit
    def from_hbm(table, positions):
        out = nl.ndarray((1, 8), table.dtype, buffer=nl.shared_hbm)
        row = nl.ndarray((1, 8), table.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=row, src=table.ap(pattern=[[8, 1], [1, 8]], offset=0, scalar_offset=positions[0:1, 0:1]))
        nisa.dma_copy(dst=out, src=row)
        return out

    with pytest.raises(TypeError, match="on chip"):
        from_hbm(table, positions)


def test_numpy_understands_nki_low_precision_dtypes():
    """Tutorials write ``np.random.rand(...).astype(nl.bfloat16)`` on the host."""
    import ml_dtypes

    a = np.array([1.0, 1.00390625 + 2**-9], np.float32).astype(nl.bfloat16)
    assert a.dtype == np.dtype(ml_dtypes.bfloat16)
    assert float(a[1]) == 1.0078125  # rounded to the nearest bf16 (7 stored mantissa bits)
    assert np.zeros(2).astype(nl.float8_e5m2).dtype == np.dtype(ml_dtypes.float8_e5m2)


# ---------------------------------------------------------------------------------------------
# nisa.nc_stream_shuffle: partition moves within 32-partition quadrants


def _shuffled(x, mask, keep):
    """numpy reference: dst row q*32+i = src row q*32+mask[i] (255: the old dst row)."""
    out = keep.copy()
    for p in range(out.shape[0]):
        m = mask[p % 32]
        if m != 255:
            out[p] = x[(p // 32) * 32 + m]
    return out


@nki.jit
def shuffle_kernel(x, mask, in_place):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    src = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=src, src=x)
    if in_place:
        nisa.nc_stream_shuffle(dst=src, src=src, shuffle_mask=mask)
        nisa.dma_copy(dst=out, src=src)
    else:
        dst = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
        nisa.memset(dst=dst, value=-1.0)
        nisa.nc_stream_shuffle(dst=dst, src=src, shuffle_mask=mask)
        nisa.dma_copy(dst=out, src=dst)
    return out


@pytest.mark.parametrize("in_place", [False, True])
def test_nc_stream_shuffle_within_quadrants(in_place):
    x = _rand(64, 16)
    mask = [(31 - i) if i % 3 else 255 for i in range(32)]  # reverse, every third kept
    out = shuffle_kernel(x, mask, in_place)
    keep = x if in_place else np.full_like(x, -1.0)
    np.testing.assert_array_equal(out, _shuffled(x, mask, keep))


def test_nc_stream_shuffle_broadcasts_one_partition_and_checks_masks():
    @nki.jit
    def broadcast_row(x):
        out = nl.ndarray((32, x.shape[1]), x.dtype, buffer=nl.shared_hbm)
        row = nl.ndarray((1, x.shape[1]), x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=row, src=x[0:1, :])
        dst = nl.ndarray((32, x.shape[1]), x.dtype, buffer=nl.sbuf)
        nisa.nc_stream_shuffle(dst=dst, src=row, shuffle_mask=[0] * 32)
        nisa.dma_copy(dst=out, src=dst)
        return out

    x = _rand(4, 8)
    np.testing.assert_array_equal(broadcast_row(x), np.repeat(x[0:1], 32, axis=0))


@nki.jit
def shuffle_from_one_row(x, mask):
    out = nl.ndarray((32, x.shape[1]), x.dtype, buffer=nl.shared_hbm)
    row = nl.ndarray((1, x.shape[1]), x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=row, src=x[0:1, :])
    dst = nl.ndarray((32, x.shape[1]), x.dtype, buffer=nl.sbuf)
    nisa.memset(dst=dst, value=0.0)
    nisa.nc_stream_shuffle(dst=dst, src=row, shuffle_mask=mask)
    nisa.dma_copy(dst=out, src=dst)
    return out


def test_nc_stream_shuffle_rejects_bad_masks():
    x = _rand(4, 8)
    with pytest.raises(Exception, match="reads src partition 1 of 1"):
        shuffle_from_one_row(x, [1] * 32)
    with pytest.raises(ValueError, match="partitions 0..31 of the quadrant or 255"):
        shuffle_from_one_row(x, [40] + [0] * 31)
    with pytest.raises(ValueError, match="at most 32"):
        shuffle_from_one_row(x, [0] * 33)


# ---------------------------------------------------------------------------------------------
# nl.loop_reduce (old API): a reduction across the iterations of an unrolled loop


@nki.jit
def blocked_matmul_loop_reduce(a_t, b, op_name):
    """out = reduce over K blocks of (a_t[kb].T @ b[kb]) with loop_reduce, as old blocked
    matmul kernels accumulate partial products from PSUM into SBUF."""
    K, M = a_t.shape
    N = b.shape[1]
    acc = nl.ndarray((M, N), nl.float32, buffer=nl.sbuf)
    for kb in nl.affine_range(K // 128):
        a_tile = nl.load(a_t[kb * 128 : (kb + 1) * 128, :])
        b_tile = nl.load(b[kb * 128 : (kb + 1) * 128, :])
        part = nl.matmul(a_tile, b_tile, transpose_x=True)
        acc[...] = nl.loop_reduce(part, op=getattr(np, op_name), loop_indices=[kb], dtype=nl.float32)
    out = nl.ndarray((M, N), nl.float32, buffer=nl.shared_hbm)
    nl.store(out, acc)
    return out


@pytest.mark.parametrize("op_name", ["add", "maximum"])
def test_loop_reduce_accumulates_across_iterations(op_name):
    a_t, b = _rand(384, 64, seed=1), _rand(384, 32, seed=2)
    parts = [a_t[k : k + 128].T.astype(np.float64) @ b[k : k + 128] for k in range(0, 384, 128)]
    ref = sum(parts) if op_name == "add" else np.maximum.reduce(parts)
    # fp32 products summed over 128 + 3 terms of O(1): error well under 1e-4 relative.
    np.testing.assert_allclose(blocked_matmul_loop_reduce(a_t, b, op_name), ref, rtol=1e-4, atol=1e-4)


def test_loop_reduce_needs_loop_iterators():
    @nki.jit
    def not_a_loop(x):
        t = nl.load(x)
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.loop_reduce(t, op=np.add, loop_indices=[0]))
        return out

    with pytest.raises(TypeError, match="loop_indices are iterators"):
        not_a_loop(_rand(4, 4))


def test_dataclass_nkiobject_takes_plain_attributes_as_keywords():
    """``@dataclass`` configs whose fields are plain class attributes (no annotation): the
    dataclass constructor has no parameter for them, the real NKIObject accepts them anyway."""

    @dataclasses.dataclass
    class Section(nl.NKIObject):
        index = None
        offset = 0
        width: int = 128

    @dataclasses.dataclass
    class NoAnnotations(nl.NKIObject):  # a dataclass with no fields at all
        index = None

    assert NoAnnotations(index=5).index == 5

    @dataclasses.dataclass
    class Sizes(nl.NKIObject):
        rows: int
        remainder: int

    assert (Sizes(rows=4).rows, Sizes(rows=4).remainder) == (4, None)  # omitted field: None
    assert Sizes(1, 2).remainder == 2

    s = Section(index=3, width=64)
    assert (s.index, s.offset, s.width) == (3, 0, 64)
    assert Section(7).width == 7 and Section().index is None
    with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
        Section(bogus=1)

    import abc

    class Both(nl.NKIObject, abc.ABC):  # still mixes with abc.ABC
        @abc.abstractmethod
        def f(self): ...

    with pytest.raises(TypeError, match="abstract"):
        Both()


def test_hbm_tensor_is_truthy_on_chip_tile_is_not():
    """Real library code tests optional tensor arguments with ``if cfg.index:``."""

    @nki.jit
    def optional_bias(x, bias):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        t = nl.load(x)
        if bias:  # an HBM argument: given
            t = nl.add(t, nl.load(bias))
        nl.store(out, t)
        return out

    x, b = _rand(4, 8), _rand(4, 8, seed=3)
    np.testing.assert_allclose(optional_bias(x, b), x + b, rtol=1e-6)

    @nki.jit
    def branch_on_tile(x):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        t = nl.load(x)
        if t:
            nl.store(out, t)
        return out

    with pytest.raises(TypeError, match="on-chip NkiTensor has no truth value"):
        branch_on_tile(x)
