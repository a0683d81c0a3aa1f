"""Shared test helpers (imported by several test modules)."""

import importlib.util
import os

import numpy as np

from daskflow import tridiagonal
from daskflow.backend import array_module

CHANNEL = {
    "grid": {"shape": [16, 8, 24], "lengths": [4.0, 2.0, 2.0], "z_stretch": 1.8},
    "physics": {"nu": 0.01, "forcing": {"kind": "pressure_gradient", "value": [0.02, 0.0]}},
    "boundaries": {"preset": "channel"},
    "initial": {"kind": "turbulent_channel", "amplitude": 0.3, "seed": 1},
    "time": {"cfl": 0.5, "dt_max": 0.05},
}
FLOW_RATE = {"kind": "flow_rate", "value": [0.6667, 0.0]}
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def benchmark_module(name: str):
    """The script ``benchmarks/<name>.py`` imported as a module (the benchmarks are not a package)."""
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "benchmarks", f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def chunked_solve(op, shift, d, sizes):
    """Solve ``op + shift`` for ``d`` (NumPy or CuPy, ``(m, ncols)``) by the parallel tridiagonal
    algorithm: rows split into chunks of ``sizes``, reduced, reduced system solved, reconstructed."""
    xp = array_module(d)
    starts = np.cumsum([0, *sizes])
    bounds = list(zip(starts[:-1], starts[1:], strict=True))
    chunks = [tridiagonal.precompute(op.lower[a:b], op.diag[a:b], op.upper[a:b], shift) for a, b in bounds]
    d = d.copy()
    rows = [tridiagonal.reduce(d[a:b], ch) for ch, (a, b) in zip(chunks, bounds, strict=True)]
    reduced = tridiagonal.FactoredTridiagonal.factor(*tridiagonal.reduced_system(chunks), op.periodic)
    x = reduced.solve(xp.concatenate(rows))
    i = 0
    for ch, (a, b) in zip(chunks, bounds, strict=True):
        n = tridiagonal.boundary_rows(b - a)
        tridiagonal.reconstruct(d[a:b], x[i], x[i + n - 1], ch)
        i += n
    return d
