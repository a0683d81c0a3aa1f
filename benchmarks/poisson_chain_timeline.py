"""What bounds chained fused Poisson solves: every worker's host and GPU spans, solve by solve.

``poisson_distributed.py`` times ``--chain`` solves submitted back to back (each takes the previous
result) and divides by the count. This benchmark runs the same chains and records, on every
worker, when each fused task entered and left its thread (host clock, ``time.perf_counter``, one
clock for all processes of the host) and, on GPU workers, when the device started and finished
its work (CUDA events recorded at the task's entry and exit on the compute stream). From them:

* ``host_task_ms``: a fused task's time in its thread (kernels queued, exchanges posted);
* ``gap_ms``: a worker's time from one task's exit to the next one's entry (the result reported
  to the scheduler, the next task sent back: Dask's round trip per dependent task);
* ``entry_interval_ms``: from the last worker's entry into one solve to its entry into the next,
  the host's bound on the chain: a solve's exchanges wait for its last participant;
* ``device_interval_ms``: from one solve's device end to the next one's, on the slowest worker
  (on CPU workers: the host spans again);
* ``bound``: ``device`` where the devices' interval exceeds the hosts' by more than
  :data:`MARGIN` (the hosts ran ahead and queued work), else ``host`` (the devices kept pace with
  the last host's entries, so they waited for it).

Medians over the second half of each chain (the steady part) and over ``--repeat`` chains.

    python benchmarks/poisson_chain_timeline.py --gpus 4                  # 512^3 per GPU, (1,1), (1,4), (4,1)
    python benchmarks/poisson_chain_timeline.py --cpu --workers 2 --per-worker 32 32 32
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from emit import device_synchronize, emit
from poisson_distributed import BC, LENGTHS, STAGGER, Z_STRETCH, _chained, _random_block, _stable_count

RECORDER = "daskflow_chain_timeline"
MARGIN = 0.05  # a device interval this much longer than the entry interval: the devices are the bound


def _install(gpu: bool) -> bool:
    """Wrap the fused tasks' body on this worker so that each call notes its host and device span
    (the task functions look ``run_on_worker`` up in their module when they run)."""
    from daskflow.pencils import direct
    from daskflow.poisson import distributed

    records: list = direct.__dict__.setdefault(RECORDER, [])
    body = direct.run_on_worker

    def timed(*args, **kwargs):
        entry = time.perf_counter()
        events = _event(gpu)
        try:
            return body(*args, **kwargs)
        finally:
            records.append((entry, time.perf_counter(), events, _event(gpu)))

    distributed.run_on_worker = timed
    return True


def _event(gpu: bool):
    if not gpu:
        return None
    import cupy

    event = cupy.cuda.Event()
    event.record()
    return event


def _collect(gpu: bool) -> list:
    """This worker's spans since the last call, ms: ``(host entry, host exit, GPU start, GPU end)``,
    host instants on the host's clock, GPU instants counted from the first entry's event and placed
    at that entry."""
    from daskflow.pencils import direct

    records = direct.__dict__.setdefault(RECORDER, [])
    device_synchronize()
    spans = []
    if records and gpu:
        import cupy

        first_entry, first = records[0][0], records[0][2]
    for entry, leave, start, end in records:
        if gpu:
            start = first_entry + 1e-3 * cupy.cuda.get_elapsed_time(first, start)
            end = first_entry + 1e-3 * cupy.cuda.get_elapsed_time(first, end)
        else:
            start, end = entry, leave
        spans.append(tuple(1e3 * t for t in (entry, leave, start, end)))
    records.clear()
    return spans


def summarize(timelines: list[dict], gpu: bool) -> dict:
    """The medians of the module docstring over the steady halves of ``timelines`` (per chain:
    worker -> spans); ``bound`` only where the device has a timeline of its own (``gpu``)."""
    task, gap, entries, devices = [], [], [], []
    for timeline in timelines:
        spans = [s for s in timeline.values() if s]
        count = min(len(s) for s in spans)
        half = count // 2
        for s in spans:
            task += [s[k][1] - s[k][0] for k in range(half, count)]
            gap += [s[k][0] - s[k - 1][1] for k in range(max(half, 1), count)]
        last_entry = [max(s[k][0] for s in spans) for k in range(count)]
        device_end = [max(s[k][3] for s in spans) for k in range(count)]
        entries += [last_entry[k] - last_entry[k - 1] for k in range(max(half, 1), count)]
        devices += [device_end[k] - device_end[k - 1] for k in range(max(half, 1), count)]
    median = statistics.median
    entry, device = median(entries), median(devices)
    return {"host_task_ms": median(task), "gap_ms": median(gap), "entry_interval_ms": entry,
            "device_interval_ms": device,
            "bound": None if not gpu else "device" if device > (1 + MARGIN) * entry else "host"}


def measure(client, grid_shape: tuple, pencils: tuple, method: str, chain: int, repeat: int, gpu: bool) -> dict:
    import dask.array as da
    import numpy as np
    from distributed import wait

    from daskflow import Grid, PoissonSolver
    from daskflow.poisson.distributed import home_chunks, persist_home

    grid = Grid(grid_shape, LENGTHS, z_stretch=Z_STRETCH)
    solver = PoissonSolver(grid, BC, STAGGER, method, pencils, granularity="fused")
    chunks = home_chunks(solver)
    if gpu:
        import cupy

        meta = cupy.empty((0, 0, 0))
    else:
        meta = np.empty((0, 0, 0))
    b = persist_home(solver, da.map_blocks(_random_block, gpu, 0, chunks=chunks, dtype=solver.dtype, meta=meta),
                     client)
    wait(b)
    for _ in range(3):
        wait(solver.solve(b))
    client.run(device_synchronize)
    client.run(_collect, gpu)
    baseline = _stable_count(client)
    chained, timelines = [], []
    for _ in range(repeat):
        chained.append(1e3 * _chained(client, solver, b, chain, baseline))  # as poisson_distributed.py times it
        timeline = client.run(_collect, gpu)
        origin = min(s[0][0] for s in timeline.values() if s)
        timelines.append({w: [tuple(t - origin for t in span) for span in s] for w, s in timeline.items()})
    return {"grid": list(grid_shape), "pencils": list(pencils), "method": method, "chain": chain,
            "chained_ms": statistics.median(chained), "chained_ms_samples": chained, **summarize(timelines, gpu),
            "last_timeline": timelines[-1]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gpus", type=int, default=4)
    parser.add_argument("--cpu", action="store_true", help="NumPy workers (the host timeline only)")
    parser.add_argument("--workers", type=int, default=None, help="CPU workers (default: --gpus)")
    parser.add_argument("--per-worker", type=int, nargs=3, default=(512, 512, 512), metavar=("NX", "NY", "NZ"))
    parser.add_argument("--chain", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--protocol", default="tcp")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    n = args.workers or args.gpus
    gpu = not args.cpu
    from distributed import Client

    from daskflow.backend import device_name

    if gpu:
        from dask_cuda import LocalCUDACluster

        cluster = LocalCUDACluster(protocol=args.protocol, CUDA_VISIBLE_DEVICES=",".join(map(str, range(n))),
                                   dashboard_address=None)
    else:
        from distributed import LocalCluster

        cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None)
    nx, ny, nz = args.per_worker
    configurations = [((nx, ny, nz), (1, 1), "ptdma")]
    if n > 1:
        configurations += [((nx, ny * n, nz), (1, n), "ptdma"), ((nx, ny * n, nz), (n, 1), "ftm")]
    results = []
    with cluster, Client(cluster) as client:
        client.wait_for_workers(n)
        client.run(_install, gpu)
        if gpu:
            import cupy

            device = device_name(cupy)
        else:
            import numpy

            device = device_name(numpy)
        for shape, pencils, method in configurations:
            r = measure(client, shape, pencils, method, args.chain, args.repeat, gpu)
            print(f"{pencils} {method}: chained {r['chained_ms']:.2f} ms, host task {r['host_task_ms']:.2f}, "
                  f"gap {r['gap_ms']:.2f}, entry interval {r['entry_interval_ms']:.2f}, device interval "
                  f"{r['device_interval_ms']:.2f} ms, bound: {r['bound']}", file=sys.stderr, flush=True)
            results.append(r)
    emit({"benchmark": "poisson_chain_timeline", "device": device, "workers": n, "per_worker": list(args.per_worker),
          "protocol": args.protocol, "command": " ".join(sys.argv[1:]), "results": results, "model_data": False},
         args.out)


if __name__ == "__main__":
    main()
