"""NKI kernels run on the NeuronCore model against numpy / torch references, in fp32 and bf16.

Tolerances: fp32 kernels do the same IEEE fp32 arithmetic as the reference except for the
summation order of reductions and matmuls (atol/rtol ~1e-5 scaled by the reduction length).
bf16 kernels round every SBUF tile to bf16 (8 significant bits), like the hardware, while the
reference computes in fp32 from the same bf16 inputs: each stored intermediate can be off by
half a bf16 ulp (2^-9 relative), so we allow rtol/atol 2e-2 (a few ulps through a kernel).
"""

from __future__ import annotations

import math

import nki
import nki.isa as nisa
import nki.language as nl
import numpy as np
import pytest
import torch


def _close(actual, expected, dtype, scale=1.0):
    actual = (
        torch.as_tensor(np.asarray(actual) if not isinstance(actual, torch.Tensor) else actual).float().cpu()
    )
    expected = torch.as_tensor(expected).float().cpu()
    if dtype == torch.bfloat16:
        torch.testing.assert_close(actual, expected, rtol=2e-2, atol=2e-2 * scale)
    else:
        torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5 * scale)


# ---------------------------------------------------------------------------------------------
# Tensor add: ISA form (new API) and load/store form (old API with index grids)


@nki.jit
def add_isa(a_input, b_input):
    assert a_input.shape == b_input.shape and a_input.shape[0] <= nl.tile_size.pmax
    a_tile = nl.ndarray(shape=a_input.shape, dtype=a_input.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=a_tile, src=a_input)
    b_tile = nl.ndarray(shape=b_input.shape, dtype=b_input.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=b_tile, src=b_input)
    c_tile = nl.ndarray(shape=a_input.shape, dtype=a_input.dtype, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=c_tile, data1=a_tile, data2=b_tile, op=nl.add)
    c_output = nl.ndarray(dtype=a_input.dtype, shape=a_input.shape, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=c_output, src=c_tile)
    return c_output


@nki.jit
def add_load_store(a_input, b_input):
    c = nl.ndarray(a_input.shape, dtype=a_input.dtype, buffer=nl.shared_hbm)
    ix = nl.arange(128)[:, None]
    iy = nl.arange(512)[None, :]
    nl.store(c[ix, iy], value=nl.load(a_input[ix, iy]) + nl.load(b_input[ix, iy]))
    return c


@pytest.mark.parametrize("kernel", [add_isa, add_load_store])
def test_tensor_add_numpy_fp32_exact(kernel):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((128, 512), dtype=np.float32)
    b = rng.standard_normal((128, 512), dtype=np.float32)
    c = kernel(a, b)
    assert isinstance(c, np.ndarray) and c.dtype == np.float32
    np.testing.assert_array_equal(c, a + b)  # one fp32 add per element: exact


