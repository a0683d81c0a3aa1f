import numpy as np
import pytest

from daskflow import tridiagonal
from daskflow.stencils import Tridiagonal, dense
from daskflow.tridiagonal import FactoredTridiagonal, solve_shifted
from tests.helpers import chunked_solve


def _random_op(rng, m, periodic):
    lower, upper = rng.uniform(0.2, 1.0, m), rng.uniform(0.2, 1.0, m)
    diag = -(lower + upper) - rng.uniform(0.1, 1.0, m)  # diagonally dominant
    if not periodic:
        lower[0] = upper[-1] = 0.0
    return Tridiagonal(lower, diag, upper, periodic)


def _rhs(rng, shape, kind):
    d = rng.standard_normal(shape)
    return d + 1j * rng.standard_normal(shape) if kind == "complex" else d


def _dense_solve(op, shift, d):
    cols = d.reshape(d.shape[0], -1)
    out = np.empty_like(cols)
    for j, s in enumerate(np.ravel(shift)):
        out[:, j] = np.linalg.solve(dense(op) + s * np.eye(op.diag.size), cols[:, j])
    return out.reshape(d.shape)


@pytest.mark.parametrize("periodic", [False, True])
@pytest.mark.parametrize("m", [2, 3, 17])
@pytest.mark.parametrize("kind", ["real", "complex"])
def test_solve_shifted_matches_dense(rng, cpu_path, periodic, m, kind):
    op = _random_op(rng, m, periodic)
    shift = -rng.uniform(0, 3, (3, 4))
    d = _rhs(rng, (m, 3, 4), kind)
    expected = _dense_solve(op, shift, d)
    x = solve_shifted(d.copy(), op, shift)
    np.testing.assert_allclose(x, expected, rtol=1e-12, atol=1e-12)


def test_solve_shifted_float32(rng, cpu_path):
    op = _random_op(rng, 12, False)
    d = rng.standard_normal((12, 5)).astype(np.float32)
    x = solve_shifted(d.copy(), op, np.zeros(5))
    np.testing.assert_allclose(x, _dense_solve(op, np.zeros(5), d.astype(float)), rtol=1e-4, atol=1e-5)
    assert x.dtype == np.float32


def test_solve_shifted_refuses_non_contiguous(rng):
    op = _random_op(rng, 4, False)
    with pytest.raises(ValueError, match="contiguous"):
        solve_shifted(rng.standard_normal((4, 6))[:, ::2], op, 0.0)


