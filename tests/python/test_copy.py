"""Host <-> device and device <-> device copies: every dtype, strides, broadcasting, casts."""

import pytest
import torch

DTYPES = [
    torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
    torch.uint16, torch.uint32, torch.uint64,
    torch.float16, torch.bfloat16, torch.float32, torch.float64,
    torch.complex64, torch.complex128,
    torch.float8_e4m3fn, torch.float8_e5m2,
]


def sample(dtype, shape=(5, 7)):
    g = torch.Generator().manual_seed(0)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype in (torch.uint16, torch.uint32, torch.uint64):
        return torch.randint(0, 1000, shape, generator=g).to(dtype)
    if dtype.is_floating_point or dtype.is_complex:
        return (torch.randn(shape, generator=g, dtype=torch.complex64 if dtype.is_complex else torch.float32) * 3).to(dtype)
    info = torch.iinfo(dtype)
    return torch.randint(max(info.min, -1000), min(info.max, 1000), shape, generator=g).to(dtype)


def same(a, b):
    """Bit-exact equality (also for float8 and NaN-free floats)."""
    assert a.dtype == b.dtype and a.shape == b.shape
    assert torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_round_trip_every_dtype(dtype):
    x = sample(dtype)
    d = x.to("neuron")
    assert d.device.type == "neuron" and d.dtype == dtype
    same(d.cpu(), x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.complex64, torch.bool], ids=str)
def test_non_contiguous_and_broadcast_views(dtype):
    x = sample(dtype, (6, 8))
    d = x.to("neuron")
    # transposed, sliced with steps, and expanded (stride-0) views on the device
    same(d.t().cpu(), x.t())
    same(d[1::2, ::3].cpu(), x[1::2, ::3])
    same(d[:, 2:3].expand(6, 5).cpu(), x[:, 2:3].expand(6, 5))
    # non-contiguous host sources
    same(x.t().to("neuron").cpu(), x.t().contiguous())
    same(x[:, :1].expand(6, 4).to("neuron").cpu(), x[:, :1].expand(6, 4).contiguous())
    # copy_ into a strided device destination, with a broadcasting source
    dst = torch.zeros(6, 8, dtype=dtype, device="neuron")
    dst[::2, 1::2].copy_(x[0, :4])
    ref = torch.zeros(6, 8, dtype=dtype)
    ref[::2, 1::2].copy_(x[0, :4])
    same(dst.cpu(), ref)


@pytest.mark.parametrize(
    "src,dst",
    [(torch.float32, torch.bfloat16), (torch.bfloat16, torch.float32), (torch.float32, torch.int32),
     (torch.int64, torch.float16), (torch.float64, torch.float32), (torch.complex64, torch.complex128),
     (torch.float32, torch.bool), (torch.float32, torch.float8_e4m3fn), (torch.float8_e5m2, torch.float32),
     (torch.float32, torch.uint8)],
    ids=str,
)
def test_dtype_conversion_matches_cpu(src, dst):
    x = sample(src, (4, 9))
    if dst == torch.uint8:
        x = x.abs()
    d = x.to("neuron")
    same(d.to(dst).cpu(), x.to(dst))  # device-side cast
    same(x.to("neuron", dtype=dst).cpu(), x.to(dst))  # cast during host->device copy
    out = torch.empty(4, 9, dtype=dst)
    out.copy_(d)  # cast during device->host copy
    same(out, x.to(dst))


def test_device_to_device_across_cores():
    x = torch.randn(33, 17)
    a = x.to("neuron:0")
    b = a.to("neuron:1")
    c = b.t().to("neuron:3")
    assert b.device.index == 1 and c.device.index == 3
    assert torch.equal(b.cpu(), x) and torch.equal(c.cpu(), x.t())


def test_large_copy_parallel_path():
    x = torch.randn(1 << 20)
    assert torch.equal(x.to("neuron").cpu(), x)
    xt = torch.randn(1024, 1024).t()
    assert torch.equal(xt.to("neuron").cpu(), xt)


def test_non_blocking_pinned_round_trip():
    x = torch.randn(1000).pin_memory()
    assert x.is_pinned()
    d = x.to("neuron", non_blocking=True)
    host = torch.empty(1000).pin_memory()
    host.copy_(d, non_blocking=True)
    torch.neuron.synchronize()
    assert torch.equal(host, x)


def test_pageable_non_blocking_is_safe():
    x = torch.randn(100)
    d = x.to("neuron", non_blocking=True)
    x.zero_()  # pageable copies complete before returning
    assert not torch.equal(d.cpu(), x)


def test_scalar_and_fill():
    t = torch.empty(3, 4, device="neuron")
    t.fill_(2.5)
    assert torch.equal(t.cpu(), torch.full((3, 4), 2.5))
    t[1].zero_()
    assert t[1].sum().item() == 0
    assert t[0, 0].item() == 2.5
    i = torch.empty(5, dtype=torch.int64, device="neuron").fill_(2**40)
    assert i[3].item() == 2**40
    c = torch.empty(2, dtype=torch.complex64, device="neuron").fill_(1 + 2j)
    assert c[1].item() == 1 + 2j
    v = torch.tensor(7.0).to("neuron")
    t.fill_(v)
    assert torch.equal(t.cpu(), torch.full((3, 4), 7.0))


def test_resize_and_set():
    t = torch.arange(6, dtype=torch.float32).to("neuron")
    t.resize_(10)
    assert t.shape == (10,) and torch.equal(t[:6].cpu(), torch.arange(6, dtype=torch.float32))
    u = torch.empty(0, device="neuron")
    u.set_(t)
    assert u.data_ptr() == t.data_ptr() and u.shape == t.shape
    w = torch.empty(0, device="neuron")
    w.set_(t.untyped_storage(), 2, (2, 2), (2, 1))
    assert torch.equal(w.cpu(), torch.tensor([[2.0, 3.0], [4.0, 5.0]]))


def test_partial_overlap_copy_is_rejected():
    t = torch.arange(10.0).to("neuron")
    with pytest.raises(RuntimeError, match="single memory location"):
        t[1:].copy_(t[:-1])


def test_copies_apply_conjugate_and_negative_bits():
    # Lazy conj()/neg views on either side of a copy (these used to recurse until the stack
    # overflowed: the Conjugate fallback clones, and clone copies).
    x = torch.randn(5, dtype=torch.complex64)
    n = x.to("neuron")
    assert torch.equal(n.conj().cpu(), x.conj())
    assert torch.equal(n.conj().clone().cpu(), x.conj().resolve_conj())
    assert torch.equal(x.conj().to("neuron").cpu(), x.conj().resolve_conj())
    d = torch.empty(5, dtype=torch.complex64, device="neuron")
    d.conj().copy_(x)
    assert torch.equal(d.cpu(), x.conj())
    e = torch.empty(5, dtype=torch.complex64)
    e.conj().copy_(n)
    assert torch.equal(e, x.conj())
    r = torch.randn(4)
    assert torch.equal(r.to("neuron")._neg_view().cpu(), -r)
    f = torch.empty(4, device="neuron")
    f._neg_view().copy_(r)
    assert torch.equal(f.cpu(), -r)
    assert torch.equal(torch.fft.ifft(n).cpu(), torch.fft.ifft(x))
