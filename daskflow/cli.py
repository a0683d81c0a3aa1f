"""Command line: ``daskflow poisson`` (a manufactured-solution Poisson demo and self-check).

Later subcommands (``run``, ``validate``, ``info``, ``jobscript``) share this entry point.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

from daskflow.backend import cupy_or_none, device_name, to_numpy
from daskflow.bc import BC_PAIRS
from daskflow.grid import Grid
from daskflow.manufactured import manufactured
from daskflow.poisson import PoissonSolver
from daskflow.poisson.plan import DTYPES, METHODS


def poisson_demo(args: argparse.Namespace) -> dict:
    gpu = cupy_or_none() if args.device in ("auto", "gpu") else None
    if args.device == "gpu" and gpu is None:
        raise SystemExit("daskflow poisson: --device gpu needs CuPy and a CUDA device")
    xp = gpu or np
    grid = Grid(tuple(args.shape), tuple(args.lengths), z_stretch=args.stretch)
    solver = PoissonSolver(grid, tuple(args.bc), "ccc", method=args.method, pencils=tuple(args.pencils),
                           dtype=args.dtype)
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
    return {
        "device": device_name(xp),
        "shape": list(grid.shape),
        "bc": list(args.bc),
        "method": args.method,
        "pencils": list(args.pencils),
        "dtype": args.dtype,
        "relative_residual": residual,
        "max_error_vs_exact": float(np.abs(err).max()),
        "seconds_per_solve": float(np.median(timings)),
    }


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="daskflow", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
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
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        result = poisson_demo(args)
    except ValueError as exc:
        print(f"daskflow {args.command}: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