@pytest.mark.parametrize("periodic", [False, True])
def test_factored_matches_dense_per_column(rng, periodic):
    m, ncols = 9, 6
    lower, upper = rng.uniform(0.2, 1, (m, ncols)), rng.uniform(0.2, 1, (m, ncols))
    diag = -(lower + upper) - 0.5
    factor = FactoredTridiagonal.factor(lower, diag, upper, periodic)
    d = _rhs(rng, (m, ncols), "complex")
    x = factor.solve(d)
    for j in range(ncols):
        op = Tridiagonal(lower[:, j], diag[:, j], upper[:, j], periodic)
        if not periodic:
            op = op._replace(lower=np.r_[0, lower[1:, j]], upper=np.r_[upper[:-1, j], 0])
        np.testing.assert_allclose(dense(op) @ x[:, j], d[:, j], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("periodic", [False, True])
@pytest.mark.parametrize(
    "sizes", [[16], [8, 8], [2] * 8, [3, 2, 5, 1, 2, 3], [5, 11], [4, 4, 4, 4]]
)
def test_parallel_tridiagonal_equals_thomas(rng, cpu_path, periodic, sizes):
    m = sum(sizes)
    op = _random_op(rng, m, periodic)
    shift = -rng.uniform(0, 2, 7)
    d = _rhs(rng, (m, 7), "complex")
    thomas = solve_shifted(d.copy(), op, shift)
    np.testing.assert_allclose(chunked_solve(op, shift, d, sizes), thomas, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("periodic", [False, True])
@pytest.mark.parametrize("sizes", [[9], [4, 5], [3, 2, 1, 3], [2] * 5])
def test_parallel_tridiagonal_with_one_shared_matrix(rng, cpu_path, periodic, sizes):
    """Coefficients of one column, ``(m, 1)``, serve every column (the z-implicit solves): the
    same answer as per-column coefficients of the same matrix, and as Thomas."""
    m, ncols = sum(sizes), 6
    op = _random_op(rng, m, periodic)
    shift = -rng.uniform(0, 2)
    d = _rhs(rng, (m, ncols), "complex")
    shared = chunked_solve(op, np.full(1, shift), d, sizes)
    per_column = chunked_solve(op, np.full(ncols, shift), d, sizes)
    np.testing.assert_allclose(shared, per_column, rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(shared, solve_shifted(d.copy(), op, np.full(ncols, shift)), rtol=1e-12, atol=1e-13)


def test_reduction_refuses_coefficients_of_other_columns(rng, cpu_path):
    op = _random_op(rng, 5, False)
    chunk = tridiagonal.precompute(op.lower, op.diag, op.upper, np.zeros(3))
    with pytest.raises(ValueError, match="coefficients for 3 columns cannot serve 4 columns"):
        tridiagonal.reduce(rng.standard_normal((5, 4)), chunk)
    with pytest.raises(ValueError, match="coefficients for 3 columns cannot serve 2 columns"):
        tridiagonal.reconstruct(rng.standard_normal((5, 2)), np.zeros(2), np.zeros(2), chunk)


@pytest.mark.parametrize("m", [2, 3, 4, 9])
def test_algorithm_2_reduces_like_algorithm_1(rng, cpu_path, m):
    op = _random_op(rng, m, True)  # keep both outer couplings
    shift = -rng.uniform(0, 2, 5)
    d = rng.standard_normal((m, 5))
    chunk = tridiagonal.precompute(op.lower, op.diag, op.upper, shift)
    d2 = d.copy()
    tridiagonal.reduce(d2, chunk)
    full = lambda v: np.repeat(v[:, None], 5, axis=1)  # noqa: E731
    a1, c1, d1 = tridiagonal.reduce_reference(full(op.lower), full(op.diag) + shift, full(op.upper), d)
    b2 = 1.0 / chunk.inv_b
    # Algorithm 2 keeps b; Algorithm 1 normalises every row to a unit diagonal.
    np.testing.assert_allclose(chunk.a / b2, a1, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(chunk.c / b2, c1, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(d2 / b2, d1, rtol=1e-12, atol=1e-14)


def test_reduced_rows_are_the_boundary_equations(rng, cpu_path):
    """Rows 0 and m-1 after reduction involve only the neighbours' and the own boundary unknowns."""
    m, ncols = 6, 3
    op = _random_op(rng, m, True)
    shift = np.zeros(ncols)
    x = rng.standard_normal((m + 2, ncols))  # with one unknown on each side of the chunk
    full = np.zeros((m, m + 2))
    for k in range(m):
        full[k, k : k + 3] = op.lower[k], op.diag[k], op.upper[k]
    d = full @ x
    chunk = tridiagonal.precompute(op.lower, op.diag, op.upper, shift)
    rows = tridiagonal.reduce(d.copy(), chunk)
    lo, dg, up = chunk.boundary_lower, chunk.boundary_diag, chunk.boundary_upper
    np.testing.assert_allclose(lo[0] * x[0] + dg[0] * x[1] + up[0] * x[m], rows[0], rtol=1e-12)
    np.testing.assert_allclose(lo[1] * x[1] + dg[1] * x[m] + up[1] * x[m + 1], rows[1], rtol=1e-12)


@pytest.mark.parametrize("periodic", [False, True])
@pytest.mark.parametrize("kind", ["real", "complex"])
def test_compiled_solves_split_over_threads_give_the_same_bits(rng, monkeypatch, periodic, kind):
    """The compiled loops run over column ranges on daskflow's CPU threads (the columns are
    independent): Thomas with shifts, factorised sweeps with per-column and shared coefficients, and
    P-TDMA's reduction and reconstruction give the one-thread result bit for bit, on uneven ranges."""
    from daskflow.backend import compiled_loops
    from daskflow.tridiagonal import cpu_kernels

    if not compiled_loops():
        pytest.skip("needs Numba")
    m, ncols = 11, 13
    op = _random_op(rng, m, periodic)
    shift = -rng.uniform(0, 2, ncols)
    d = _rhs(rng, (m, ncols), kind)
    lower, upper = rng.uniform(0.2, 1, (m, ncols)), rng.uniform(0.2, 1, (m, ncols))
    per_column = FactoredTridiagonal.factor(lower, -(lower + upper) - 0.5, upper, periodic)
    shared = FactoredTridiagonal.factor(op.lower, op.diag - 0.3, op.upper, periodic)

    def every_solve():
        return [solve_shifted(d.copy(), op, shift), per_column.solve(d), shared.solve(d),
                chunked_solve(op, shift, d, [4, 3, 4]), chunked_solve(op, shift[:1], d, [5, 6])]

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setenv("DASKFLOW_THREADS", "1")
    one = every_solve()
    monkeypatch.setenv("DASKFLOW_THREADS", "3")
    monkeypatch.setattr(cpu_kernels, "MIN_COLUMNS", 2)  # three ranges of 13 columns: 5, 5 and 3
    calls = []
    real_split = cpu_kernels.run_in_threads
    monkeypatch.setattr(cpu_kernels, "run_in_threads",
                        lambda fn, ranges, threads: calls.append(ranges) or real_split(fn, ranges, threads))
    for got, want in zip(every_solve(), one, strict=True):
        np.testing.assert_array_equal(got, want)
    assert calls and all(ranges == [(0, 5), (5, 10), (10, 13)] for ranges in calls)


def test_one_shared_matrix_factors_with_the_vector_loop_s_bits(rng):
    """A one-column factorisation (the z-implicit solves, set up again whenever dt changes) runs as
    a scalar recurrence: the same bits as the vector loop on several columns."""
    from daskflow.tridiagonal.thomas import FactoredTridiagonal, _elimination_factors

    m = 37
    lower, upper = rng.uniform(0.2, 1, (m, 1)), rng.uniform(0.2, 1, (m, 1))
    diag = -(lower + upper) - 0.3
    one = _elimination_factors(np, lower, diag, upper)
    several = _elimination_factors(np, *(np.repeat(c, 3, axis=1) for c in (lower, diag, upper)))
    for a, b in zip(one, several, strict=True):
        assert np.array_equal(np.repeat(a, 3, axis=1), b)
    factored = FactoredTridiagonal.factor(lower, diag, upper, periodic=True)
    moved = factored.to(np)
    for name in ("lower", "inv_den", "cp", "zz", "vlast"):
        assert np.array_equal(getattr(moved, name), getattr(factored, name))


@pytest.mark.parametrize("m", [1, 2, 3, 4, 7, 40, 144])
def test_two_sweeps_of_a_shared_matrix_give_algorithm_2s_reduction_and_solution(m):
    """What the rows kernels compute, in NumPy: one forward sweep (Algorithm 2's) and the weighted
    sum ``first_weights`` give the reduced boundary rows of :func:`reduce`, and the backward sweep
    of the forward values with ``forward_a`` gives :func:`reconstruct`'s interior (to rounding;
    equal at m <= 2, where nothing is reduced)."""
    rng = np.random.default_rng(m + 100)
    lower, upper = -rng.uniform(0.1, 0.5, m), -rng.uniform(0.1, 0.5, m)
    diag = 1.0 - lower - upper + rng.uniform(0, 0.3, m)
    chunk = tridiagonal.precompute(lower, diag, upper, np.zeros(1))
    d = rng.standard_normal((m, 6))
    reduced = d.copy()
    boundary = tridiagonal.reduce(reduced, chunk)
    forward, inv_b = d.copy(), chunk.inv_b[:, 0]
    for k in range(2, m):
        forward[k] -= lower[k] * forward[k - 1] * inv_b[k - 1]
    tol = 0 if m <= 2 else 1e-14
    np.testing.assert_allclose(chunk.first_weights[:, 0] @ d, boundary[0], rtol=0, atol=tol)
    np.testing.assert_array_equal(forward[m - 1], boundary[-1])
    x0, xl = rng.standard_normal(6), rng.standard_normal(6)
    want = tridiagonal.reconstruct(reduced, x0, xl, chunk)
    x = forward.copy()
    x[0], x[m - 1] = x0, xl
    for k in range(m - 2, 0, -1):
        x[k] = (forward[k] - chunk.forward_a[k, 0] * x0 - upper[k] * x[k + 1]) * inv_b[k]
    np.testing.assert_allclose(x, want, rtol=0, atol=tol)


@pytest.mark.parametrize("m", [1, 2, 3, 5, 40])
def test_one_column_precompute_is_the_vector_codes_bits(m):
    """The reduction coefficients of a matrix shared by every column, a scalar recurrence, give the
    bits of the vector code's column (run here on two equal columns), and move in one transfer."""
    rng = np.random.default_rng(m)
    lower, upper = -rng.uniform(0.1, 0.5, m), -rng.uniform(0.1, 0.5, m)
    diag = 1.0 - lower - upper + rng.uniform(0, 0.3, m)
    one = tridiagonal.precompute(lower, diag, upper, np.full(1, 0.25))
    two = tridiagonal.precompute(lower, diag, upper, np.full(2, 0.25))
    for name, x, y in zip(tridiagonal.ReducedChunk._fields, one, two, strict=True):
        if name in ("forward_a", "first_weights"):  # the rows kernels' coefficients: one column only
            assert x.shape == (m, 1) and y is None, name
            continue
        if x is None:  # kept only where GPU kernels recompute the coefficients
            assert y is None, name
            continue
        y = y if y.ndim == 1 else y[:, :1]
        assert x.shape == y.shape, name
        np.testing.assert_array_equal(x, y, err_msg=name)
    assert one.to(np) is one


@pytest.mark.gpu
@pytest.mark.parametrize("m", [5, 37, 144])
def test_every_tile_geometry_of_the_row_kernels_gives_the_same_bits(cupy, m):
    """The ``_rows`` kernels' arithmetic does not depend on their tiles: each geometry a benchmark
    may sweep (values per tile, warps per block, load batches) gives the bits of one warp a block with
    32-value tiles, over rows not a multiple of a block and chunks shorter and longer than a tile; the
    shipped geometries (each kernel its own) give them too."""
    rng = np.random.default_rng(11)
    lower, upper = -rng.uniform(0.2, 1, m), -rng.uniform(0.2, 1, m)
    diag = 1 - lower - upper
    factored = FactoredTridiagonal.factor(lower[:, None], diag[:, None], upper[:, None], False).to(cupy)
    chunk = tridiagonal.precompute(lower, diag, upper, np.zeros(1))
    field0 = cupy.asarray(rng.standard_normal((3, 50, m + 3)))
    addend = cupy.asarray(rng.standard_normal(field0.shape))
    ends = cupy.asarray(rng.standard_normal((2, 150)))

    def solves(geometry):
        thomas, reduced = field0.copy(), field0.copy()
        assert tridiagonal.solve_rows_in_place(factored, thomas, addend, geometry)
        boundary = tridiagonal.reduce_rows(reduced, m, chunk, geometry)
        rebuilt = tridiagonal.reconstruct_rows(reduced.copy(), ends[0], ends[1], m, chunk, addend, geometry)
        return [cupy.asnumpy(a) for a in (thomas, reduced, boundary, rebuilt)]

    want = solves({"VALUES": 32, "WARPS": 1, "BATCH": 16})
    for values, warps, batch in [(32, 2, 4), (16, 1, 16), (16, 2, 8), (16, 4, 32), (8, 2, 16), (8, 4, 8)]:
        got = solves({"VALUES": values, "WARPS": warps, "BATCH": batch})
        for name, g, w in zip(("thomas", "reduced", "boundary", "rebuilt"), got, want, strict=True):
            np.testing.assert_array_equal(g, w, err_msg=f"{name} at {values} values, {warps} warps, batch {batch}")
    for name, g, w in zip(("thomas", "reduced", "boundary", "rebuilt"), solves(None), want, strict=True):
        np.testing.assert_array_equal(g, w, err_msg=f"{name}, shipped geometry")
    np.testing.assert_array_equal(want[3][..., m:], cupy.asnumpy(field0)[..., m:])


def test_row_kernel_geometries_are_checked_before_anything_compiles():
    """A tile geometry the row kernels cannot run (a tile's lanes not covering whole rows, an unknown
    key) is a one-line error naming the setting and what it may be; the shipped ones are valid."""
    from daskflow.tridiagonal import kernels, row_kernels

    for name, geometry in row_kernels.GEOMETRY.items():
        assert row_kernels.definitions(geometry).count("#define") == 3, name
    source = kernels._source("cr_reconstruct_rows", np.dtype(np.float64), (("VALUES", 8), ("WARPS", 2), ("BATCH", 4)))
    assert "#define VALUES 8\n#define WARPS 2\n#define BATCH 4\n" in source
    with pytest.raises(ValueError, match=r"VALUES = 24; allowed: 1, 2, 4, 8, 16, 32"):
        row_kernels.definitions({"VALUES": 24})
    with pytest.raises(ValueError, match=r"WARPS = 0; allowed: 1 to 32"):
        row_kernels.definitions({"WARPS": 0})
    with pytest.raises(ValueError, match=r"unknown key 'ROWS'; the keys are VALUES, WARPS, BATCH"):
        row_kernels.definitions({"ROWS": 4})
    with pytest.raises(ValueError, match=r"BATCH = 8.0; allowed: 1 to 64"):
        row_kernels.definitions({"VALUES": 16, "WARPS": 2, "BATCH": 8.0})
    with pytest.raises(ValueError, match=r"BATCH missing"):
        row_kernels.definitions({"VALUES": 16, "WARPS": 2})
    # float64 tiles of 32 values: five warps fit a block's 48 KiB of shared memory, six do not
    assert row_kernels.definitions({"VALUES": 32, "WARPS": 5, "BATCH": 8})
    assert row_kernels.definitions({"VALUES": 32, "WARPS": 10, "BATCH": 8}, itemsize=4)
    with pytest.raises(ValueError, match=r"WARPS = 6 tiles of VALUES = 32 take 55296 bytes of shared memory"):
        row_kernels.definitions({"VALUES": 32, "WARPS": 6, "BATCH": 8})
    with pytest.raises(ValueError, match=r"launch: thomas_shifted takes no tile geometry"):
        kernels.launch("thomas_shifted", np.float64, 1, geometry={"WARPS": 2})
