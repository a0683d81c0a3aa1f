"""Tests for daskflow.transforms against dense operators assembled from the stencil."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import scipy.fft

from daskflow import transforms
from daskflow.backend import cupy_or_none
from daskflow.transforms import (
    BCS,
    PLACEMENTS,
    backward,
    eigenvalues,
    forward,
    n_unknowns,
    spectral_size,
)

H = 0.37
NS = (2, 3, 4, 7, 8, 16)
CASES = list(itertools.product(PLACEMENTS, BCS, NS))
R2R = [(p, bc) for p in PLACEMENTS for bc in BCS if bc != "PP"]
TOL = {np.float64: 1e-12, np.float32: 1e-5}


def dense_operator(bc: str, placement: str, n: int, h: float) -> np.ndarray:
    """``(x[i-1] - 2 x[i] + x[i+1]) / h^2`` on the unknowns, ghosts from the module's rules."""
    m = n if bc == "PP" or placement == "c" else n - 1
    a = np.zeros((m, m))
    for i in range(m):
        a[i, i] -= 2.0
        for j in (i - 1, i + 1):
            if 0 <= j < m:
                a[i, j] += 1.0
            elif bc == "PP":
                a[i, j % m] += 1.0
            elif bc[0 if j < 0 else 1] == "N":  # mirror ghost: x[-1] = x[0], x[m] = x[m-1]
                a[i, i] += 1.0
            elif placement == "c":  # Dirichlet half a cell outside: x[-1] = -x[0]
                a[i, i] -= 1.0
            # placement "f" Dirichlet: the ghost is the boundary point itself, value 0
    return a / h**2


def random(rng: np.random.Generator, shape: tuple[int, ...], dtype: type, cplx: bool) -> np.ndarray:
    x = rng.standard_normal(shape)
    if cplx:
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(np.result_type(dtype, np.complex64) if cplx else dtype)


def assert_close(got: np.ndarray, want: np.ndarray, tol: float, scale: float | None = None) -> None:
    assert got.shape == want.shape
    scale = float(np.abs(want).max()) if scale is None else scale
    assert float(np.abs(got - want).max()) <= tol * max(scale, 1e-300)


def along(v: np.ndarray, axis: int, ndim: int) -> np.ndarray:
    """Reshape a 1-D array to broadcast along ``axis`` of an ``ndim``-D array."""
    shape = [1] * ndim
    shape[axis] = -1
    return v.reshape(shape)


def apply_dense(a: np.ndarray, x: np.ndarray, axis: int) -> np.ndarray:
    return np.moveaxis(np.tensordot(a, np.moveaxis(x, axis, 0), axes=1), 0, axis)


@pytest.mark.parametrize(("placement", "bc", "n"), CASES)
def test_eigenvalues_match_dense(placement: str, bc: str, n: int) -> None:
    ref = np.linalg.eigvalsh(dense_operator(bc, placement, n, H))
    atol = 1e-12 * np.abs(ref).max()
    lam_c = eigenvalues(bc, placement, n, H, complex_input=True)
    assert lam_c.dtype == np.float64 and lam_c.shape == (spectral_size(bc, placement, n, True),)
    np.testing.assert_allclose(np.sort(lam_c), ref, rtol=1e-12, atol=atol)
    lam_r = eigenvalues(bc, placement, n, H)
    assert lam_r.shape == (spectral_size(bc, placement, n, False),)
    if bc == "PP":  # rfft modes: the set of distinct values
        assert np.abs(lam_r[:, None] - ref[None, :]).min(axis=1).max() <= atol
        assert np.abs(lam_r[:, None] - ref[None, :]).min(axis=0).max() <= atol
    else:
        np.testing.assert_array_equal(lam_r, lam_c)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("cplx", [False, True])
@pytest.mark.parametrize(("placement", "bc", "n"), CASES)
def test_operator_and_round_trips(placement: str, bc: str, n: int, cplx: bool, dtype: type) -> None:
    rng = np.random.default_rng(n)
    tol = TOL[dtype]
    a = dense_operator(bc, placement, n, H)
    m = n_unknowns(bc, placement, n)
    lam = eigenvalues(bc, placement, n, H, complex_input=cplx)
    for shape, axis in [
        ((n,), 0),
        ((n, 3, 2), 0),
        ((2, n, 3), 1),
        ((3, 2, n), 2),
        ((3, 2, n), -1),
        ((2, n, 3), -2),
    ]:
        x = random(rng, shape, dtype, cplx)
        spec = forward(x, axis, bc, placement)
        assert spec.shape[axis] == spectral_size(bc, placement, n, cplx)
        assert spec.dtype == (np.result_type(dtype, np.complex64) if bc == "PP" or cplx else dtype)
        xu = np.take(x, np.arange(m), axis=axis)
        # operator: backward(lambda * forward(x)) == A @ x
        y = backward(
            spec * along(lam.astype(dtype), axis, x.ndim),
            axis,
            bc,
            placement,
            n,
            real_output=not cplx,
        )
        assert y.dtype == x.dtype
        want = apply_dense(a, xu.astype(np.complex128 if cplx else np.float64), axis)
        assert_close(y, want, tol, scale=np.abs(a).max() * np.abs(x).max())
        # backward(forward(x)) == x
        assert_close(backward(spec, axis, bc, placement, n, real_output=not cplx), xu, tol)
        # forward(backward(X)) == X, with X a valid spectrum
        big = random(rng, spec.shape, dtype, cplx or bc == "PP")
        if bc == "PP" and not cplx:
            big = forward(backward(big, axis, bc, placement, n, real_output=True), axis, bc, placement)
        back = backward(big, axis, bc, placement, n, real_output=not cplx)
        assert back.shape[axis] == m
        pad = [(0, 0)] * x.ndim
        pad[axis] = (0, n - m)  # the caller fills the boundary face of "f" non-periodic
        assert_close(forward(np.pad(back, pad), axis, bc, placement), big, tol)


