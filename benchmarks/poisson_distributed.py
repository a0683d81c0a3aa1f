"""Distributed Poisson solve on one node's GPUs: weak and strong scaling, FTM vs P-TDMA, stage vs fused.

Times ``PoissonSolver(grid, ("PP", "PP", "NN"), "ccc", method, pencils, granularity=g).solve(b)`` with
``b`` created on the workers (CuPy chunks) and persisted in the solver's home layout
(``persist_home``: one chunk per worker). For every GPU count of ``--gpus`` a fresh
``dask_cuda.LocalCUDACluster`` (UCX, RMM pool shared with CuPy) runs every pencil split
``py * pz = n`` of the weak-scaling grid (``ny`` scaled by ``n``) and of the fixed strong-scaling
grid, for both methods and both granularities. Per configuration:

* ``solve_ms``: median wall time of ``--repeat`` solves, each submitted and waited for alone;
* ``chained_ms``: ``--chain`` solves submitted back to back (each takes the previous result), only
  the last waited for, divided by the count: the median of ``--chain-repeat`` chains;
* orchestration overhead, two estimates: ``1 - busiest worker's task compute time / wall`` from
  Dask's task stream of one solve (``distributed.get_task_stream``), and ``1 - floor / solve`` with
  the floor the in-process single-device solve of one chunk-sized problem on a worker.

Prints one JSON document (device and versions included; ``definitions`` explains the fields).
``--cpu`` runs the same on a CPU ``LocalCluster`` with NumPy chunks (smoke test). The client process
never imports CuPy before the cluster is up (only for the chunk meta afterwards).

    python benchmarks/poisson_distributed.py [--gpus 1 2 4] [--weak-per-gpu 512 512 512]
        [--strong 512 512 512] [--repeat 10] [--chain 10] [--quick] [--out result.json]
    python benchmarks/poisson_distributed.py --cpu --gpus 1 2 --strong 32 32 32 --weak-per-gpu 32 32 32 --repeat 2
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from importlib import metadata

import numpy as np
from emit import device_synchronize, emit

BC = ("PP", "PP", "NN")
STAGGER = "ccc"
LENGTHS = (4.0, 2.0, 2.0)
Z_STRETCH = 2.0
METHODS = ("ftm", "ptdma")
GRANULARITIES = ("stage", "fused")

DEFINITIONS = {
    "results[]": "one entry per (grid, gpus, method, granularity, pencils); problems says which series use it",
    "solve_ms": "median wall time of one solve submitted and distributed.wait-ed alone (graph build included)",
    "chained_ms": "wall time of `chain` solves submitted back to back, only the last waited (and the workers' GPUs "
                  "synchronised after it), divided by `chain`: the median of `chain_repeat` such chains",
    "chained_ms_samples": "every chain's time per solve (a chain is one sample: a worker's pause inside it, such as "
                          "a garbage collection, counts once in it)",
    "setup_s": "one-time plan broadcast and P-TDMA set-up on the workers (not in the solve times)",
    "task_stream": "one solve recorded with distributed.get_task_stream: wall_ms, span_ms (longest time from a "
                   "worker's first task start to its last task stop; worker clocks are not compared), tasks, "
                   "per-worker summed task compute/transfer ms, busiest worker's compute ms",
    "overhead_task_stream": "1 - busiest_compute_ms / wall_ms. Task compute time is host time of the task body: "
                            "asynchronous GPU work pending at a task's end, and in fused mode the waits for "
                            "pieces inside the one task, count as compute, so this is a lower bound on overhead",
    "floor_ms": "fastest of max(repeat, 5) in-process solves (pencils (1, 1), no Dask) of one chunk-sized "
                "problem (the largest chunk) on one worker's device, timed with CUDA events",
    "overhead_floor": "1 - floor_ms / solve_ms: everything beyond the local compute of the biggest chunk, "
                      "communication included (an estimate: the chunk problem is not the chunk's exact work)",
    "weak_scaling": "per method, the fastest configuration at each GPU count (by solve_ms and by chained_ms); "
                    "efficiency = t(base gpus) / t(n)",
    "strong_scaling": "as weak_scaling on the fixed grid; speedup = t(base) / t(n), efficiency = speedup * base / n",
    "ptdma_speedup": "ftm time / ptdma time for the same grid, gpus, pencils and granularity; same_algorithm "
                     "is true for pz = 1, where both methods run the same stages",
    "overhead_by_granularity": "median over configurations of the two overhead estimates, per granularity "
                               "and GPU count",
}


def log(msg: str) -> None:
    print(f"[poisson_distributed {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- functions that run on the workers

def _random_block(gpu: bool, seed: int, block_id=None, block_info=None):
    """A standard-normal chunk made where it lives, Fortran-ordered (the solver's fast input order)."""
    if gpu:
        import cupy as xp
    else:
        xp = np
    info = block_info[None]
    shape, dtype = tuple(info["chunk-shape"]), info["dtype"]
    rng = xp.random.default_rng(seed + int(np.ravel_multi_index(block_id, info["num-chunks"])))
    return rng.standard_normal(shape[::-1], dtype=dtype).T


def _worker_info(gpu: bool) -> dict:
    if not gpu:
        from daskflow.backend import device_name

        return {"device": device_name(np), "cupy": None, "cuda_runtime": None}
    import cupy

    from daskflow.backend import device_name

    return {"device": device_name(cupy), "cupy": cupy.__version__,
            "cuda_runtime": cupy.cuda.runtime.runtimeGetVersion()}


def _chunk_floor(shape: tuple, dtype: str, repeat: int, gpu: bool) -> float:
    """Fastest of ``repeat`` (at least 5) in-process solves of a ``shape`` problem on this worker's
    device, in seconds: the local compute floor (the worker's event loop and comms threads share the
    process, so a slow outlier says nothing about the compute)."""
    from daskflow import Grid, PoissonSolver

    grid = Grid(tuple(shape), LENGTHS, z_stretch=Z_STRETCH)
    solver = PoissonSolver(grid, BC, STAGGER, "ptdma", (1, 1), dtype=dtype)
    if gpu:
        import cupy as xp
    else:
        xp = np
    b = xp.random.default_rng(0).standard_normal(grid.shape[::-1], dtype=dtype).T
    solver.solve(b)
    times = []
    for _ in range(max(repeat, 5)):
        if gpu:
            start, stop = xp.cuda.Event(), xp.cuda.Event()
            start.record()
            solver.solve(b)
            stop.record()
            stop.synchronize()
            times.append(xp.cuda.get_elapsed_time(start, stop) * 1e-3)
        else:
            t0 = time.perf_counter()
            solver.solve(b)
            times.append(time.perf_counter() - t0)
    return float(min(times))


def _n_tasks(dask_scheduler) -> int:
    return len(dask_scheduler.tasks)


# ---------------------------------------------------------------- client side

def start_cluster(args, n: int):
    """A cluster of ``n`` workers: GPUs ``0..n-1`` (CuPy on its own pool, as ``daskflow run`` leaves
    it, or on an RMM pool with ``--rmm-pool-size``), or CPU processes."""
    if args.cpu:
        from distributed import LocalCluster

        return LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None)
    from dask_cuda import LocalCUDACluster

    rmm = {} if args.rmm_pool_size is None else {"rmm_pool_size": args.rmm_pool_size,
                                                 "rmm_allocator_external_lib_list": ["cupy"]}
    return LocalCUDACluster(protocol=args.protocol, CUDA_VISIBLE_DEVICES=",".join(str(i) for i in range(n)),
                            dashboard_address=None, **rmm)


