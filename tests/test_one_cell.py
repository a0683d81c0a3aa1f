"""Axes of one cell: quasi-two-dimensional problems without a thin second cell.

Along a one-cell axis every field is uniform, so that axis adds a constant to the operator: the 1x1
Laplacian of its boundary pair (0 when periodic or Neumann at both ends, the ghost-cell values
``-4/h^2`` for Dirichlet and ``-2/h^2`` for mixed ends at cell centres). A one-cell solve must
therefore equal the two-dimensional problem with that constant moved to the identity, solved on a
grid whose extra axis has two periodic cells and uniform data (the thin second cell the seed code
needs), and must satisfy the solver's own discrete operator to round-off.
"""

import numpy as np
import pytest

from daskflow import Grid, HelmholtzSolver, PoissonSolver, Simulation, transforms
from daskflow.bc import BC_PAIRS
from daskflow.spectral import backward_xy, forward_xy
from daskflow.stencils import control_widths, dense, laplacian_1d
from daskflow.validation import taylor_green as tg

LENGTHS = (1.0, 2.0, 1.5)
SHAPE = (6, 5, 7)
OTHERS = ("NN", "PP", "DN")  # the pairs of the other two axes, by axis
ALPHA = 0.3


def one_cell_value(pair: str, placement: str, h: float, axis: int) -> float:
    """The 1x1 Laplacian of a one-cell axis of width ``h``, from the ghost-point rules."""
    if pair in ("PP", "NN"):
        return 0.0
    if placement == "c":  # D: ghost = -value (mirror to zero at the wall), N: ghost = value
        return (-2.0 + sum(1.0 if end == "N" else -1.0 for end in pair)) / h**2
    # the upper face of one cell, with a mirror ghost above it (z only) and face 0 = 0 below it
    assert axis == 2 and pair == "DN"
    return -2.0 / h**2


# ------------------------------------------------------------------ 1-D operators and transforms


@pytest.mark.parametrize("pair", BC_PAIRS)
@pytest.mark.parametrize("placement", ["c", "f"])
@pytest.mark.parametrize("axis", [0, 1, 2])
def test_one_cell_operator_and_transform(pair, placement, axis):
    h = 0.7
    face_neumann = "second_order" if axis == 2 else "copy"
    has_unknown = placement == "c" or pair == "PP" or (axis == 2 and pair[1] == "N")
    if not has_unknown:  # the only stored face is the boundary
        with pytest.raises(ValueError, match="leaves no unknowns"):
            laplacian_1d(np.array([h]), pair, placement, face_neumann)
        return
    op = laplacian_1d(np.array([h]), pair, placement, face_neumann)
    assert dense(op).shape == (1, 1) and not op.periodic  # one row: no cyclic system
    expected = one_cell_value(pair, placement, h, axis)
    assert dense(op)[0, 0] == pytest.approx(expected, abs=1e-14 / h**2)
    assert control_widths(np.array([h]), pair, placement, face_neumann).shape == (1,)
    if axis == 2 and placement == "f":
        return  # the z closure has no fast transform
    # the length-1 transform diagonalises the 1x1 operator: its eigenvalue is that value
    for complex_input in (False, True):
        lam = transforms.eigenvalues(pair, placement, 1, h, complex_input=complex_input)
        np.testing.assert_allclose(lam, [expected], rtol=1e-14, atol=1e-14)
        x = np.random.default_rng(0).standard_normal((3, 1)) * (1 + 1j if complex_input else 1)
        spec = transforms.forward(x, -1, pair, placement)
        back = transforms.backward(spec, -1, pair, placement, 1, real_output=not complex_input)
        np.testing.assert_allclose(back, x, rtol=1e-14, atol=1e-15)


@pytest.mark.parametrize("bc, stagger, shape", [
    (bc, stagger, shape) for bc, stagger in ((("PP", "DD"), "cc"), (("NN", "PP"), "cc"), (("DN", "ND"), "fc"))
    for shape in ((1, 5, 3), (6, 1, 3), (1, 1, 3)) if not (shape[0] == 1 and stagger[0] == "f")])
