"""Lab 1, Step 2: eager-mode training on the Neuron device.

Run: python examples/lab1/eager_mode.py

A standard PyTorch training loop; compared with GPU code, only the device line changes. Labels are
int32, as the lab guide asks (Neuron has no native int64).
"""

import torch
from torch import nn

torch.manual_seed(52590)  # fixes the data and the initial weights (the lab guide's run)

device = torch.device("neuron")
print(f"Using: {device}")

model = nn.Sequential(nn.Linear(10, 2)).to(device)
X = torch.randn(100, 10).to(device)
y = torch.randint(0, 2, (100,), dtype=torch.int32).to(device)

criterion = nn.CrossEntropyLoss()
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

for epoch in range(10):
    output = model(X)
    loss = criterion(output, y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    print(f"Epoch {epoch + 1}, Loss: {loss.item():.4f}")