def _stable_count(client) -> int:
    """Scheduler task count once two reads 20 ms apart agree."""
    last = client.run_on_scheduler(_n_tasks)
    while True:
        time.sleep(0.02)
        now = client.run_on_scheduler(_n_tasks)
        if now == last:
            return now
        last = now


def _settle(client, target: int, timeout: float = 120.0) -> None:
    """Wait until the scheduler holds at most ``target`` tasks: a released result must be forgotten
    before the same stage-granularity solve is submitted again (the same solver and input give the
    same keys, and the scheduler would hand back the old result instead of solving), and the next
    timing starts with the last one's memory freed."""
    deadline = time.perf_counter() + timeout
    while client.run_on_scheduler(_n_tasks) > target:
        if time.perf_counter() > deadline:
            raise TimeoutError(f"scheduler still holds more than {target} tasks after {timeout} s")
        time.sleep(0.002)


def _timed_solve(client, solver, b, baseline: int) -> float:
    from distributed import wait

    _settle(client, baseline)
    t0 = time.perf_counter()
    out = solver.solve(b)
    wait(out)
    elapsed = time.perf_counter() - t0
    del out
    return elapsed


def _chained(client, solver, b, k: int, baseline: int) -> float:
    """Seconds per solve of ``k`` solves submitted back to back, until the last one's GPU work is
    done: a fused task returns once its kernels are queued, so the chain ends with a device
    synchronisation on every worker (one round trip, which the chain's time includes)."""
    from distributed import wait

    _settle(client, baseline)
    t0 = time.perf_counter()
    x = b
    for _ in range(k):
        x = solver.solve(x)
    wait(x)
    client.run(device_synchronize)
    elapsed = time.perf_counter() - t0
    del x
    return elapsed / k


