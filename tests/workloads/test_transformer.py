"""nn.TransformerEncoder (2 layers, batch_first, no dropout) with a linear head, trained with
AdamW on neuron and on CPU from the same seed. Dropout is 0 so that both devices compute the same
function (their random streams differ by design).

Tolerance: fp32; attention runs as the fused neuron kernel on one side and PyTorch's CPU flash
kernel on the other (other block sizes, so other summation orders): 2e-4 relative / 2e-5 absolute
for outputs, losses and gradients at every step. Parameters are compared to 2 * lr * steps:
AdamW moves a parameter by about lr per step whatever the size of its gradient, so for parameters
whose exact gradient is zero (the key biases: softmax ignores a per-row shift) the rounding noise
of either device decides the direction.
"""

import torch
import torch_neuronx
from torch import nn
from workload_helpers import assert_close_dicts, assert_no_fallback, grads, params, twin


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        layer = nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
        self.head = nn.Linear(32, 5)

    def forward(self, x, mask=None):
        return self.head(self.encoder(x, mask=mask, is_causal=mask is not None))


def test_transformer_encoder_adamw_trains_like_cpu():
    torch.manual_seed(0)
    cpu = Model()
    neuron = twin(cpu)
    X = torch.randn(4, 12, 32)
    y = torch.randint(0, 5, (4, 12))
    mask = nn.Transformer.generate_square_subsequent_mask(12)
    Xn, yn, maskn = X.to("neuron"), y.to("neuron"), mask.to("neuron")
    crit = nn.CrossEntropyLoss()
    opt_c = torch.optim.AdamW(cpu.parameters(), lr=1e-3)
    opt_n = torch.optim.AdamW(neuron.parameters(), lr=1e-3)
    for step in range(3):
        m_c, m_n = (mask, maskn) if step % 2 else (None, None)
        out_c = cpu(X, m_c)
        loss_c = crit(out_c.flatten(0, 1), y.flatten())
        opt_c.zero_grad()
        loss_c.backward()
        out_n = neuron(Xn, m_n)
        loss_n = crit(out_n.flatten(0, 1), yn.flatten())
        opt_n.zero_grad()
        loss_n.backward()
        torch.testing.assert_close(out_n.detach().cpu(), out_c.detach(), rtol=2e-4, atol=2e-5)
        torch.testing.assert_close(loss_n.cpu(), loss_c.detach(), rtol=2e-4, atol=1e-6)
        assert_close_dicts(grads(neuron), grads(cpu), rtol=2e-4, atol=2e-5, what=f"grad step {step}")
        opt_c.step()
        opt_n.step()
    assert_close_dicts(params(neuron), params(cpu), rtol=0, atol=2 * 1e-3 * 3, what="param")
    # Inference takes PyTorch's fused encoder-layer path (_transformer_encoder_layer_fwd), with a
    # key-padding mask; compared on identical weights.
    cpu.eval()
    ref = Model().eval()
    ref.load_state_dict(neuron.state_dict())
    neuron.eval()
    pad = torch.zeros(4, 12, dtype=torch.bool)
    pad[1, 9:] = True
    with torch.no_grad():
        out_n = neuron.head(neuron.encoder(Xn, src_key_padding_mask=pad.to("neuron")))
        out_c = ref.head(ref.encoder(X, src_key_padding_mask=pad))
    torch.testing.assert_close(out_n.cpu(), out_c, rtol=2e-4, atol=2e-5)
    assert "aten::_transformer_encoder_layer_fwd" in torch_neuronx.get_executed_ops()
    assert_no_fallback()
