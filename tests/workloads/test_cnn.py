"""A small CNN (conv / batch norm / ReLU / max pool / avg pool / linear) trained with SGD +
momentum on neuron and on CPU from the same seed; then an evaluation-mode forward (running
statistics).

Tolerance: fp32. The convolutions are im2col + MKL GEMM on neuron and oneDNN on CPU, so sums run
in other orders (~1e-6 relative per layer); batch norm divides by a batch standard deviation,
which can amplify that a little. 1e-4 relative / 1e-5 absolute over 4 steps.
"""

import torch
from torch import nn
from workload_helpers import assert_close_dicts, assert_no_fallback, grads, params, twin


def make_cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, stride=1, padding=1, bias=False),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.AvgPool2d(2),
        nn.Flatten(),
        nn.Linear(16 * 4 * 4, 10),
    )


def test_small_cnn_trains_like_cpu():
    torch.manual_seed(0)
    cpu = make_cnn()
    neuron = twin(cpu)
    X = torch.randn(8, 3, 16, 16)
    y = torch.randint(0, 10, (8,))
    Xn, yn = X.to("neuron"), y.to("neuron")
    crit = nn.CrossEntropyLoss()
    opt_c = torch.optim.SGD(cpu.parameters(), lr=0.05, momentum=0.9)
    opt_n = torch.optim.SGD(neuron.parameters(), lr=0.05, momentum=0.9)
    for step in range(4):
        out_c = cpu(X)
        loss_c = crit(out_c, y)
        opt_c.zero_grad()
        loss_c.backward()

        out_n = neuron(Xn)
        loss_n = crit(out_n, yn)
        opt_n.zero_grad()
        loss_n.backward()

        torch.testing.assert_close(out_n.detach().cpu(), out_c.detach(), rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(loss_n.cpu(), loss_c.detach(), rtol=1e-4, atol=1e-6)
        assert_close_dicts(grads(neuron), grads(cpu), rtol=1e-4, atol=1e-5, what=f"grad step {step}")
        opt_c.step()
        opt_n.step()
    # Running statistics (momentum updates) and parameters agree, and so does eval mode.
    assert_close_dicts(params(neuron), params(cpu), rtol=1e-4, atol=1e-5, what="state")
    cpu.eval()
    neuron.eval()
    with torch.no_grad():
        torch.testing.assert_close(neuron(Xn).cpu(), cpu(X), rtol=1e-4, atol=1e-5)
    assert_no_fallback()
