"""The NKI Library on neuron-emu: optimized kernels written in NKI (``nki.language`` /
``nki.isa``), with the package layout and kernel signatures of aws-neuron/nki-library.

    nkilib.core          production kernels: mlp (mlp_tkg / mlp_cte), rmsnorm,
                         rmsnorm_quant_kernel, cumsum, RoPE / rope_hf, qkv,
                         attention_cte / attention_tkg, output_projection_cte / _tkg;
                         utils (kernel_assert, TiledRange, TensorView, SbufManager, ...)
    nkilib.experimental  fused kernels: transformer_tkg (multi-layer decode megakernel),
                         attention_block_tkg; loss: cross_entropy_forward / _backward

Every kernel runs on the NeuronCore model (every hardware rule checked) and has a PyTorch
reference implementation next to it (``*_torch.py``). Signatures follow the library's (see docs/nkilib.md);
passing arguments by keyword keeps code working across library releases. See docs/nkilib.md.
"""

__version__ = "0.1.0+neuronemu.1"