def test_xy_transforms_of_fields_with_one_cell(bc, stagger, shape):
    rng = np.random.default_rng(1)
    field = rng.standard_normal(shape)
    spec = forward_xy(field, bc, stagger)
    back = backward_xy(spec, shape, bc, stagger)
    m = shape[0] - 1 if (stagger[0] == "f" and bc[0] != "PP") else shape[0]
    np.testing.assert_allclose(back[:m], field[:m], rtol=0, atol=1e-14)


# ------------------------------------------------------------------ Poisson and Helmholtz solves


def _problem(axis: int, pair: str):
    shape = list(SHAPE)
    shape[axis] = 1
    bc = list(OTHERS)
    bc[axis] = pair
    return tuple(shape), tuple(bc)


def _solver(grid, bc, stagger, helmholtz, **kw):
    if helmholtz:
        return HelmholtzSolver(grid, bc, stagger, alpha=ALPHA, **kw)
    return PoissonSolver(grid, bc, stagger, **kw)


def _cases():
    out = []
    for axis in range(3):
        for pair in BC_PAIRS:
            out.append((axis, pair, "c"))
            if pair == "PP" or (axis == 2 and pair[1] == "N"):
                out.append((axis, pair, "f"))
    return out


@pytest.mark.parametrize("axis, pair, placement", _cases())
@pytest.mark.parametrize("helmholtz", [False, True], ids=["poisson", "helmholtz"])
@pytest.mark.parametrize("method", ["ptdma", "ftm"])
def test_one_cell_solve_equals_the_two_dimensional_problem(axis, pair, placement, helmholtz, method):
    """The one-cell solve satisfies the discrete operator to round-off and equals the 2-D problem
    (the one-cell constant moved to the identity) solved with a thin periodic second cell."""
    shape, bc = _problem(axis, pair)
    stagger = "".join(placement if a == axis else "c" for a in range(3))
    grid = Grid(shape, LENGTHS, z_stretch=1.5)  # stretched z (a no-op when z is the one-cell axis)
    solver = _solver(grid, bc, stagger, helmholtz, method=method)
    rng = np.random.default_rng(axis * 10 + BC_PAIRS.index(pair))
    b = np.asfortranarray(rng.standard_normal(shape))
    x = solver.solve(b)
    residual = np.abs(solver.apply(x) - solver.compatible(b)).max()
    assert residual < 1e-12 * np.abs(b).max(), residual

    # the same problem in two dimensions: c0 I + s L_2D, c0 = identity + s * lambda_axis
    identity, scale = (1.0, -ALPHA) if helmholtz else (0.0, 1.0)
    lam = one_cell_value(pair, placement, grid.widths(axis)[0], axis)
    c0 = identity + scale * lam
    thin_shape, thin_bc, thin_lengths = list(shape), list(bc), list(LENGTHS)
    thin_shape[axis], thin_bc[axis] = 2, "PP"
    thin = Grid(tuple(thin_shape), tuple(thin_lengths), z_stretch=1.5 if axis != 2 else 0.0)
    rhs = np.asfortranarray(np.repeat(b, 2, axis=axis))
    thin_stagger = "".join("c" if a == axis else stagger[a] for a in range(3))
    if c0 == 0.0:
        reference = PoissonSolver(thin, tuple(thin_bc), thin_stagger, method=method).solve(rhs)
    else:  # c0 (I - alpha L_2D) with alpha = -s / c0 > 0
        reference = HelmholtzSolver(thin, tuple(thin_bc), thin_stagger, alpha=-scale / c0,
                                    method=method).solve(rhs / c0)
    for k in range(2):  # both thin cells carry the one-cell solution
        np.testing.assert_allclose(np.take(reference, [k], axis=axis), x, rtol=0, atol=1e-12 * np.abs(x).max())


@pytest.mark.parametrize("pair", BC_PAIRS)
@pytest.mark.parametrize("axis, method, pencils", [(0, "ptdma", (1, 2)), (1, "ptdma", (1, 2)), (1, "ftm", (1, 1)),
                                                   (2, "ptdma", (2, 1)), (2, "ftm", (3, 1))])
