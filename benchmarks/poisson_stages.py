"""Where the compute of a distributed pressure solve goes: every chunk of a ``(py, 1)`` decomposition
solved on one GPU in this process (no transport), each stage timed with CUDA events, against the
one-pencil solve of one chunk's points. The difference is what the pencils add besides moving the
pieces: the transposes' assemblies, and the x and y transforms apart instead of one 2-D FFT. In one
process every piece stays where it is cut, so each is swapped straight into its place of the
assembled chunk (as a participant's piece for itself is in a distributed solve; the pieces that
travel also pay a cut of their own).
Prints one JSON document with the device name; times are ms per solve and per chunk.

    python benchmarks/poisson_stages.py [--shape 512 256 144] [--py 2] [--repeat 10]
"""

from __future__ import annotations

import argparse
import functools
from collections import defaultdict

import numpy as np
from emit import emit

STAGES = {"daskflow.poisson.stages": ["forward_x", "forward_y_owned", "backward_y_owned", "backward_x_owned",
                                      "forward_xy", "backward_xy_owned"],
          "daskflow.poisson.algorithms": ["cut_for_y_pencil", "cut_for_x_pencil", "assemble_y", "assemble_x"],
          "daskflow.zsolve.spectral": ["thomas"]}


class StageClock:
    """Wraps the stage functions of :data:`STAGES` (module attributes, looked up when a solve runs)
    so that each call is timed by CUDA events while :attr:`on`."""

    def __init__(self, cupy) -> None:
        import importlib

        self.cupy, self.on, self.times = cupy, True, defaultdict(list)
        for module_name, names in STAGES.items():
            module = importlib.import_module(module_name)
            for name in names:
                setattr(module, name, self._timed(name, getattr(module, name)))

    def _timed(self, name: str, fn):
        @functools.wraps(fn)
        def stage(*args, **kwargs):
            if not self.on:
                return fn(*args, **kwargs)
            start, stop = self.cupy.cuda.Event(), self.cupy.cuda.Event()
            start.record()
            out = fn(*args, **kwargs)
            stop.record()
            stop.synchronize()
            self.times[name].append(self.cupy.cuda.get_elapsed_time(start, stop))
            return out

        return stage


def measure(cupy, clock: StageClock, shape: tuple[int, int, int], py: int, repeat: int) -> dict:
    """Stage and whole-solve times (ms per solve and chunk) of ``py`` chunks of ``shape`` each."""
    from daskflow import Grid
    from daskflow.bc import Boundaries
    from daskflow.pencils.executor import LocalExecutor
    from daskflow.poisson import algorithms
    from daskflow.poisson.plan import SpectralPlan

    nx, ny, nz = shape
    grid = Grid((nx, ny * py, nz), (12.0, 6.0, 2.0), z_stretch=1.8)
    plan = SpectralPlan(grid, Boundaries.parse(("PP", "PP", "NN"), "ccc"), 0.0, 1.0, "ptdma", (py, 1),
                        np.dtype("float64"))
    rng = cupy.random.default_rng(0)
    blocks = {k: rng.standard_normal((nz, ny, nx)) for k in plan.decomposition.indices}  # memory order (z, y, x)
    ex = LocalExecutor(plan)
    algorithms.solve(ex, plan, dict(blocks), "ptdma")  # warm-up: FFT plans, kernels, pools
    clock.times.clear()
    for _ in range(repeat):
        algorithms.solve(ex, plan, dict(blocks), "ptdma")
    stages = {name: float(np.median(t)) * len(t) / repeat / py for name, t in clock.times.items()}
    clock.on = False
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    start.record()
    for _ in range(repeat):
        algorithms.solve(ex, plan, dict(blocks), "ptdma")
    stop.record()
    stop.synchronize()
    clock.on = True
    solve = cupy.cuda.get_elapsed_time(start, stop) / repeat / py
    return {"py": py, "grid": list(grid.shape), "solve_ms_per_chunk": solve, "stages_ms_per_chunk": stages}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", type=int, nargs=3, default=[512, 256, 144], help="points per chunk")
    parser.add_argument("--py", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()
    import cupy

    from daskflow.backend import device_name

    clock = StageClock(cupy)
    shape = tuple(args.shape)
    runs = [measure(cupy, clock, shape, 1, args.repeat), measure(cupy, clock, shape, args.py, args.repeat)]
    emit({"benchmark": "poisson_stages", "device": device_name(cupy), "shape_per_chunk": list(shape), "runs": runs,
          "note": "stages synchronised one by one; solve_ms_per_chunk unsynchronised"})


if __name__ == "__main__":
    main()
