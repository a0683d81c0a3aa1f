"""Advection in skew-symmetric form (``physics.advection: skew_symmetric``) against the divergence form.

The skew-symmetric operator conserves the discrete kinetic energy (volume-weighted with the cell and
face volumes ``dx dy dz``) exactly, on a periodic box, a stretched wall-bounded channel and a cavity;
in time only the RK3 error remains. It agrees with the divergence form to second order on smooth
fields, exactly (on uniform axes) for discretely divergence-free ones, and runs on a cluster.
"""

import copy

import numpy as np
import pytest

from daskflow import Simulation
from daskflow.backend import to_numpy
from daskflow.config import load
from daskflow.grid import Grid
from daskflow.ns import advection as adv
from daskflow.ns import boundaries as nsb
from daskflow.ns import operators as ops
from daskflow.ns.domain import whole_domain
from daskflow.ns.initial import positions
from daskflow.ns.stepper import State, Stepper
from daskflow.run_config import ForcingConfig
from tests.helpers import CHANNEL as BASE_CHANNEL
from tests.helpers import FLOW_RATE

NO_FORCING = ForcingConfig("none", (0.0, 0.0))
WALLS = {"periodic": (), "channel": (2,), "cavity": (0, 2)}
CASES = {  # name: (preset, shape, lengths, z_stretch)
    "periodic-box": ("periodic", (12, 10, 8), (2.0, 1.5, 1.0), 0.0),
    "periodic-stretched": ("periodic", (12, 10, 16), (2.0, 1.5, 2.0), 1.5),
    "channel-uniform": ("channel", (12, 10, 16), (2.0, 1.5, 2.0), 0.0),
    "channel-stretched": ("channel", (12, 10, 16), (2.0, 1.5, 2.0), 2.0),
    "cavity-stretched": ("cavity", (10, 6, 14), (1.0, 0.5, 1.0), 2.5),
}


def _setup(case: str):
    preset, shape, lengths, stretch = CASES[case]
    grid = Grid(shape, lengths, stretch)
    bcs = nsb.build({"preset": preset})
    return grid, bcs, ops.Metrics.of(grid, bcs.periodic(2))


def divergence_free(grid: Grid, walls, rng, scale: float = 1.0) -> list:
    """A random, discretely divergence-free staggered field with zero normal velocity on ``walls``:
    ``u = curl psi`` with backward differences (``psi_c`` on the faces along the two axes but ``c``)."""
    width = (grid.dx, grid.dy, grid.dzf[None, None, :])
    psi = [scale * rng.standard_normal(grid.shape) for _ in range(3)]
    for c in range(3):
        for axis in walls:
            if axis != c:  # psi_c on the wall faces of ``axis``: zero (no flow through them)
                psi[c][ops._index(axis, -1)] = 0.0

    def back(f, axis):
        if axis in walls:
            below = np.concatenate([np.zeros_like(ops._take(f, axis, slice(0, 1))), ops._take(f, axis, slice(0, -1))],
                                   axis=axis)
        else:
            below = np.roll(f, 1, axis)
        return (f - below) / width[axis]

    return [np.asfortranarray(back(psi[(c + 2) % 3], (c + 1) % 3) - back(psi[(c + 1) % 3], (c + 2) % 3))
            for c in range(3)]


def volumes(m: ops.Metrics) -> list:
    """Control volumes of the stored u, v, w points (``w``: centre-to-centre z distances)."""
    cell = m.dx * m.dy
    return [cell * m.dzf[1:-1][None, None, :]] * 2 + [cell * m.dzc[1:][None, None, :]]


def production(fields, terms, m: ops.Metrics) -> tuple[float, float]:
    """``sum(V u . A(u))`` and the same sum of absolute values (its scale)."""
    parts = [f * a * v for f, a, v in zip(fields, terms, volumes(m), strict=True)]
    return float(sum(p.sum() for p in parts)), float(sum(np.abs(p).sum() for p in parts))


def padded(fields, bcs):
    return [ops.pad(f, bcs.components[i], i) for i, f in enumerate(fields)]


# ---------------------------------------------------------------------------- energy, momentum, identities


