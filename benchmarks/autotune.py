"""Does ``pencils: auto`` / ``poisson: auto`` pick what an exhaustive benchmark finds fastest?

On one cluster (``--gpus N``: a ``dask_cuda.LocalCUDACluster`` over UCX on GPUs ``0..N-1``;
otherwise a CPU ``LocalCluster`` of ``--workers N`` single-thread processes) and one grid:

1. exhaustive benchmark: every decomposition ``py * pz = N`` valid for the grid x both methods
   (FTM and P-TDMA also where ``pz = 1``, where they run the same stages), measured two ways:
   * ``worker``: the autotuner's own measure with more repetitions and rounds (``--repeat``,
     ``--rounds``) — one task per worker running back-to-back solves with direct exchanges, as the
     simulation's fused step does, per-solve time of the slowest worker, configurations interleaved
     (:func:`daskflow.autotune.time_candidates`);
   * ``client``: ``PoissonSolver(..., granularity="fused").solve(b)`` submitted from the client and
     waited for (``distributed.wait``), one solve at a time, ``b`` persisted in the home layout — an
     independent measure that includes the scheduler round trip;
2. the autotuner (:func:`daskflow.autotune.autotune`, default warm-up and repetitions) with an empty
   cache (timed), then again (a cache hit: no solve);
3. whether the autotuner's pick is within 5% of the exhaustive best (by median), for both measures,
   and the benchmark's own resolution (``noise``: two measurements of one configuration).

Prints one JSON document (device, versions, both tables, the pick and its table, the verdicts).

    python benchmarks/autotune.py --gpus 4 --shape 512 512 512               # the GPU host (~2 min)
    python benchmarks/autotune.py --workers 4 --out docs/results/autotune_cpu.json   # CPU (small grid)
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
import uuid
from importlib import metadata

import numpy as np
from emit import emit

LENGTHS = (4.0, 2.0, 2.0)
Z_STRETCH = 2.0
TOLERANCE = 0.05


def log(msg: str) -> None:
    print(f"[autotune {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _random_block(gpu: bool, block_id=None, block_info=None):
    if gpu:
        import cupy as xp
    else:
        xp = np
    info = block_info[None]
    rng = xp.random.default_rng(int(np.ravel_multi_index(block_id, info["num-chunks"])))
    return rng.standard_normal(tuple(info["chunk-shape"])[::-1], dtype=info["dtype"]).T


def _worker_versions(gpu: bool) -> dict:
    if not gpu:
        return {"cupy": None, "cuda_runtime": None}
    import cupy

    return {"cupy": cupy.__version__, "cuda_runtime": cupy.cuda.runtime.runtimeGetVersion()}


def start_cluster(args):
    if args.gpus:
        from dask_cuda import LocalCUDACluster

        options = {}
        if args.rmm_pool_size:
            options = {"rmm_pool_size": args.rmm_pool_size, "rmm_allocator_external_lib_list": ["cupy"]}
        return LocalCUDACluster(protocol=args.protocol, CUDA_VISIBLE_DEVICES=",".join(map(str, range(args.gpus))),
                                dashboard_address=None, **options)
    from distributed import LocalCluster

    return LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True, dashboard_address=None)


def client_times(client, grid, bc, dtype, pencils, method, gpu: bool, warmup: int, repeat: int) -> list[float]:
    """Seconds per ``solve`` + ``wait`` of a fused PoissonSolver from the client."""
    import dask.array as da
    from distributed import wait

    from daskflow import PoissonSolver
    from daskflow.poisson.distributed import home_chunks, persist_home

    solver = PoissonSolver(grid, bc, "ccc", method, pencils, dtype, granularity="fused")
    if gpu:
        import cupy  # the cluster is up: the chunk meta may now live in this process

        meta = cupy.empty((0, 0, 0), dtype=dtype)
    else:
        meta = np.empty((0, 0, 0), dtype=dtype)
    rhs = da.map_blocks(_random_block, gpu, chunks=home_chunks(solver), dtype=dtype, meta=meta)
    b = persist_home(solver, rhs, client)
    wait(b)
    times = []
    for i in range(warmup + repeat):
        solver.token = uuid.uuid4().hex  # new graph keys: the scheduler must not hand back the last result
        t0 = time.perf_counter()
        x = solver.solve(b)
        wait(x)
        elapsed = time.perf_counter() - t0
        del x
        if i >= warmup:
            times.append(elapsed)
    del b, solver
    return times


def _same(a: dict, b: dict) -> bool:
    """Same configuration: equal pencils and method, or equal pencils with pz = 1 (same stages)."""
    return a["pencils"] == b["pencils"] and (a["method"] == b["method"] or a["pencils"][1] == 1)


def verdict(table: list[dict], pick: dict, metric: str) -> dict:
    best = min(table, key=lambda r: r[metric])
    mine = min((r for r in table if _same(r, pick)), key=lambda r: r[metric])
    return {"best": {"pencils": best["pencils"], "method": best["method"], metric: best[metric]},
            "pick": {"pencils": mine["pencils"], "method": mine["method"], metric: mine[metric]},
            "ratio": mine[metric] / best[metric], "within_5_percent": mine[metric] <= (1 + TOLERANCE) * best[metric],
            "same_configuration": _same(best, pick)}


def noise(table: list[dict]) -> dict:
    """The spread between rows that run the same stages (pz = 1 under both methods): how far apart
    two measurements of one configuration land on this machine, per measure."""
    out = {}
    for metric in ("median_ms", "client_median_ms"):
        spreads = []
        for a in table:
            for b in table:
                if a["pencils"] == b["pencils"] and a["pencils"][1] == 1 and (a["method"], b["method"]) == ("ptdma",
                                                                                                             "ftm"):
                    spreads.append(abs(a[metric] - b[metric]) / min(a[metric], b[metric]))
        out[metric] = max(spreads, default=None)
    return out


def main() -> None:
    import dask
    import distributed

    import daskflow
    from daskflow import Grid
    from daskflow import autotune as at

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpus", type=int, default=0, help="GPU workers (LocalCUDACluster over --protocol)")
    parser.add_argument("--workers", type=int, default=4, help="CPU workers when --gpus is not given")
    parser.add_argument("--shape", type=int, nargs=3, default=None, metavar=("NX", "NY", "NZ"),
                        help="grid (default 512^3 on GPUs, 64 x 64 x 32 on CPUs)")
    parser.add_argument("--bc", nargs=3, default=["PP", "PP", "NN"], help="pressure boundary pairs (x y z)")
    parser.add_argument("--dtype", default="float64", choices=["float64", "float32"])
    parser.add_argument("--repeat", type=int, default=20, help="timed solves per configuration, exhaustive")
    parser.add_argument("--warmup", type=int, default=2, help="untimed solves per round, exhaustive")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds over the configurations, exhaustive")
    parser.add_argument("--client-repeat", type=int, default=10, help="timed client-side solves per configuration")
    parser.add_argument("--protocol", default="ucx", help="GPU cluster comms")
    parser.add_argument("--rmm-pool-size", default=None, help="RMM pool per GPU worker (default: none, CuPy's pool)")
    parser.add_argument("--out", default=None, help="also write the JSON document here")
    args = parser.parse_args()
    gpu = args.gpus > 0
    n = args.gpus or args.workers
    shape = tuple(args.shape or ([512] * 3 if gpu else [64, 64, 32]))
    grid = Grid(shape, LENGTHS, z_stretch=Z_STRETCH)
    bc = tuple(args.bc)
    device = "gpu" if gpu else "cpu"
    os.environ["DASKFLOW_CACHE_DIR"] = tempfile.mkdtemp(prefix="daskflow-autotune-")  # start from an empty cache

    t0 = time.perf_counter()
    from distributed import Client

    with start_cluster(args) as cluster, Client(cluster) as client:
        client.wait_for_workers(n)
        startup = time.perf_counter() - t0
        cluster_info = at.describe_cluster(client, device)
        worker_versions = next(iter(client.run(_worker_versions, gpu).values()))
        log(f"{n} workers up in {startup:.1f} s: {cluster_info['device_names']}")

        cands = at.candidates(grid, bc, n, dtype=args.dtype, distinct=False)
        t1 = time.perf_counter()
        exhaustive = at.time_candidates(grid, bc, args.dtype, cands, client, device, args.warmup, args.repeat,
                                        rounds=args.rounds)
        for row, (pencils, method) in zip(exhaustive, cands, strict=True):
            times = client_times(client, grid, bc, args.dtype, pencils, method, gpu, 2, args.client_repeat)
            row["client_median_ms"] = 1e3 * statistics.median(times)
            row["client_min_ms"] = 1e3 * min(times)
            log(f"{list(pencils)} {method:5s}: worker {row['median_ms']:.3f} ms, "
                f"client {row['client_median_ms']:.3f} ms")
        exhaustive_s = time.perf_counter() - t1

        t2 = time.perf_counter()
        first = at.autotune(grid, bc, args.dtype, client)
        first_s = time.perf_counter() - t2
        solves_before = at.timed_solves
        t3 = time.perf_counter()
        second = at.autotune(grid, bc, args.dtype, client)
        second_s = time.perf_counter() - t3
        log(f"autotuner: {list(first.pencils)} {first.method} in {first_s:.2f} s; again from the cache in "
            f"{second_s:.3f} s ({at.timed_solves - solves_before} solves)")

    pick = {"pencils": list(first.pencils), "method": first.method}
    document = {
        "benchmark": "autotune",
        "device": cluster_info["device_names"][0] if len(cluster_info["device_names"]) == 1
        else cluster_info["device_names"],
        "backend": f"cupy (LocalCUDACluster, {args.protocol})" if gpu else "numpy (CPU LocalCluster)",
        "workers": n, "cluster": cluster_info, "grid": list(shape), "lengths": list(LENGTHS), "z_stretch": Z_STRETCH,
        "bc": list(bc), "stagger": "ccc", "dtype": args.dtype,
        "versions": {"daskflow": daskflow.__version__, "dask": dask.__version__,
                     "distributed": distributed.__version__, "numpy": np.__version__,
                     "dask_cuda": _version("dask-cuda"), "python": platform.python_version(),
                     "distributed_ucxx": next((v for v in map(_version, ("distributed-ucxx-cu13",
                                                                          "distributed-ucxx-cu12")) if v), None),
                     **worker_versions},
        "config": {"repeat": args.repeat, "warmup": args.warmup, "rounds": args.rounds,
                   "client_repeat": args.client_repeat, "autotune_repeat": at.REPEATS,
                   "autotune_warmup": at.WARMUP, "autotune_rounds": at.ROUNDS, "tolerance": TOLERANCE,
                   "rmm_pool_size": args.rmm_pool_size if gpu else None},
        "definitions": {
            "median_ms": "worker-side median per solve (the autotuner's measure, slowest worker per solve)",
            "client_median_ms": "client-side solve + distributed.wait of a fused PoissonSolver (one at a time)",
            "verdict": "the pick's exhaustive time vs the exhaustive best; pz = 1 rows of both methods are the "
                       "same configuration",
            "noise": "relative difference between the two pz = 1 rows (the same stages measured twice): the "
                     "resolution of the exhaustive benchmark on this machine, per measure",
        },
        "startup_s": startup, "exhaustive_s": exhaustive_s,
        "exhaustive": exhaustive,
        "autotune": {"pick": pick, "seconds": first_s, "table": first.table, "cache_hit_seconds": second_s,
                     "cache_hit": second.cached, "cache_hit_solves": at.timed_solves - solves_before,
                     "cache_key": first.key},
        "verdict": {"worker": verdict(exhaustive, pick, "median_ms"),
                    "client": verdict(exhaustive, pick, "client_median_ms")},
        "total_s": time.perf_counter() - t0,
    }
    document["within_5_percent"] = document["verdict"]["worker"]["within_5_percent"]
    document["noise"] = noise(exhaustive)
    emit(document, args.out)


if __name__ == "__main__":
    main()
