"""PyTorch reference of nkilib.core.cumsum (fp32 accumulation, rounded to the input dtype)."""

import torch


def cumsum_torch_ref(x: torch.Tensor, axis: int = -1) -> dict:
    return {"output_0": torch.cumsum(x.float(), dim=axis).to(x.dtype)}
