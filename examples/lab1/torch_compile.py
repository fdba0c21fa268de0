"""Lab 1 Step 3: torch.compile with the Neuron backend.

The whole forward becomes one NEFF (compiled once, then served from the NEFF cache at
TORCH_NEURONX_NEFF_CACHE_DIR, default /tmp/neff_cache) and runs as one launch on the device.
"""

import torch
from torch import nn


class SimpleModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear1 = nn.Linear(10, 20)
        self.relu = nn.ReLU()
        self.linear2 = nn.Linear(20, 5)

    def forward(self, x):
        return self.linear2(self.relu(self.linear1(x)))


if __name__ == "__main__":  # compile_speedup.py imports SimpleModel
    device = torch.device("neuron")
    model = SimpleModel().to(device)
    compiled_model = torch.compile(model, backend="neuron")

    x = torch.randn(2, 10).to(device)
    with torch.no_grad():
        output = compiled_model(x)

    print(f"Input shape:  {x.shape}")
    print(f"Output shape: {output.shape}")
