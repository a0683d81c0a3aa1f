"""Navier-Stokes solver: projection, accuracy in space and time, laminar flows, forcing."""

import copy

import numpy as np
import pytest

from daskflow import Simulation
from daskflow.backend import to_numpy
from daskflow.ns import operators as ops
from daskflow.validation.taylor_green import errors as _tg_errors
from daskflow.validation.taylor_green import simulate as _taylor_green
from tests.helpers import CHANNEL


def _cfg(base, **sections):
    import copy

    cfg = copy.deepcopy(base)
    for name, values in sections.items():
        cfg.setdefault(name, {}).update(values)
    return cfg


@pytest.mark.parametrize("implicit", ["none", "z", "xyz"])
def test_divergence_free_after_every_step_on_stretched_channel(implicit):
    sim = Simulation(_cfg(CHANNEL, time={"implicit_diffusion": implicit}))
    dx = min(sim.grid.dx, sim.grid.dy, sim.grid.dzf.min())
    for _ in range(8):
        sim.run(steps=1)
        velocity = float(abs(to_numpy(sim.state.u)).max())
        assert sim.divergence_max() * dx / velocity < 1e-11


def test_taylor_green_second_order_in_space():
    errors = [_tg_errors(_taylor_green(n, 0.4 / n**2 * 16, int(round(0.4 / (0.4 / n**2 * 16))))) for n in (16, 32, 64)]
    u_orders = [np.log2(errors[i][0] / errors[i + 1][0]) for i in range(2)]
    p_orders = [np.log2(errors[i][1] / errors[i + 1][1]) for i in range(2)]
    print("Taylor-Green space: errors", errors, "u orders", u_orders, "p orders", p_orders)
    assert 1.9 <= u_orders[-1] <= 2.1
    assert 1.9 <= p_orders[-1] <= 2.1


@pytest.mark.parametrize("implicit, minimum", [("none", 2.7), ("z", 1.9), ("xyz", 1.9)])
def test_taylor_green_time_order(implicit, minimum):
    t_end, n = 0.8, 24
    reference = _taylor_green(n, t_end / 640, 640, nu=0.2, implicit=implicit).state.u
    errors = []
    for steps in (8, 16, 32):
        u = _taylor_green(n, t_end / steps, steps, nu=0.2, implicit=implicit).state.u
        errors.append(float(np.abs(u - reference).max()))
    orders = [np.log2(errors[i] / errors[i + 1]) for i in range(2)]
    print(f"Taylor-Green time ({implicit}): errors {errors} orders {orders}")
    assert orders[-1] >= minimum


LAMINAR = {"grid": {"shape": [4, 4, 32], "lengths": [1.0, 1.0, 2.0]},
           "physics": {"nu": 0.1, "forcing": {"kind": "pressure_gradient", "value": [0.2, 0.0]}},
           "boundaries": {"preset": "channel"}, "time": {"dt_max": 0.05}}


@pytest.mark.parametrize("stretch", [0.0, 2.0])
def test_laminar_channel_stays_on_the_analytic_profile(stretch):
    errors = []
    for nz in (16, 32):
        cfg = _cfg(LAMINAR, grid={"shape": [4, 4, nz], "z_stretch": stretch}, initial={"kind": "poiseuille"})
        sim = Simulation(cfg)
        exact = to_numpy(sim.state.u).copy()
        sim.run(steps=20)
        errors.append(np.abs(to_numpy(sim.state.u) - exact).max() / exact.max())
    print("laminar channel, stay:", errors)
    assert errors[1] < 1e-2 and (errors[1] < 1e-13 or errors[0] / errors[1] > 3.5)


@pytest.mark.parametrize("stretch", [0.0, 2.0])
def test_laminar_channel_relaxes_from_rest(stretch):
    cfg = _cfg(LAMINAR, grid={"z_stretch": stretch}, time={"implicit_diffusion": "z", "dt": 0.5})
    sim = Simulation(cfg)
    target = Simulation(_cfg(cfg, initial={"kind": "poiseuille"})).state.u
    sim.run(until=80.0)  # 20 viscous times lz^2 / nu / pi^2
    error = np.abs(to_numpy(sim.state.u) - to_numpy(target)).max() / to_numpy(target).max()
    assert error < 5e-3


