"""NKI kernels as PyTorch operators: wrap_nki / nki_op in eager mode on the neuron device, as a
single node of torch.compile graphs (aot_eager and eager backends until the neuron backend
lands), fake-tensor shape propagation, in-place operators and autograd."""

from __future__ import annotations

import nki
import nki.isa as nisa
import nki.language as nl
import numpy as np
import pytest
import torch
from torch_neuronx import nki_op, wrap_nki


@nki.jit
def add_kernel(a, b):
    c = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(c, value=nl.add(nl.load(a), nl.load(b)))
    return c


@nki.jit
def scale_rows(x, factor):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    rows = x.shape[0] // nl.num_programs(0)
    pid = nl.program_id(0)
    t = nl.load(x[pid * rows : (pid + 1) * rows, :])
    nl.store(out[pid * rows : (pid + 1) * rows, :], nl.multiply(t, factor))
    return out


@nki.jit
def mul_into(a, b, out):
    """Writes a * b into the caller's `out` (an in/out argument)."""
    nl.store(out, nl.multiply(nl.load(a), nl.load(b)))


_add = wrap_nki(add_kernel)


@nki_op("nki_test::add", mutates_args={})
def nki_add(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return _add(a, b)


@nki_op("nki_test::mul_into", mutates_args={"out"})
def nki_mul_into(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> None:
    wrap_nki(mul_into)(a, b, out)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_nki_op_eager_on_neuron(dtype):
    a = torch.randn(128, 64, device="neuron", dtype=dtype)
    b = torch.randn(128, 64, device="neuron", dtype=dtype)
    c = nki_add(a, b)
    assert c.device == a.device and c.dtype == dtype and c.shape == a.shape
    torch.testing.assert_close(c.cpu(), a.cpu() + b.cpu(), rtol=0, atol=0)


def test_lab_shape_1d():
    a = torch.randn(128, device="neuron")
    b = torch.randn(128, device="neuron")
    c = nki_add(a, b)
    assert c.shape == torch.Size([128]) and str(c.device) == "neuron:0"
    torch.testing.assert_close(c.cpu(), a.cpu() + b.cpu(), rtol=0, atol=0)


def _graphs_for(backend_name):
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return torch._dynamo.lookup_backend(backend_name)(gm, example_inputs)

    return graphs, backend


@pytest.mark.parametrize("backend_name", ["aot_eager", "eager"])
def test_nki_op_is_one_node_in_compiled_graphs(backend_name):
    torch._dynamo.reset()
    graphs, backend = _graphs_for(backend_name)

    @torch.compile(backend=backend, fullgraph=True)
    def f(x, y):
        return nki_add(x * 2, y) + 1

    a = torch.randn(128, device="neuron")
    b = torch.randn(128, device="neuron")
    out = f(a, b)
    torch.testing.assert_close(out.cpu(), a.cpu() * 2 + b.cpu() + 1)
    assert len(graphs) == 1
    calls = [n for n in graphs[0].graph.nodes if n.op == "call_function" and "nki_test" in str(n.target)]
    assert len(calls) == 1 and "nki_test.add" in str(calls[0].target)


def test_fake_tensor_propagation_does_not_run_the_kernel():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        a = torch.empty(128, 32, device="neuron")
        b = torch.empty(128, 32, device="neuron")
        c = torch.ops.nki_test.add(a, b)
    assert c.shape == (128, 32) and c.device.type == "neuron"


def test_in_place_operator_mutates_its_argument():
    a = torch.randn(64, 32, device="neuron")
    b = torch.randn(64, 32, device="neuron")
    out = torch.zeros(64, 32, device="neuron")
    nki_mul_into(a, b, out)
    torch.testing.assert_close(out.cpu(), a.cpu() * b.cpu(), rtol=0, atol=0)

    torch._dynamo.reset()

    @torch.compile(backend="aot_eager", fullgraph=True)
    def f(x, y, o):
        nki_mul_into(x, y, o)
        return o + 0

    out2 = torch.zeros(64, 32, device="neuron")
    r = f(a, b, out2)
    torch.testing.assert_close(r.cpu(), a.cpu() * b.cpu(), rtol=0, atol=0)
    torch.testing.assert_close(out2.cpu(), a.cpu() * b.cpu(), rtol=0, atol=0)


def test_in_place_kernel_argument_non_contiguous_is_written_back():
    a = torch.randn(32, 16)
    out = torch.zeros(16, 32).t()  # non-contiguous view
    mul_into(a, a, out)
    torch.testing.assert_close(out, a * a, rtol=0, atol=0)


def test_wrap_nki_grid():
    x = torch.randn(128, 32, device="neuron")
    out = wrap_nki(scale_rows)[2](x, 2.0)
    torch.testing.assert_close(out.cpu(), x.cpu() * 2, rtol=0, atol=0)


def test_direct_kernel_call_inside_compile_graph_breaks_and_runs():
    torch._dynamo.reset()

    @torch.compile(backend="aot_eager")
    def f(x):
        return add_kernel(x, x) * 3

    x = torch.randn(128, 16, device="neuron")
    torch.testing.assert_close(f(x).cpu(), x.cpu() * 6)


@nki.jit
def square_kernel(x):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    nl.store(out, nl.multiply(t, t))
    return out


@nki.jit
def square_backward_kernel(x, grad):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    g = nl.load(grad)
    r = nl.ndarray(t.shape, nl.float32, buffer=nl.sbuf)
    nisa.scalar_tensor_tensor(dst=r, data=t, op0=nl.multiply, operand0=2.0, op1=nl.multiply, operand1=g)
    nl.store(out, r)
    return out


@nki_op("nki_test::square", mutates_args={})
def nki_square(x: torch.Tensor) -> torch.Tensor:
    return wrap_nki(square_kernel)(x)


@nki_op("nki_test::square_backward", mutates_args={})
def nki_square_backward(x: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    return wrap_nki(square_backward_kernel)(x, grad)


def _setup(ctx, inputs, output):
    (x,) = inputs
    ctx.save_for_backward(x)


def _backward(ctx, grad):
    (x,) = ctx.saved_tensors
    return nki_square_backward(x, grad.contiguous())


nki_square.register_autograd(_backward, setup_context=_setup)


def test_register_autograd_trains():
    torch.manual_seed(0)
    w = torch.randn(64, 32, device="neuron", requires_grad=True)
    target = torch.randn(64, 32, device="neuron")
    opt = torch.optim.SGD([w], lr=0.1)
    w_ref = w.detach().cpu().clone().requires_grad_(True)
    opt_ref = torch.optim.SGD([w_ref], lr=0.1)
    for _ in range(3):
        opt.zero_grad()
        loss = ((nki_square(w) - target) ** 2).mean()
        loss.backward()
        opt.step()
        opt_ref.zero_grad()
        loss_ref = ((w_ref * w_ref - target.cpu()) ** 2).mean()
        loss_ref.backward()
        opt_ref.step()
        torch.testing.assert_close(loss.detach().cpu(), loss_ref.detach(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(w.detach().cpu(), w_ref.detach(), rtol=1e-5, atol=1e-6)


def test_register_autograd_under_compile():
    torch._dynamo.reset()
    x = torch.randn(32, 16, device="neuron", requires_grad=True)

    @torch.compile(backend="aot_eager", fullgraph=True)
    def f(v):
        return nki_square(v).sum()

    f(x).backward()
    torch.testing.assert_close(x.grad.cpu(), 2 * x.detach().cpu(), rtol=1e-6, atol=1e-6)


def test_numpy_and_cpu_tensors_give_matching_types():
    a = np.random.randn(16, 8).astype(np.float32)
    assert isinstance(add_kernel(a, a), np.ndarray)
    t = torch.from_numpy(a)
    r = add_kernel(t, t)
    assert isinstance(r, torch.Tensor) and r.device.type == "cpu"
    with pytest.raises(ValueError, match="mix"):
        add_kernel(a, t)


def test_kernel_runs_on_the_current_stream():
    import torch_neuronx

    x = torch.randn(128, 64, device="neuron")
    torch.neuron.synchronize()
    s = torch.neuron.Stream()
    with torch.neuron.stream(s):
        torch_neuronx._C._debug_launch_sleep(0, 200)
        out = add_kernel(x, x)
    assert not s.query() and torch.neuron.default_stream().query()
    s.synchronize()
    torch.testing.assert_close(out.cpu(), 2 * x.cpu(), rtol=0, atol=0)
