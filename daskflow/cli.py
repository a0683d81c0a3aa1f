"""Command line: ``daskflow run CONFIG`` (a simulation), ``daskflow validate CONFIG``,
``daskflow info``, ``daskflow jobscript CONFIG``, and ``daskflow poisson`` (a manufactured-solution
Poisson solve on an embedded Dask cluster, checked against the exact solution).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

from daskflow.backend import cupy_or_none, device_name, to_numpy
from daskflow.bc import BC_PAIRS
from daskflow.grid import Grid
from daskflow.manufactured import manufactured
from daskflow.poisson import PoissonSolver
from daskflow.poisson.plan import DTYPES, METHODS


def _to_gpu(block):
    import cupy

    return cupy.asarray(block)


def poisson_on_cluster(args, solver: PoissonSolver, rhs: np.ndarray, gpu: bool) -> tuple:
    """Solve the demo problem as a Dask graph on the embedded cluster; returns (x, seconds)."""
    import dask.array as da
    from distributed import wait

    from daskflow.cluster import start
    from daskflow.config import DEFAULTS
    from daskflow.poisson.distributed import home_chunks, persist_home

    section = {**DEFAULTS["cluster"], "kind": "local-cuda" if gpu else "local"}
    with start(section, args.pencils[0] * args.pencils[1]) as client:
        print(f"daskflow: {len(client.scheduler_info()['workers'])} workers, dashboard {client.dashboard_link}",
              file=sys.stderr)
        b = da.from_array(rhs, chunks=home_chunks(solver))
        if gpu:
            b = b.map_blocks(_to_gpu, dtype=rhs.dtype)
        b = persist_home(solver, b, client)
        wait(solver.solve(b))  # set-up and warm-up
        timings = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            x = solver.solve(b)
            wait(x)
            timings.append(time.perf_counter() - start)
        return x.map_blocks(to_numpy, dtype=rhs.dtype).compute(), float(np.median(timings))


def poisson_demo(args: argparse.Namespace) -> dict:
    gpu = cupy_or_none() if args.device in ("auto", "gpu") else None
    if args.device == "gpu" and gpu is None:
        raise SystemExit("daskflow poisson: --device gpu needs CuPy and a CUDA device")
    grid = Grid(tuple(args.shape), tuple(args.lengths), z_stretch=args.stretch)
    solver = PoissonSolver(grid, tuple(args.bc), "ccc", method=args.method, pencils=tuple(args.pencils),
                           dtype=args.dtype, granularity=args.granularity)
    if args.cluster == "local":
        exact, rhs = (v.astype(args.dtype, order="F") for v in manufactured(grid, args.bc))
        x, seconds = poisson_on_cluster(args, solver, rhs, gpu is not None)
        residual = float(np.linalg.norm(solver.apply(x.astype(args.dtype, order="F")) - solver.compatible(rhs))
                         / np.linalg.norm(solver.compatible(rhs)))
        err = x - exact
        if solver.plan.singular:
            err -= err.mean()
        return _report(args, grid, gpu or np, residual, float(np.abs(err).max()), seconds, "local Dask cluster")
    xp = gpu or np
    exact, rhs = (xp.asarray(v, dtype=args.dtype, order="F") for v in manufactured(grid, args.bc))
    x = solver.solve(rhs)  # warm-up (plans, kernels)
    timings = []
    for _ in range(args.repeat):
        if gpu is not None:
            gpu.cuda.Device().synchronize()
        start = time.perf_counter()
        x = solver.solve(rhs)
        if gpu is not None:
            gpu.cuda.Device().synchronize()
        timings.append(time.perf_counter() - start)
    target = solver.compatible(rhs)
    residual = float(xp.linalg.norm(solver.apply(x) - target) / xp.linalg.norm(target))
    err = to_numpy(x) - to_numpy(exact)
    if solver.plan.singular:
        err -= err.mean()
    return _report(args, grid, xp, residual, float(np.abs(err).max()), float(np.median(timings)), "in process")


def _report(args, grid: Grid, xp, residual: float, error: float, seconds: float, where: str) -> dict:
    return {
        "device": device_name(xp),
        "ran": where,
        "shape": list(grid.shape),
        "bc": list(args.bc),
        "method": args.method,
        "pencils": list(args.pencils),
        "granularity": args.granularity,
        "dtype": args.dtype,
        "relative_residual": residual,
        "max_error_vs_exact": error,
        "seconds_per_solve": seconds,
    }


def _parser() -> argparse.ArgumentParser:
    from daskflow import __version__

    parser = argparse.ArgumentParser(prog="daskflow", description=__doc__)
    parser.add_argument("--version", action="version", version=f"daskflow {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="run a configured simulation (YAML), on an embedded cluster by default")
    r.add_argument("config", help="YAML configuration file, or the name of a shipped example (channel-small)")
    r.add_argument("--steps", type=int, help="override time.steps: the run's length in steps from its initial "
                   "state (a restart continues to the same final step)")
    r.add_argument("--output", help="override output.store")
    r.add_argument("--pencils", type=int, nargs=2, metavar=("PY", "PZ"), help="override solver.pencils")
    r.add_argument("--restart", action="store_true",
                   help="continue the store's run from its latest intact checkpoint, to time.steps (or "
                        "time.end_time); the grid, boundaries, nu and dtype must be the store's")
    r.add_argument("--cluster", default=None,
                   help="override cluster.kind: auto (default: embedded cluster, one worker per pencil), none (in "
                        "process), local, local-cuda, slurm, pbs, a scheduler address, or scheduler-file:PATH")
    r.add_argument("--report-every", type=int, default=0, help="steps between progress lines (default: ~20 lines)")
    v = sub.add_parser("validate", help="check a configuration without starting anything")
    v.add_argument("config")
    sub.add_parser("info", help="versions, GPUs, UCX availability, default cluster")
    j = sub.add_parser("jobscript", help="print the batch script dask-jobqueue submits for the cluster section")
    j.add_argument("config")
    p = sub.add_parser("poisson", help="solve a manufactured Poisson problem and report accuracy and speed")
    p.add_argument("--shape", type=int, nargs=3, default=[64, 64, 64], metavar=("NX", "NY", "NZ"))
    p.add_argument("--lengths", type=float, nargs=3, default=[2.0, 1.0, 2.0], metavar=("LX", "LY", "LZ"))
    p.add_argument("--stretch", type=float, default=2.0, help="z stretching (0 = uniform)")
    p.add_argument("--bc", nargs=3, default=["PP", "PP", "NN"], choices=BC_PAIRS, metavar="BC",
                   help=f"x y z boundary pairs, each one of {', '.join(BC_PAIRS)}")
    p.add_argument("--method", default="ptdma", choices=METHODS)
    p.add_argument("--pencils", type=int, nargs=2, default=[1, 2], metavar=("PY", "PZ"))
    p.add_argument("--dtype", default="float64", choices=DTYPES)
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "gpu"])
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--cluster", default="local", choices=["local", "none"],
                   help="local: an embedded Dask cluster with one worker per pencil (default); none: in process")
    p.add_argument("--granularity", default="fused", choices=["stage", "fused"],
                   help="Dask graph granularity on a cluster")
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except KeyboardInterrupt:  # Ctrl-C outside a run's own handling (imports, start-up)
        print("daskflow: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader of the output went away (daskflow validate X | head)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _main(argv: list[str] | None) -> int:
    args = _parser().parse_args(argv)
    if args.command in ("run", "validate", "info", "jobscript"):
        from daskflow.runner import info, jobscript, run, validate

        try:
            return {"run": run, "validate": validate, "info": info, "jobscript": jobscript}[args.command](args)
        except ValueError as exc:
            print(f"daskflow {args.command}: {exc}", file=sys.stderr)
            return 2
    if args.cluster == "local" and args.pencils[0] * args.pencils[1] > 64:
        print("daskflow poisson: --pencils asks for more than 64 workers", file=sys.stderr)
        return 2
    try:
        result = poisson_demo(args)
    except ValueError as exc:
        print(f"daskflow {args.command}: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