@pytest.mark.parametrize("case", list(CASES))
def test_skew_symmetric_form_produces_no_kinetic_energy(case):
    """``sum(V u . S(u)) = 0`` to round-off for divergence-free fields (and for any field: ``V S`` is
    antisymmetric); the divergence form's production is zero on uniform grids only."""
    grid, bcs, m = _setup(case)
    rng = np.random.default_rng(7)
    fields = divergence_free(grid, WALLS[bcs.preset], rng)
    P = padded(fields, bcs)
    assert np.abs(ops.divergence(*P, m)).max() < 1e-12 * max(np.abs(f).max() for f in fields) / grid.dzf.min()
    skew = adv.explicit_terms(*P, m, 0.0, (), advection="skew_symmetric")
    prod, scale = production(fields, skew, m)
    assert abs(prod) < 1e-13 * scale
    prod, scale = production(fields, adv.skew_advection(*P, m), m)
    assert abs(prod) < 1e-13 * scale
    divergence_form = production(fields, adv.explicit_terms(*P, m, 0.0, ()), m)
    if grid.z_stretch == 0.0:
        assert abs(divergence_form[0]) < 1e-13 * divergence_form[1]
    else:  # the plain mean of u, v on the x-, y-faces of a w volume: measured -2.4e-4, -5.0e-4, 2.1e-3 here
        assert abs(divergence_form[0]) > 1e-5 * divergence_form[1]
    # any field, divergence-free or not, with zero normal velocity at the walls
    rough = [rng.standard_normal(grid.shape) for _ in range(3)]
    for axis in WALLS[bcs.preset]:
        rough[axis][ops._index(axis, -1)] = 0.0
    prod, scale = production(rough, adv.skew_advection(*padded(rough, bcs), m), m)
    assert abs(prod) < 1e-13 * scale


@pytest.mark.parametrize("case", ["periodic-box", "periodic-stretched", "channel-uniform", "channel-stretched"])
def test_skew_symmetric_equals_divergence_form_for_divergence_free_fields(case):
    """With the volume-weighted advecting velocity on the w volumes, the fluxes of every momentum
    volume sum to its mean discrete divergence: the two forms are identical for a discretely
    divergence-free field on uniform grids (u and v also on stretched ones), and the skew form
    conserves momentum (periodic box) like the divergence form."""
    grid, bcs, m = _setup(case)
    fields = divergence_free(grid, WALLS[bcs.preset], np.random.default_rng(11))
    P = padded(fields, bcs)
    skew, div = adv.skew_advection(*P, m), adv.advection(*P, m)
    same = (0, 1, 2) if grid.z_stretch == 0.0 else (0, 1)
    for c in same:
        np.testing.assert_allclose(skew[c], div[c], rtol=0, atol=1e-12 * np.abs(div[c]).max())
    if grid.z_stretch:
        assert np.abs(skew[2] - div[2]).max() > 1e-3 * np.abs(div[2]).max()
    if bcs.preset == "periodic":
        for s, v in zip(skew, volumes(m), strict=True):
            assert abs((s * v).sum()) < 1e-13 * np.abs(s * v).sum()


@pytest.mark.parametrize("axes", [(0, 1, 2), (0, 1), ()])
def test_blocked_skew_terms_equal_the_plain_expressions(blocking, axes):
    grid = Grid((12, 10, 9), (2.0, 1.5, 2.0), 1.7, "both")
    m = ops.Metrics.of(grid, False)
    rng = np.random.default_rng(3)
    P = [np.asfortranarray(rng.standard_normal((14, 12, 11))) for _ in range(3)]
    got = adv.explicit_terms(*P, m, 0.03, axes, threads=blocking, advection="skew_symmetric")
    for i, (s, g) in enumerate(zip(adv.skew_advection(*P, m), got, strict=True)):
        expected = s + 0.03 * ops.laplacian(P[i], m, i, axes) if axes else s
        assert g.flags.f_contiguous
        np.testing.assert_allclose(g, expected, rtol=0, atol=1e-13 * np.abs(expected).max())


# ---------------------------------------------------------------------------- second-order agreement


