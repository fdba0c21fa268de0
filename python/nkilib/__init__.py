"""The NKI Library on neuron-emu: optimized kernels written in NKI (``nki.language`` /
``nki.isa``), with the package layout and kernel signatures of aws-neuron/nki-library.

    nkilib.core          production kernels: mlp, rmsnorm, RoPE / rope_hf, qkv,
                         attention_cte / attention_tkg, output_projection_cte / _tkg
    nkilib.experimental  fused kernels: transformer_tkg (multi-layer decode megakernel),
                         attention_block_tkg

Every kernel runs on the NeuronCore model (every hardware rule checked) and has a PyTorch
reference implementation next to it (``*_torch.py``). Pass arguments by keyword: positional
orders change between library releases. See docs/nkilib.md.
"""

__version__ = "0.1.0+neuronemu.1"
