"""GPU twins of the numerics tests: CuPy kernels and solvers against the NumPy path (1e-12)."""

import itertools

import numpy as np
import pytest

from daskflow import Grid, HelmholtzSolver, PoissonSolver, tridiagonal
from daskflow.bc import BC_PAIRS
from daskflow.stencils import Tridiagonal
from tests.helpers import chunked_solve

pytestmark = pytest.mark.gpu

GRID = Grid((12, 10, 16), (2.0, 1.0, 2.0), z_stretch=2.0)


def _close(gpu_value, cpu_value, rtol):
    got = gpu_value.get() if hasattr(gpu_value, "get") else gpu_value
    scale = np.abs(cpu_value).max()
    np.testing.assert_allclose(got, cpu_value, rtol=0, atol=rtol * scale)


@pytest.mark.parametrize("periodic", [False, True])
@pytest.mark.parametrize("dtype", [np.float64, np.complex128, np.float32, np.complex64])
def test_thomas_kernels_match_numpy(cupy, rng, periodic, dtype):
    m, cols = 33, (7, 9)
    lower, upper = rng.uniform(0.2, 1, m), rng.uniform(0.2, 1, m)
    op = Tridiagonal(lower, -(lower + upper) - 0.3, upper, periodic)
    shift = -rng.uniform(0, 2, cols)
    d = (rng.standard_normal((m, *cols)) + 1j * rng.standard_normal((m, *cols))).astype(dtype) \
        if np.iscomplexobj(np.zeros(1, dtype)) else rng.standard_normal((m, *cols)).astype(dtype)
    cpu = tridiagonal.solve_shifted(d.copy(), op, shift)
    gpu = tridiagonal.solve_shifted(cupy.asarray(d), op, cupy.asarray(shift))
    _close(gpu, cpu, 1e-12 if np.finfo(dtype).bits >= 64 else 1e-5)


@pytest.mark.parametrize("periodic", [False, True])
def test_parallel_tridiagonal_kernels_match_numpy(cupy, rng, periodic):
    sizes = [2, 5, 3, 1, 2]
    m, ncols = sum(sizes), 37
    lower, upper = rng.uniform(0.2, 1, m), rng.uniform(0.2, 1, m)
    op = Tridiagonal(lower, -(lower + upper) - 0.3, upper, periodic)
    shift = -rng.uniform(0, 2, ncols)
    d = rng.standard_normal((m, ncols)) + 1j * rng.standard_normal((m, ncols))
    results = [chunked_solve(op, shift, d, sizes),
               chunked_solve(op, cupy.asarray(shift), cupy.asarray(d), sizes)]
    _close(results[1], results[0], 1e-12)
    _close(results[1], tridiagonal.solve_shifted(d.copy(), op, shift), 1e-12)


@pytest.mark.parametrize("dtype", [np.complex128, np.float32])
def test_parallel_tridiagonal_kernels_recompute_per_column_coefficients(cupy, rng, dtype):
    """Chunks whose coefficients differ per column keep no (m, ncols) arrays on the GPU: the kernels
    recompute them, across segments of rows, and solve as the uploaded host coefficients do (in two
    sweeps where those make three)."""
    sizes = [40, 17, 3, 18, 34, 16, 2]  # 18, 34: row m - 2 opens a segment of its own
    m, ncols = sum(sizes), 45
    lower, upper = rng.uniform(0.2, 1, m), rng.uniform(0.2, 1, m)
    op = Tridiagonal(lower, -(lower + upper) - 0.3, upper, False)
    shift = -rng.uniform(0, 2, ncols)
    d = rng.standard_normal((m, ncols)).astype(dtype)
    if np.iscomplexobj(d):
        d = d + 1j * rng.standard_normal((m, ncols))
    chunk = tridiagonal.precompute(op.lower[:40], op.diag[:40], op.upper[:40], cupy.asarray(shift))
    assert chunk.a is None and chunk.inv_b is None and chunk.entering.shape == (3, 2, ncols)
    got = chunked_solve(op, cupy.asarray(shift), cupy.asarray(d), sizes)
    single = np.finfo(dtype).bits < 64
    _close(got, chunked_solve(op, shift, d, sizes), 1e-5 if single else 1e-12)
    _close(got, tridiagonal.solve_shifted(d.astype(np.complex128).copy(), op, shift), 1e-5 if single else 1e-12)
    for size in sizes:  # against the coefficients set up on the host and uploaded, chunk by chunk
        rows = slice(0, size)
        host = tridiagonal.precompute(op.lower[rows], op.diag[rows], op.upper[rows], shift)
        device = tridiagonal.precompute(op.lower[rows], op.diag[rows], op.upper[rows], cupy.asarray(shift))
        real = np.dtype(dtype).type(0).real.dtype
        block = rng.standard_normal((size, ncols)).astype(dtype)
        if np.iscomplexobj(block):
            block = block + 1j * rng.standard_normal((size, ncols))
        ours, theirs = cupy.asarray(block), cupy.asarray(block)
        rows_ours = tridiagonal.reduce(ours, device.in_precision(real))
        rows_theirs = tridiagonal.reduce(theirs, host.in_precision(real).to(cupy))
        first, last = cupy.asarray(rng.standard_normal(ncols)), cupy.asarray(rng.standard_normal(ncols))
        tridiagonal.reconstruct(ours, first, last, device.in_precision(real))
        tridiagonal.reconstruct(theirs, first, last, host.in_precision(real).to(cupy))
        # Two sweeps against Algorithm 2's three: the first boundary row is a sum accumulated along
        # the forward sweep, the interior the backward sweep of the forward values (rounding apart);
        # the last boundary row is the forward sweep's, the set-up's arithmetic with products rounded
        # apart: the uploaded arrays' bits in double precision.
        tol = dict(rtol=1e-5, atol=1e-6) if single else dict(rtol=1e-12, atol=1e-13)
        np.testing.assert_allclose(rows_ours.get(), rows_theirs.get(), **tol)
        np.testing.assert_allclose(ours.get(), theirs.get(), **tol)
        if not single:
            np.testing.assert_array_equal(rows_ours[-1].get(), rows_theirs[-1].get())


