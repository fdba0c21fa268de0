"""nkilib.core.attention.attention_tkg, the NKI Library's SBUF subkernel contract (AttnTKGConfig,
q/k in SBUF or fused RoPE from HBM, out [B, H, d, s] or [d, B*H*s] in SBUF, mask
[s_prior, B, H, s] or in-kernel from rope_pos_ids, sink), against attention_tkg_torch_ref at
LNC=1 and LNC=2 (every program's result is checked: the wrapper stores each program's copy).

Tolerances: fp32 differs from the fp32 reference only in summation order (1e-4 of the output
scale); bf16 rounds q/K/V, the probabilities and the output to bf16 (each up to 2^-9
relative, three stages): 3e-2.
"""

from __future__ import annotations

import nki
import nki.isa as nisa
import nki.language as nl
import pytest
import torch
from nkilib.core.attention.attention_tkg import attention_tkg
from nkilib.core.attention.attention_tkg_torch import attention_tkg_torch_ref
from nkilib.core.attention.attention_tkg_utils import AttnTKGConfig
from nkilib.core.utils.allocator import SbufManager


@nki.jit
def _tkg(q, k_active, v_active, k_prior, v_prior, mask, inv_freqs, rope_pos_ids, sink, cfg):
    """Calls the subkernel as a library kernel would; returns ([n_prgs, *out], [n_prgs, *k_out]):
    an HBM output is shared by the programs (they split the sequences: entry 0), an SBUF output
    is stored by each program into its own entry."""
    n, p = nl.num_programs(0), nl.program_id(0)
    sbm = SbufManager(0, 64 * 1024)
    if cfg.qk_in_sb:
        q_in = nl.ndarray(q.shape, q.dtype, buffer=nl.sbuf, name="q_in")
        nisa.dma_copy(dst=q_in, src=q)
        k_in = nl.ndarray(k_active.shape, k_active.dtype, buffer=nl.sbuf, name="k_in")
        nisa.dma_copy(dst=k_in, src=k_active)
    else:
        q_in, k_in = q, k_active
    B, H, s, d = cfg.bs, cfg.q_head, cfg.s_active, cfg.d_head
    o_shape = (d, B * H * s) if cfg.out_in_sb else (B, H, d, s)
    k_shape = (d, B * s) if cfg.k_out_in_sb else (B, 1, d, s)
    res = nl.ndarray((n,) + o_shape, q.dtype, buffer=nl.shared_hbm, name="res")
    kres = nl.ndarray((n,) + k_shape, q.dtype, buffer=nl.shared_hbm, name="kres")
    out = nl.ndarray(o_shape, q.dtype, buffer=nl.sbuf, name="out") if cfg.out_in_sb else res[0]
    k_out = None
    if cfg.fuse_rope:
        k_out = nl.ndarray(k_shape, q.dtype, buffer=nl.sbuf, name="k_out") if cfg.k_out_in_sb else kres[0]
    o, ko = attention_tkg(
        q_in,
        k_in,
        v_active,
        k_prior,
        v_prior,
        mask,
        out,
        cfg,
        sbm,
        inv_freqs=inv_freqs,
        rope_pos_ids=rope_pos_ids,
        sink=sink,
        k_out=k_out,
    )
    if cfg.out_in_sb:
        nisa.dma_copy(dst=res[p], src=o)
    if cfg.fuse_rope and cfg.k_out_in_sb:
        nisa.dma_copy(dst=kres[p], src=ko)
    return res, kres