@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize(("placement", "bc"), R2R)
def test_eigenvectors_closed_form(placement: str, bc: str, n: int) -> None:
    """forward == V^T x with V from the docstring table, and A V = V diag(lambda)."""
    rows = {
        ("c", "NN"): (np.cos, 0.5, 0.0, 0.0),
        ("c", "DD"): (np.sin, 0.5, 1.0, 0.0),
        ("c", "ND"): (np.cos, 0.5, 0.5, 0.0),
        ("c", "DN"): (np.sin, 0.5, 0.5, 0.0),
        ("f", "NN"): (np.cos, 0.5, 0.0, 0.0),
        ("f", "DD"): (np.sin, 1.0, 1.0, 1.0),
        ("f", "ND"): (np.cos, 0.5, 0.5, 0.5),
        ("f", "DN"): (np.sin, 1.0, 0.5, 0.5),
    }
    f, a_off, b_off, dlen = rows[placement, bc]
    m = n_unknowns(bc, placement, n)
    i = np.arange(m)
    v = f(np.pi * np.outer(i + a_off, i + b_off) / (m + dlen))  # columns are v_l
    a = dense_operator(bc, placement, n, H)
    lam = eigenvalues(bc, placement, n, H)
    assert_close(a @ v, v * lam, 1e-12, scale=np.abs(a).max())
    x = np.random.default_rng(1).standard_normal(n)
    assert_close(forward(x, 0, bc, placement), v.T @ x[:m], 1e-12)


@pytest.mark.parametrize("n", NS)
def test_matches_scipy(n: int) -> None:
    x = np.random.default_rng(2).standard_normal((3, n))
    ref = {
        ("c", "NN"): scipy.fft.dct(x, type=2),
        ("c", "DD"): scipy.fft.dst(x, type=2),
        ("c", "ND"): scipy.fft.dct(x, type=4),
        ("c", "DN"): scipy.fft.dst(x, type=4),
        ("f", "NN"): scipy.fft.dct(x[:, :-1], type=2),
        ("f", "DD"): scipy.fft.dst(x[:, :-1], type=1),
    }
    for (placement, bc), want in ref.items():  # scipy's unnormalised r2r carry a factor 2
        assert_close(forward(x, -1, bc, placement), want / 2, 1e-12)
        assert_close(backward(want, -1, bc, placement, n, real_output=True), 2 * x[:, : want.shape[1]], 1e-12)


ONE_CELL = [(p, bc, 1) for p in PLACEMENTS for bc in BCS if bc == "PP" or p == "c"]
AXES = [((None, 3, 2), 0), ((2, None, 3), 1), ((3, 2, None), -1), ((2, None, 3), -2), ((None,), 0)]


def _built(x, axis, bc, placement, n=None, real_output=None):
    """The FFT-built transform (CuPy's path) run on NumPy: forward, or backward with ``n``."""
    if n is None:
        m = n_unknowns(bc, placement, x.shape[axis])
        return transforms._built_forward(np, x, axis, bc, placement, m)
    return transforms._built_backward(np, x, axis, bc, placement, n_unknowns(bc, placement, n), real_output)


