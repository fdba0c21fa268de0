"""The decomposition table AOT autograd applies before the Neuron compiler sees a graph.

Core ATen decompositions, minus the ops the compiler lowers as a whole (softmax, layer norm and
training batch norm and their backward run the eager kernels; softmax stays whole so the
attention fusion can see it), plus decompositions of composite training ops (losses, embedding
backward, batch norm in evaluation mode) into ops the compiler lowers.
"""

from __future__ import annotations

import functools

import torch
from torch._decomp import core_aten_decompositions, get_decompositions

aten = torch.ops.aten

# Lowered directly: keep them whole.
_KEEP = [
    aten._softmax,
    aten._log_softmax,
    aten._softmax_backward_data,
    aten._log_softmax_backward_data,
    aten.gelu,
    aten.silu,
    aten.gelu_backward,
    aten.silu_backward,
    aten.native_layer_norm,
    aten.native_layer_norm_backward,
    aten.embedding,
    aten.index_copy,
    aten.addmm,
    aten.clamp,
    aten.clamp_min,
    aten.clamp_max,
    aten.masked_fill,
    aten.repeat,
    aten.stack,
    aten.narrow,
    aten.index_select,
    aten._adaptive_avg_pool2d,
    aten._adaptive_avg_pool2d_backward,
    aten.avg_pool2d_backward,
    aten.max_pool2d_with_indices_backward,
    aten.threshold_backward,
    aten.sigmoid_backward,
    aten.tanh_backward,
    aten.var_mean,
    aten.leaky_relu,
    # Lowered as slice_scatter, or folded into an index_put by scatter_rewrite.py.
    aten.select_scatter,
    aten.slice_scatter,
]

# Training batch norm (what AOT's functionalized training graphs hold) and its backward: kept
# whole in training graphs, lowered to the eager kernels (kernels::batch_norm_forward/backward).
_KEEP_TRAINING = [
    aten._native_batch_norm_legit_functional,
    aten.native_batch_norm_backward,
]

# Decomposed into ops the compiler lowers.
_ADD = [
    aten.native_batch_norm,
    aten.native_batch_norm_backward,
    aten._native_batch_norm_legit,
    aten._native_batch_norm_legit_no_training,
    aten._native_batch_norm_legit_functional,
    aten.embedding_dense_backward,
    aten.nll_loss_forward,
    aten.nll_loss_backward,
    aten.nll_loss2d_forward,
    aten.nll_loss2d_backward,
    aten.mse_loss,
    aten.mse_loss_backward,
    aten.rms_norm,
    aten._fused_rms_norm,
    aten.linalg_vector_norm,
    aten._scaled_dot_product_flash_attention_for_cpu,
    aten.hardtanh,
    aten.hardsigmoid,
    aten.hardswish,
    aten.elu,
    aten.leaky_relu_backward,
    aten.addcmul,
    aten.addcdiv,
    aten.lerp,
    aten.binary_cross_entropy,
    aten.binary_cross_entropy_backward,
    aten.tril,
    aten.triu,
]


@functools.lru_cache(maxsize=2)
def decomposition_table(training: bool) -> dict:
    table = dict(core_aten_decompositions())
    extra = _ADD if training else [op for op in _ADD if op is not aten._scaled_dot_product_flash_attention_for_cpu]
    table.update(get_decompositions(extra))
    for op in _KEEP + (_KEEP_TRAINING if training else []):
        for overload in op.overloads():
            table.pop(getattr(op, overload), None)
    return table
