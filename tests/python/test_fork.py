import multiprocessing as mp

import torch


def _cpu_work(q):
    q.put(float(torch.ones(3).sum()))


def _device_work(q):
    try:
        torch.ones(3, device="neuron")
        q.put("no error")
    except RuntimeError as e:
        q.put(str(e))


def test_forked_child_without_device_use_works():
    torch.ones(2, device="neuron")  # runtime initialised in the parent
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_cpu_work, args=(q,))
    p.start()
    p.join(60)
    assert p.exitcode == 0
    assert q.get(timeout=5) == 3.0


def test_forked_child_touching_device_gets_spawn_hint():
    torch.ones(2, device="neuron")
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_device_work, args=(q,))
    p.start()
    p.join(60)
    msg = q.get(timeout=5)
    assert "forked subprocess" in msg and "'spawn' start method" in msg


def test_dataloader_workers_with_fork():
    ds = torch.utils.data.TensorDataset(torch.arange(16.0))
    dl = torch.utils.data.DataLoader(ds, batch_size=4, num_workers=2, multiprocessing_context="fork")
    total = sum(float(b[0].to("neuron").sum().item()) for b in dl)
    assert total == float(torch.arange(16.0).sum())
