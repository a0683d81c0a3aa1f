import itertools

import dask.array as da
import numpy as np
import pytest

from daskflow import Grid, HelmholtzSolver, PoissonSolver
from daskflow.bc import BC_PAIRS

ALL_TRIPLES = list(itertools.product(BC_PAIRS, repeat=3))
GRID = Grid((8, 6, 10), (1.3, 2.0, 2.0), z_stretch=1.8)


def _rhs(grid, rng, dtype=np.float64):
    return np.asfortranarray(rng.standard_normal(grid.shape)).astype(dtype, order="F")


def _residual(solver, b):
    x = solver.solve(b)
    target = solver.compatible(b)
    return np.linalg.norm(solver.apply(x) - target) / np.linalg.norm(target), x


@pytest.mark.parametrize("bc", ALL_TRIPLES, ids=["-".join(t) for t in ALL_TRIPLES])
def test_poisson_residual_all_bc_triples_stretched(bc, rng):
    b = _rhs(GRID, rng)
    solver = PoissonSolver(GRID, bc, "ccc", method="ptdma", pencils=(2, 3))
    res, x = _residual(solver, b)
    assert res <= 1e-11
    reference = PoissonSolver(GRID, bc, "ccc", method="ftm").solve(b)
    np.testing.assert_allclose(x, reference, rtol=0, atol=1e-12 * np.abs(reference).max())


STAGGERED = [(axis, pair) for axis in range(3) for pair in BC_PAIRS]


@pytest.mark.parametrize("axis, pair", STAGGERED)
@pytest.mark.parametrize("method, pencils", [("ptdma", (1, 1)), ("ptdma", (2, 3)), ("ftm", (3, 2))])
def test_face_placement_on_each_axis_and_bc(axis, pair, method, pencils, rng):
    bc = ["PP", "NN", "DD"]
    bc[axis] = pair
    stagger = "".join("f" if a == axis else "c" for a in range(3))
    b = _rhs(GRID, rng)
    for solver in (PoissonSolver(GRID, bc, stagger, method, pencils),
                   HelmholtzSolver(GRID, bc, stagger, alpha=0.05, method=method, pencils=pencils)):
        res, x = _residual(solver, b)
        assert res <= 1e-11
        if pair != "PP" and not (axis == 2 and pair[1] == "N"):  # a boundary value, not an unknown
            top = np.take(x, -1, axis=axis)
            below = np.take(x, -2, axis=axis)
            np.testing.assert_array_equal(top, below if pair[1] == "N" else 0 * top)


@pytest.mark.parametrize("bc", ALL_TRIPLES, ids=["-".join(t) for t in ALL_TRIPLES])
def test_float32_residual_all_bc_triples(bc, rng):
    b = _rhs(GRID, rng, np.float32)
    for method, pencils in [("ptdma", (1, 1)), ("ptdma", (2, 2)), ("ftm", (2, 2))]:
        solver = PoissonSolver(GRID, bc, "ccc", method, pencils, dtype="float32")
        res, x = _residual(solver, b)
        assert x.dtype == np.float32
        assert res <= 1e-4


DECOMPOSITIONS = [(1, 1), (2, 1), (1, 2), (2, 2), (3, 2), (1, 4), (1, 8), (4, 4)]


@pytest.mark.parametrize("pencils", DECOMPOSITIONS)
@pytest.mark.parametrize(
    "bc", [("PP", "PP", "NN"), ("NN", "DN", "DD"), ("DD", "PP", "PP"), ("ND", "NN", "ND")]
)
def test_ftm_and_ptdma_emulation_agree_with_thomas(pencils, bc, rng):
    grid = Grid((9, 8, 16), (2.0, 1.0, 2.0), z_stretch=2.2)  # odd nx: uneven splits
    b = _rhs(grid, rng)
    reference = PoissonSolver(grid, bc, "ccc", "ftm", (1, 1)).solve(b)
    scale = np.abs(reference).max()
    x = PoissonSolver(grid, bc, "ccc", "ptdma", pencils).solve(b)
    np.testing.assert_allclose(x, reference, rtol=0, atol=1e-12 * scale)
    y_modes = 5 if bc[:2] == ("DD", "PP") else 8  # a real FFT along y halves the modes
    if pencils[1] > y_modes:  # FTM's z-pencils split the y modes
        with pytest.raises(ValueError, match="pencils: pz"):
            PoissonSolver(grid, bc, "ccc", "ftm", pencils)
    else:
        x = PoissonSolver(grid, bc, "ccc", "ftm", pencils).solve(b)
        np.testing.assert_allclose(x, reference, rtol=0, atol=1e-12 * scale)