@pytest.mark.parametrize("threads", ["1", "2"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("cplx", [False, True])
@pytest.mark.parametrize(("placement", "bc", "n"), CASES + ONE_CELL + [(p, bc, 17) for p, bc in R2R])
def test_numpy_path_matches_fft_built(placement, bc, n, cplx, dtype, threads, monkeypatch) -> None:
    """NumPy arrays go through scipy.fft (its r2r types where it has them, on ``DASKFLOW_THREADS``
    workers): the same values as the FFT-built transforms to round-off, dtypes and shapes included;
    with ``overwrite`` the same again, the input reused for the result where scipy allows."""
    monkeypatch.setenv("DASKFLOW_THREADS", threads)
    rng = np.random.default_rng(5 * n)
    tol = TOL[dtype]
    m = n_unknowns(bc, placement, n)
    for shape, axis in AXES:
        x = random(rng, tuple(n if s is None else s for s in shape), dtype, cplx)
        want = _built(x, axis, bc, placement)
        got = forward(x, axis, bc, placement)
        assert got.dtype == want.dtype and got.shape == want.shape and got.flags.c_contiguous
        assert_close(got, want, tol, scale=np.abs(x).max() * n)
        scratch = x.copy()
        in_place = forward(scratch, axis, bc, placement, overwrite=True)
        assert in_place.dtype == want.dtype
        assert_close(in_place, got, tol, scale=np.abs(x).max() * n)
        if bc != "PP" and m == n and (placement, bc) in transforms._SCIPY:
            assert np.shares_memory(in_place, scratch)  # no new array
        real_output = not cplx
        spec = want if bc == "PP" else random(rng, want.shape, dtype, cplx)
        want_back = _built(spec, axis, bc, placement, n, real_output)
        got_back = backward(spec, axis, bc, placement, n, real_output)
        assert got_back.dtype == want_back.dtype and got_back.shape == want_back.shape
        assert_close(got_back, want_back, tol)
        scratch = spec.copy()
        in_place = backward(scratch, axis, bc, placement, n, real_output, overwrite=True)
        assert_close(in_place, got_back, tol)
        if bc != "PP" and (placement, bc) in transforms._SCIPY:
            assert np.shares_memory(in_place, scratch)
        if bc != "PP" and not cplx:  # real output from a complex spectrum: its real part
            spec_c = spec + 1j * rng.standard_normal(spec.shape)
            assert_close(backward(spec_c, axis, bc, placement, n, True, overwrite=True), got_back, tol)


def test_overwrite_false_leaves_input(rng) -> None:
    for (placement, bc), cplx in itertools.product([(p, bc) for p in PLACEMENTS for bc in BCS], (False, True)):
        x = random(rng, (3, 8, 5), np.float64, cplx)
        keep = x.copy()
        spec = forward(x, 1, bc, placement)
        np.testing.assert_array_equal(x, keep)
        keep = spec.copy()
        backward(spec, 1, bc, placement, 8, real_output=not cplx)
        np.testing.assert_array_equal(spec, keep)


@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("bc", [bc for bc in BCS if bc != "PP"])
def test_f_boundary_face_ignored(bc: str, n: int) -> None:
    x = np.random.default_rng(3).standard_normal((n, 2))
    x2 = x.copy()
    x2[-1] += 10.0
    np.testing.assert_array_equal(forward(x, 0, bc, "f"), forward(x2, 0, bc, "f"))


def test_bad_arguments() -> None:
    x = np.zeros(4)
    with pytest.raises(ValueError, match=r"bc must be one of .*'PP'.*'DN'.*'XY'"):
        forward(x, 0, "XY", "c")
    with pytest.raises(ValueError, match=r"placement must be one of .*'c'.*'f'.*'z'"):
        forward(x, 0, "NN", "z")
    with pytest.raises(ValueError, match="bc must be one of"):
        eigenvalues("nn", "c", 4, 1.0)
    with pytest.raises(ValueError, match="placement must be one of"):
        backward(x, 0, "DD", "C", 4, real_output=True)
    with pytest.raises(ValueError, match="n must be >= 1"):
        n_unknowns("PP", "c", 0)
    with pytest.raises(ValueError, match="expected 3"):
        backward(np.zeros(4), 0, "NN", "f", 4, real_output=True)


@pytest.mark.gpu
def test_cupy_matches_numpy() -> None:
    cupy = pytest.importorskip("cupy")
    if cupy_or_none() is None:
        pytest.skip("no CUDA device")
    rng = np.random.default_rng(4)
    for (placement, bc, n), cplx, dtype in itertools.product(CASES, (False, True), (np.float64, np.float32)):
        tol = TOL[dtype]
        m = n_unknowns(bc, placement, n)
        lam = eigenvalues(bc, placement, n, H, complex_input=cplx).astype(dtype)
        for shape, axis in [((n, 3, 2), 0), ((2, n, 3), 1), ((3, 2, n), -1)]:
            x = random(rng, shape, dtype, cplx)
            spec = forward(x, axis, bc, placement)
            spec_d = forward(cupy.asarray(x), axis, bc, placement)
            assert isinstance(spec_d, cupy.ndarray) and spec_d.dtype == spec.dtype
            assert_close(spec_d.get(), spec, tol, scale=np.abs(x).max() * n)
            lam_d = cupy.asarray(along(lam, axis, x.ndim))
            y_d = backward(spec_d * lam_d, axis, bc, placement, n, real_output=not cplx)
            y = backward(spec * along(lam, axis, x.ndim), axis, bc, placement, n, real_output=not cplx)
            assert y_d.dtype == y.dtype
            assert_close(y_d.get(), y, tol, scale=np.abs(x).max() * 4 / H**2)
            back = backward(spec_d, axis, bc, placement, n, real_output=not cplx).get()
            assert_close(back, np.take(x, np.arange(m), axis=axis), tol)
