"""Lab 2: NKI Library kernels as PyTorch operators - wrap_nki(kernel) + @nki_op, the Lab 1 Step 4 pattern."""

from __future__ import annotations

import math

import nki
import torch
from nkilib.core.mlp.mlp import mlp
from nkilib.core.utils.common_types import ActFnType, NormType, QKVOutputLayout, WeightLayout
from torch_neuronx import nki_op, wrap_nki

OUT_IN = WeightLayout.OUT_IN  # nn.Linear.weight as it is ([out, in]): nkilib DMA-transposes it
mlp_kernel = wrap_nki(mlp)  # the NKI kernel, callable on torch tensors


@nki_op("nkilib::mlp", mutates_args={})  # a torch op: eager on neuron, one node under torch.compile
def nki_mlp(x: torch.Tensor, gate_w: torch.Tensor, up_w: torch.Tensor, down_w: torch.Tensor) -> torch.Tensor:
    """SwiGLU MLP: down(silu(gate(x)) * up(x)). Prefill (S > 1) runs the CTE path, decode TKG."""
    out = (mlp_kernel[lnc()] if x.shape[1] == 1 else mlp_kernel)(  # decode: on both cores (LNC=2)
        hidden_tensor=x,
        gate_proj_weights_tensor=gate_w,
        up_proj_weights_tensor=up_w,
        down_proj_weights_tensor=down_w,
        activation_fn=ActFnType.SiLU,
        normalization_type=NormType.NO_NORM,
        weight_layout=OUT_IN,
        force_cte_mode=x.shape[1] > 1,
    )
    return out[0]


import functools  # noqa: E402


@functools.cache
def lnc() -> int:
    """Physical NeuronCores per logical core (NEURON_LOGICAL_NC_CONFIG: 2 on trn2). Kernels that
    shard their work by nl.program_id run with this grid, ``kernel[lnc()](...)``, so that both
    cores of the logical core work on them."""
    return torch.neuron.get_device_properties().logical_nc_config


# The other kernels of the lab, registered the same way. Each operator runs its kernels on the
# tensors' neuron device in eager mode and is a single graph node under torch.compile; weights
# are passed as nn.Linear stores them (``module.weight``) and no transposed copy is made.
from nkilib.core.attention.attention_cte import attention_cte  # noqa: E402
from nkilib.core.attention.attention_decode_hf import attention_decode_hf  # noqa: E402
from nkilib.core.attention.kv_cache import update_kv_cache  # noqa: E402
from nkilib.core.embeddings.rope_hf import rope_hf  # noqa: E402
from nkilib.core.qkv.qkv import qkv  # noqa: E402
from nkilib.core.rmsnorm.rmsnorm import rmsnorm  # noqa: E402
from nkilib.experimental.transformer.transformer_tkg import transformer_tkg  # noqa: E402

rmsnorm_kernel = wrap_nki(rmsnorm)
rope_kernel = wrap_nki(rope_hf)
qkv_kernel = wrap_nki(qkv)
attn_cte_kernel = wrap_nki(attention_cte)
attn_tkg_kernel = wrap_nki(attention_decode_hf)
kv_update_kernel = wrap_nki(update_kv_cache)
transformer_kernel = wrap_nki(nki.jit(transformer_tkg))  # not decorated in nkilib: jit at the call site