@pytest.mark.parametrize("kernel", [add_isa, add_load_store])
@pytest.mark.parametrize("device", ["cpu", "neuron"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_tensor_add_torch(kernel, device, dtype):
    a = torch.randn(128, 512, dtype=dtype, device=device)
    b = torch.randn(128, 512, dtype=dtype, device=device)
    c = kernel(a, b)
    assert c.device == a.device and c.dtype == dtype and c.shape == a.shape
    # bf16 + bf16 computed in fp32 then rounded to bf16 is what torch does on CPU too: exact.
    torch.testing.assert_close(c.cpu(), a.cpu() + b.cpu(), rtol=0, atol=0)


def test_bf16_storage_rounding_and_fp32_psum():
    @nki.jit
    def k(a, b):
        out = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray(a.shape, nl.bfloat16, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=t, data1=nl.load(a), data2=nl.load(b), op=nl.add)
        nl.store(out, t)
        return out

    a = np.ones((4, 8), np.float32)
    b = np.full((4, 8), 2.0**-9, np.float32)  # below half a bf16 ulp of 1.0
    np.testing.assert_array_equal(k(a, b), np.ones((4, 8), np.float32))
    b = np.full((4, 8), 2.0**-7, np.float32)
    np.testing.assert_array_equal(k(a, b), np.full((4, 8), 1 + 2.0**-7, np.float32))


# ---------------------------------------------------------------------------------------------
# Tiled matmul (new API), including ragged edges


@nki.jit
def matmul_tiled(lhsT, rhs):
    K, M = lhsT.shape
    _, N = rhs.shape
    TM, TK, TN = nl.tile_size.gemm_stationary_fmax, nl.tile_size.pmax, nl.tile_size.gemm_moving_fmax
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(math.ceil(M / TM)):
        ms = min(TM, M - m * TM)
        for n in nl.affine_range(math.ceil(N / TN)):
            ns = min(TN, N - n * TN)
            res_psum = nl.ndarray((TM, TN), nl.float32, buffer=nl.psum)
            for k in nl.affine_range(math.ceil(K / TK)):
                ks = min(TK, K - k * TK)
                lt = nl.ndarray((TK, TM), dtype=lhsT.dtype, buffer=nl.sbuf)
                rt = nl.ndarray((TK, TN), dtype=rhs.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=lt[:ks, :ms], src=lhsT[k * TK : k * TK + ks, m * TM : m * TM + ms])
                nisa.dma_copy(dst=rt[:ks, :ns], src=rhs[k * TK : k * TK + ks, n * TN : n * TN + ns])
                nisa.nc_matmul(dst=res_psum[:ms, :ns], stationary=lt[:ks, :ms], moving=rt[:ks, :ns])
            res_sb = nl.ndarray(res_psum.shape, dtype=result.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=res_sb[:ms, :ns], src=res_psum[:ms, :ns])
            nisa.dma_copy(dst=result[m * TM : m * TM + ms, n * TN : n * TN + ns], src=res_sb[:ms, :ns])
    return result


@pytest.mark.parametrize("K,M,N", [(256, 256, 1024), (384, 128, 512), (300, 200, 700), (77, 5, 13)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_tiled_matmul(K, M, N, dtype):
    lhsT = torch.randn(K, M, dtype=dtype)
    rhs = torch.randn(K, N, dtype=dtype)
    out = matmul_tiled(lhsT, rhs)
    ref = lhsT.float().T @ rhs.float()  # fp32 accumulation like the PSUM
    _close(out, ref, dtype, scale=math.sqrt(K))


def test_tiled_matmul_on_device_is_one_async_task():
    lhsT = torch.randn(256, 128, device="neuron")
    rhs = torch.randn(256, 512, device="neuron")
    torch.neuron.synchronize()
    torch_neuronx = pytest.importorskip("torch_neuronx")
    torch_neuronx._C._debug_launch_sleep(0, 200)  # keeps the stream busy
    out = matmul_tiled(lhsT, rhs)
    assert not torch.neuron.current_stream().query()  # returned before running
    torch.neuron.synchronize()
    _close(out, lhsT.cpu().T @ rhs.cpu(), torch.float32, scale=16)


def test_nl_matmul_and_transpose():
    @nki.jit
    def k(x, y):
        out = nl.ndarray((x.shape[0], y.shape[1]), nl.float32, buffer=nl.shared_hbm)
        r = nl.matmul(nl.load(x), nl.load(y))  # inserts a Tensor Engine transpose of x
        nl.store(out, r)
        return out

    x = np.random.randn(96, 64).astype(np.float32)
    y = np.random.randn(64, 200).astype(np.float32)
    np.testing.assert_allclose(k(x, y), x @ y, rtol=1e-5, atol=1e-4)


# ---------------------------------------------------------------------------------------------
# RMSNorm: the aws sample's old-style kernel (masks, broadcast_to) and nl.rms_norm


@nki.jit
def rmsnorm_old_style(a_tensor, g_tensor):
    out_tensor = nl.ndarray(a_tensor.shape, dtype=a_tensor.dtype, buffer=nl.shared_hbm)
    num_rows = a_tensor.shape[0]
    ix = nl.arange(128)[:, None]
    iw = nl.arange(1)[:, None]
    iy = nl.arange(a_tensor.shape[1])[None, :]
    g_tile = nl.load(g_tensor.reshape((1, g_tensor.shape[0]))[iw, iy])
    for i in nl.affine_range(math.ceil(a_tensor.shape[0] / 128)):
        a_tile = nl.load(a_tensor[i * 128 + ix, iy], mask=(i * 128 + ix < num_rows))
        square_sum = nl.sum(nl.square(a_tile), axis=[1])
        rms_reciprocal = nl.rsqrt(square_sum / a_tensor.shape[1])
        out_tile = nl.multiply(a_tile, rms_reciprocal)
        g_bcast = g_tile.broadcast_to((128, g_tensor.shape[0]))
        out_tile[...] = nl.multiply(out_tile, g_bcast, mask=(i * 128 + ix < num_rows))
        nl.store(out_tensor[i * 128 + ix, iy], value=out_tile, mask=(i * 128 + ix < num_rows))
    return out_tensor


@nki.jit
def rmsnorm_nl(x, w):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    wt = nl.load(w.reshape((1, w.shape[0])))
    for i in range(math.ceil(x.shape[0] / 128)):
        rows = min(128, x.shape[0] - i * 128)
        t = nl.load(x[i * 128 : i * 128 + rows, :])
        nl.store(out[i * 128 : i * 128 + rows, :], nl.rms_norm(t, wt, axis=1, n=x.shape[1], epsilon=1e-6))
    return out


@pytest.mark.parametrize("kernel,eps", [(rmsnorm_old_style, 0.0), (rmsnorm_nl, 1e-6)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows", [256, 300])
def test_rmsnorm(kernel, eps, dtype, rows):
    x = torch.randn(rows, 512, dtype=dtype)
    g = torch.randn(512, dtype=dtype)
    out = kernel(x, g)
    xf = x.float()
    ref = xf * torch.rsqrt((xf * xf).mean(1, keepdim=True) + eps) * g.float()
    _close(out, ref, dtype, scale=4)


# ---------------------------------------------------------------------------------------------
# Softmax: nl.softmax and the ISA sequence of the attention tutorial


@nki.jit
def softmax_nl(x):
    R, _ = x.shape
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    for i in range(math.ceil(R / 128)):
        rows = min(128, R - i * 128)
        t = nl.load(x[i * 128 : i * 128 + rows, :])
        nl.store(out[i * 128 : i * 128 + rows, :], nl.softmax(t, axis=1))
    return out


@nki.jit
def softmax_isa(x):
    P, F = x.shape
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((P, F), x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    neg_max = nl.ndarray((P, 1), nl.float32, buffer=nl.sbuf)
    nisa.tensor_reduce(dst=neg_max, op=nl.maximum, data=t, axis=1, negate=True)
    e = nl.ndarray((P, F), nl.float32, buffer=nl.sbuf)
    s = nl.ndarray((P, 1), nl.float32, buffer=nl.sbuf)
    nisa.activation(
        dst=e,
        op=nl.exp,
        data=t,
        bias=neg_max,
        reduce_op=nl.add,
        reduce_res=s,
        reduce_cmd=nisa.reduce_cmd.reset_reduce,
    )
    r = nl.ndarray((P, 1), nl.float32, buffer=nl.sbuf)
    nisa.reciprocal(dst=r, data=s)
    p = nl.ndarray((P, F), x.dtype, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=p, data=e, op0=nl.multiply, operand0=r)
    nisa.dma_copy(dst=out, src=p)
    return out


@pytest.mark.parametrize("kernel,rows", [(softmax_nl, 200), (softmax_isa, 128)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_softmax(kernel, rows, dtype):
    x = torch.randn(rows, 384, dtype=dtype) * 3
    out = kernel(x)
    _close(out, torch.softmax(x.float(), dim=1), dtype)


# ---------------------------------------------------------------------------------------------
# Flash attention forward (online softmax over 128-key blocks, optional causal mask)


@nki.jit
def flash_attn_fwd(q, k, v, causal=False):
    """q, k, v: [S, d] for one head; S a multiple of 128, d <= 128."""
    S, d = q.shape
    scale = 1.0 / math.sqrt(d)
    out = nl.ndarray((S, d), dtype=q.dtype, buffer=nl.shared_hbm)
    T = 128
    for i in nl.affine_range(S // T):
        qT = nl.ndarray((d, T), dtype=q.dtype, buffer=nl.sbuf)
        nisa.dma_transpose(dst=qT, src=q[i * T : (i + 1) * T, :])
        m = nl.full((T, 1), -1e30, dtype=nl.float32)
        l = nl.zeros((T, 1), dtype=nl.float32)
        acc = nl.zeros((T, d), dtype=nl.float32)
        for j in nl.sequential_range((i + 1) if causal else S // T):
            kT = nl.ndarray((d, T), dtype=k.dtype, buffer=nl.sbuf)
            nisa.dma_transpose(dst=kT, src=k[j * T : (j + 1) * T, :])
            vt = nl.ndarray((T, d), dtype=v.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=vt, src=v[j * T : (j + 1) * T, :])
            s_psum = nl.ndarray((T, T), dtype=nl.float32, buffer=nl.psum)
            nisa.nc_matmul(dst=s_psum, stationary=qT, moving=kT)
            s = nl.ndarray((T, T), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_scalar(dst=s, data=s_psum, op0=nl.multiply, operand0=scale)
            if causal and j == i:  # keep key f <= query p, i.e. p - f >= 0
                nisa.affine_select(
                    dst=s,
                    pattern=[[-1, T]],
                    channel_multiplier=1,
                    on_true_tile=s,
                    on_false_value=-1e30,
                    cmp_op=nl.greater_equal,
                )
            mx = nl.ndarray((T, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_reduce(dst=mx, op=nl.maximum, data=s, axis=1)
            m_new = nl.ndarray((T, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_tensor(dst=m_new, data1=m, data2=mx, op=nl.maximum)
            neg = nl.ndarray((T, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_scalar(dst=neg, data=m_new, op0=nl.multiply, operand0=-1.0)
            p = nl.ndarray((T, T), dtype=q.dtype, buffer=nl.sbuf)
            rs = nl.ndarray((T, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.activation(
                dst=p,
                op=nl.exp,
                data=s,
                bias=neg,
                reduce_op=nl.add,
                reduce_res=rs,
                reduce_cmd=nisa.reduce_cmd.reset_reduce,
            )
            corr = nl.ndarray((T, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.activation(dst=corr, op=nl.exp, data=m, bias=neg)
            nisa.scalar_tensor_tensor(dst=l, data=l, op0=nl.multiply, operand0=corr, op1=nl.add, operand1=rs)
            pT_psum = nl.ndarray((T, T), dtype=q.dtype, buffer=nl.psum)
            nisa.nc_transpose(dst=pT_psum, data=p)
            pT = nl.ndarray((T, T), dtype=q.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=pT, src=pT_psum)
            pv = nl.ndarray((T, d), dtype=nl.float32, buffer=nl.psum)
            nisa.nc_matmul(dst=pv, stationary=pT, moving=vt)
            nisa.scalar_tensor_tensor(
                dst=acc, data=acc, op0=nl.multiply, operand0=corr, op1=nl.add, operand1=pv
            )
            nisa.tensor_copy(dst=m, src=m_new)
        rl = nl.ndarray((T, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.reciprocal(dst=rl, data=l)
        o = nl.ndarray((T, d), dtype=q.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=o, data=acc, op0=nl.multiply, operand0=rl)
        nisa.dma_copy(dst=out[i * T : (i + 1) * T, :], src=o)
    return out


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_flash_attention_forward(causal, dtype):
    S, d = 384, 64
    q, k, v = (torch.randn(S, d, dtype=dtype) for _ in range(3))
    out = flash_attn_fwd(q, k, v, causal)
    ref = torch.nn.functional.scaled_dot_product_attention(
        q.float()[None], k.float()[None], v.float()[None], is_causal=causal
    )[0]
    _close(out, ref, dtype)


def test_flash_attention_on_neuron_device():
    q, k, v = (torch.randn(256, 32, device="neuron") for _ in range(3))
    out = flash_attn_fwd(q, k, v, True)
    assert out.device == q.device
    ref = torch.nn.functional.scaled_dot_product_attention(
        q.cpu()[None], k.cpu()[None], v.cpu()[None], is_causal=True
    )[0]
    _close(out, ref, torch.float32)


# ---------------------------------------------------------------------------------------------
# Grid launch, runtime loops, specialization


@nki.jit
def scale_rows(x, factor):
    """Each of the grid instances scales its share of the rows."""
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    n = nl.num_programs(0)
    rows = x.shape[0] // n
    pid = nl.program_id(0)
    t = nl.load(x[pid * rows : (pid + 1) * rows, :])
    nl.store(out[pid * rows : (pid + 1) * rows, :], nl.multiply(t, factor))
    return out


@pytest.mark.parametrize("grid", [1, 2, 4])
def test_grid_launch(grid):
    x = np.random.randn(128, 64).astype(np.float32)
    out = scale_rows[grid](x, 3.0)
    np.testing.assert_array_equal(out, x * np.float32(3.0))
    traced = scale_rows[grid].specialize(x, 3.0)
    assert len(traced.programs) == grid


def test_grid_launch_on_device():
    x = torch.randn(256, 64, device="neuron")
    out = scale_rows[2](x, -0.5)
    torch.testing.assert_close(out.cpu(), x.cpu() * -0.5, rtol=0, atol=0)


def test_fori_loop_with_dynamic_offsets():
    @nki.jit
    def k(x):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        nrow = x.shape[0] // 32

        def body(i):
            t = nl.ndarray((32, x.shape[1]), x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=x[nl.ds(i * 32, 32), :])
            nisa.tensor_scalar(dst=t, data=t, op0=nl.add, operand0=1.0)
            nisa.dma_copy(dst=out[nl.ds(i * 32, 32), :], src=t)

        nl.fori_loop(0, nrow, body)
        return out

    x = np.random.randn(160, 16).astype(np.float32)
    np.testing.assert_array_equal(k(x), x + 1)
    traced = k.specialize(x)
    assert traced.num_instructions == 5  # the loop body was traced once
    est = nki.estimate(k, x)
    assert est.instructions == 5 * 3  # three instructions per iteration were executed


def test_while_loop_with_register_condition():
    @nki.jit
    def k(n_in, x):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        acc = nl.zeros(x.shape, nl.float32)
        t = nl.load(x)
        cnt = nl.ndarray((1, 1), nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=cnt, src=n_in)
        r = nisa.register_alloc()
        nisa.register_load(r, cnt)

        def body(c):
            nisa.tensor_tensor(dst=acc, data1=acc, data2=t, op=nl.add)
            nisa.tensor_scalar(dst=cnt, data=cnt, op0=nl.subtract, operand0=1)
            nxt = nisa.register_alloc()
            nisa.register_load(nxt, cnt)
            return nxt

        nl.while_loop(r, body)
        nl.store(out, acc)
        return out

    x = np.random.randn(8, 8).astype(np.float32)
    for n in (0, 1, 5):
        np.testing.assert_allclose(k(np.array([[n]], np.int32), x), x * n, rtol=1e-6)


def test_specialization_runs_python_once_per_signature(capsys):
    @nki.jit
    def k(x, times):
        print("TRACING", x.shape, times)
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        t = nl.load(x)
        for _ in range(times):  # meta-code: unrolled
            t = nl.add(t, 1.0)
        nl.store(out, t)
        return out

    x = np.zeros((4, 4), np.float32)
    np.testing.assert_array_equal(k(x, 3), x + 3)
    np.testing.assert_array_equal(k(x + 1, 3), x + 4)  # same shapes/dtypes/constants: no retrace
    np.testing.assert_array_equal(k(x, 2), x + 2)  # new constant: retrace
    np.testing.assert_array_equal(k(np.zeros((8, 4), np.float32), 2), np.full((8, 4), 2, np.float32))
    assert capsys.readouterr().out.count("TRACING") == 3
    info = k.cache_info()
    assert info["traces"] == 3 and info["memory_hits"] == 1
    assert "nki.isa.tensor_scalar" in k.specialize(x, 3).dump()
    assert k.specialize(x, 3).dump().count("tensor_scalar") == 3


# ---------------------------------------------------------------------------------------------
# Other instructions and language operations


def test_reductions_broadcast_and_elementwise():
    @nki.jit
    def k(x, y):
        tx, ty = nl.load(x), nl.load(y)
        outs = []
        for val in (
            nl.sum(tx, axis=1),
            nl.max(tx, axis=[1]),
            nl.min(tx, axis=1),
            nl.mean(tx, axis=1),
            nl.var(tx, axis=1),
            nl.maximum(tx, ty),
            nl.exp(tx),
            nl.tanh(tx),
            nl.gelu(tx),
            nl.silu(tx),
            nl.multiply(tx, nl.sum(ty, axis=1)),  # [P, F] * [P, 1]: a tensor_scalar with a vector
            tx * 2.0 - ty / 4.0,
            nl.where(nl.greater(tx, ty), tx, ty),
        ):
            o = nl.ndarray(val.shape, nl.float32, buffer=nl.shared_hbm)
            nl.store(o, val)
            outs.append(o)
        return tuple(outs)

    x = np.random.randn(64, 96).astype(np.float32)
    y = np.random.randn(64, 96).astype(np.float32)
    r = k(x, y)
    xt = torch.from_numpy(x)
    refs = [
        x.sum(1, keepdims=True),
        x.max(1, keepdims=True),
        x.min(1, keepdims=True),
        x.mean(1, keepdims=True),
        x.var(1, keepdims=True),
        np.maximum(x, y),
        np.exp(x),
        np.tanh(x),
        torch.nn.functional.gelu(xt).numpy(),
        torch.nn.functional.silu(xt).numpy(),
        x * y.sum(1, keepdims=True),
        x * 2 - y / 4,
        np.where(x > y, x, y),
    ]
    for got, ref in zip(r, refs):
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


def test_iota_affine_select_scan_bn_stats_max8():
    @nki.jit
    def k(x):
        P, F = x.shape
        io = nl.ndarray((P, F), nl.int32, buffer=nl.sbuf)
        nisa.iota(dst=io, pattern=[[1, F]], offset=3, channel_multiplier=F)
        t = nl.load(x)
        tri = nl.ndarray((P, F), nl.float32, buffer=nl.sbuf)
        nisa.affine_select(
            dst=tri,
            pattern=[[-1, F]],
            channel_multiplier=1,
            on_true_tile=t,
            on_false_value=0.0,
            cmp_op=nl.greater_equal,
        )
        cs = nl.ndarray((P, F), nl.float32, buffer=nl.sbuf)
        zeros = nl.zeros((P, F), nl.float32)
        nisa.tensor_tensor_scan(dst=cs, data0=zeros, data1=t, initial=0.0, op0=nl.add, op1=nl.add)
        st = nl.ndarray((P, 6), nl.float32, buffer=nl.sbuf)
        nisa.bn_stats(dst=st, data=t)
        mv = nl.ndarray((P, 2), nl.float32, buffer=nl.sbuf)
        nisa.bn_aggr(dst=mv, data=st)
        m8 = nl.ndarray((P, 8), nl.float32, buffer=nl.sbuf)
        nisa.max8(dst=m8, src=t)
        outs = []
        for tile in (io, tri, cs, mv, m8):
            o = nl.ndarray(tile.shape, tile.dtype, buffer=nl.shared_hbm)
            nl.store(o, tile)
            outs.append(o)
        return tuple(outs)

    x = np.random.randn(32, 48).astype(np.float32)
    io, tri, cs, mv, m8 = k(x)
    np.testing.assert_array_equal(io, 3 + np.arange(32)[:, None] * 48 + np.arange(48)[None, :])
    np.testing.assert_array_equal(tri, np.tril(x))
    np.testing.assert_allclose(cs, np.cumsum(x, axis=1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(mv[:, 0], x.mean(1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(mv[:, 1], x.var(1), rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(m8, -np.sort(-x, axis=1)[:, :8])


def test_views_rearrange_permute_broadcast_and_ap():
    @nki.jit
    def k(x):
        # x: [4, 32, 16] -> SBUF [32, 4, 16] via a permuted DMA, then views of it.
        t = nl.ndarray((32, 4, 16), x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x.permute(1, 0, 2))
        flat = t.reshape((32, 64))
        o1 = nl.ndarray((32, 64), x.dtype, buffer=nl.shared_hbm)
        nl.store(o1, flat)
        r = t.rearrange("p a b -> p b a")
        o2 = nl.ndarray((32, 16, 4), x.dtype, buffer=nl.shared_hbm)
        nl.store(o2, nl.copy(r))
        col = t[:, 1:2, 3:4].reshape((32, 1))
        b = nl.copy(col.broadcast(1, 8))  # free-dim broadcast view (stride 0)
        o3 = nl.ndarray((32, 8), x.dtype, buffer=nl.shared_hbm)
        nl.store(o3, b)
        # raw access pattern: every other element of partition rows 0..31, first 8 columns
        raw = t.ap(pattern=[[64, 32], [2, 8]], offset=1)
        o4 = nl.ndarray((32, 8), x.dtype, buffer=nl.shared_hbm)
        nl.store(o4, nl.copy(raw))
        return o1, o2, o3, o4

    x = np.arange(4 * 32 * 16, dtype=np.float32).reshape(4, 32, 16)
    o1, o2, o3, o4 = k(x)
    xt = x.transpose(1, 0, 2)
    np.testing.assert_array_equal(o1, xt.reshape(32, 64))
    np.testing.assert_array_equal(o2, xt.transpose(0, 2, 1))
    np.testing.assert_array_equal(o3, np.repeat(xt[:, 1, 3:4], 8, axis=1))
    np.testing.assert_array_equal(o4, xt.reshape(32, 64)[:, 1:17:2])


def test_fp8_dtypes_round_through_storage():
    @nki.jit
    def k(x):
        out = nl.ndarray(x.shape, nl.float32, buffer=nl.shared_hbm)
        t8 = nl.ndarray(x.shape, nl.float8_e4m3, buffer=nl.sbuf)
        nisa.dma_copy(dst=t8, src=x)  # DMA casts through fp32
        nl.store(out, nl.copy(t8, dtype=nl.float32))
        return out

    x = np.array([[1.0, 1.0625, 1.1, 300.0, -0.3, 2.0**-9, 2.0**-10]], np.float32)
    got = k(x)
    # e4m3 (IEEE-like, max 240): 3 mantissa bits; 300 overflows to inf; 2^-9 is the smallest
    # subnormal and 2^-10 (half of it) rounds to even, i.e. 0.
    np.testing.assert_array_equal(
        got, np.array([[1.0, 1.0, 1.125, np.inf, -0.3125, 2.0**-9, 0.0]], np.float32)
    )


def test_simulate_entry_point_and_numpy_outputs():
    x = np.random.randn(128, 512).astype(np.float32)
    out = nki.simulate(add_isa)(x, x)
    np.testing.assert_array_equal(out, 2 * x)
    out = nki.simulate(scale_rows[2])(x, 0.5)
    np.testing.assert_array_equal(out, x * 0.5)


def test_old_style_psum_accumulation_and_isa_calls_returning_tiles():
    @nki.jit
    def old_matmul(xT, y):
        K, M = xT.shape
        _, N = y.shape
        out = nl.ndarray((M, N), nl.float32, buffer=nl.shared_hbm)
        res = nl.zeros((M, N), dtype=nl.float32, buffer=nl.psum)
        for k in nl.affine_range(K // 128):
            a = nl.load(xT[k * 128 : (k + 1) * 128, :])
            b = nl.load(y[k * 128 : (k + 1) * 128, :])
            res += nl.matmul(a, b, transpose_x=True)
        nl.store(out, value=nl.copy(res))
        return out

    @nki.jit
    def old_attention_scores(q, k):
        qk = nisa.nc_matmul(nl.load(q), nl.load(k))  # returns a PSUM tile
        mx = nisa.tensor_reduce(op=nl.max, data=qk, axis=1)
        e = nisa.activation(op=nl.exp, data=nisa.tensor_scalar(data=qk, op0=nl.subtract, operand0=mx))
        p = nisa.tensor_scalar(data=e, op0=nl.multiply, operand0=nisa.reciprocal(data=nl.sum(e, axis=1)))
        out = nl.ndarray(p.shape, nl.float32, buffer=nl.shared_hbm)
        nl.store(out, p)
        return out

    x = np.random.randn(256, 64).astype(np.float32)
    y = np.random.randn(256, 96).astype(np.float32)
    np.testing.assert_allclose(old_matmul(x, y), x.T @ y, rtol=1e-5, atol=1e-4)
    q = np.random.randn(64, 128).astype(np.float32)
    k = np.random.randn(64, 100).astype(np.float32)
    s = q.T @ k
    e = np.exp(s - s.max(1, keepdims=True))
    np.testing.assert_allclose(old_attention_scores(q, k), e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-6)


def test_nki_simulator_env_runs_on_host(monkeypatch):
    monkeypatch.setenv("NKI_SIMULATOR", "1")
    x = torch.randn(128, 512, device="neuron")
    out = add_isa(x, x)
    assert out.device == x.device
    torch.testing.assert_close(out.cpu(), 2 * x.cpu(), rtol=0, atol=0)


def test_tensor_scalar_cumulative_and_range_select():
    @nki.jit
    def k(x, lo, hi):
        P, F = x.shape
        t = nl.load(x)
        cs = nl.ndarray((P, F), nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar_cumulative(
            dst=cs, src=t, op0=nl.multiply, op1=nl.add, imm0=2.0, reduce_cmd=nisa.reduce_cmd.reset_reduce
        )
        cm = nl.ndarray((P, F), nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar_cumulative(
            dst=cm, src=t, op0=nl.add, op1=nl.maximum, imm0=0.0, reduce_cmd=nisa.reduce_cmd.reset_reduce
        )
        sel = nl.ndarray((P, F), nl.float32, buffer=nl.sbuf)
        mx = nl.ndarray((P, 1), nl.float32, buffer=nl.sbuf)
        nisa.range_select(
            dst=sel,
            on_true_tile=t,
            comp_op0=nl.greater_equal,
            comp_op1=nl.less,
            bound0=nl.load(lo),
            bound1=nl.load(hi),
            reduce_res=mx,
            on_false_value=-1e30,
        )
        outs = []
        for tile in (cs, cm, sel, mx):
            o = nl.ndarray(tile.shape, nl.float32, buffer=nl.shared_hbm)
            nl.store(o, tile)
            outs.append(o)
        return tuple(outs)

    x = np.random.randn(16, 40).astype(np.float32)
    lo = np.random.randint(0, 20, (16, 1)).astype(np.float32)
    hi = lo + np.random.randint(1, 20, (16, 1)).astype(np.float32)
    cs, cm, sel, mx = k(x, lo, hi)
    np.testing.assert_allclose(cs, np.cumsum(2 * x, axis=1), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(cm, np.maximum.accumulate(x, axis=1))
    idx = np.arange(40)[None, :]
    keep = (idx >= lo) & (idx < hi)
    np.testing.assert_array_equal(sel, np.where(keep, x, np.float32(-1e30)))
    np.testing.assert_array_equal(mx[:, 0], np.where(keep, x, -np.inf).max(1))
