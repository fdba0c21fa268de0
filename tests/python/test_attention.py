"""scaled_dot_product_attention on neuron: the fused kernel (the OVERRIDEABLE backend) against
PyTorch's CPU attention, forward and backward: causal (top-left aligned, any Lq/Lk), boolean and
additive masks (broadcast, fully masked rows), grouped-query attention, custom scale, decode
(one query against a long cache), bf16, and the math fallback for dropout/fp64.

Tolerances: fp32 differs by summation order only (2e-5). bf16 runs in fp32 inside the kernel, so
it is compared with the fp32 CPU result of the same bf16 inputs at bf16 resolution (2^-6).
"""

import pytest
import torch
import torch_neuronx
from torch.nn import functional as F

N = "neuron"
FUSED = "aten::_scaled_dot_product_fused_attention_overrideable"


def rnd(*shape, seed=0):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


def compare(B, Hq, Hkv, L, S, E, Ev, dtype=torch.float32, mask=None, **kw):
    q, k, v = rnd(B, Hq, L, E, seed=1), rnd(B, Hkv, S, E, seed=2), rnd(B, Hkv, S, Ev, seed=3)
    if dtype != torch.float32:
        q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    qc, kc, vc = (t.detach().float().clone().requires_grad_() for t in (q, k, v))
    qn, kn, vn = (t.detach().to(N).requires_grad_() for t in (q, k, v))
    mask_c = mask_n = None
    if mask is not None:
        mask_c = mask.detach().clone().requires_grad_(mask.requires_grad)
        mask_n = mask.detach().to(N).requires_grad_(mask.requires_grad)
    out_c = F.scaled_dot_product_attention(qc, kc, vc, attn_mask=mask_c, **kw)
    torch_neuronx.clear_op_tracking()
    out_n = F.scaled_dot_product_attention(qn, kn, vn, attn_mask=mask_n, **kw)
    assert FUSED in torch_neuronx.get_executed_ops()
    tol = 2e-5 if dtype == torch.float32 else 1.6e-2
    torch.testing.assert_close(out_n.detach().cpu().float(), out_c.detach(), rtol=tol, atol=tol)
    g = rnd(*out_c.shape, seed=4)
    out_c.backward(g)
    out_n.backward(g.to(dtype).to(N))
    for c, n in ((qc, qn), (kc, kn), (vc, vn)):
        torch.testing.assert_close(n.grad.cpu().float(), c.grad, rtol=tol, atol=tol * 4)
    if mask is not None and mask.requires_grad:
        torch.testing.assert_close(mask_n.grad.cpu(), mask_c.grad, rtol=tol, atol=tol)
    assert FUSED + "_backward" in torch_neuronx.get_executed_ops()


@pytest.mark.parametrize("L,S", [(1, 1), (5, 7), (70, 70), (300, 5), (5, 300), (257, 513)])
@pytest.mark.parametrize("causal", [False, True])
def test_shapes_and_causal(L, S, causal):
    compare(2, 2, 2, L, S, 16, 8, is_causal=causal)


def test_gqa_scale_and_decode():
    compare(1, 8, 2, 33, 40, 16, 16, enable_gqa=True)
    compare(1, 6, 3, 20, 20, 8, 8, enable_gqa=True, is_causal=True, scale=0.37)
    compare(1, 8, 8, 1, 300, 64, 64)  # decode: one query, a long cache


def test_masks():
    g = torch.Generator().manual_seed(5)
    bool_mask = torch.rand(9, 11, generator=g) > 0.3
    compare(2, 2, 2, 9, 11, 8, 8, mask=bool_mask)
    full = torch.ones(9, 11, dtype=torch.bool)
    full[3] = False  # a fully masked row: zeros out, zero grads (like PyTorch's CPU kernel)
    compare(2, 2, 2, 9, 11, 8, 8, mask=full)
    compare(2, 3, 3, 9, 11, 8, 8, mask=rnd(2, 1, 9, 11, seed=6))
    compare(2, 3, 3, 9, 11, 8, 8, mask=rnd(11, seed=7).requires_grad_())  # additive mask with a gradient
    compare(1, 2, 2, 9, 9, 8, 8, mask=rnd(9, 9, seed=8), is_causal=False)


