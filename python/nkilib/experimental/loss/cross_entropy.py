"""Cross-entropy loss over large vocabularies, positions on partitions, the vocabulary streamed
in chunks.

forward: an online log-sum-exp per position (running max m and sum d; d is rescaled by
exp(m_old - m_new) when the max grows), the target logit picked out of its chunk with
range_select; loss = lse - logit[target], both returned (lse is the backward's saved state).
backward: grad = scale * (exp(logit - lse) - onehot(target)), scale 1/N ('mean') or 1 ('sum'),
optionally written over the logits.

Statistics in fp32 on every dtype; results rounded once to `dtype`.
"""

from __future__ import annotations

import nki
import nki.isa as nisa
import nki.language as nl

from ...core.utils.kernel_assert import kernel_assert
from ...core.utils.kernel_helpers import get_verified_program_sharding_info
from ...core.utils.tile_ops import P, chunks

NEG = -3.4028234663852886e38
F_MAX = 65535  # the library's largest chunk_size
SBUF_CHUNK = 8192  # vocabulary columns per pass here (fp32 scratch: 32 KiB per partition)


def _validate(func: str, logits_hbm, targets_hbm, positions_per_batch: int, chunk_size: int, dtype):
    kernel_assert(
        len(logits_hbm.shape) == 2,
        f"{func}: logits_hbm must be 2D [num_positions, vocab_size], got shape {logits_hbm.shape}",
    )
    kernel_assert(
        len(targets_hbm.shape) == 1, f"{func}: targets_hbm must be 1D [num_positions], got {targets_hbm.shape}"
    )
    N, V = logits_hbm.shape
    kernel_assert(
        targets_hbm.shape[0] == N, f"{func}: targets_hbm length {targets_hbm.shape[0]} != num_positions {N}"
    )
    kernel_assert(targets_hbm.dtype == nl.int32, f"{func}: targets_hbm must be int32, got {targets_hbm.dtype}")
    for what, dt in (("logits_hbm", logits_hbm.dtype), ("dtype", dtype)):
        kernel_assert(dt in (nl.bfloat16, nl.float32), f"{func}: {what} must be bfloat16 or float32, got {dt}")
    kernel_assert(N > 0 and V > 0, f"{func}: empty logits {logits_hbm.shape}")
    kernel_assert(
        0 < chunk_size <= min(V, F_MAX), f"{func}: chunk_size {chunk_size} must be in [1, min(vocab_size={V}, {F_MAX})]"
    )
    kernel_assert(
        0 < positions_per_batch <= P, f"{func}: positions_per_batch {positions_per_batch} must be in [1, {P}]"
    )
    return N, V


def _vocab_chunks(V: int, chunk_size: int) -> list:
    """(start, size) of the passes: the caller's chunks, each split to fit SBUF_CHUNK."""
    out = []
    for c in chunks(V, chunk_size):
        for s in chunks(c.size, SBUF_CHUNK):
            out.append((c.start + s.start, s.size))
    return out


def _program_tiles(func: str, N: int, positions_per_batch: int) -> list:
    """(first position, count) of the position tiles this program of the launch grid owns."""
    _, n_prgs, prg_id = get_verified_program_sharding_info(func, (0, 1))
    return [(pt.start, pt.size) for pt in chunks(N, positions_per_batch) if pt.index % n_prgs == prg_id]


def _load_logits(logits_hbm, p0: int, ps: int, c0: int, cs: int, C: int):
    """Logits of positions p0 .. p0 + ps, vocabulary columns c0 .. c0 + cs, into a [ps, C] tile."""
    x = nl.ndarray((ps, C), logits_hbm.dtype, buffer=nl.sbuf, name="logits")
    nisa.dma_copy(dst=x[:, 0:cs], src=logits_hbm[p0 : p0 + ps, c0 : c0 + cs])
    return x


def _load_column(src_hbm, p0: int, ps: int, name: str):
    """Rows p0 .. p0 + ps of a 1-D HBM vector as an fp32 [ps, 1] tile."""
    raw = nl.ndarray((ps, 1), src_hbm.dtype, buffer=nl.sbuf, name=name + "_raw")
    nisa.dma_copy(dst=raw, src=src_hbm.reshape((src_hbm.shape[0], 1))[p0 : p0 + ps, :])
    col = nl.ndarray((ps, 1), nl.float32, buffer=nl.sbuf, name=name)
    nisa.tensor_copy(dst=col, src=raw)
    return col


def _target_bounds(targets_hbm, p0: int, ps: int):
    """[target, target + 1) per position, fp32 (range_select's bounds; exact below 2^24)."""
    lo = _load_column(targets_hbm, p0, ps, "target")
    hi = nl.ndarray((ps, 1), nl.float32, buffer=nl.sbuf, name="target_hi")
    nisa.tensor_scalar(dst=hi, data=lo, op0=nl.add, operand0=1.0)
    return lo, hi