@pytest.mark.parametrize("periodic", [False, True])
def test_parallel_tridiagonal_kernels_with_one_shared_matrix(cupy, rng, periodic):
    """The kernels read ``(m, 1)`` coefficients for every column (the z-implicit solves)."""
    sizes = [4, 1, 6, 2]
    m, ncols = sum(sizes), 300
    lower, upper = rng.uniform(0.2, 1, m), rng.uniform(0.2, 1, m)
    op = Tridiagonal(lower, -(lower + upper) - 0.3, upper, periodic)
    d = rng.standard_normal((m, ncols))
    shared = chunked_solve(op, cupy.zeros(1), cupy.asarray(d), sizes)
    _close(shared, chunked_solve(op, np.zeros(ncols), d, sizes), 1e-12)


TRIPLES = list(itertools.product(BC_PAIRS, repeat=3))


@pytest.mark.parametrize("bc", TRIPLES, ids=["-".join(t) for t in TRIPLES])
def test_poisson_gpu_matches_cpu_all_triples(cupy, rng, bc):
    b = np.asfortranarray(rng.standard_normal(GRID.shape))
    for method, pencils in [("ptdma", (1, 1)), ("ptdma", (2, 4)), ("ftm", (3, 2))]:
        solver = PoissonSolver(GRID, bc, "ccc", method, pencils)
        cpu = solver.solve(b)
        gpu = solver.solve(cupy.asarray(b, order="F"))
        assert isinstance(gpu, cupy.ndarray)
        _close(gpu, cpu, 1e-12)
        target = solver.compatible(cupy.asarray(b))
        res = cupy.linalg.norm(solver.apply(gpu) - target) / cupy.linalg.norm(target)
        assert float(res) <= 1e-11


@pytest.mark.parametrize("axis, pair", [(a, p) for a in range(3) for p in BC_PAIRS])
def test_face_placement_gpu_matches_cpu(cupy, rng, axis, pair):
    bc = ["PP", "NN", "DD"]
    bc[axis] = pair
    stagger = "".join("f" if a == axis else "c" for a in range(3))
    b = np.asfortranarray(rng.standard_normal(GRID.shape))
    for solver in (PoissonSolver(GRID, bc, stagger, "ptdma", (2, 4)),
                   HelmholtzSolver(GRID, bc, stagger, alpha=0.1, method="ftm", pencils=(2, 2))):
        _close(solver.solve(cupy.asarray(b)), solver.solve(b), 1e-12)


@pytest.mark.parametrize("bc", [("PP", "PP", "NN"), ("NN", "DD", "DN"), ("DN", "ND", "PP")])
def test_float32_on_gpu(cupy, rng, bc):
    b = np.asfortranarray(rng.standard_normal(GRID.shape)).astype(np.float32, order="F")
    for method, pencils in [("ptdma", (1, 1)), ("ptdma", (2, 4)), ("ftm", (2, 2))]:
        solver = PoissonSolver(GRID, bc, "ccc", method, pencils, dtype="float32")
        x = solver.solve(cupy.asarray(b, order="F"))
        assert x.dtype == np.float32
        target = solver.compatible(cupy.asarray(b))
        assert float(cupy.linalg.norm(solver.apply(x) - target) / cupy.linalg.norm(target)) <= 1e-4


