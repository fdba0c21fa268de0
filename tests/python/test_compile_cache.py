"""The NEFF cache across processes: a NEFF appears on disk, a second process loads it instead
of compiling, four processes compiling the same graph at once compile it once, and entries
that must not be trusted are rejected once and recompiled: truncated or corrupted files,
another graph's NEFF or frontend index entry under this graph's name, an index value that is
not a key, a directory in the way."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys

from repo_paths import REPO

SCRIPT = r"""
import json, os, sys, torch, torch_neuronx
torch.manual_seed(0)
act = {"relu": torch.nn.ReLU(), "tanh": torch.nn.Tanh()}[os.environ.get("TEST_ACT", "relu")]
model = torch.nn.Sequential(torch.nn.Linear(10, 20), act, torch.nn.Linear(20, 5)).to("neuron")
x = torch.randn(2, 10)
with torch.no_grad():
    out = torch.compile(model, backend="neuron")(x.to("neuron")).cpu()
    want = model.cpu()(x)
assert torch.allclose(out, want, rtol=1e-5, atol=1e-6), (out, want)
m = torch.neuron.get_dynamo_metrics()
print("METRICS " + json.dumps({k: v for k, v in m.items() if not isinstance(v, dict)}))
"""


def _run(cache_dir, extra_env=None, script=SCRIPT):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(REPO, "python") + os.pathsep + env.get("PYTHONPATH", "")
    env["TORCH_NEURONX_NEFF_CACHE_DIR"] = str(cache_dir)
    env.update(extra_env or {})
    return subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, cwd=REPO)


def _metrics(proc):
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    line = next(ln for ln in out.splitlines() if ln.startswith("METRICS "))
    return json.loads(line[len("METRICS "):]), err


def _neffs(cache_dir):
    return glob.glob(os.path.join(str(cache_dir), "*.neff"))


def test_lab1_example_prints_shapes_and_writes_a_neff(tmp_path):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(REPO, "python")
    env["TORCH_NEURONX_NEFF_CACHE_DIR"] = str(tmp_path)
    r = subprocess.run([sys.executable, os.path.join(REPO, "examples", "lab1", "torch_compile.py")], capture_output=True,
                       text=True, env=env, timeout=300, check=False)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.splitlines() == ["Input shape:  torch.Size([2, 10])", "Output shape: torch.Size([2, 5])"]
    assert "Warning" not in r.stderr, r.stderr
    assert len(_neffs(tmp_path)) == 1


def test_second_process_hits_the_disk_cache(tmp_path):
    m1, _ = _metrics(_run(tmp_path))
    assert m1["graphs_compiled"] == 1 and m1["cache_writes"] == 1
    # Warm start: the Dynamo-graph index leads straight to the NEFF (AOT is skipped).
    m2, _ = _metrics(_run(tmp_path))
    assert m2["graphs_compiled"] == 0
    assert m2["cache_hits_disk"] == 1 and m2["warm_starts"] == 1
    # Without the index the graph is traced again and its NEFF still comes from disk.
    for f in glob.glob(str(tmp_path / "frontend" / "*.entry")):
        os.remove(f)
    m3, _ = _metrics(_run(tmp_path))
    assert m3["graphs_compiled"] == 0 and m3["cache_hits_disk"] == 1 and m3["warm_starts"] == 0
    assert len(_neffs(tmp_path)) == 1


def test_four_processes_compile_the_same_graph_once(tmp_path):
    procs = [_run(tmp_path, {"TORCH_NEURONX_NEFF_CACHE_LOCK_TIMEOUT": "300"}) for _ in range(4)]
    ms = [_metrics(p)[0] for p in procs]
    assert sum(m["graphs_compiled"] for m in ms) == 1, ms
    assert sum(m["cache_hits_disk"] for m in ms) == 3, ms
    assert len(_neffs(tmp_path)) == 1
    assert not glob.glob(str(tmp_path / "*.tmp*"))  # no leftover partial writes


def _corrupt_and_rerun(tmp_path, mutate):
    _metrics(_run(tmp_path))
    [neff] = _neffs(tmp_path)
    with open(neff, "r+b") as f:
        mutate(f, os.path.getsize(neff))
    m, err = _metrics(_run(tmp_path))
    assert m["cache_corrupted"] == 1 and m["graphs_compiled"] == 1, m
    assert "NEFF cache entry rejected and recompiled" in err
    # The rewritten entry is valid again.
    m2, _ = _metrics(_run(tmp_path))
    assert m2["graphs_compiled"] == 0 and m2["cache_corrupted"] == 0
    return err


def test_corrupted_cache_entry_is_recompiled(tmp_path):
    def flip(f, size):
        f.seek(size // 2)
        b = f.read(1)
        f.seek(size // 2)
        f.write(bytes([b[0] ^ 0x40]))

    err = _corrupt_and_rerun(tmp_path, flip)
    assert "checksum mismatch" in err


def test_truncated_cache_entry_is_recompiled(tmp_path):
    err = _corrupt_and_rerun(tmp_path, lambda f, size: f.truncate(size - 100))
    assert "truncated" in err


def test_disabled_disk_cache_writes_nothing(tmp_path):
    m, _ = _metrics(_run(tmp_path, {"TORCH_NEURONX_DISABLE_NEFF_CACHE": "1"}))
    assert m["graphs_compiled"] == 1 and m["cache_writes"] == 0
    assert _neffs(tmp_path) == []


def _frontend_entries(cache_dir):
    return sorted(glob.glob(os.path.join(str(cache_dir), "frontend", "*")))


def _two_models(tmp_path):
    """The same I/O signature, different programs (ReLU vs Tanh), each in its own cache."""
    a, b = tmp_path / "a", tmp_path / "b"
    _metrics(_run(a))
    _metrics(_run(b, {"TEST_ACT": "tanh"}))
    return a, b


def test_another_graphs_neff_under_the_key_is_rejected(tmp_path):
    a, b = _two_models(tmp_path)
    [neff_a], [neff_b] = _neffs(a), _neffs(b)
    with open(neff_b, "rb") as src, open(neff_a, "wb") as dst:
        dst.write(src.read())
    # The script checks the result against eager: the foreign program must not run.
    m, err = _metrics(_run(a))
    assert m["cache_corrupted"] == 1 and m["graphs_compiled"] == 1, m
    assert "holds the NEFF of cache_key" in err, err[-2000:]
    m2, _ = _metrics(_run(a))
    assert m2["graphs_compiled"] == 0 and m2["cache_corrupted"] == 0, m2


def test_frontend_entry_of_another_graph_is_rejected(tmp_path):
    a, b = _two_models(tmp_path)
    [neff_b] = _neffs(b)
    [entry_a], [entry_b] = _frontend_entries(a), _frontend_entries(b)
    for src, dst in ((neff_b, os.path.join(a, os.path.basename(neff_b))), (entry_b, entry_a)):
        with open(src, "rb") as f, open(dst, "wb") as g:
            g.write(f.read())
    m, err = _metrics(_run(a))
    # Not a warm start from B's entry: A is traced again and its own NEFF loaded from disk.
    assert m["warm_starts"] == 0 and m["cache_corrupted"] == 1, m
    assert m["graphs_compiled"] == 0 and m["cache_hits_disk"] == 1, m
    assert "written for key" in err, err[-2000:]


LOAD_EVIL = r"""
import sys, torch, torch_neuronx
from torch_neuronx import _C
print("RESULT", _C._cc.load_cached(sys.argv[1]))
"""


def test_index_values_that_are_not_keys_name_no_file(tmp_path):
    cache, outside = tmp_path / "cache", tmp_path / "x"
    cache.mkdir()
    outside.mkdir()
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "python"), TORCH_NEURONX_NEFF_CACHE_DIR=str(cache))
    # <cache>/.locks/../../x/evil.lock and <cache>/../../x/evil.neff are outside the cache.
    r = subprocess.run([sys.executable, "-c", LOAD_EVIL, "../../x/evil"], capture_output=True, text=True, env=env,
                       cwd=REPO, timeout=300, check=False)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "RESULT None" in r.stdout
    assert list(outside.iterdir()) == []
    # An index entry (whole, sealed for its key) whose NEFF key is a path: rejected, the graph
    # compiles normally, nothing is created outside the cache directory.
    _metrics(_run(cache))
    [entry] = _frontend_entries(cache)
    k = os.path.basename(entry).split(".")[0]
    forge = r"""