def _smooth(grid: Grid) -> tuple[list, list]:
    """A smooth divergence-free channel field (zero at the walls) and its exact ``-(u . grad) u``.

    ``u = sin x cos y g'(z)``, ``v = sin x g(z)``, ``w = -cos x cos y g(z)``, ``g = sin^2(pi z / 2)``
    on ``z`` in [0, 2]."""
    def field(component):
        x, y, z = positions(grid, component)
        g, g1, g2 = np.sin(np.pi * z / 2) ** 2, np.pi / 2 * np.sin(np.pi * z), np.pi**2 / 2 * np.cos(np.pi * z)
        u, v, w = np.sin(x) * np.cos(y) * g1, np.sin(x) * g, -np.cos(x) * np.cos(y) * g
        grads = [  # (d/dx, d/dy, d/dz) of u, v, w
            (np.cos(x) * np.cos(y) * g1, -np.sin(x) * np.sin(y) * g1, np.sin(x) * np.cos(y) * g2),
            (np.cos(x) * g, 0.0 * x, np.sin(x) * g1),
            (np.sin(x) * np.cos(y) * g, np.cos(x) * np.sin(y) * g, -np.cos(x) * np.cos(y) * g1),
        ][component]
        value = (u, v, w)[component]
        exact = -(u * grads[0] + v * grads[1] + w * grads[2])
        return np.asfortranarray(np.broadcast_to(value, grid.shape)), np.broadcast_to(exact, grid.shape)

    pairs = [field(c) for c in range(3)]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def test_both_forms_agree_to_second_order():
    """On a smooth field (stretched channel): skew minus divergence form, and each against the exact
    ``-(u . grad) u``, fall about 4x per grid doubling (w at the wall faces left out). Measured max
    gaps 3.4e-3, 1.0e-3, 2.6e-4 at n = 16, 32, 64; errors of both forms 0.163, 0.044, 0.011."""
    bcs = nsb.build({"preset": "channel"})
    gaps, errors = [], {"divergence": [], "skew_symmetric": []}
    for n in (16, 32, 64):
        grid = Grid((n, n, n), (2 * np.pi, 2 * np.pi, 2.0), 1.5)
        m = ops.Metrics.of(grid, False)
        fields, exact = _smooth(grid)
        P = padded(fields, bcs)
        forms = {name: adv.explicit_terms(*P, m, 0.0, (), advection=name) for name in errors}
        inner = [np.s_[:, :, :], np.s_[:, :, :], np.s_[:, :, :-1]]
        gaps.append(max(np.abs(s - d)[i].max() for s, d, i in
                        zip(forms["skew_symmetric"], forms["divergence"], inner, strict=True)))
        for name, terms in forms.items():
            errors[name].append(max(np.abs(t - e)[i].max() for t, e, i in zip(terms, exact, inner, strict=True)))
    for series in (gaps, *errors.values()):
        orders = np.log2(np.array(series[:-1]) / np.array(series[1:]))
        assert np.all(orders > 1.7) and orders[-1] > 1.9, series  # measured gap: 1.76, 1.95 (then 1.98)


# ---------------------------------------------------------------------------- energy in time (RK3)


def _energy(state: State, m: ops.Metrics) -> float:
    return 0.5 * sum(float((f * f * v).sum()) for f, v in zip((state.u, state.v, state.w), volumes(m), strict=True))


def _inviscid_drift(case: str, advection: str, steps: int, t_end: float, fields) -> float:
    grid, bcs, _ = _setup(case)
    stepper = Stepper(whole_domain(grid, bcs), 0.0, NO_FORCING, "none", advection)
    state = State(*(f.copy(order="F") for f in fields), np.zeros(grid.shape, order="F"))
    e0 = _energy(state, stepper.metrics)
    for _ in range(steps):
        stepper.step(state, t_end / steps)
    return (_energy(state, stepper.metrics) - e0) / e0


@pytest.mark.parametrize("case", ["periodic-box", "channel-stretched"])
def test_inviscid_energy_drift_is_the_rk3_error(case):
    """``nu = 0``, fixed time: the skew form's energy drift falls ~8x per halving of dt (measured
    -2.8e-5, -3.5e-6, -4.4e-7 on the stretched channel: ratios 7.96, 7.99); the divergence form's
    tends to its semi-discrete production on the stretched grid (+3.62e-4, +3.65e-4). On the uniform
    periodic box both forms are identical (divergence-free fields)."""
    grid, bcs, _ = _setup(case)
    rng = np.random.default_rng(5)
    fields = divergence_free(grid, WALLS[bcs.preset], rng)
    fields = [f / max(np.abs(g).max() for g in fields) for f in fields]  # |u| <= 1
    t_end, steps = 0.4, (8, 16, 32)  # CFL about 0.4, 0.2, 0.1
    skew = [_inviscid_drift(case, "skew_symmetric", n, t_end, fields) for n in steps]
    assert all(d < 0 for d in skew), skew  # RK3 dissipates
    ratios = np.array(skew[:-1]) / np.array(skew[1:])
    assert np.all((ratios > 6.5) & (ratios < 10)), (skew, ratios)
    if grid.z_stretch:
        div = [_inviscid_drift(case, "divergence", n, t_end, fields) for n in steps[1:]]
        assert abs(div[1]) > 10 * abs(skew[2]), (div, skew)
        assert abs(div[0] - div[1]) < 0.2 * abs(div[1]), div  # converged in dt: not a time error


# ---------------------------------------------------------------------------- configuration and runs


