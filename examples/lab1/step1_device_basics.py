"""Lab 1, Step 1: Device & Tensor Basics — the lab guide's interpreter session as a script.

Run: python examples/lab1/step1_device_basics.py   (no import other than torch is needed)
"""

import torch

# CPU tensor
cpu_tensor = torch.randn(3, 3)
print(cpu_tensor.device)

# Move it to the Neuron device
neuron_tensor = cpu_tensor.to("neuron")
print(neuron_tensor.device)

# Compute on the Neuron device directly (no trip back to the CPU)
result = neuron_tensor * 2 + 1
print(result)

# Device-agnostic code: works on GPU and Neuron alike
device = torch.accelerator.current_accelerator()
print(device)

portable_tensor = torch.randn(3, 3, device=device)
print(portable_tensor.device)