def test_device_mismatch_is_a_value_error(cupy):
    with pytest.raises(ValueError, match="device='gpu'"):
        PoissonSolver(GRID, device="gpu").solve(np.zeros(GRID.shape))
    with pytest.raises(ValueError, match="device='cpu'"):
        PoissonSolver(GRID, device="cpu").solve(cupy.zeros(GRID.shape))


@pytest.mark.parametrize("dtype", [np.complex128, np.complex64, np.float64, np.float32])
@pytest.mark.parametrize("shape, piece", [((5, 70, 45), slice(3, 40)), ((3, 33, 64), slice(0, 64)),
                                          ((2, 1, 9), slice(4, 5))])
def test_swapped_cut_kernel_gives_the_array_code_bits(cupy, rng, dtype, shape, piece):
    from daskflow.pencils.layout import cut_swapped

    a = rng.standard_normal(shape).astype(dtype)
    if np.iscomplexobj(a):
        a = a + 1j * rng.standard_normal(shape).astype(dtype)
    got = cut_swapped(cupy.asarray(a), piece)
    assert got.flags.c_contiguous and got.shape == (shape[0], piece.stop - piece.start, shape[1])
    np.testing.assert_array_equal(got.get(), cut_swapped(a, piece))


@pytest.mark.parametrize("dtype", [np.complex128, np.float64])
@pytest.mark.parametrize("piece", [slice(-1, 9), slice(62, 71), slice(-3, 68), slice(69, 72), slice(-2, 0)])
def test_wrapped_columns_are_swapped_in_one_launch_with_the_array_code_bits(cupy, rng, dtype, piece):
    """Columns that run past either end of a periodic last axis (the pressure rows around y): one
    kernel launch gives the bits of the NumPy cut, into a new array and into a slice of a chunk."""
    from daskflow.pencils.layout import cut_swapped, swap_into

    a = rng.standard_normal((5, 37, 70)).astype(dtype)
    want = cut_swapped(a, piece)
    assert want.shape == (5, piece.stop - piece.start, 37)
    np.testing.assert_array_equal(want, np.take(a, np.arange(piece.start, piece.stop) % 70, axis=2).swapaxes(1, 2))
    np.testing.assert_array_equal(cut_swapped(cupy.asarray(a), piece).get(), want)
    chunk = cupy.zeros((5, want.shape[1], 80), dtype)
    swap_into(cupy.asarray(a), piece, chunk[:, :, 3:40])
    np.testing.assert_array_equal(chunk[:, :, 3:40].get(), want)
    assert not chunk[:, :, :3].any() and not chunk[:, :, 40:].any()


@pytest.mark.parametrize("dtype", [np.complex128, np.float32])
def test_a_piece_kept_by_its_participant_is_swapped_into_place(cupy, rng, dtype):
    """The swap kernel writes into a slice of the assembled chunk (strided rows): the bits of the
    cut and concatenation, the rest of the chunk untouched."""
    from daskflow.pencils.layout import assemble, cut_swapped, cut_swapped_local

    blocks = [rng.standard_normal((5, 37, 70)).astype(dtype) for _ in range(3)]
    part = slice(20, 53)
    want = np.concatenate([cut_swapped(b, part) for b in blocks], axis=2)
    on_device = [cupy.asarray(b) for b in blocks]
    for mine in range(3):
        pieces = [cut_swapped_local(b, part) if i == mine else cut_swapped(b, part) for i, b in enumerate(on_device)]
        np.testing.assert_array_equal(assemble(pieces, 2).get(), want)


