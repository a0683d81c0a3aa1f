"""Single-GPU Poisson solve versus its floor.

Times ``PoissonSolver.solve`` for BCs (PP, PP, NN) on a stretched grid next to the floor measured
in the same process on the same array: ``cupy.fft.rfft2`` + ``irfft2`` over x and y plus one
device-to-device copy of the field. Prints one JSON document (device and versions included).

    python benchmarks/poisson_single.py [--sizes 256 512] [--repeat 20] [--dtype float64]
"""

from __future__ import annotations

import argparse
import json
import platform

import numpy as np


def _time(cp, fn, repeat: int) -> float:
    """Median seconds of ``fn()`` over ``repeat`` runs, timed with CUDA events after a warm-up."""
    fn()
    cp.cuda.Device().synchronize()
    times = []
    for _ in range(repeat):
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, stop) * 1e-3)
    return float(np.median(times))


def measure(cp, n: int, dtype: str, repeat: int) -> dict:
    """Solve and floor timings for an ``n^3`` grid."""
    from daskflow import Grid, PoissonSolver

    grid = Grid((n, n, n), (4.0, 2.0, 2.0), z_stretch=2.0)
    solver = PoissonSolver(grid, ("PP", "PP", "NN"), "ccc", "ptdma", (1, 1), dtype=dtype)
    b = cp.asfortranarray(cp.random.default_rng(0).standard_normal(grid.shape, dtype=dtype))
    memory = b.T  # (z, y, x) C-contiguous: the solver's layout
    out = cp.empty_like(memory)
    spec = cp.fft.rfft2(memory, axes=(-2, -1))

    def floor():
        cp.fft.irfft2(cp.fft.rfft2(memory, axes=(-2, -1)), s=memory.shape[1:], axes=(-2, -1))
        out[...] = memory

    t_floor = _time(cp, floor, repeat)
    t_rfft = _time(cp, lambda: cp.fft.rfft2(memory, axes=(-2, -1)), repeat)
    t_irfft = _time(cp, lambda: cp.fft.irfft2(spec, s=memory.shape[1:], axes=(-2, -1)), repeat)
    t_copy = _time(cp, lambda: out.__setitem__(Ellipsis, memory), repeat)
    t_solve = _time(cp, lambda: solver.solve(b), repeat)
    x = solver.solve(b)
    target = solver.compatible(b)
    residual = float(cp.linalg.norm(solver.apply(x) - target) / cp.linalg.norm(target))
    return {
        "n": n, "points": n**3, "dtype": dtype,
        "solve_ms": 1e3 * t_solve, "floor_ms": 1e3 * t_floor,
        "rfft2_ms": 1e3 * t_rfft, "irfft2_ms": 1e3 * t_irfft, "copy_ms": 1e3 * t_copy,
        "ratio_solve_to_floor": t_solve / t_floor,
        "relative_residual": residual,
    }


def main() -> None:
    import cupy as cp

    import daskflow
    from daskflow.backend import device_name

    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[256, 512])
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--dtype", default="float64")
    args = parser.parse_args()

    results = []
    for n in args.sizes:
        results.append(measure(cp, n, args.dtype, args.repeat))
        cp.get_default_memory_pool().free_all_blocks()
    versions = {"daskflow": daskflow.__version__, "cupy": cp.__version__, "numpy": np.__version__,
                "cuda_runtime": cp.cuda.runtime.runtimeGetVersion(), "python": platform.python_version()}
    print(json.dumps({
        "benchmark": "poisson_single",
        "device": device_name(cp),
        "bc": ["PP", "PP", "NN"], "method": "ptdma (pz=1: Thomas)", "z_stretch": 2.0,
        "versions": versions,
        "target": "solve_ms <= 1.3 x floor_ms at 512^3",
        "results": results,
    }, indent=2))


if __name__ == "__main__":
    main()
