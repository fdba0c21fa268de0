import pytest
import torch


def test_oom_message_names_device_and_sizes(py):
    r = py(
        """
        import torch
        a = torch.empty(int(0.75 * 2**30), dtype=torch.uint8, device='neuron:1')
        try:
            torch.empty(2**30, dtype=torch.uint8, device='neuron:1')
        except torch.OutOfMemoryError as e:
            print(str(e).splitlines()[0])
            print(torch.neuron.memory_stats(1)['num_ooms'])
        else:
            raise SystemExit('no OOM')
        """,
        env={"NEURON_EMU_HBM_GB": "1"},
    )
    assert r.returncode == 0, r.stderr
    first, ooms = r.stdout.strip().splitlines()
    assert first.startswith("neuron:1 out of HBM memory: tried to allocate 1.00 GiB; 768.00 MiB of 1.00 GiB allocated")
    assert ooms == "1"


def test_cached_block_reuse_and_stats():
    torch.neuron.synchronize()
    torch.neuron.empty_cache()
    torch.neuron.reset_peak_memory_stats()
    base = torch.neuron.memory_allocated()
    x = torch.empty(1 << 20, device="neuron")  # 4 MiB
    ptr = x.data_ptr()
    assert torch.neuron.memory_allocated() - base >= 4 << 20
    assert torch.neuron.max_memory_allocated() >= torch.neuron.memory_allocated()
    del x
    assert torch.neuron.memory_allocated() == base
    assert torch.neuron.memory_reserved() >= 4 << 20  # cached, not returned
    y = torch.empty(1 << 20, device="neuron")
    assert y.data_ptr() == ptr  # same block reused on the same stream
    del y
    torch.neuron.empty_cache()
    stats = torch.neuron.memory_stats()
    assert stats["allocated_bytes.all.current"] == base
    assert "reserved_bytes.all.peak" in stats and stats["num_ooms"] == 0
    free, total = torch.neuron.mem_get_info()
    assert total == 24 * 2**30 and 0 < free <= total
    summary = torch.neuron.memory_summary()
    assert "neuron:0 memory summary" in summary and "Allocated memory" in summary


def test_accelerator_memory_api():
    x = torch.empty(1000, device="neuron")
    assert torch.accelerator.memory_allocated(0) >= 4000
    del x


def test_pin_memory():
    x = torch.randn(10)
    assert not x.is_pinned()
    p = x.pin_memory()
    assert p.is_pinned() and torch.equal(p, x)
    assert p[3:].is_pinned()


def test_bad_env_is_reported(py):
    r = py("import torch; torch.zeros(1, device='neuron')", env={"NEURON_RT_VISIBLE_CORES": "9"})
    assert r.returncode != 0
    assert "NEURON_RT_VISIBLE_CORES=9" in r.stderr


@pytest.mark.parametrize("var,value,count", [("NEURON_RT_VISIBLE_CORES", "1-3", 3), ("NEURON_RT_NUM_CORES", "2", 2),
                                             ("NEURON_LOGICAL_NC_CONFIG", "1", 8)])
def test_visible_core_env(py, var, value, count):
    r = py("import torch; print(torch.neuron.device_count())", env={var: value})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(count)