@pytest.mark.parametrize("dtype", [np.float64, np.complex128, np.float32])
@pytest.mark.parametrize("shape", [(70, 5, 45), (33, 1, 64), (1, 3, 2)])
def test_layout_changes_through_tiles_give_the_bits_of_cupys_copies(cupy, rng, dtype, shape):
    """A C field's reversed view (the spectral solves' memory order), a z slab of it, and the way
    back: the tiled copies hold the values of CuPy's own, in the order asked for."""
    from daskflow.pencils.kernels import c_contiguous, f_contiguous

    a = cupy.asarray(rng.standard_normal(shape).astype(dtype) * (1 + 1j if np.iscomplexobj(dtype(0)) else 1))
    view = a.T  # (z, y, x): x slowest
    for src in (view, view[1:], a):
        got = c_contiguous(src)
        assert got.flags.c_contiguous and got.dtype == src.dtype
        np.testing.assert_array_equal(got.get(), cupy.ascontiguousarray(src).get())
    back = f_contiguous(a)
    assert back.flags.f_contiguous
    np.testing.assert_array_equal(back.get(), a.get())
    assert c_contiguous(a) is a and f_contiguous(view) is view
    if not np.iscomplexobj(dtype(0)):  # a solution scaled on its way to the operators' order
        for src in (view, a):
            got = c_contiguous(src, 0.125)
            assert got.flags.c_contiguous and got is not src
            np.testing.assert_array_equal(got.get(), (cupy.ascontiguousarray(src) * dtype(0.125)).get())


def test_both_transforms_of_a_reversed_c_field_are_those_of_its_contiguous_copy(cupy, rng):
    """``forward_xy`` of a C field's memory-order view (what a (1, pz) pencil's solve gets; a z slab
    of it too) goes through the tiled copy: the bits of the contiguous input's transform, and
    NumPy's spectrum."""
    from daskflow.bc import Boundaries
    from daskflow.poisson import stages
    from daskflow.poisson.plan import SpectralPlan

    grid = Grid((16, 12, 10), (2.0, 1.0, 2.0), z_stretch=1.5)
    plan = SpectralPlan(grid, Boundaries.parse(("PP", "PP", "NN"), "ccc"), 1.0, 0.0, "ptdma", (1, 1), np.float64)
    field = rng.standard_normal(grid.shape)
    on_device = cupy.asarray(field)  # C-ordered (x, y, z)
    for view, host in ((on_device.T, field.T), (on_device.T[3:], field.T[3:])):
        got = stages.forward_xy(plan, (0, 0), view)
        np.testing.assert_array_equal(got.get(), stages.forward_xy(plan, (0, 0), cupy.ascontiguousarray(view)).get())
        _close(got, stages.forward_xy(plan, (0, 0), np.ascontiguousarray(host)), 1e-12)


@pytest.mark.parametrize("pencils", [(1, 1), (2, 1), (2, 2)])
@pytest.mark.parametrize("bc", [("PP", "PP", "NN"), ("PP", "DD", "DN"), ("NN", "PP", "DD")])
def test_gpu_solves_left_unnormalised_are_the_solution_times_the_periodic_lengths(cupy, rng, bc, pencils):
    """On the GPU too (cuFFT in place, into given memory, CuPy's irfft2): with ``normalised=False``
    the solution times ``inverse_scale`` is the normalised solve's, bit for bit on power-of-two
    periodic lengths."""
    grid = Grid((16, 8, 12), (2.0, 1.0, 2.0), z_stretch=1.5)
    b = cupy.asarray(rng.standard_normal(grid.shape))
    want = PoissonSolver(grid, bc, "ccc", pencils=pencils, device="gpu").solve(b)
    solver = PoissonSolver(grid, bc, "ccc", pencils=pencils, device="gpu", normalised=False)
    np.testing.assert_array_equal((solver.solve(b) * solver.plan.inverse_scale).get(), want.get())


def test_ffts_into_given_memory_give_cupys_bits(cupy, rng):
    """The cuFFT transforms that write where they are told (a pipelined transpose's slabs) give the
    bits of ``cupy.fft``: forward into another array, inverse in place in a view, c2r into a slab."""
    from daskflow import transforms

    x = cupy.asarray(rng.standard_normal((6, 5, 16)) + 1j * rng.standard_normal((6, 5, 16)))
    out = cupy.empty_like(x)
    assert transforms.fft_into(x, out) is out
    np.testing.assert_array_equal(out.get(), cupy.fft.fft(x).get())
    want = cupy.fft.ifft(x[2:4]).get()
    slab = x[2:4]
    assert transforms.fft_into(slab, slab, inverse=True) is slab
    np.testing.assert_array_equal(x[2:4].get(), want)
    spectrum = cupy.fft.rfft(cupy.asarray(rng.standard_normal((6, 5, 16))))
    want = cupy.fft.irfft(spectrum, n=16).get()
    real = cupy.zeros((8, 5, 16))
    transforms.irfft_into(spectrum.copy(), real[1:7])
    np.testing.assert_array_equal(real[1:7].get(), want)
    assert not real[0].any() and not real[7].any()
    assert not transforms.transforms_into(x.swapaxes(0, 2), out, -1)