def _task_stream(client, solver, b, baseline: int) -> dict:
    """One solve under the task stream: wall, span, and per-worker task compute and transfer time."""
    from distributed import get_task_stream, wait

    _settle(client, baseline)
    with get_task_stream(client) as ts:
        t0 = time.perf_counter()
        out = solver.solve(b)
        wait(out)
        wall = time.perf_counter() - t0
        del out
    compute, transfer, spans = {}, {}, {}
    for task in ts.data:
        worker = task.get("worker")
        for ss in task.get("startstops", ()):
            duration = ss["stop"] - ss["start"]
            if ss["action"] == "compute":
                compute[worker] = compute.get(worker, 0.0) + duration
                first, last = spans.get(worker, (ss["start"], ss["stop"]))
                spans[worker] = (min(first, ss["start"]), max(last, ss["stop"]))
            elif ss["action"] == "transfer":
                transfer[worker] = transfer.get(worker, 0.0) + duration
    busiest = max(compute.values(), default=0.0)
    return {
        "wall_ms": 1e3 * wall,
        "span_ms": 1e3 * max((last - first for first, last in spans.values()), default=0.0),
        "tasks": len(ts.data),
        "compute_ms_per_worker": sorted(1e3 * v for v in compute.values()),
        "transfer_ms_per_worker": sorted(1e3 * v for v in transfer.values()),
        "busiest_compute_ms": 1e3 * busiest,
        "overhead": 1.0 - busiest / wall,
    }


