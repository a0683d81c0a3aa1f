"""The z-row tridiagonal kernels (:mod:`daskflow.tridiagonal.row_kernels`) over a sweep of their tile
geometries on one GPU: Thomas's two sweeps with the addend (the z-implicit diffusion of one velocity
component on one GPU) and P-TDMA's reduction and reconstruction (the same on z-chunks). Prints one
JSON document with the device name: per geometry and kernel the ms per call, the bandwidth it
reaches (bytes the kernel must move: a Thomas solve with its addend reads the field twice, writes
it twice and reads the addend once) and whether its bits equal the shipped geometries' (the first
run, ``geometry: null``).

    python benchmarks/row_kernels.py [--rows 130560] [--values 144] [--repeat 20]

The defaults are the z rows of one 510 x 256 x 144 float64 pencil (the channel step's per-GPU grid).
"""

from __future__ import annotations

import argparse
import itertools

import numpy as np
from emit import emit, event_seconds

# bytes moved per call, in units of the field's size
FIELD_PASSES = {"thomas_uniform_rows": 5, "cr_reduce_rows": 2, "cr_reconstruct_rows": 3}


def _systems(m: int):
    """A diagonally dominant matrix shared by every row: what the implicit diffusion solves."""
    rng = np.random.default_rng(1)
    lower, upper = -rng.uniform(0.2, 1, m), -rng.uniform(0.2, 1, m)
    diag = 1 - lower - upper
    return lower, diag, upper


def _solvers(cupy, field0, geometry: dict | None) -> tuple[dict, object]:
    """Per kernel, a call that runs it on a fresh copy of ``field0`` into the returned work array."""
    from daskflow import tridiagonal

    m = field0.shape[-1]
    lower, diag, upper = _systems(m)
    factored = tridiagonal.FactoredTridiagonal.factor(lower[:, None], diag[:, None], upper[:, None], False)
    factored = factored.to(cupy)
    chunk = tridiagonal.precompute(lower, diag, upper, np.zeros(1)).to(cupy)  # where a solver keeps it
    addend = cupy.full_like(field0, 0.5)
    reduced = field0.copy()
    tridiagonal.reduce_rows(reduced, m, chunk, geometry)
    first = cupy.asarray(np.random.default_rng(2).standard_normal(field0.size // m))
    last = first[::-1].copy()
    work = field0.copy()

    def thomas():
        work[...] = field0
        tridiagonal.solve_rows_in_place(factored, work, addend, geometry)

    def reduce():
        work[...] = field0
        tridiagonal.reduce_rows(work, m, chunk, geometry)

    def reconstruct():
        work[...] = reduced
        tridiagonal.reconstruct_rows(work, first, last, m, chunk, addend, geometry)

    return {"thomas_uniform_rows": thomas, "cr_reduce_rows": reduce, "cr_reconstruct_rows": reconstruct}, work


def measure(cupy, rows: int, values: int, repeat: int, geometries: list[dict | None]) -> list[dict]:
    """Each geometry's rows; the copy that refreshes the field before each call is timed alone and
    taken off."""
    field0 = cupy.asarray(np.random.default_rng(0).standard_normal((rows, values)))
    scratch = cupy.empty_like(field0)
    copy_s = event_seconds(cupy, lambda: scratch.__setitem__(Ellipsis, field0), repeat, warmup=2)
    reference, out = {}, []
    for geometry in geometries:
        solvers, work = _solvers(cupy, field0, geometry)
        row = {"geometry": geometry, "kernels": {}}
        for name, call in solvers.items():
            seconds = event_seconds(cupy, call, repeat, warmup=2) - copy_s
            call()
            result = work.copy()
            reference.setdefault(name, result)
            row["kernels"][name] = {"ms": 1e3 * seconds,
                                    "gb_per_s": FIELD_PASSES[name] * field0.nbytes / seconds / 1e9,
                                    "bits_equal_shipped": bool((result == reference[name]).all())}
        out.append(row)
    return out


def _geometries(values: list[int], warps: list[int], batches: list[int]) -> list[dict | None]:
    """The shipped geometries (``None``: each kernel its own), then every one of the sweep, each
    checked (float64 tiles) before anything runs."""
    from daskflow.tridiagonal.row_kernels import definitions

    sweep = [{"VALUES": v, "WARPS": w, "BATCH": b} for v, w, b in itertools.product(values, warps, batches)]
    for geometry in sweep:
        definitions(geometry, itemsize=8)
    return [None] + sweep


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=510 * 256)
    parser.add_argument("--values", type=int, default=144, help="values per row (the z points of a chunk)")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--tile-values", type=int, nargs="+", default=[32, 16])
    parser.add_argument("--warps", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--batches", type=int, nargs="+", default=[8, 16, 32])
    args = parser.parse_args()
    import cupy

    from daskflow.backend import device_name
    from daskflow.tridiagonal.row_kernels import GEOMETRY

    geometries = _geometries(args.tile_values, args.warps, args.batches)
    emit({"benchmark": "row_kernels", "device": device_name(cupy), "rows": args.rows, "values": args.values,
          "field_bytes": args.rows * args.values * 8, "shipped": GEOMETRY,
          "runs": measure(cupy, args.rows, args.values, args.repeat, geometries)})


if __name__ == "__main__":
    main()
