"""The 64-bit dtype contract: a one-time warning per dtype through the
`torch_neuronx.python_ops.dtype_autocast` logger when an int64/float64 tensor reaches a neuron
kernel (native or CPU fallback), and NEURON_EMU_STRICT_DTYPES=1 errors for values that 32 bits
cannot hold. Each case runs in a fresh interpreter because the warning is once per process."""

from __future__ import annotations

import logging

INT64_MSG = (
    "Neuron backend does not support int64. Automatically casting to int32. Consider using int32 "
    "directly for better performance until native int64 support is added."
)
FLOAT64_MSG = (
    "Neuron backend does not support float64. Automatically casting to float32. Consider using "
    "float32 directly for better performance until native float64 support is added."
)
PREFIX = "WARNING:torch_neuronx.python_ops.dtype_autocast:"


def test_message_text():
    from torch_neuronx.python_ops import dtype_autocast

    assert dtype_autocast.message("int64") == INT64_MSG
    assert dtype_autocast.message("float64") == FLOAT64_MSG
    assert dtype_autocast.logger.name == "torch_neuronx.python_ops.dtype_autocast"


def test_warns_once_per_dtype_native_ops(py):
    r = py(
        """
        import torch
        x = torch.arange(10, dtype=torch.int32).to('neuron')
        y = x * 2 + 1                        # 32-bit: no warning
        torch.neuron.synchronize()
        print('--- 32-bit done', flush=True)
        a = torch.ones(4, dtype=torch.int64, device='neuron')
        for _ in range(3):
            b = a + a                         # int64: one warning in total
        f = torch.ones(4, dtype=torch.float64, device='neuron').sum()  # float64: one warning
        g = torch.ones(4, dtype=torch.float64, device='neuron') * 3
        torch.neuron.synchronize()
        print(b.cpu().tolist(), f.item(), flush=True)
        """
    )
    assert r.returncode == 0, r.stderr
    lines = [line for line in r.stderr.splitlines() if "dtype_autocast" in line]
    assert lines == [PREFIX + INT64_MSG, PREFIX + FLOAT64_MSG], r.stderr
    assert "[2, 2, 2, 2] 4.0" in r.stdout


def test_warning_goes_through_logging(py):
    r = py(
        """
        import logging, torch
        records = []
        class H(logging.Handler):
            def emit(self, rec):
                records.append((rec.name, rec.levelno, rec.getMessage()))
        logging.getLogger('torch_neuronx.python_ops.dtype_autocast').addHandler(H())
        torch.ones(3, dtype=torch.int64, device='neuron').add_(1)
        torch.ones(3, dtype=torch.int64, device='neuron').add_(1)
        print(records)
        """
    )
    assert r.returncode == 0, r.stderr
    assert f"[('torch_neuronx.python_ops.dtype_autocast', {logging.WARNING}, '{INT64_MSG}')]" in r.stdout


def test_fallback_ops_warn_too(py):
    r = py(
        """
        import torch, torch_neuronx
        x = torch.tensor([3, 1, 2], dtype=torch.int64).to('neuron')
        torch_neuronx.clear_op_tracking()
        s = torch.ops.aten.kthvalue(x, 1)   # no neuron kernel: CPU fallback
        print(torch_neuronx.get_fallback_ops())
        """
    )
    assert r.returncode == 0, r.stderr
    assert "aten::kthvalue" in r.stdout
    assert (PREFIX + INT64_MSG) in r.stderr


def test_strict_mode_rejects_out_of_range_values(py, tmp_path):
    env = {"NEURON_EMU_STRICT_DTYPES": "1"}
    ok = py(
        """
        import torch
        a = torch.tensor([1, -5, 2**31 - 1], dtype=torch.int64, device='neuron')
        print((a + 0).cpu().tolist())
        d = torch.tensor([0.5, -3e38, 1e-30], dtype=torch.float64, device='neuron')
        print((d * 1).cpu().tolist())
        """,
        env=env,
    )
    assert ok.returncode == 0, ok.stderr
    # A value that does not fit fails where it enters the device: the copy (.to('neuron'),
    # torch.tensor(..., device='neuron')), not only the first kernel that reads it.
    for create in (
        "a = torch.tensor([1, 2**40], dtype=torch.int64).to('neuron')",
        "a = torch.tensor([1, 2**40], dtype=torch.int64, device='neuron')",
    ):
        bad_int = py(f"import torch\n{create}\nprint('CREATED')\n", env=env)
        assert bad_int.returncode != 0 and "CREATED" not in bad_int.stdout
        assert "copy to neuron (tensor.to('neuron'), copy_): int64 value 1099511627776 does not fit in int32" in (
            bad_int.stderr
        ), bad_int.stderr
    bad_f64 = py("import torch\nd = torch.tensor([1e300], dtype=torch.float64).to('neuron')\n", env=env)
    assert bad_f64.returncode != 0 and "copy to neuron" in bad_f64.stderr and "overflows float32" in bad_f64.stderr
    overflow = py(
        """
        import torch
        a = torch.tensor([2**30], dtype=torch.int64, device='neuron')
        b = a * 4           # the result leaves the int32 range
        torch.neuron.synchronize()
        """,
        env=env,
    )
    assert overflow.returncode != 0 and "aten::mul.Tensor" in overflow.stderr
    bad_float = py(
        """
        import torch
        d = torch.tensor([1e30, 1e30], dtype=torch.float64, device='neuron')
        s = (d * 1e10).sum()   # 1e40 leaves the float32 range inside the device
        torch.neuron.synchronize()
        """,
        env=env,
    )
    assert bad_float.returncode != 0
    assert "overflows float32" in bad_float.stderr and "aten::mul" in bad_float.stderr
    tiny = py(
        """
        import torch
        d = torch.tensor([1e-30], dtype=torch.float64, device='neuron')
        (d * 1e-20).cpu()
        """,
        env=env,
    )
    assert tiny.returncode != 0 and "precision" in tiny.stderr
    # Compiled graphs compute 64-bit values exactly and do not check them (docs/eager-kernels.md):
    # the out-of-range result reaches the CPU fallback of the next eager op, which does.
    fb = py(
        """
        import torch
        x = torch.tensor([3, 2**20], dtype=torch.int64).to('neuron')
        y = torch.compile(lambda t: t * 2**20, backend='neuron')(x)
        print('COMPILED', y.cpu().tolist())
        torch.ops.aten.kthvalue(y, 1)
        """,
        env=dict(env, TORCH_NEURONX_NEFF_CACHE_DIR=str(tmp_path / "neff")),
    )
    assert "COMPILED [3145728, 1099511627776]" in fb.stdout, fb.stderr
    assert fb.returncode != 0 and "aten::kthvalue" in fb.stderr and "int32" in fb.stderr


def test_no_warning_without_64bit_tensors(py):
    r = py(
        """
        import torch
        x = torch.randn(8, device='neuron')
        y = (x * 0.5 + 2).sum()   # Python floats are float64 CPU scalars: they do not count
        print(y.item())
        """
    )
    assert r.returncode == 0, r.stderr
    assert "dtype_autocast" not in r.stderr