def measure(client, args, solver, b, problems: list[str], n: int, floor_s: float) -> dict:
    """Every timing of one solver (``b`` already persisted in its home layout)."""
    from distributed import wait

    from daskflow.poisson.distributed import cluster_state, home_chunks

    t0 = time.perf_counter()
    state = cluster_state(solver, client, "numpy" if args.cpu else "cupy")
    wait([*state.plans.values(), *state.coefficients.values(), *state.factors.values()])
    del state
    setup = time.perf_counter() - t0
    baseline = _stable_count(client)
    for _ in range(args.warmup):
        _timed_solve(client, solver, b, baseline)
    times = [_timed_solve(client, solver, b, baseline) for _ in range(args.repeat)]
    chains = [_chained(client, solver, b, args.chain, baseline) for _ in range(args.chain_repeat)]
    stream = _task_stream(client, solver, b, baseline)
    _settle(client, baseline)
    chunks = home_chunks(solver)
    solve = float(np.median(times))
    shape = solver.grid.shape
    return {
        "problems": problems, "gpus": n, "grid": list(shape), "points": int(np.prod(shape)),
        "points_per_gpu": int(np.prod(shape)) // n,
        "method": solver.method, "granularity": solver.granularity, "pencils": list(solver.pencils),
        "chunk": [chunks[0][0], max(chunks[1]), max(chunks[2])],
        "solve_ms": 1e3 * solve, "solve_ms_min": 1e3 * min(times), "solve_ms_max": 1e3 * max(times),
        "chained_ms": 1e3 * float(np.median(chains)), "chained_ms_samples": [1e3 * c for c in chains],
        "setup_s": setup,
        "task_stream": stream, "overhead_task_stream": stream["overhead"],
        "floor_ms": 1e3 * floor_s, "overhead_floor": 1.0 - floor_s / solve,
    }