@pytest.mark.parametrize("stretch", [0.0, 2.0])
def test_couette_relaxes_to_the_linear_profile_and_stays(stretch):
    cfg = {"grid": {"shape": [4, 4, 24], "lengths": [1.0, 1.0, 2.0], "z_stretch": stretch},
           "physics": {"nu": 0.1, "forcing": {"kind": "none"}}, "boundaries": {"preset": "couette"},
           "time": {"implicit_diffusion": "z", "dt": 0.5}}
    exact = Simulation(_cfg(cfg, initial={"kind": "couette"}))
    linear = to_numpy(exact.state.u).copy()
    exact.run(steps=10)
    assert np.abs(to_numpy(exact.state.u) - linear).max() < 1e-12  # linear profiles are exact
    sim = Simulation(cfg)
    sim.run(until=80.0)
    assert np.abs(to_numpy(sim.state.u) - linear).max() < 1e-3


def test_constant_flow_rate_holds_bulk_velocity():
    cfg = _cfg(CHANNEL, physics={"forcing": {"kind": "flow_rate", "value": [0.6667, 0.0]}})
    sim = Simulation(cfg)
    for _ in range(10):
        sim.run(steps=1)
        assert abs(sim.bulk_velocity() - 0.6667) < 1e-12
    assert sim.divergence_max() < 1e-12


@pytest.mark.parametrize("implicit", ["none", "z"])
@pytest.mark.parametrize("poisson, pencils", [("ptdma", [2, 2]), ("ftm", [2, 2]), ("ptdma", [1, 3]), ("ftm", [1, 3])])
def test_decomposed_pressure_solves_equal_single_chunk(implicit, poisson, pencils):
    base = _cfg(CHANNEL, time={"implicit_diffusion": implicit})
    reference = Simulation(base).run(steps=20)
    sim = Simulation(_cfg(base, solver={"poisson": poisson, "pencils": pencils})).run(steps=20)
    for name in "uvwp":
        ref = to_numpy(getattr(reference.state, name))
        np.testing.assert_allclose(to_numpy(getattr(sim.state, name)), ref, rtol=0,
                                   atol=1e-10 * np.abs(ref).max())
    expected = {(2, 2): ((4, 4), (12, 12)), (1, 3): ((8,), (8, 8, 8))}[tuple(pencils)]
    assert sim.u.chunks[1:] == expected


def test_set_evaluates_functions_at_staggered_positions():
    sim = Simulation({"grid": {"shape": [4, 3, 5], "lengths": [1.0, 1.0, 1.0]}, "boundaries": {"preset": "periodic"},
                      "physics": {"nu": 0.01, "forcing": {"kind": "none"}}})
    sim.set(u=lambda x, y, z: x + 0 * y + 0 * z, w=lambda x, y, z: z + 0 * x + 0 * y)
    np.testing.assert_allclose(to_numpy(sim.state.u)[:, 0, 0], sim.grid.xf[1:])
    np.testing.assert_allclose(to_numpy(sim.state.w)[0, 0, :], sim.grid.zf[1:])
    with pytest.raises(ValueError, match="unknown field"):
        sim.set(q=np.zeros((4, 3, 5)))


def test_operators_divergence_of_gradient_is_the_poisson_operator(rng):
    from daskflow import Grid, PoissonSolver
    from daskflow.ns.boundaries import build

    grid = Grid((6, 5, 8), (1.0, 2.0, 1.5), z_stretch=2.0)
    bcs = build({"preset": "channel"})
    m = ops.Metrics.of(grid, False)
    phi = rng.standard_normal(grid.shape)
    P = ops.pad(phi, bcs.p)
    grads = [ops.gradient(P, m, i) for i in range(3)]
    grads[2][:, :, -1] = 0.0  # the wall face keeps its (zero) normal velocity
    padded = [ops.pad(gr, bcs.components[i], i) for i, gr in enumerate(grads)]
    lap = PoissonSolver(grid, bcs.p).apply(np.asfortranarray(phi))
    np.testing.assert_allclose(ops.divergence(*padded, m), lap, rtol=1e-12, atol=1e-10)


def test_numpy_steps_are_never_captured_as_cuda_graphs():
    """CUDA graphs (daskflow.ns.graphs) are for single-pencil GPU steps only."""
    sim = Simulation(copy.deepcopy(CHANNEL)).run(steps=2)
    assert sim._local.steppers[0].graphs is None