def test_pencils_with_one_cell_equal_one_chunk(pair, axis, method, pencils):
    """The emulated decompositions (the stages a cluster runs) give the single-chunk solution."""
    shape, bc = _problem(axis, pair)
    grid = Grid(shape, LENGTHS, z_stretch=1.0)
    b = np.asfortranarray(np.random.default_rng(3).standard_normal(shape))
    for helmholtz in (False, True):
        reference = _solver(grid, bc, "ccc", helmholtz).solve(b)
        x = _solver(grid, bc, "ccc", helmholtz, method=method, pencils=pencils).solve(b)
        np.testing.assert_allclose(x, reference, rtol=0, atol=1e-12 * np.abs(reference).max())


def test_dask_array_solve_with_one_cell():
    import dask.array as da

    for shape, pencils, bc in [((6, 5, 1), (2, 1), ("PP", "NN", "PP")), ((6, 1, 8), (1, 2), ("DD", "PP", "ND"))]:
        grid = Grid(shape, LENGTHS)
        b = np.asfortranarray(np.random.default_rng(4).standard_normal(shape))
        solver = PoissonSolver(grid, bc, pencils=pencils)
        x = solver.solve(da.from_array(b, chunks=(shape[0], -(-shape[1] // pencils[0]), -(-shape[2] // pencils[1]))))
        reference = PoissonSolver(grid, bc).solve(b)
        np.testing.assert_allclose(x.compute(), reference, rtol=0, atol=1e-12 * np.abs(reference).max())


def test_one_cell_z_ignores_stretching():
    """One z cell spans the box whatever the stretching (its end faces are exact)."""
    for cluster in ("both", "lower", "upper", "middle"):
        grid = Grid((4, 3, 1), LENGTHS, z_stretch=2.5, z_cluster=cluster)
        np.testing.assert_array_equal(grid.zf, [0.0, LENGTHS[2]])
    b = np.asfortranarray(np.random.default_rng(5).standard_normal((4, 3, 1)))
    stretched = PoissonSolver(Grid((4, 3, 1), LENGTHS, z_stretch=2.5), ("PP", "NN", "DD")).solve(b)
    uniform = PoissonSolver(Grid((4, 3, 1), LENGTHS), ("PP", "NN", "DD")).solve(b)
    np.testing.assert_array_equal(stretched, uniform)


def test_decompositions_that_split_a_one_cell_axis_are_refused():
    with pytest.raises(ValueError, match=r"pencils: pz = 2, but grid.shape\[2\] = 1"):
        PoissonSolver(Grid((6, 5, 1)), ("PP", "PP", "PP"), method="ptdma", pencils=(1, 2))
    with pytest.raises(ValueError, match=r"pencils: py = 2, but grid.shape\[1\] = 1"):
        PoissonSolver(Grid((6, 1, 6)), ("PP", "PP", "PP"), pencils=(2, 1))
    with pytest.raises(ValueError, match=r"pencils: py = 2, but grid.shape\[0\] = 1"):
        PoissonSolver(Grid((1, 6, 6)), ("PP", "PP", "PP"), pencils=(2, 1))
    with pytest.raises(ValueError, match=r"grid.shape\[0\] = 1 is too small for bc 'DD' with stagger 'f'"):
        PoissonSolver(Grid((1, 6, 6)), ("DD", "PP", "PP"), "fcc")
    cfg = tg.config(8, 0.01, plane="xy", thin=1, pencils=[1, 2])
    with pytest.raises(ValueError, match=r"config solver.pencils: pz = 2, but grid.shape\[2\] = 1"):
        Simulation(cfg)


# ------------------------------------------------------------------ Navier-Stokes


@pytest.mark.parametrize("plane", tg.PLANES)
def test_taylor_green_one_cell_second_order_in_space(plane):
    sizes = (16, 32, 64)
    errors = tg.space_errors(sizes, plane=plane, thin=1, end=0.2)
    u_orders = tg.observed_orders([e[0] for e in errors])
    p_orders = tg.observed_orders([e[1] for e in errors])
    print(f"Taylor-Green {plane}, one cell across: errors {errors}, u orders {u_orders}, p orders {p_orders}")
    assert min(u_orders + p_orders) >= 1.8, (u_orders, p_orders)


@pytest.mark.parametrize("plane", tg.PLANES)
@pytest.mark.parametrize("implicit", ["none", "z", "xyz"])
def test_one_cell_run_equals_the_thin_two_cell_run(plane, implicit):
    """The flow is uniform across the plane: one cell and two periodic cells give the same fields."""
    n, dt, steps = 16, 0.02, 10
    one = tg.simulate(n, dt, steps, implicit=implicit, plane=plane, thin=1)
    two = tg.simulate(n, dt, steps, implicit=implicit, plane=plane, thin=2)
    across = 1 if plane == "xz" else 2
    for name in "uvwp":
        a, b = getattr(one.state, name), getattr(two.state, name)
        for k in range(2):
            np.testing.assert_allclose(np.take(b, [k], axis=across), a, rtol=0, atol=1e-12)
    assert one.stepper.divergence_max(one.state) < 1e-12
    assert np.abs(getattr(one.state, "uvw"[across])).max() == 0.0  # nothing moves across the plane


@pytest.mark.parametrize("implicit", ["none", "z", "xyz"])
def test_walls_across_a_one_cell_axis(implicit):
    """Walls on a one-cell axis (a channel one cell high): the normal velocity has no unknowns (its
    only stored face is the wall) and stays zero; the in-plane Taylor-Green mode (an exact discrete
    solution on equal x and y spacings) decays at ``nu (lambda_x + lambda_y + 4 / h^2)``, the last
    term the 1x1 Dirichlet value of the walls."""
    cfg = {"grid": {"shape": [8, 8, 1], "lengths": [1.0, 1.0, 0.5]},
           "physics": {"nu": 0.01, "forcing": {"kind": "none", "value": [0.0, 0.0]}},
           "boundaries": {"preset": "channel"}, "initial": {"kind": "zero"},
           "time": {"dt": 1e-3, "implicit_diffusion": implicit}}
    sim = Simulation(cfg)
    sim.set(u=lambda x, y, z: np.sin(2 * np.pi * x) * np.cos(2 * np.pi * y),
            v=lambda x, y, z: -np.cos(2 * np.pi * x) * np.sin(2 * np.pi * y))
    u0 = sim.state.u.copy()
    sim.run(steps=50)
    g = sim.grid
    in_plane = 4 * np.sin(np.pi * g.dx) ** 2 / g.dx**2 + 4 * np.sin(np.pi * g.dy) ** 2 / g.dy**2
    rate = 0.01 * (in_plane + 4 / g.dzf[0] ** 2)
    decay = float((sim.state.u * u0).sum() / (u0 * u0).sum())
    print(f"{implicit}: decay {decay}, expected {np.exp(-rate * sim.time)}")
    assert decay == pytest.approx(np.exp(-rate * sim.time), rel=1e-8)
    np.testing.assert_allclose(sim.state.u, decay * u0, rtol=0, atol=1e-13)
    assert np.abs(sim.state.w).max() == 0.0
    assert sim.stepper.divergence_max(sim.state) < 1e-12


# ------------------------------------------------------------------ on a cluster


@pytest.fixture(scope="module")
def client():
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as c:
        yield c


# the only splits of a 2-worker decomposition with one cell in y (x-z plane) or z (x-y plane): the
# cell cannot be split, FTM needs pz <= the y modes (1 here), P-TDMA two z points per chunk
@pytest.mark.parametrize("plane, pencils, poisson", [("xy", [2, 1], "ptdma"), ("xy", [2, 1], "ftm"),
                                                     ("xz", [1, 2], "ptdma")])
@pytest.mark.parametrize("implicit", ["none", "z", "xyz"])
def test_one_cell_runs_on_two_workers_equal_the_in_process_run(client, plane, pencils, poisson, implicit):
    n, dt, steps = 16, 0.02, 8
    reference = tg.simulate(n, dt, steps, implicit=implicit, plane=plane, thin=1)
    sim = tg.simulate(n, dt, steps, implicit=implicit, plane=plane, thin=1, client=client, pencils=pencils,
                      poisson=poisson)
    assert sim.step == steps
    for name in "uvwp":
        field = getattr(sim, name)
        assert (len(field.chunks[1]), len(field.chunks[2])) == tuple(pencils)
        ref = getattr(reference.state, name)
        np.testing.assert_allclose(field.compute(), ref, rtol=0, atol=1e-13 * max(1.0, np.abs(ref).max()))
    assert sim.divergence_max() < 1e-12