def _inputs(cfg: AttnTKGConfig, dtype, pos, gen):
    B, H, s, Sp, Sf, d = cfg.bs, cfg.q_head, cfg.s_active, cfg.curr_sprior, cfg.full_sprior, cfg.d_head

    def r(*shape):
        return torch.randn(*shape, generator=gen).to(dtype)

    q = r(d, B * H * s) if cfg.qk_in_sb else r(B, H, s, d)
    ka = r(d, B * s) if cfg.qk_in_sb else r(B, 1, s, d)
    va = r(B, 1, s, d)
    kp = r(B + 1, 1, Sf, d) if cfg.tp_k_prior else r(B + 1, 1, d, Sf)  # B+: an extra garbage batch
    vp = r(B + 1, 1, Sf, d)
    pos_t = torch.tensor(pos, dtype=torch.int32)
    rope_pos = (pos_t[:, None] + torch.arange(s, dtype=torch.int32)[None, :]).contiguous()  # [B, s]
    causal = torch.tril(torch.ones(s, s, dtype=torch.uint8))  # [query, key]
    if cfg.use_pos_id:
        mask = causal.t()[:, None, None, :].expand(s, B, H, s).contiguous()
    else:  # prior keys j < pos[b], the active tail causal; one extra hole to test per-key masking
        j = torch.arange(Sp)
        m = (j[None, :] < pos_t[:, None]).to(torch.uint8)[:, None, None, :].expand(B, H, s, Sp).clone()
        m[..., Sp - s :] = causal
        if Sp - s > 2:
            m[:, 0, :, 1] = 0
        mask = m.permute(3, 0, 1, 2).contiguous()
    inv = (1.0 / (10000 ** (torch.arange(0, d, 2).float() / d))).reshape(d // 2, 1) if cfg.fuse_rope else None
    return q, ka, va, kp, vp, mask, inv, rope_pos if (cfg.fuse_rope or cfg.use_pos_id) else None


CASES = [
    # (cfg, pos per batch, sink)
    (
        AttnTKGConfig(bs=1, q_head=8, s_active=1, curr_sprior=256, full_sprior=256, d_head=64, qk_in_sb=True),
        [255],
        False,
    ),
    (
        AttnTKGConfig(
            bs=2,
            q_head=4,
            s_active=3,
            curr_sprior=40,
            full_sprior=64,
            d_head=32,
            qk_in_sb=True,
            tp_k_prior=True,
        ),
        [5, 30],
        True,
    ),
    (
        AttnTKGConfig(
            bs=3,
            q_head=2,
            s_active=2,
            curr_sprior=600,
            full_sprior=640,
            d_head=128,
            qk_in_sb=True,
            out_in_sb=True,
        ),
        [598, 0, 300],
        False,
    ),
    (
        AttnTKGConfig(
            bs=2,
            q_head=8,
            s_active=1,
            curr_sprior=130,
            full_sprior=130,
            d_head=64,
            qk_in_sb=True,
            use_pos_id=True,
            tp_k_prior=True,
        ),
        [129, 17],
        True,
    ),
    (
        AttnTKGConfig(
            bs=2,
            q_head=4,
            s_active=2,
            curr_sprior=96,
            full_sprior=128,
            d_head=64,
            fuse_rope=True,
            use_pos_id=True,
            tp_k_prior=True,
        ),
        [94, 10],
        False,
    ),
    (
        AttnTKGConfig(
            bs=4,
            q_head=2,
            s_active=1,
            curr_sprior=64,
            full_sprior=64,
            d_head=64,
            fuse_rope=True,
            k_out_in_sb=True,
            out_in_sb=True,
        ),
        [63, 1, 20, 40],
        True,
    ),
]


@pytest.mark.parametrize("lnc", [1, 2])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_attention_tkg_matches_reference(case, dtype, lnc):
    cfg, pos, with_sink = CASES[case]
    gen = torch.Generator().manual_seed(case)
    q, ka, va, kp, vp, mask, inv, rope_pos = _inputs(cfg, dtype, pos, gen)
    sink = torch.randn(cfg.q_head, 1, generator=gen) if with_sink else None
    B, H, s, d = cfg.bs, cfg.q_head, cfg.s_active, cfg.d_head
    o_shape = (d, B * H * s) if cfg.out_in_sb else (B, H, d, s)
    ref_out = torch.zeros(o_shape)
    ref_k = torch.zeros((d, B * s) if cfg.k_out_in_sb else (B, 1, d, s)) if cfg.fuse_rope else None
    attention_tkg_torch_ref[lnc](
        q,
        ka,
        va,
        kp,
        vp,
        mask,
        ref_out,
        cfg,
        None,
        inv_freqs=inv,
        rope_pos_ids=rope_pos,
        sink=sink,
        k_out=ref_k,
    )
    kern = _tkg[lnc] if lnc > 1 else _tkg
    res, kres = kern(q, ka, va, kp, vp, mask, inv, rope_pos, sink, cfg)
    tol = 1e-4 if dtype == torch.float32 else 3e-2
    scale = max(1.0, ref_out.abs().max().item())
    for p in range(lnc if cfg.out_in_sb else 1):
        torch.testing.assert_close(res[p].float(), ref_out, rtol=tol, atol=tol * scale)
    for p in range(lnc if cfg.k_out_in_sb else 1):
        if cfg.fuse_rope:
            torch.testing.assert_close(
                kres[p].float(), ref_k, rtol=tol, atol=tol * max(1.0, ref_k.abs().max().item())
            )


def test_attention_tkg_reference_matches_plain_softmax_attention():
    """The reference itself, against a direct formula (one sequence, all keys visible, no RoPE):
    a wrong layout convention in the reference would otherwise pass unnoticed."""
    B, H, s, Sp, d = 1, 2, 1, 8, 4
    cfg = AttnTKGConfig(
        bs=B, q_head=H, s_active=s, curr_sprior=Sp, full_sprior=Sp, d_head=d, qk_in_sb=True, tp_k_prior=True
    )
    gen = torch.Generator().manual_seed(0)
    q, ka, va = (
        torch.randn(d, H, generator=gen),
        torch.randn(d, 1, generator=gen),
        torch.randn(1, 1, 1, d, generator=gen),
    )
    kp, vp = torch.randn(1, 1, Sp, d, generator=gen), torch.randn(1, 1, Sp, d, generator=gen)
    mask = torch.ones(Sp, 1, H, 1, dtype=torch.uint8)
    out = torch.zeros(B, H, d, s)
    attention_tkg_torch_ref(q, ka, va, kp, vp, mask, out, cfg, None)
    K = kp[0, 0].clone()
    K[-1] = ka[:, 0]
    V = vp[0, 0].clone()
    V[-1] = va[0, 0, 0]
    for h in range(H):
        p = torch.softmax(K @ q[:, h], 0)
        torch.testing.assert_close(out[0, h, :, 0], V.t() @ p)


def test_attention_tkg_rejects_bad_input():
    cfg = AttnTKGConfig(bs=1, q_head=2, s_active=1, curr_sprior=8, full_sprior=8, d_head=16)
    q = torch.zeros(1, 2, 1, 16)
    args = (
        q,
        q[:, :1],
        q[:, :1],
        torch.zeros(1, 1, 16, 8),
        torch.zeros(1, 1, 8, 16),
        torch.ones(8, 1, 2, 1),
        None,
    )
    with pytest.raises(AssertionError, match="q and k_active must be in SBUF"):
        _tkg(*args[:6], None, None, None, cfg)
    cfg2 = AttnTKGConfig(bs=1, q_head=2, s_active=1, curr_sprior=8, full_sprior=8, d_head=16, qk_in_sb=True)
    with pytest.raises(AssertionError, match=r"q has shape \(1, 2, 1, 16\); expected \(16, 2\)"):
        _tkg(*args[:6], None, None, None, cfg2)
    cfg3 = AttnTKGConfig(
        bs=1, q_head=2, s_active=1, curr_sprior=8, full_sprior=8, d_head=16, qk_in_sb=True, block_len=4
    )
    with pytest.raises(AssertionError, match="block KV cache"):
        _tkg(torch.zeros(16, 2), torch.zeros(16, 1), *args[2:6], None, None, None, cfg3)
