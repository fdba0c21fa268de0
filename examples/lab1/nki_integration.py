"""Lab 1, Step 4: integrate an NKI kernel into PyTorch with the @nki_op pattern.

Run: python examples/lab1/nki_integration.py

An @nki.jit kernel adds two tensors; wrap_nki + @nki_op make it the custom operator
`lab1::nki_add`, which runs on the neuron device in eager mode and is one graph node inside
torch.compile(backend="neuron").
"""

import nki
import nki.language as nl
import torch
from torch_neuronx import nki_op, wrap_nki


@nki.jit
def nki_add_kernel(a_input, b_input):
    # a_input, b_input: 1-D tensors of up to 128 elements (one element per SBUF partition).
    c_output = nl.ndarray(a_input.shape, dtype=a_input.dtype, buffer=nl.shared_hbm)
    a_tile = nl.load(a_input)
    b_tile = nl.load(b_input)
    nl.store(c_output, value=nl.add(a_tile, b_tile))
    return c_output


add_kernel = wrap_nki(nki_add_kernel)


@nki_op("lab1::nki_add", mutates_args={})
def nki_add(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return add_kernel(a, b)


def main() -> None:
    device = torch.device("neuron")
    a = torch.randn(128, device=device)
    b = torch.randn(128, device=device)

    # Eager mode: the custom op runs the kernel on neuron:0.
    result = nki_add(a, b)
    torch.neuron.synchronize()
    print(f"Eager mode - NKI add result shape: {result.shape}, device: {result.device}")

    # Compiled mode: the op is a single node of the compiled graph.
    @torch.compile(backend="neuron")
    def add_twice(x, y):
        return nki_add(x * 2, y)

    result = add_twice(a, b)
    torch.neuron.synchronize()
    print(f"Compiled mode - NKI add result shape: {result.shape}, device: {result.device}")


if __name__ == "__main__":
    main()