def _store_column(dst_hbm, p0: int, ps: int, col, dtype, name: str) -> None:
    out = col
    if dtype != nl.float32:
        out = nl.ndarray((ps, 1), dtype, buffer=nl.sbuf, name=name)
        nisa.tensor_copy(dst=out, src=col)
    nisa.dma_copy(dst=dst_hbm.reshape((dst_hbm.shape[0], 1))[p0 : p0 + ps, :], src=out)


@nki.jit
def cross_entropy_forward(
    logits_hbm,
    targets_hbm,
    positions_per_batch: int = 32,
    chunk_size: int = 32768,
    dtype: nki.dtype = nl.bfloat16,
):
    """Per-position cross-entropy loss and log-sum-exp.

    Args:
        logits_hbm: [num_positions, V] bf16 or fp32 (HBM, already flattened).
        targets_hbm: [num_positions] int32 class indices in [0, V).
        positions_per_batch: positions per tile (<= 128, on partitions).
        chunk_size: vocabulary columns per chunk (<= min(V, 65535)); larger chunks are split to
            fit SBUF, so it changes only the schedule, never the result.
        dtype: dtype of the outputs (statistics are fp32).

    A launch grid splits the position tiles between the programs.
    Returns: (loss [num_positions], lse [num_positions]) in HBM, dtype `dtype`.
    """
    N, V = _validate("cross_entropy_forward", logits_hbm, targets_hbm, positions_per_batch, chunk_size, dtype)
    loss_hbm = nl.ndarray((N,), dtype=dtype, buffer=nl.shared_hbm, name="loss")
    lse_hbm = nl.ndarray((N,), dtype=dtype, buffer=nl.shared_hbm, name="lse")
    f32 = nl.float32
    passes = _vocab_chunks(V, chunk_size)
    C = max(s for _, s in passes)
    for p0, ps in _program_tiles("cross_entropy_forward", N, positions_per_batch):
        t_lo, t_hi = _target_bounds(targets_hbm, p0, ps)
        m = nl.ndarray((ps, 1), f32, buffer=nl.sbuf, name="run_max")
        nisa.memset(dst=m, value=NEG)
        d = nl.ndarray((ps, 1), f32, buffer=nl.sbuf, name="run_sum")
        nisa.memset(dst=d, value=0.0)
        tl = nl.ndarray((ps, 1), f32, buffer=nl.sbuf, name="target_logit")
        nisa.memset(dst=tl, value=NEG)
        for c0, cs in passes:
            x = _load_logits(logits_hbm, p0, ps, c0, cs, C)
            mx = nl.ndarray((ps, 1), f32, buffer=nl.sbuf, name="chunk_max")
            nisa.tensor_reduce(dst=mx, op=nl.maximum, data=x[:, 0:cs], axis=1)
            m_new = nl.ndarray((ps, 1), f32, buffer=nl.sbuf, name="new_max")
            nisa.tensor_tensor(dst=m_new, data1=m, data2=mx, op=nl.maximum)
            nb = nl.ndarray((ps, 1), f32, buffer=nl.sbuf, name="neg_max")
            nisa.tensor_scalar(dst=nb, data=m_new, op0=nl.multiply, operand0=-1.0)
            e = nl.ndarray((ps, C), f32, buffer=nl.sbuf, name="scratch")
            s = nl.ndarray((ps, 1), f32, buffer=nl.sbuf, name="chunk_sum")
            nisa.activation(
                dst=e[:, 0:cs], op=nl.exp, data=x[:, 0:cs], bias=nb, scale=1.0,
                reduce_op=nl.add, reduce_res=s, reduce_cmd=nisa.reduce_cmd.reset_reduce,
            )
            corr = nl.ndarray((ps, 1), f32, buffer=nl.sbuf, name="rescale")
            nisa.activation(dst=corr, op=nl.exp, data=m, bias=nb, scale=1.0)
            nisa.scalar_tensor_tensor(dst=d, data=d, op0=nl.multiply, operand0=corr, op1=nl.add, operand1=s)
            nisa.tensor_copy(dst=m, src=m_new)
            # the target's logit if it lies in this chunk (NEG otherwise), max-accumulated
            ts_ = nl.ndarray((ps, 1), f32, buffer=nl.sbuf, name="chunk_target")
            nisa.range_select(
                dst=e[:, 0:cs], on_true_tile=x[:, 0:cs], comp_op0=nl.greater_equal, comp_op1=nl.less,
                bound0=t_lo, bound1=t_hi, range_start=c0, on_false_value=NEG,
                reduce_op=nl.maximum, reduce_res=ts_,
            )
            nisa.tensor_tensor(dst=tl, data1=tl, data2=ts_, op=nl.maximum)
        lse = nl.ndarray((ps, 1), f32, buffer=nl.sbuf, name="lse_sb")
        nisa.activation(dst=lse, op=nl.log, data=d)
        nisa.tensor_tensor(dst=lse, data1=lse, data2=m, op=nl.add)
        loss = nl.ndarray((ps, 1), f32, buffer=nl.sbuf, name="loss_sb")
        nisa.tensor_tensor(dst=loss, data1=lse, data2=tl, op=nl.subtract)
        _store_column(loss_hbm, p0, ps, loss, dtype, "loss_out")
        _store_column(lse_hbm, p0, ps, lse, dtype, "lse_out")
    return loss_hbm, lse_hbm