@nki_op("nkilib::mlp_fused", mutates_args={})
def nki_mlp_fused(
    x: torch.Tensor,
    residual: torch.Tensor,
    norm_w: torch.Tensor,
    gate_w: torch.Tensor,
    up_w: torch.Tensor,
    down_w: torch.Tensor,
    eps: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """h = x + residual; returns (mlp(rmsnorm(h)), h): residual add, RMSNorm and MLP in one kernel
    (decode on both cores of the logical core)."""
    kernel = mlp_kernel[lnc()] if x.shape[1] == 1 else mlp_kernel
    out, added = kernel(
        hidden_tensor=x,
        gate_proj_weights_tensor=gate_w,
        up_proj_weights_tensor=up_w,
        down_proj_weights_tensor=down_w,
        normalization_weights_tensor=norm_w,
        normalization_type=NormType.RMS_NORM,
        fused_add_tensor=residual,
        store_fused_add_result=True,
        eps=eps,
        weight_layout=OUT_IN,
        force_cte_mode=x.shape[1] > 1,
    )
    return out, added


@nki_op("nkilib::rmsnorm", mutates_args={})
def nki_rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return rmsnorm_kernel(input=x, gamma=weight, eps=eps)


@nki_op("nkilib::rope", mutates_args={})
def nki_rope(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate-half RoPE on q [B, Hq, S, D] and k [B, Hkv, S, D]; cos/sin [S, D/2] (the rows
    of this step's positions)."""
    return rope_kernel(q=q, k=k, q_out=torch.empty_like(q), k_out=torch.empty_like(k), cos=cos, sin=sin)


@nki_op("nkilib::qkv_rope", mutates_args={})
def nki_qkv_rope(
    x: torch.Tensor,
    norm_w: torch.Tensor,
    q_w: torch.Tensor,
    k_w: torch.Tensor,
    v_w: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    n_heads: int,
    n_kv_heads: int,
    eps: float,
) -> torch.Tensor:
    """RMSNorm + QKV projection + RoPE in one kernel: [n_heads + 2 n_kv_heads, B, S, D] (up to
    128 tokens: the two cores of the logical core split the heads)."""
    d = q_w.shape[0] // n_heads
    return qkv_kernel[lnc()](
        input=x,
        fused_qkv_weights=(q_w, k_w, v_w),
        output_layout=QKVOutputLayout.NBSd,
        fused_norm_type=NormType.RMS_NORM,
        gamma_norm_weights=norm_w,
        norm_eps=eps,
        fused_rope=True,
        cos_cache=cos,
        sin_cache=sin,
        d_head=d,
        num_q_heads=n_heads,
        num_kv_heads=n_kv_heads,
        weight_layout=OUT_IN,
    )


@nki_op("nkilib::attention", mutates_args={"k_cache", "v_cache"})
def nki_attn(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    pos: torch.Tensor,
) -> torch.Tensor:
    """Causal attention of q/k/v [B, H, S, D] over a static KV cache [B, Hkv, max_seq, D];
    writes k/v into the cache at positions pos (int32 [S], consecutive). Prefill (S > 1) runs
    attention_cte, decode attention_decode_hf, neuron-emu's HF-layout decode kernel (which also does the cache write)."""
    B, H, S, D = q.shape
    Hkv = k.shape[1]
    start = pos[:1].reshape(1, 1)
    if S == 1:
        return attn_tkg_kernel(
            q=q,
            k_active=k,
            v_active=v,
            k_prior=k_cache,
            v_prior=v_cache,
            position_ids=start,
            update_cache=True,
        )
    kv_update_kernel(k_cache=k_cache, v_cache=v_cache, k=k, v=v, position_ids=start)
    out = attn_cte_kernel(
        q=q.reshape(B * H, S, D),
        k=k.reshape(B * Hkv, S, D),
        v=v.reshape(B * Hkv, S, D),
        scale=1.0 / math.sqrt(D),
        causal_mask=True,
        k_prior=k_cache.reshape(B * Hkv, k_cache.shape[2], D),
        v_prior=v_cache.reshape(B * Hkv, v_cache.shape[2], D),
        prior_used_len=pos[:1],
        tp_k=True,
    )
    return out.reshape(B, H, S, D)


@nki_op("nkilib::transformer_tkg", mutates_args={"k_cache", "v_cache"})
def nki_transformer(
    x: torch.Tensor,
    pos: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    q_w: list[torch.Tensor],
    k_w: list[torch.Tensor],
    v_w: list[torch.Tensor],
    o_w: list[torch.Tensor],
    gate_w: list[torch.Tensor],
    up_w: list[torch.Tensor],
    down_w: list[torch.Tensor],
    attn_norm_w: list[torch.Tensor],
    mlp_norm_w: list[torch.Tensor],
    eps: float,
) -> torch.Tensor:
    """Every decoder layer of a decode step in one megakernel (nkilib.experimental
    transformer_tkg). cos/sin are the full [max_seq, D/2] tables (gathered in the kernel at
    pos); the caches [L, B, Hkv, max_seq, D] are updated in place."""
    L = len(q_w)
    return transformer_kernel(
        X=x,
        W_qkvs=[(q_w[i], k_w[i], v_w[i]) for i in range(L)],
        W_outs=list(o_w),
        W_gates=list(gate_w),
        W_ups=list(up_w),
        W_downs=list(down_w),
        W_gamma_qkvs=list(attn_norm_w),
        W_gamma_mlps=list(mlp_norm_w),
        K_caches=[k_cache[i] for i in range(L)],
        V_caches=[v_cache[i] for i in range(L)],
        RoPE_cos=cos,
        RoPE_sin=sin,
        mask_cache=None,  # generated in the kernel from position_ids
        mask_active=None,
        position_ids=pos[:1].reshape(1, 1),
        num_layers=L,
        eps=eps,
        weight_layout=OUT_IN,
    )