def pencil_candidates(n: int, shape: tuple) -> list[tuple[int, int]]:
    """Every ``(py, pz)`` with ``py * pz = n``, one chunk per worker, two z points per chunk at least."""
    return [(py, n // py) for py in range(1, n + 1)
            if n % py == 0 and py <= shape[1] and shape[2] // (n // py) >= 2]


def run_cluster(args, n: int, floors: dict) -> tuple[list[dict], dict]:
    """All configurations on an ``n``-worker cluster."""
    import dask.array as da
    from distributed import Client, wait

    from daskflow import Grid, PoissonSolver
    from daskflow.poisson.distributed import home_chunks, persist_home

    problems: dict[tuple, list[str]] = {}
    if "weak" in args.problems:
        nx, ny, nz = args.weak_per_gpu
        problems.setdefault((nx, ny * n, nz), []).append("weak")
    if "strong" in args.problems:
        problems.setdefault(tuple(args.strong), []).append("strong")
    t0 = time.perf_counter()
    results = []
    with start_cluster(args, n) as cluster, Client(cluster) as client:
        client.wait_for_workers(n)
        startup = time.perf_counter() - t0
        info = client.run(_worker_info, not args.cpu)
        log(f"{n} worker(s) up in {startup:.1f} s: {sorted({v['device'] for v in info.values()})}")
        if args.cpu:
            meta = np.empty((0, 0, 0), dtype=args.dtype)
        else:
            import cupy  # the cluster is up: the chunk meta may now live in this process

            meta = cupy.empty((0, 0, 0), dtype=args.dtype)
        workers = sorted(client.scheduler_info(n_workers=-1)["workers"])
        for shape, labels in problems.items():
            grid = Grid(shape, LENGTHS, z_stretch=Z_STRETCH)
            for pencils in pencil_candidates(n, shape):
                base = _stable_count(client)
                probe = PoissonSolver(grid, BC, STAGGER, "ftm", pencils, dtype=args.dtype)
                chunks = home_chunks(probe)
                chunk = (chunks[0][0], max(chunks[1]), max(chunks[2]))
                if chunk not in floors:
                    floors[chunk] = client.submit(_chunk_floor, chunk, args.dtype, args.repeat, not args.cpu,
                                                  workers=[workers[0]], pure=False).result()
                rhs = da.map_blocks(_random_block, not args.cpu, 0, chunks=chunks, dtype=probe.dtype, meta=meta)
                b = persist_home(probe, rhs, client)
                wait(b)
                del probe
                for method in args.methods:
                    for granularity in args.granularities:
                        before = _stable_count(client)
                        solver = PoissonSolver(grid, BC, STAGGER, method, pencils, dtype=args.dtype,
                                               granularity=granularity)
                        r = measure(client, args, solver, b, labels, n, floors[chunk])
                        del solver
                        _settle(client, before)
                        results.append(r)
                        log(f"{n} gpu(s) grid {shape} {method:5s} {granularity:5s} pencils {pencils}: "
                            f"solve {r['solve_ms']:.2f} ms, chained {r['chained_ms']:.2f} ms, "
                            f"overhead {r['overhead_task_stream']:.2f} (tasks) {r['overhead_floor']:.2f} (floor)")
                del b
                _settle(client, base)
    return results, {"gpus": n, "startup_s": startup, "workers": list(info.values())}


# ---------------------------------------------------------------- summaries

def _config(r: dict) -> dict:
    return {"pencils": r["pencils"], "granularity": r["granularity"]}


def scaling(results: list[dict], problem: str) -> list[dict]:
    """Fastest configuration per method and GPU count, relative to the smallest GPU count."""
    rows = []
    for method in METHODS:
        runs = [r for r in results if problem in r["problems"] and r["method"] == method]
        counts = sorted({r["gpus"] for r in runs})
        if not counts:
            continue
        for n in counts:
            row = {"method": method, "gpus": n, "grid": next(r["grid"] for r in runs if r["gpus"] == n)}
            for metric in ("solve_ms", "chained_ms"):
                best_base = min((r for r in runs if r["gpus"] == counts[0]), key=lambda r: r[metric])
                best = min((r for r in runs if r["gpus"] == n), key=lambda r: r[metric])
                entry = {"ms": best[metric], **_config(best)}
                ratio = best_base[metric] / best[metric]
                if problem == "weak":
                    entry["efficiency"] = ratio
                else:
                    entry["speedup"] = ratio
                    entry["efficiency"] = ratio * counts[0] / n
                row[metric.removesuffix("_ms")] = entry
            row["base_gpus"] = counts[0]
            rows.append(row)
    return rows


def ptdma_speedup(results: list[dict]) -> list[dict]:
    by_key = {(tuple(r["grid"]), r["gpus"], tuple(r["pencils"]), r["granularity"], r["method"]): r for r in results}
    rows = []
    for (grid, n, pencils, granularity, method), ftm in by_key.items():
        ptdma = by_key.get((grid, n, pencils, granularity, "ptdma"))
        if method != "ftm" or ptdma is None:
            continue
        rows.append({"grid": list(grid), "gpus": n, "pencils": list(pencils), "granularity": granularity,
                     "same_algorithm": pencils[1] == 1,
                     "ftm_ms": ftm["solve_ms"], "ptdma_ms": ptdma["solve_ms"],
                     "speedup": ftm["solve_ms"] / ptdma["solve_ms"],
                     "speedup_chained": ftm["chained_ms"] / ptdma["chained_ms"]})
    return rows


def overhead_summary(results: list[dict]) -> list[dict]:
    rows = []
    for granularity in GRANULARITIES:
        for n in sorted({r["gpus"] for r in results}):
            runs = [r for r in results if r["granularity"] == granularity and r["gpus"] == n]
            if runs:
                rows.append({"granularity": granularity, "gpus": n, "configs": len(runs),
                             "median_overhead_task_stream": float(np.median([r["overhead_task_stream"] for r in runs])),
                             "median_overhead_floor": float(np.median([r["overhead_floor"] for r in runs]))})
    return rows


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def main() -> None:
    import dask
    import distributed

    import daskflow

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpu", action="store_true", help="CPU LocalCluster with NumPy chunks (smoke test)")
    parser.add_argument("--gpus", type=int, nargs="+", default=[1, 2, 4], help="GPU (worker) counts")
    parser.add_argument("--weak-per-gpu", type=int, nargs=3, default=None, metavar=("NX", "NY", "NZ"),
                        help="weak scaling: grid (NX, NY * n, NZ) on n GPUs (default 512^3, --quick 256^3)")
    parser.add_argument("--strong", type=int, nargs=3, default=None, metavar=("NX", "NY", "NZ"),
                        help="strong scaling: one fixed grid (default 512^3, --quick 256^3)")
    parser.add_argument("--problems", nargs="+", choices=["weak", "strong"], default=["weak", "strong"])
    parser.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS))
    parser.add_argument("--granularities", nargs="+", choices=GRANULARITIES, default=list(GRANULARITIES))
    parser.add_argument("--repeat", type=int, default=None, help="solves timed one by one (default 10, --quick 3)")
    parser.add_argument("--chain", type=int, default=None, help="solves chained back to back (default 10, --quick 3)")
    parser.add_argument("--chain-repeat", type=int, default=3, help="chains timed; chained_ms is their median")
    parser.add_argument("--warmup", type=int, default=None, help="untimed solves first (default 2, --quick 1)")
    parser.add_argument("--dtype", default="float64", choices=["float64", "float32"])
    parser.add_argument("--protocol", default="ucx", help="GPU cluster comms (ucx or tcp)")
    parser.add_argument("--rmm-pool-size", default=None,
                        help="RMM pool per GPU worker for CuPy (default none: CuPy's own pool)")
    parser.add_argument("--quick", action="store_true", help="fewer repeats and 256^3 defaults")
    parser.add_argument("--out", default=None, help="also write the JSON document here")
    args = parser.parse_args()
    size = [256] * 3 if args.quick else [512] * 3
    args.weak_per_gpu = args.weak_per_gpu or size
    args.strong = args.strong or size
    args.repeat = args.repeat or (3 if args.quick else 10)
    args.chain = args.chain or (3 if args.quick else 10)
    args.warmup = args.warmup if args.warmup is not None else (1 if args.quick else 2)

    t0 = time.perf_counter()
    results, clusters, floors = [], [], {}
    for n in args.gpus:
        r, c = run_cluster(args, n, floors)
        results += r
        clusters.append(c)
    workers = [w for c in clusters for w in c["workers"]]
    devices = sorted({w["device"] for w in workers})
    versions = {"daskflow": daskflow.__version__, "dask": dask.__version__, "distributed": distributed.__version__,
                "cupy": next((w["cupy"] for w in workers if w["cupy"]), None), "numpy": np.__version__,
                "dask_cuda": _version("dask-cuda"), "distributed_ucxx": next(
                    (v for v in map(_version, ("distributed-ucxx-cu13", "distributed-ucxx-cu12")) if v), None),
                "cuda_runtime": next((w["cuda_runtime"] for w in workers if w["cuda_runtime"]), None),
                "python": platform.python_version()}
    document = {
        "benchmark": "poisson_distributed",
        "device": devices[0] if len(devices) == 1 else devices,
        "backend": "numpy (CPU LocalCluster)" if args.cpu else f"cupy (LocalCUDACluster, {args.protocol})",
        "gpu_counts": args.gpus,
        "bc": list(BC), "stagger": STAGGER, "lengths": list(LENGTHS), "z_stretch": Z_STRETCH,
        "versions": versions,
        "config": {"weak_per_gpu": args.weak_per_gpu, "strong": args.strong, "problems": args.problems,
                   "methods": args.methods, "granularities": args.granularities, "repeat": args.repeat,
                   "chain": args.chain, "chain_repeat": args.chain_repeat, "warmup": args.warmup,
                   "dtype": args.dtype, "quick": args.quick,
                   "cpu": args.cpu, "protocol": None if args.cpu else args.protocol,
                   "rmm_pool_size": None if args.cpu else args.rmm_pool_size},
        "clusters": [{k: v for k, v in c.items() if k != "workers"} for c in clusters],
        "total_s": time.perf_counter() - t0,
        "definitions": DEFINITIONS,
        "results": results,
        "weak_scaling": scaling(results, "weak"),
        "strong_scaling": scaling(results, "strong"),
        "ptdma_speedup": ptdma_speedup(results),
        "overhead_by_granularity": overhead_summary(results),
    }
    emit(document, args.out)


if __name__ == "__main__":
    main()
