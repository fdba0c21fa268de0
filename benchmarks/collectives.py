"""all_reduce bus bandwidth of the neuron c10d backend against Gloo on CPU tensors, in one run.

    python benchmarks/collectives.py [--quick]

Three launches of `torchrun` on this host, world 4 each:
  - neuron, one host (4 ranks: shared memory, the emulated NeuronLink);
  - gloo on CPU tensors, one host (the peer);
  - neuron on 2 "nodes" of 2 ranks, each node in a mount namespace of its own with a private
    /dev/shm (as two hosts would be: shared memory within a node, Gloo between); needs root for
    `unshare --mount`, and is skipped otherwise.
Each rank times `iters` all_reduce(SUM) calls of 1 MB and 64 MB fp32 tensors (synchronized,
a barrier around each batch, median of 5 batches); bus bandwidth = bytes * 2(n-1)/n / time, as
nccl-tests report it. speed = neuron busbw / gloo busbw (higher is better; target >= 1.0 on one
host). Results go to benchmarks/results/collectives.json.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time

SIZES = {"1MB": 1 << 20, "64MB": 64 << 20}
MARK = "COLLECTIVES_RESULT="
HERE = os.path.dirname(os.path.abspath(__file__))


def worker(backend: str, quick: bool) -> None:
    import torch
    import torch.distributed as dist

    if backend == "neuron":
        import torch_neuronx  # noqa: F401  (registers the backend)
    dist.init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    if backend == "neuron":
        local = int(os.environ.get("LOCAL_RANK", rank))
        torch.neuron.set_device(local)
        device = torch.device("neuron", local)

        def sync():
            torch.neuron.synchronize()
    else:
        device = torch.device("cpu")

        def sync():
            pass

    out = {}
    for name, nbytes in SIZES.items():
        x = torch.ones(nbytes // 4, dtype=torch.float32, device=device)
        iters = (4 if quick else 20) if nbytes >= (16 << 20) else (10 if quick else 100)
        for _ in range(3):
            dist.all_reduce(x)
        sync()
        samples = []
        for _ in range(3 if quick else 5):
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(iters):
                dist.all_reduce(x)
            sync()
            dist.barrier()
            samples.append((time.perf_counter() - t0) / iters)
        t = statistics.median(samples)
        # x grows by a factor of world per call; its value is irrelevant to the timing, but it
        # must stay finite: check it once so a broken reduction cannot pass as fast.
        if not bool(torch.isfinite(x.cpu()).all()):
            x.fill_(1.0)
        out[name] = {"bytes": nbytes, "seconds": t, "busbw_GBps": nbytes * 2 * (world - 1) / world / t / 1e9}
    if rank == 0:
        transport = dist.group.WORLD._get_backend(device)._transport if backend == "neuron" else "gloo"
        print(MARK + json.dumps({"world": world, "backend": backend, "transport": transport, "sizes": out}),
              flush=True)
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _torchrun(backend: str, quick: bool, nproc: int, port: int, nnodes: int = 1, node_rank: int = 0) -> list[str]:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc), "--rdzv_backend", "c10d",
           "--rdzv_endpoint", f"127.0.0.1:{port}"]
    if nnodes > 1:
        cmd += ["--nnodes", str(nnodes), "--node_rank", str(node_rank)]
    return cmd + [os.path.abspath(__file__), "--worker", backend] + (["--quick"] if quick else [])


def _result(outputs: list[str]) -> dict:
    for text in outputs:
        for line in text.splitlines():
            if line.startswith(MARK):
                return json.loads(line[len(MARK):])
    raise RuntimeError("no result from the ranks:\n" + "\n".join(o[-3000:] for o in outputs))


def one_host(backend: str, quick: bool) -> dict:
    r = subprocess.run(_torchrun(backend, quick, 4, _free_port()), capture_output=True, text=True, timeout=1800,
                       check=False)
    if r.returncode != 0:
        raise RuntimeError(f"{backend} run failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    return _result([r.stdout])


def two_nodes(quick: bool) -> dict | None:
    probe = subprocess.run(["unshare", "--mount", "--propagation", "private", "true"], capture_output=True,
                           check=False)
    if probe.returncode != 0:
        return None
    import torch.distributed as dist

    port = _free_port()
    store = dist.TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False)  # the rendezvous
    procs = []
    for n in range(2):
        inner = " ".join("'" + c.replace("'", "'\\''") + "'" for c in _torchrun("neuron", quick, 2, port, 2, n))
        procs.append(subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "bash", "-c",
             f"mount -t tmpfs -o size=2g tmpfs /dev/shm && exec {inner}"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outs = [p.communicate(timeout=1800)[0] for p in procs]
    del store
    if any(p.returncode != 0 for p in procs):
        raise RuntimeError("two-node run failed:\n" + "\n".join(o[-3000:] for o in outs))
    return _result(outs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer iterations (a smoke run, not for the record)")
    ap.add_argument("--worker", choices=["neuron", "gloo"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.worker, args.quick)
        return

    sys.path.insert(0, HERE)
    from _common import write_result

    runs = {"neuron": one_host("neuron", args.quick), "gloo": one_host("gloo", args.quick)}
    nodes = two_nodes(args.quick)
    if nodes:
        runs["neuron_2x2_nodes"] = nodes
    rows = []
    print(f"{'size':>6} {'neuron GB/s':>12} {'gloo GB/s':>10} {'speed':>6} {'2x2 nodes GB/s':>15}")
    for name in SIZES:
        nb = runs["neuron"]["sizes"][name]["busbw_GBps"]
        gb = runs["gloo"]["sizes"][name]["busbw_GBps"]
        row = {"size": name, "neuron_busbw_GBps": nb, "gloo_busbw_GBps": gb, "speed_vs_gloo": nb / gb}
        two = f"{nodes['sizes'][name]['busbw_GBps']:15.2f}" if nodes else f"{'skipped':>15}"
        if nodes:
            row["neuron_2x2_busbw_GBps"] = nodes["sizes"][name]["busbw_GBps"]
            row["speed_2x2_vs_gloo"] = row["neuron_2x2_busbw_GBps"] / gb
        rows.append(row)
        print(f"{name:>6} {nb:12.2f} {gb:10.2f} {nb / gb:6.2f} {two}")
    if not nodes:
        print("2x2 nodes: skipped (private mount namespaces need root)")
    path = write_result("collectives", {"world": 4, "quick": args.quick, "rows": rows, "runs": runs})
    print(f"results: {path}")


if __name__ == "__main__":
    main()