def test_config_and_stepper_name_the_setting():
    assert load({"grid": {"shape": [8, 8, 8]},
                 "physics": {"nu": 0.1, "forcing": {"kind": "none"}}})["physics"]["advection"] == "divergence"
    assert load({"grid": {"shape": [8, 8, 8]},
                 "physics": {"nu": 0.1, "forcing": {"kind": "none"}, "advection": "skew_symmetric"}}
                )["physics"]["advection"] == "skew_symmetric"
    for bad in ("skew", "Divergence", None, 1):
        with pytest.raises(ValueError, match=r"physics\.advection: must be one of divergence, skew_symmetric"):
            load({"physics": {"advection": bad}})
    grid, bcs, m = _setup("channel-uniform")
    with pytest.raises(ValueError, match="advection must be one of divergence, skew_symmetric; got 'skew'"):
        Stepper(whole_domain(grid, bcs), 0.01, NO_FORCING, "none", "skew")
    P = [np.zeros((14, 12, 18))] * 3
    with pytest.raises(ValueError, match="advection must be one of"):
        adv.explicit_terms(*P, m, 0.0, (), advection="advective")


CHANNEL = {**BASE_CHANNEL, "physics": {"nu": 0.01, "forcing": FLOW_RATE, "advection": "skew_symmetric"}}


def test_skew_symmetric_simulation_runs_divergence_free():
    sim = Simulation(copy.deepcopy(CHANNEL)).run(steps=10)
    assert sim.stepper.advection == "skew_symmetric"
    assert sim.divergence_max() * sim.grid.dzf.min() / float(np.abs(sim.state.u).max()) < 1e-11
    assert abs(sim.bulk_velocity() - 0.6667) < 1e-12
    divergence_form = copy.deepcopy(CHANNEL)
    divergence_form["physics"]["advection"] = "divergence"
    other = Simulation(divergence_form).run(steps=10)
    gap = np.abs(other.state.w - sim.state.w).max() / np.abs(other.state.w).max()
    assert 1e-8 < gap < 0.1  # different (stretched z) but close


def test_skew_symmetric_on_a_cluster_equals_the_single_chunk_run():
    from distributed import Client, LocalCluster

    reference = Simulation(copy.deepcopy(CHANNEL)).run(steps=10)
    cfg = copy.deepcopy(CHANNEL)
    cfg["solver"] = {"pencils": [2, 2]}
    with LocalCluster(n_workers=4, threads_per_worker=1, processes=True, dashboard_address=None) as c, \
            Client(c) as client:
        sim = Simulation(cfg, client=client).run(steps=10)
        assert sim._flow_plan.advection == "skew_symmetric"
        for name in "uvwp":
            ref = to_numpy(getattr(reference.state, name))
            np.testing.assert_allclose(to_numpy(getattr(sim, name).compute()), ref, rtol=0,
                                       atol=1e-10 * np.abs(ref).max())


# ---------------------------------------------------------------------------- GPU twins


@pytest.mark.gpu
@pytest.mark.parametrize("axes", [(), (0, 1), (0, 1, 2)])
def test_gpu_skew_terms_equal_numpy(cupy, axes):
    grid = Grid((10, 7, 12), (2.0, 1.0, 2.0), z_stretch=2.0)
    m = ops.Metrics.of(grid, False)
    rng = np.random.default_rng(3)
    P = [rng.standard_normal((12, 9, 14)) for _ in range(3)]
    expected = adv.explicit_terms(*(np.asfortranarray(p) for p in P), m, 0.3, axes, advection="skew_symmetric")
    got = adv.explicit_terms(*(cupy.asarray(p) for p in P), m, 0.3, axes, advection="skew_symmetric")
    for g, e in zip(got, expected, strict=True):
        assert isinstance(g, cupy.ndarray)
        np.testing.assert_allclose(g.get(), e, rtol=0, atol=1e-12 * np.abs(e).max())


@pytest.mark.gpu
@pytest.mark.parametrize("implicit", ["none", "z"])
def test_gpu_skew_symmetric_simulation_equals_numpy(cupy, implicit):
    runs = {}
    for device in ("cpu", "gpu"):
        cfg = copy.deepcopy(CHANNEL)
        cfg["time"]["implicit_diffusion"] = implicit
        cfg["solver"] = {"device": device}
        runs[device] = Simulation(cfg).run(steps=10)
    assert isinstance(runs["gpu"].state.u, cupy.ndarray)
    for name in "uvwp":
        cpu = np.asarray(getattr(runs["cpu"].state, name))
        np.testing.assert_allclose(getattr(runs["gpu"].state, name).get(), cpu, rtol=0, atol=1e-10 * np.abs(cpu).max())
