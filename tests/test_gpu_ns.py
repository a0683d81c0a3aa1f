"""GPU twins of the Navier-Stokes checks: CuPy runs equal NumPy runs, divergence-free."""

import copy

import numpy as np
import pytest

from daskflow import Simulation
from tests.helpers import CHANNEL as BASE_CHANNEL
from tests.helpers import FLOW_RATE

pytestmark = pytest.mark.gpu

CHANNEL = {**BASE_CHANNEL, "physics": {"nu": 0.01, "forcing": FLOW_RATE}}


@pytest.mark.parametrize("implicit", ["none", "z", "xyz"])
@pytest.mark.parametrize("solver", [{"poisson": "ptdma", "pencils": [1, 1]}, {"poisson": "ptdma", "pencils": [2, 3]},
                                    {"poisson": "ftm", "pencils": [2, 2]}])
def test_cupy_simulation_equals_numpy(cupy, implicit, solver):
    runs = {}
    for device in ("cpu", "gpu"):
        cfg = copy.deepcopy(CHANNEL)
        cfg["time"]["implicit_diffusion"] = implicit
        cfg["solver"] = {**solver, "device": device}
        sim = Simulation(cfg).run(steps=10)
        assert isinstance(sim.state.u, cupy.ndarray if device == "gpu" else np.ndarray)
        runs[device] = sim
    for name in "uvwp":
        cpu = np.asarray(getattr(runs["cpu"].state, name))
        gpu = getattr(runs["gpu"].state, name).get()
        np.testing.assert_allclose(gpu, cpu, rtol=0, atol=1e-10 * np.abs(cpu).max())
    dz = runs["gpu"].grid.dzf.min()
    assert runs["gpu"].divergence_max() * dz / float(abs(runs["gpu"].state.u).max()) < 1e-11
    assert abs(runs["gpu"].bulk_velocity() - 0.6667) < 1e-12


@pytest.mark.parametrize("axes", [(), (0, 1), (0, 1, 2)])
def test_fused_explicit_kernel_matches_array_expressions(cupy, axes):
    from daskflow.grid import Grid
    from daskflow.ns import advection as adv
    from daskflow.ns import operators as ops
    from daskflow.ns.kernels import explicit_terms

    grid = Grid((10, 7, 12), (2.0, 1.0, 2.0), z_stretch=2.0)
    m = ops.Metrics.of(grid, False)
    rng = np.random.default_rng(3)
    padded = [rng.standard_normal((12, 9, 14)) for _ in range(3)]
    expected = adv.advection(*padded, m)
    expected = [e + 0.3 * ops.laplacian(f, m, i, axes) if axes else e
                for i, (e, f) in enumerate(zip(expected, padded, strict=True))]
    got = explicit_terms(*(cupy.asarray(p) for p in padded), m, 0.3, axes)
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_allclose(g.get(), e, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_padded_copies_on_the_gpu_equal_numpys(cupy, rng, dtype):
    """Padded copies on the GPU put every value where NumPy's do, into a single field and into each
    field of a stack (the halo's allocation), ghosts from the same rules."""
    from daskflow.ns import operators as ops
    from daskflow.ns.boundaries import ComponentBC

    fields = [rng.standard_normal((7, 5, 9)).astype(dtype) for _ in range(3)]
    bc = ComponentBC(("PP", "PP", "DD"), ((0.0, 0.0), (0.0, 0.0), (1.0, -1.0)))
    for got, want in zip(ops.padded_copies([cupy.asarray(f) for f in fields]), ops.padded_copies(fields), strict=True):
        np.testing.assert_array_equal(got[1:-1, 1:-1, 1:-1].get(), want[1:-1, 1:-1, 1:-1])
    for i, f in enumerate(fields):
        np.testing.assert_array_equal(ops.pad(cupy.asarray(f), bc, i).get(), ops.pad(f, bc, i))
