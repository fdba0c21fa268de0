"""torch.compile(backend="neuron") on Hugging Face causal LMs as users run them: Llama, Qwen3
and GPT-2 with their default DynamicCache (use_cache=True) in inference and training, and
model.generate() with a compiled forward (dynamic and static cache) giving eager's ids.

Models are tiny random ones (one or two layers, hidden size 64). Reference: the same model in
eager mode on the CPU. Tolerances: fp32 throughout; the compiled graph fuses and reorders
reductions (a few ulp), so logits agree to 1e-5 absolute and gradients to 1e-5.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch_neuronx  # noqa: F401

transformers = pytest.importorskip("transformers")


def _model(arch: str, layers: int = 2):
    torch.manual_seed(0)
    if arch == "llama":
        cfg = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
                                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
        return transformers.LlamaForCausalLM(cfg)
    if arch == "qwen3":
        cfg = transformers.Qwen3Config(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
                                       num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                       max_position_embeddings=64)
        return transformers.Qwen3ForCausalLM(cfg)
    cfg = transformers.GPT2Config(vocab_size=128, n_embd=64, n_layer=layers, n_head=4, n_positions=64,
                                  bos_token_id=None, eos_token_id=None, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    return transformers.GPT2LMHeadModel(cfg)


def _ids(n: int = 8):
    torch.manual_seed(1)
    return torch.randint(0, 128, (1, n))


@pytest.mark.parametrize("arch", ["llama", "qwen3", "gpt2"])
def test_forward_with_the_default_dynamic_cache(arch, fresh_compile):
    model = _model(arch).eval()
    ids = _ids()
    with torch.no_grad():
        want = model(ids)
    assert want.past_key_values is not None  # use_cache=True is the default
    m = model.to("neuron")
    with torch.no_grad():
        got = torch.compile(m, backend="neuron")(ids.to("neuron"))
    torch.testing.assert_close(got.logits.cpu(), want.logits, rtol=1e-5, atol=1e-5)
    # The cache the compiled forward returns is the eager one.
    k_got = got.past_key_values.layers[0].keys.cpu()
    torch.testing.assert_close(k_got, want.past_key_values.layers[0].keys, rtol=1e-5, atol=1e-5)
    assert torch.neuron.get_dynamo_metrics()["fallback_ops"] == {}


@pytest.mark.parametrize("arch", ["llama", "qwen3", "gpt2"])
def test_training_step_with_the_default_cache(arch, fresh_compile):
    ref = _model(arch, layers=1).train()
    model = copy.deepcopy(ref).to("neuron")
    ids = _ids()
    out = torch.compile(model, backend="neuron")(ids.to("neuron"), labels=ids.to("neuron"))
    out.loss.backward()
    want = ref(ids, labels=ids)
    want.loss.backward()
    assert out.loss.item() == pytest.approx(want.loss.item(), rel=1e-5)
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=1e-4, atol=1e-5, msg=name)
    m = torch.neuron.get_dynamo_metrics()
    assert m["aot_graphs"]["backward"] >= 1
    assert m["fallback_ops"] == {}  # attention forward with statistics and its backward compiled


@pytest.mark.parametrize("cache", ["dynamic", "static"])
def test_generate_with_a_compiled_forward_gives_eager_ids(cache, fresh_compile):
    model = _model("llama", layers=1).eval()
    ids = _ids()
    kw = {"max_new_tokens": 8, "do_sample": False, "pad_token_id": 0}
    if cache == "static":
        kw["cache_implementation"] = "static"
    want = model.generate(ids, **kw)
    m = model.to("neuron")
    m.forward = torch.compile(m.forward, backend="neuron")
    got = m.generate(ids.to("neuron"), **kw).cpu()
    assert got.tolist() == want.tolist()
    assert torch.neuron.get_dynamo_metrics()["dynamo_graphs"] >= 1


def test_tensors_created_while_tracing_are_constants(fresh_compile):
    """A real neuron tensor made inside the traced code (HF's empty cache placeholder is one)
    reaches the graph as an attribute, not a fake tensor."""

    def f(x):
        return x + torch.tensor([1.0, 2.0, 3.0], device="neuron")

    x = torch.randn(2, 3)
    got = torch.compile(f, backend="neuron")(x.to("neuron")).cpu()
    torch.testing.assert_close(got, x + torch.tensor([1.0, 2.0, 3.0]), rtol=0, atol=0)
    assert torch.neuron.get_dynamo_metrics()["graphs_compiled"] == 1