def test_two_z_points_per_chunk_with_face_placement(rng):
    grid = Grid((6, 4, 8), (1.0, 1.0, 1.0), z_stretch=1.5)
    b = _rhs(grid, rng)
    for bc in [("PP", "PP", "DD"), ("NN", "PP", "NN"), ("PP", "DD", "PP")]:
        ref = PoissonSolver(grid, bc, "ccf", "ftm").solve(b)
        x = PoissonSolver(grid, bc, "ccf", "ptdma", (1, 4)).solve(b)
        np.testing.assert_allclose(x, ref, rtol=0, atol=1e-12 * np.abs(ref).max())


def test_singular_solution_has_zero_weighted_mean_and_projects_rhs(rng):
    b = _rhs(GRID, rng) + 3.0  # far from compatible
    solver = PoissonSolver(GRID, ("PP", "NN", "NN"), "ccc", pencils=(2, 2))
    x = solver.solve(b)
    weights = GRID.dzf[None, None, :] * np.ones(GRID.shape)
    assert abs((weights * x).sum()) <= 1e-12 * np.abs(x).sum()
    compat = solver.compatible(b)
    assert abs((weights * compat).sum()) <= 1e-12 * np.abs(b).sum()
    np.testing.assert_allclose(solver.apply(x), compat, atol=1e-11 * np.abs(b).max())