import json, sys, torch, torch_neuronx
from torch_neuronx import _C
path, k = sys.argv[1], sys.argv[2]
entry = json.loads(_C._cc.cache_file_read(path, "frontend", k))
entry["neff_key"] = "../../x/evil"
assert _C._cc.cache_file_write(path, "frontend", k, json.dumps(entry).encode())
"""
    r = subprocess.run([sys.executable, "-c", forge, entry, k], capture_output=True, text=True, env=env, cwd=REPO,
                       timeout=300, check=False)
    assert r.returncode == 0, r.stderr[-3000:]
    m, err = _metrics(_run(cache))
    assert m["warm_starts"] == 0 and m["cache_corrupted"] == 1 and m["cache_hits_disk"] == 1, m
    assert "is not a cache key" in err
    assert list(outside.iterdir()) == []


def test_directory_at_the_entry_path_recompiles(tmp_path):
    _metrics(_run(tmp_path))
    [neff] = _neffs(tmp_path)
    os.remove(neff)
    os.makedirs(os.path.join(neff, "inner"))
    m, err = _metrics(_run(tmp_path))
    assert m["graphs_compiled"] == 1 and m["cache_corrupted"] == 1, m
    assert "is a directory" in err and "could not write the NEFF cache entry" in err, err[-2000:]
    assert os.path.isdir(os.path.join(neff, "inner"))


def _build_id(dirs, tmp_path):
    out = tmp_path / "build_id.h"
    subprocess.run(["cmake", "-DSRC_DIRS=" + ";".join(str(d) for d in dirs), f"-DOUT={out}", "-P",
                    os.path.join(REPO, "csrc", "compiler", "build_id.cmake")], check=True, capture_output=True)
    return out.read_text().split('"')[1]


def test_neff_build_id_covers_every_layer_a_neff_embeds(tmp_path):
    """A NEFF embeds serialized NKI programs (csrc/nki) and names kernels and runtime features, so
    the build id in every NEFF and frontend cache key hashes those layers too: a change to the
    NKI program format must not let an older NEFF be loaded (it failed as "the plan binds N HBM
    tensors"). Two checkouts of the same sources share one id."""
    def tree(root, nki_text):
        for layer, text in (("compiler", "int a;"), ("nki", nki_text), ("kernels", "int k;"), ("runtime", "int r;")):
            (root / layer).mkdir(parents=True)
            (root / layer / "x.cpp").write_text(text)
        return [root / n for n in ("compiler", "nki", "kernels", "runtime")]

    a = _build_id(tree(tmp_path / "a", "int program_format = 1;"), tmp_path)
    b = _build_id(tree(tmp_path / "b", "int program_format = 1;"), tmp_path)
    c = _build_id(tree(tmp_path / "c", "int program_format = 2;"), tmp_path)
    assert a == b, "the id depends on where the checkout is"
    assert a != c, "a change in csrc/nki does not change the NEFF build id"
    (tmp_path / "b" / "nki" / "x.cpp").rename(tmp_path / "b" / "nki" / "y.cpp")
    assert _build_id([tmp_path / "b" / n for n in ("compiler", "nki", "kernels", "runtime")], tmp_path) != a
    # The build's own CMake rule passes all four layers.
    cml = open(os.path.join(REPO, "csrc", "compiler", "CMakeLists.txt")).read()
    for layer in ("csrc/nki", "csrc/kernels", "csrc/runtime"):
        assert layer in cml.split("NEURON_CC_ID_DIRS", 1)[1].split(")", 1)[0], layer