@nki.jit
def cross_entropy_backward(
    logits_hbm,
    targets_hbm,
    lse_state_hbm,
    reduction: str = "mean",
    positions_per_batch: int = 32,
    chunk_size: int = 32768,
    dtype: nki.dtype = nl.bfloat16,
    inplace: bool = True,
):
    """d loss / d logits = scale * (softmax(logits) - onehot(targets)), softmax from the saved
    lse (cross_entropy_forward's second output).

    Args:
        logits_hbm, targets_hbm, positions_per_batch, chunk_size, dtype: as in the forward.
        lse_state_hbm: [num_positions] bf16 or fp32.
        reduction: 'mean' (scale 1 / num_positions) or 'sum' (scale 1).
        inplace: write the gradient over logits_hbm (then logits_hbm.dtype must be `dtype`)
            and return it; otherwise a new HBM tensor.

    Returns: grad_logits [num_positions, V], dtype `dtype`.
    """
    kernel_assert(
        reduction in ("mean", "sum"), f"cross_entropy_backward: reduction must be 'mean' or 'sum', got {reduction!r}"
    )
    N, V = _validate("cross_entropy_backward", logits_hbm, targets_hbm, positions_per_batch, chunk_size, dtype)
    kernel_assert(
        len(lse_state_hbm.shape) == 1 and lse_state_hbm.shape[0] == N,
        f"cross_entropy_backward: lse_state_hbm must be [{N}], got {lse_state_hbm.shape}",
    )
    kernel_assert(
        lse_state_hbm.dtype in (nl.bfloat16, nl.float32),
        f"cross_entropy_backward: lse_state_hbm must be bfloat16 or float32, got {lse_state_hbm.dtype}",
    )
    if inplace:
        kernel_assert(
            logits_hbm.dtype == dtype,
            f"cross_entropy_backward: inplace needs logits_hbm.dtype == dtype, got {logits_hbm.dtype} and {dtype}",
        )
        grad_hbm = logits_hbm
    else:
        grad_hbm = nl.ndarray((N, V), dtype=dtype, buffer=nl.shared_hbm, name="grad_logits")
    scale = 1.0 / N if reduction == "mean" else 1.0
    f32 = nl.float32
    passes = _vocab_chunks(V, chunk_size)
    C = max(s for _, s in passes)
    for p0, ps in _program_tiles("cross_entropy_backward", N, positions_per_batch):
        t_lo, _ = _target_bounds(targets_hbm, p0, ps)
        nlse = _load_column(lse_state_hbm, p0, ps, "lse")
        nisa.tensor_scalar(dst=nlse, data=nlse, op0=nl.multiply, operand0=-1.0)
        for c0, cs in passes:
            x = _load_logits(logits_hbm, p0, ps, c0, cs, C)
            prob = nl.ndarray((ps, C), f32, buffer=nl.sbuf, name="prob")
            nisa.activation(dst=prob[:, 0:cs], op=nl.exp, data=x[:, 0:cs], bias=nlse, scale=1.0)
            col = nl.ndarray((ps, C), f32, buffer=nl.sbuf, name="column")
            nisa.iota(dst=col[:, 0:cs], pattern=[[1, cs]], offset=c0, channel_multiplier=0)
            onehot = nl.ndarray((ps, C), f32, buffer=nl.sbuf, name="onehot")
            nisa.tensor_scalar(dst=onehot[:, 0:cs], data=col[:, 0:cs], op0=nl.equal, operand0=t_lo)
            nisa.tensor_tensor(dst=prob[:, 0:cs], data1=prob[:, 0:cs], data2=onehot[:, 0:cs], op=nl.subtract)
            g = nl.ndarray((ps, C), dtype, buffer=nl.sbuf, name="grad")
            nisa.tensor_scalar(dst=g[:, 0:cs], data=prob[:, 0:cs], op0=nl.multiply, operand0=scale)
            nisa.dma_copy(dst=grad_hbm[p0 : p0 + ps, c0 : c0 + cs], src=g[:, 0:cs])
    return grad_hbm