def test_bf16_and_fp16():
    compare(1, 4, 4, 64, 64, 64, 64, dtype=torch.bfloat16, is_causal=True)
    compare(1, 2, 2, 17, 33, 32, 32, dtype=torch.float16)


def test_non_contiguous_inputs():
    # [B, L, H, E] memory seen as [B, H, L, E], the usual layout after a projection.
    x = rnd(2, 12, 3, 3 * 16, seed=9)
    q, k, v = x.chunk(3, dim=-1)
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    out_c = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    out_n = F.scaled_dot_product_attention(q.to(N), k.to(N), v.to(N), is_causal=True)
    torch.testing.assert_close(out_n.cpu(), out_c, rtol=2e-5, atol=2e-5)
    # The output's memory is [B, L, H, E]: transpose(1, 2).reshape is a free view.
    o = out_n.transpose(1, 2)
    assert o.is_contiguous()


def test_dropout_and_fp64_take_the_math_path():
    q = rnd(1, 2, 5, 4).double()
    torch_neuronx.clear_op_tracking()
    out = F.scaled_dot_product_attention(q.to(N), q.to(N), q.to(N), is_causal=True)
    assert FUSED not in torch_neuronx.get_executed_ops()
    torch.testing.assert_close(out.cpu(), F.scaled_dot_product_attention(q, q, q, is_causal=True))
    qf = q.float().to(N)
    out = F.scaled_dot_product_attention(qf, qf, qf, dropout_p=0.5)
    assert out.shape == (1, 2, 5, 4) and FUSED not in torch_neuronx.get_executed_ops()


def test_mismatched_heads_without_enable_gqa_is_an_error():
    q, k = torch.randn(1, 4, 3, 8, device=N), torch.randn(1, 2, 3, 8, device=N)
    with pytest.raises(RuntimeError):
        F.scaled_dot_product_attention(q, k, k)


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_transformer_encoder_inference_fast_path(norm_first, activation):
    torch.manual_seed(0)

    def make():
        layer = torch.nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, dropout=0.0,
                                                 batch_first=True, norm_first=norm_first, activation=activation)
        return torch.nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False).eval()

    cpu = make()
    neu = make()
    neu.load_state_dict(cpu.state_dict())
    neu = neu.to(N)
    x = rnd(2, 5, 32)
    pad = torch.tensor([[False] * 5, [False, False, False, True, True]])
    causal = torch.nn.Transformer.generate_square_subsequent_mask(5)
    for kw in ({}, {"src_key_padding_mask": pad}, {"mask": causal}):
        with torch.no_grad():
            out_c = cpu(x, **kw)
            torch_neuronx.clear_op_tracking()
            out_n = neu(x.to(N), **{k: v.to(N) for k, v in kw.items()})
        torch.testing.assert_close(out_n.cpu(), out_c, rtol=2e-5, atol=2e-5)
        assert "aten::_transformer_encoder_layer_fwd" in torch_neuronx.get_executed_ops()
        assert "aten::_transformer_encoder_layer_fwd" not in torch_neuronx.get_fallback_ops()


def test_multihead_attention_module_with_weights():
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(32, 4, batch_first=True).eval()
    mhan = torch.nn.MultiheadAttention(32, 4, batch_first=True).eval()
    mhan.load_state_dict(mha.state_dict())
    mhan = mhan.to(N)
    x = rnd(2, 5, 32)
    pad = torch.tensor([[False] * 5, [False, False, False, True, True]])
    with torch.no_grad():
        oc, wc = mha(x, x, x, key_padding_mask=pad)
        on, wn = mhan(x.to(N), x.to(N), x.to(N), key_padding_mask=pad.to(N))
    torch.testing.assert_close(on.cpu(), oc, rtol=2e-5, atol=2e-5)
    torch.testing.assert_close(wn.cpu(), wc, rtol=2e-5, atol=2e-5)
