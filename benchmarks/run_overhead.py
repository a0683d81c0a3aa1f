"""A run's fixed cost on a cluster: when its fused tasks enter their workers after the client submits
them, and when the client sees them done after they leave. Prints one JSON document.

    python benchmarks/run_overhead.py --gpus 2                  # 512 x 512 x 144, pencils (2, 1), NCCL
    python benchmarks/run_overhead.py --workers 2 --shape 32 32 16   # CPU workers, mailbox

Between two runs the client asks for a record (``Simulation.diagnostics``), as ``daskflow run``
does after every segment; ``--back-to-back`` leaves it out. Each worker's task body is wrapped (on
the workers, through ``client.run``) to note the wall-clock time it entered, when its steps ended
and when it left; the client notes its submission and when the run returned. Times are ms from the
submission, one row per run and worker; the steps themselves are in ``body_ms``. The control
streams' batching intervals in force (``daskflow.control-interval``) are printed beside them.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from channel_step import _config, cluster_device, cuda_cluster
from emit import emit

from daskflow.backend import device_name
from daskflow.pencils import control


def _wrap_task(dask_worker=None) -> None:
    """Note the entry and exit of every fused run task and the end of its steps on this worker."""
    import daskflow.ns.distributed as fused
    import daskflow.ns.runs as runs

    if getattr(fused, "_timed_by_benchmark", False):
        return
    marks = dask_worker.__dict__.setdefault("run_marks", [])
    task, advance = fused.run_on_worker, runs.advance_pencil

    def timed_task(*args, **kwargs):
        marks.append(("enter", time.time()))
        out = task(*args, **kwargs)
        marks.append(("leave", time.time()))
        return out

    def timed_advance(*args, **kwargs):
        marks.append(("steps", time.time()))
        out = advance(*args, **kwargs)
        marks.append(("stepped", time.time()))
        return out

    fused.run_on_worker, runs.advance_pencil = timed_task, timed_advance
    fused._timed_by_benchmark = True


def _take_marks(dask_worker=None) -> list:
    marks = list(dask_worker.run_marks)
    dask_worker.run_marks.clear()
    return marks


def measure(client, cfg: dict, steps: int, runs: int, back_to_back: bool) -> list[dict]:
    from daskflow import Simulation

    client.run(_wrap_task)
    sim = Simulation(cfg, client=client)
    sim.run(steps=2)
    sim.run(steps=steps)
    client.run(_take_marks)
    rows = []
    for _ in range(runs):
        if not back_to_back:
            sim.diagnostics()
        start = time.time()
        sim.run(steps=steps)
        returned = time.time()
        for worker, marks in client.run(_take_marks).items():
            at = {name: 1e3 * (t - start) for name, t in marks}
            rows.append({"worker": worker, "entered_ms": at["enter"], "body_ms": at["stepped"] - at["steps"],
                         "left_ms": at["leave"], "returned_ms": 1e3 * (returned - start),
                         "seen_after_leaving_ms": 1e3 * (returned - start) - at["leave"]})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=0, help="GPU workers (LocalCUDACluster, NCCL); 0: CPU")
    parser.add_argument("--workers", type=int, default=2, help="CPU workers when --gpus is 0")
    parser.add_argument("--shape", type=int, nargs=3, default=None, help="per worker (default 512 256 144 on GPUs)")
    parser.add_argument("--steps", type=int, default=10, help="steps per run")
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--back-to-back", action="store_true", help="no client call between runs")
    parser.add_argument("--json", default=None, help="also write the document here")
    args = parser.parse_args()

    from distributed import Client, LocalCluster

    n = args.gpus or args.workers
    shape = args.shape or ([512, 256, 144] if args.gpus else [32, 16, 16])
    cfg = _config([shape[0], shape[1] * n, shape[2]], "z", [n, 1], cfl_every=10)
    if args.gpus:
        cfg["cluster"] = {"comm": "nccl"}
        cluster = cuda_cluster(args.gpus)
    else:
        cfg["solver"]["device"] = "cpu"
        cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None)
    with cluster, Client(cluster) as client:
        device = cluster_device(client) if args.gpus else device_name(np)
        rows = measure(client, cfg, args.steps, args.runs, args.back_to_back)
        intervals = control.intervals(client)
    entered = [r["entered_ms"] for r in rows]
    emit({"benchmark": "run_overhead", "device": device, "workers": n, "shape": cfg["grid"]["shape"],
          "steps_per_run": args.steps, "between_runs": "none" if args.back_to_back else "a record",
          "entered_ms_median": float(np.median(entered)), "entered_ms_max": float(np.max(entered)),
          "seen_after_leaving_ms_median": float(np.median([r["seen_after_leaving_ms"] for r in rows])),
          "control_intervals_s": intervals, "rows": rows}, args.json)


if __name__ == "__main__":
    main()
