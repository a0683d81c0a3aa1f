"""What the batching of Dask's control messages costs a task and a fused Poisson solve: the same
cluster with daskflow's intervals (``daskflow.control-interval`` on every stream) and with
distributed's own (10 ms client, 5 ms scheduler to workers, 2 ms otherwise), in alternation.
Prints one JSON document with the device name.

    python benchmarks/control_latency.py --workers 2                 # CPU workers, 32^3 solve
    python benchmarks/control_latency.py --gpus 2 --shape 256 256 256

Per mode and round: ``noop_ms``, a no-op task on every worker submitted and gathered (after a
pause of ``--pause`` ms, as a run follows the release of the previous one's results); ``solve_ms``,
one fused P-TDMA solve (pencils (1, workers)) of a persisted right-hand side, awaited;
``chained_ms``, ``--chain`` solves submitted back to back (each takes the previous result) per
solve, the workers' GPUs synchronised after the last. Each figure is the median of ``--repeat``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from emit import device_synchronize, emit

from daskflow import settings
from daskflow.pencils import control


def _noop(i: int) -> int:
    return i


def _on_device(block):
    """A NumPy chunk as a Fortran-ordered CuPy array (the solver's fast input order)."""
    import cupy

    return cupy.asfortranarray(cupy.asarray(block))


def _median_ms(fn, repeat: int, pause: float = 0.0) -> float:
    """Median ms of ``repeat`` calls of ``fn``, each after ``pause`` seconds (not timed)."""
    times = []
    for _ in range(repeat):
        time.sleep(pause)
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1e3 * float(np.median(times))


def measure(client, solver, rhs, repeat: int, chain: int, pause: float, rounds: int) -> list[dict]:
    """Rows ``{mode, round, noop_ms, solve_ms, chained_ms}``, the two modes alternating."""
    from distributed import wait

    workers = list(client.scheduler_info()["workers"])
    wait(solver.solve(rhs))  # set-up: plans, communicator, daskflow's intervals

    def noop() -> None:
        client.gather([client.submit(_noop, i, workers=[w], pure=False) for i, w in enumerate(workers)])

    def one_solve() -> None:
        wait(solver.solve(rhs))

    def chained() -> None:
        x = rhs
        for _ in range(chain):
            x = solver.solve(x)
        wait(x)
        client.run(device_synchronize)

    modes = {"daskflow": dict.fromkeys(control.DISTRIBUTED, settings.get("control-interval")),
             "distributed": control.DISTRIBUTED}
    rows = []
    for i in range(rounds):
        for mode, seconds in modes.items():
            control.set_intervals(client, seconds)
            rows.append({"mode": mode, "round": i, "noop_ms": _median_ms(noop, repeat, pause),
                         "solve_ms": _median_ms(one_solve, repeat), "chained_ms": _median_ms(chained, repeat) / chain})
    control.set_intervals(client, modes["daskflow"])
    return rows


def summary(rows: list[dict]) -> dict:
    """Per mode, the median over rounds of each figure."""
    out = {}
    for mode in dict.fromkeys(r["mode"] for r in rows):
        mine = [r for r in rows if r["mode"] == mode]
        out[mode] = {k: float(np.median([r[k] for r in mine])) for k in ("noop_ms", "solve_ms", "chained_ms")}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=0, help="GPU workers (LocalCUDACluster, NCCL); 0: CPU")
    parser.add_argument("--workers", type=int, default=2, help="CPU workers when --gpus is 0")
    parser.add_argument("--shape", type=int, nargs=3, default=[32, 32, 32], help="the Poisson grid")
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--chain", type=int, default=10)
    parser.add_argument("--pause", type=float, default=3.0, help="ms before each no-op submission")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", default=None, help="also write the document here")
    args = parser.parse_args()

    import dask.array as da
    from channel_step import cluster_device, cuda_cluster
    from distributed import Client, LocalCluster

    from daskflow import Grid, PoissonSolver
    from daskflow.backend import device_name
    from daskflow.poisson.distributed import home_chunks

    n = args.gpus or args.workers
    grid = Grid(tuple(args.shape), (2.0, 1.0, 2.0), z_stretch=2.0)
    cluster = cuda_cluster(n) if args.gpus else LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                                                               dashboard_address=None)
    with cluster, Client(cluster) as client:
        device = cluster_device(client) if args.gpus else device_name(np)
        solver = PoissonSolver(grid, ("PP", "PP", "NN"), "ccc", "ptdma", (1, n), granularity="fused",
                               device="gpu" if args.gpus else "cpu", comm="nccl" if args.gpus else "auto")
        rhs = da.random.default_rng(0).standard_normal(grid.shape, chunks=home_chunks(solver))
        rhs = (rhs.map_blocks(_on_device) if args.gpus else rhs).persist()
        rows = measure(client, solver, rhs, args.repeat, args.chain, args.pause * 1e-3, args.rounds)
    emit({"benchmark": "control_latency", "device": device, "workers": n, "shape": args.shape,
          "intervals_s": {"daskflow": settings.get("control-interval"), "distributed": control.DISTRIBUTED},
          "summary": summary(rows), "rows": rows}, args.json)


if __name__ == "__main__":
    main()
