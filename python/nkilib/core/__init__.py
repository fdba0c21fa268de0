"""Production kernels of the NKI Library. Import them from their modules, as with the
real library::

    from nkilib.core.mlp.mlp import mlp
    from nkilib.core.subkernels.rmsnorm_tkg import rmsnorm_tkg
    from nkilib.core.rmsnorm.rmsnorm import rmsnorm
    from nkilib.core.embeddings.rope import RoPE
    from nkilib.core.embeddings.rope_hf import rope_hf
    from nkilib.core.qkv.qkv import qkv
    from nkilib.core.attention.attention_cte import attention_cte
    from nkilib.core.attention.attention_tkg import attention_tkg
    from nkilib.core.output_projection.output_projection_cte import output_projection_cte
    from nkilib.core.output_projection.output_projection_tkg import output_projection_tkg
    from nkilib.core.cumsum import cumsum
    from nkilib.core.rmsnorm.rmsnorm_quant import rmsnorm_quant_kernel
"""