def test_helmholtz_is_identity_minus_alpha_laplacian(rng):
    x = _rhs(GRID, rng)
    h = HelmholtzSolver(GRID, ("PP", "DD", "NN"), alpha=0.7)
    p = PoissonSolver(GRID, ("PP", "DD", "NN"))
    np.testing.assert_allclose(h.apply(x), x - 0.7 * p.apply(x), rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(h.solve(h.apply(x)), x, rtol=1e-11, atol=1e-11)


def test_c_ordered_input_gives_the_same_answer(rng):
    b = _rhs(GRID, rng)
    s = PoissonSolver(GRID, ("PP", "PP", "DD"))
    np.testing.assert_allclose(s.solve(np.ascontiguousarray(b)), s.solve(b), rtol=1e-14, atol=1e-14)


@pytest.mark.parametrize(
    "kwargs, word",
    [
        ({"bc": ("PN", "PP", "NN")}, "bc for axis x"),
        ({"bc": ("PP", "QQ", "NN")}, "bc for axis y"),
        ({"bc": ("PP", "PP")}, "bc must be three"),
        ({"stagger": "cc"}, "stagger"),
        ({"method": "cg"}, "method"),
        ({"pencils": (0, 1)}, "pencils"),
        ({"pencils": (1, 6)}, "P-TDMA needs at least two z points"),
        ({"pencils": (9, 1)}, "pencils: py"),
        ({"dtype": "int32"}, "dtype"),
        ({"device": "tpu"}, "device"),
    ],
)
def test_bad_solver_arguments_raise_value_error_naming_them(kwargs, word):
    args = {"bc": ("PP", "PP", "NN"), **kwargs}
    with pytest.raises(ValueError, match=word):
        PoissonSolver(GRID, **args)


def test_bad_rhs_raises_value_error(rng):
    s = PoissonSolver(GRID, device="cpu")
    with pytest.raises(ValueError, match="shape"):
        s.solve(np.zeros((8, 6, 9)))
    with pytest.raises(ValueError, match="dtype"):
        s.solve(np.zeros(GRID.shape, dtype=np.float32))
    with pytest.raises(ValueError, match="NumPy, CuPy or Dask"):
        s.solve([[0.0]])
    with pytest.raises(ValueError, match="alpha"):
        HelmholtzSolver(GRID, alpha=-1.0)
    assert PoissonSolver(GRID, pencils=(1, 6), method="ftm").solve(_rhs(GRID, rng)).shape == GRID.shape


def test_dask_array_on_the_local_scheduler_without_client(rng):
    """No distributed client: solve() returns a lazy Dask array for the local scheduler."""
    grid = Grid((9, 8, 8), (2.0, 1.0, 2.0), z_stretch=2.0)
    b = _rhs(grid, rng)
    solver = PoissonSolver(grid, ("PP", "NN", "NN"), "ccc", "ptdma", (2, 4))
    out = solver.solve(da.from_array(b, chunks=(9, 4, 2)))
    assert out.chunks == ((9,), (4, 4), (2, 2, 2, 2))
    x = out.compute(scheduler="sync")
    np.testing.assert_allclose(x, solver.solve(b), rtol=0, atol=1e-12 * np.abs(x).max())


@pytest.mark.parametrize("pencils", [(1, 2), (2, 1), (3, 2)])
def test_the_y_pencils_of_a_transpose_hold_y_last(pencils, rng):
    """After the x->y transpose the spectral y-pencils are (z, x modes, y modes), C-contiguous: the
    y transform runs along the last axis; without a transpose (py = 1) they stay (z, y, x)."""
    from daskflow.bc import Boundaries
    from daskflow.pencils.executor import LocalExecutor
    from daskflow.poisson import algorithms
    from daskflow.poisson.plan import SpectralPlan

    grid = Grid((9, 8, 6), (2.0, 1.0, 2.0))
    plan = SpectralPlan(grid, Boundaries.parse(("PP", "PP", "NN"), "ccc"), 0.0, 1.0, "ftm", pencils,
                        np.dtype(np.float64))
    field = rng.standard_normal(grid.shape)
    dec = plan.decomposition
    blocks = {(p, q): np.ascontiguousarray(field.T[dec.z[q], dec.y[p], :]) for p, q in dec.indices}
    spectra = algorithms._forward_chain(plan, LocalExecutor(plan), blocks, [])
    whole = np.fft.fft(np.fft.rfft(field.T, axis=2), axis=1)  # (z, y modes, x modes)
    assert plan.y_last == (pencils[0] > 1)
    for (p, q), block in spectra.items():
        want = whole[dec.z[q], :, dec.xs[p]]
        if plan.y_last:
            want = want.transpose(0, 2, 1)
            assert block.flags.c_contiguous
        np.testing.assert_allclose(block, want, rtol=0, atol=1e-12 * np.abs(whole).max())


def test_a_swapped_cut_is_the_contiguous_swapped_piece(rng):
    from daskflow.pencils.layout import cut_swapped

    a = rng.standard_normal((3, 5, 7))
    piece = cut_swapped(a, slice(2, 6))
    assert piece.flags.c_contiguous and piece.shape == (3, 4, 5)
    np.testing.assert_array_equal(piece, a[:, :, 2:6].swapaxes(1, 2))


def test_a_swapped_cut_may_wrap_around_the_periodic_axis_once(rng):
    from daskflow.pencils.kernels import wrapped_range
    from daskflow.pencils.layout import cut_swapped, cut_swapped_local

    a = rng.standard_normal((2, 3, 5))
    np.testing.assert_array_equal(cut_swapped(a, slice(-1, 6)), a[:, :, [4, 0, 1, 2, 3, 4, 0]].swapaxes(1, 2))
    assert wrapped_range(slice(2, 4), 5) == (2, 0, 2) and wrapped_range(slice(-1, 3), 5) == (4, 5, 4)
    for bad in (slice(-1, 7), slice(0, 4, 2), slice(-6, -2), slice(4, 11)):
        for cut in (cut_swapped, cut_swapped_local):
            with pytest.raises(ValueError, match="columns"):
                cut(a, bad)


def test_a_deferred_swapped_piece_is_assembled_in_its_place(rng):
    """A participant's own piece is swapped straight into the assembled chunk: the same bits as its
    cut and a concatenation, in any position among received pieces."""
    from daskflow.pencils.layout import SwappedPiece, assemble, cut_swapped, cut_swapped_local

    blocks = [rng.standard_normal((3, 4, 9)) + 1j * rng.standard_normal((3, 4, 9)) for _ in range(3)]
    parts = [slice(0, 3), slice(3, 6), slice(6, 9)]
    want = np.concatenate([cut_swapped(b, parts[1]) for b in blocks], axis=2)
    for mine in range(3):
        pieces = [cut_swapped_local(b, parts[1]) if i == mine else cut_swapped(b, parts[1])
                  for i, b in enumerate(blocks)]
        assert isinstance(pieces[mine], SwappedPiece) and pieces[mine].shape == (3, 3, 4)
        got = assemble(pieces, 2)
        assert got.flags.c_contiguous
        np.testing.assert_array_equal(got, want)
        into = np.full_like(want, np.nan)
        assert assemble(pieces, 2, out=into) is into
        np.testing.assert_array_equal(into, want)


def test_a_deferred_piece_of_wrapped_rows_is_assembled_in_its_place(rng):
    """A participant's own piece whose y rows wrap (the pressure rows of pencils (py, 1)) is
    swapped straight into its place: the bits of the cut that copies it first, which holds the
    rows of both neighbours around the periodic y."""
    from daskflow.bc import Boundaries
    from daskflow.pencils.layout import SwappedPiece, assemble
    from daskflow.poisson import algorithms
    from daskflow.poisson.plan import SpectralPlan

    plan = SpectralPlan(Grid((10, 8, 4), (1.0, 1.0, 1.0)), Boundaries.parse(("PP", "PP", "NN"), "ccc"), 0.0, 1.0,
                        "ptdma", (2, 1), np.dtype(np.float64))
    blocks = [rng.standard_normal((4, 3, 8)) + 1j * rng.standard_normal((4, 3, 8)) for _ in range(2)]
    cut = algorithms.cut_for_x_pencil_with_rows
    for dst in [(0, 0), (1, 0)]:
        want = np.concatenate([cut(plan, (s, 0), b, dst) for s, b in enumerate(blocks)], axis=2)
        assert want.shape == (4, 6, 6)
        for mine in range(2):
            pieces = [cut.local(plan, (s, 0), b, dst) if s == mine else cut(plan, (s, 0), b, dst)
                      for s, b in enumerate(blocks)]
            assert isinstance(pieces[mine], SwappedPiece) and pieces[mine].shape == (4, 6, 3)
            np.testing.assert_array_equal(assemble(pieces, 2), want)
        rows = [(4 * dst[0] + k) % 8 for k in range(-1, 5)]  # the 4 y rows of dst and one on each side
        for s, b in enumerate(blocks):
            np.testing.assert_array_equal(want[:, :, 3 * s:3 * s + 3], b[:, :, rows].swapaxes(1, 2))


def test_a_transpose_defers_only_the_pieces_a_participant_keeps(rng):
    """Through a direct executor a chunk's piece for its own participant is a deferred swap, placed
    by the assembly with the bits of a cut; the pieces that travel are copies (a view would change
    under the sender), and so are posted pieces unless the poster keeps their sources as they are
    until it joins them."""
    from daskflow.bc import Boundaries
    from daskflow.pencils.executor import DirectExecutor
    from daskflow.pencils.layout import SwappedPiece, cut_swapped
    from daskflow.pencils.team import Team
    from daskflow.poisson import algorithms
    from daskflow.poisson.plan import SpectralPlan

    plan = SpectralPlan(Grid((8, 6, 4), (1.0, 1.0, 1.0)), Boundaries.parse(("PP", "PP", "NN"), "ccc"), 0.0, 1.0,
                        "ftm", (2, 1), np.dtype(np.float64))
    dec = plan.decomposition
    seen, posted = {}, {}

    def join(plan, key, pieces, *_):
        seen[key] = [type(p) for p in pieces]
        return algorithms.assemble_y(plan, key, pieces)

    team = Team(2)
    owner = lambda key: team.members[key[0]]  # noqa: E731

    blocks = {k: rng.standard_normal((4, 3, dec.spectral[0])) for k in dec.indices}

    def body(i):
        me = team.members[i]
        ex = DirectExecutor(plan, me, "run", owner, team.transports[me])
        out = ex.exchange(blocks, dec.indices, algorithms._z_group(dec), algorithms.cut_for_y_pencil, [join])
        for joined in (False, True):
            handle = ex.post(blocks, dec.indices, algorithms._z_group(dec), algorithms.cut_for_y_pencil,
                             joined=joined)
            posted.setdefault(joined, {}).update({k: [type(p) for p in pieces]
                                                  for k, pieces in ex.complete(handle).items()})
        return out

    joined = {k: v for part in team.run(body) for k, v in part.items()}
    assert seen == {(0, 0): [SwappedPiece, np.ndarray], (1, 0): [np.ndarray, SwappedPiece]}
    # posted pieces whose source may change before they are joined (a scatter) are copies; posted
    # slabs of a transpose, joined while their sources stay, defer as an exchange does
    assert posted[False] == {(0, 0): [np.ndarray, np.ndarray], (1, 0): [np.ndarray, np.ndarray]}
    assert posted[True] == seen
    for (p, q), got in joined.items():
        want = np.concatenate([cut_swapped(blocks[(s, q)], dec.xs[p]) for s in range(dec.py)], axis=2)
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("bc", [("PP", "PP", "NN"), ("PP", "DD", "DN"), ("NN", "PP", "DD"), ("DD", "NN", "NN")])
@pytest.mark.parametrize("pencils", [(1, 1), (2, 1), (2, 2)])
def test_a_solve_left_unnormalised_is_the_solution_times_the_periodic_lengths(bc, pencils, rng):
    """``normalised=False`` leaves the 1/n of the inverse periodic transforms to the caller: the
    solution times :attr:`inverse_scale` (1 / (nx ny) over the periodic axes) is the normalised
    solve's, bit for bit where those lengths are powers of two (scaling by them is exact)."""
    grid = Grid((16, 8, 12), (2.0, 1.0, 2.0), z_stretch=1.5)
    b = rng.standard_normal(grid.shape)
    want = PoissonSolver(grid, bc, "ccc", pencils=pencils).solve(b)
    solver = PoissonSolver(grid, bc, "ccc", pencils=pencils, normalised=False)
    periodic = [n for n, pair in zip(grid.shape[:2], bc[:2], strict=True) if pair == "PP"]
    assert solver.plan.inverse_scale == 1.0 / np.prod(periodic)
    np.testing.assert_array_equal(solver.solve(b) * solver.plan.inverse_scale, want)
    assert PoissonSolver(grid, bc, "ccc").plan.inverse_scale == 1.0


def test_a_plans_unnormalised_copy_is_made_once_and_goes_with_it():
    """The copy shares the plan's cached device arrays but is kept outside that cache: dropping the
    plan frees both by reference counting (no cycle waiting for a collection), and a pickled plan
    ships without it."""
    import gc
    import pickle
    import weakref

    plan = PoissonSolver(Grid((8, 6, 4), (1.0, 1.0, 1.0))).plan
    copy = plan.unnormalised()
    assert plan.unnormalised() is copy and copy.unnormalised() is copy and not copy.normalised
    assert copy._device_cache is plan._device_cache and copy not in plan._device_cache.values()
    assert "_unnormalised" not in pickle.loads(pickle.dumps(plan)).__dict__
    cache = weakref.ref(plan._device_cache.setdefault("marker", type("Held", (), {})()))
    gc.disable()
    try:
        del plan, copy
        assert cache() is None
    finally:
        gc.enable()
