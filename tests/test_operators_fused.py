"""The cache-blocked NumPy operators (explicit terms, divergence, update, pad), through the compiled
loops and through the array code, against the plain array expressions, on one slab and many, with
one thread and two."""

import numpy as np
import pytest

from daskflow.grid import Grid
from daskflow.ns import advection as adv
from daskflow.ns import boundaries as nsb
from daskflow.ns import operators as ops


@pytest.fixture
def setup():
    rng = np.random.default_rng(3)
    grid = Grid((12, 10, 9), (2.0, 1.5, 2.0), 1.7, "both")
    m = ops.Metrics.of(grid, False)
    padded = [np.asfortranarray(rng.standard_normal((14, 12, 11))) for _ in range(3)]
    return rng, m, padded


@pytest.mark.parametrize("axes", [(0, 1, 2), (0, 1), ()])
def test_explicit_terms_equal_advection_plus_laplacian(setup, blocking, cpu_path, axes):
    _, m, padded = setup
    nu = 0.03
    advect = adv.advection(*padded, m)
    got = adv.explicit_terms(*padded, m, nu, axes, threads=blocking)
    for i, (a, f, g) in enumerate(zip(advect, padded, got, strict=True)):
        expected = a + nu * ops.laplacian(f, m, i, axes) if axes else a
        assert g.flags.f_contiguous
        np.testing.assert_allclose(g, expected, rtol=0, atol=1e-13 * np.abs(expected).max())


def test_divergence_and_update(setup, blocking, cpu_path):
    rng, m, padded = setup
    U, V, W = padded
    dzf = m.dzf[1:-1][None, None, :]
    C, LO = ops.C, ops.LO
    expected = ((U[C, C, C] - U[LO, C, C]) / m.dx + (V[C, C, C] - V[C, LO, C]) / m.dy
                + (W[C, C, C] - W[C, C, LO]) / dzf) / 0.7
    got = ops.divergence(U, V, W, m, 0.7, threads=blocking)
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-13 * np.abs(expected).max())
    P = padded[0]
    f, r, h = (np.asfortranarray(rng.standard_normal((12, 10, 9))) for _ in range(3))
    for axis in range(3):
        for body in (0.0, 0.4):
            expected = f + (0.3 * r + 0.2 * (body - ops.gradient(P, m, axis)) + -0.1 * h)
            got = ops.update(f, P, m, axis, 0.2, body, ((0.3, r), (-0.1, h)), threads=blocking)
            np.testing.assert_allclose(got, expected, rtol=0, atol=1e-13 * np.abs(expected).max())
            increment = ops.update(None, P, m, axis, 0.2, body, ((0.3, r),), threads=blocking)
            np.testing.assert_allclose(increment, 0.3 * r + 0.2 * (body - ops.gradient(P, m, axis)), rtol=0,
                                       atol=1e-13)
            diffused = ops.update(None, P, m, axis, 0.2, body, ((0.3, r),), threads=blocking,
                                  diffusion=(padded[1], (0, 2), 0.05))
            np.testing.assert_allclose(diffused, increment + 0.05 * ops.laplacian(padded[1], m, axis, (0, 2)),
                                       rtol=0, atol=1e-13 * np.abs(diffused).max())
            offset = ops.update(None, P, m, axis, 0.2, body, ((0.3, r),), threads=blocking, offset=-0.25)
            np.testing.assert_array_equal(offset, increment + -0.25)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_the_compiled_second_differences_equal_the_array_code(setup, blocking, monkeypatch, dtype):
    """The compiled loop of :func:`ops.laplacian` (z-slabs over the threads) gives the array code's
    bits, in float64 and float32 (its sums stay in the field's type), for face and centred
    components, along any axes in any order, new or added into ``out``."""
    from daskflow.backend import numba_or_none

    if numba_or_none() is None:
        pytest.skip("needs Numba")
    rng, m, padded = setup
    A = np.asfortranarray(padded[0].astype(dtype))
    base = np.asfortranarray(rng.standard_normal((12, 10, 9)).astype(dtype))
    for component in range(4):
        for axes in ((2,), (0, 1), (0, 1, 2), (2, 0)):
            monkeypatch.setenv("DASKFLOW_NUMBA", "1")
            got = ops.laplacian(A, m, component, axes, 0.013, threads=blocking)
            added = ops.laplacian(A, m, component, axes, 0.013, out=base.copy(), threads=blocking)
            monkeypatch.setenv("DASKFLOW_NUMBA", "0")
            want = ops.laplacian(A, m, component, axes, 0.013)
            want_added = ops.laplacian(A, m, component, axes, 0.013, out=base.copy())
            for g, w in ((got, want), (added, want_added)):
                assert g.dtype == dtype
                np.testing.assert_array_equal(g, w, err_msg=f"{component} {axes}")


def test_pressure_update_adds_phi_less_its_second_differences(setup, cpu_path):
    rng, m, padded = setup
    p, phi = (np.asfortranarray(rng.standard_normal((12, 10, 9))) for _ in range(2))
    Phi = padded[2]
    for axes in ((2,), (0, 1, 2)):
        expected = p + phi - 0.3 * ops.laplacian(Phi, m, 3, axes)
        got = ops.pressure_update(p, phi, Phi, m, axes, 0.3)
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-13 * np.abs(expected).max())
    np.testing.assert_array_equal(ops.pressure_update(p, phi, Phi, m, (), 0.3), p + phi)


def _ghost_plane(a, axis: int, side: int, letter: str, value: float, face: bool):
    """The ghost plane beyond ``side`` of a bounded axis, written out plainly: a face on the lower
    wall is the wall value (D) and the ghost beyond the stored upper face a copy; centred values
    mirror to ``value`` (D) or copy (N)."""
    edge = np.take(a, [0 if side == 0 else a.shape[axis] - 1], axis=axis)
    if face:
        return np.full_like(edge, value) if (side == 0 and letter == "D") else edge
    return 2 * value - edge if letter == "D" else edge


def _concatenated(a, axis: int, pair: str, values, face: bool):
    """The plain reference: ``a`` with its two ghost planes along ``axis`` concatenated (wrapped
    when periodic)."""
    n = a.shape[axis]
    if pair == "PP":
        lo, hi = np.take(a, [n - 1], axis=axis), np.take(a, [0], axis=axis)
    else:
        lo, hi = (_ghost_plane(a, axis, side, pair[side], values[side], face) for side in (0, 1))
    return np.concatenate([lo, a, hi], axis=axis)


@pytest.mark.parametrize("preset", ["channel", "cavity", "couette", "periodic"])
def test_pad_equals_concatenated_ghost_planes(preset, blocking, cpu_path):
    bcs = nsb.build({"preset": preset})
    a = np.asfortranarray(np.random.default_rng(1).standard_normal((6, 5, 7)))
    for component in range(3):
        bc = bcs.components[component]
        expected = a
        for axis in range(3):
            expected = _concatenated(expected, axis, bc.pairs[axis], bc.values[axis], axis == component)
        got = ops.pad(a, bc, component)
        assert got.flags.f_contiguous
        np.testing.assert_array_equal(got, expected)
    expected = a
    for axis in range(3):
        expected = _concatenated(expected, axis, bcs.p[axis], (0.0, 0.0), False)
    np.testing.assert_array_equal(ops.pad(a, bcs.p), expected)


def _stacked_pad(xp, arrays, rules):
    """The fields padded as one stack, axis after axis, by :func:`ops.fill_ghosts_stacked`."""
    stack = ops.padded_copies([xp.asarray(a) for a in arrays])
    for axis in range(3):
        view = stack[(Ellipsis, *(slice(None) if ax <= axis else ops.C for ax in range(3)))]
        ops.fill_ghosts_stacked(view, axis, rules)
    return stack


def _velocity_and_pressure(preset):
    bcs = nsb.build({"preset": preset})
    rules = [(*ops.bc_of(bcs.components[i]), i) for i in range(3)] + [(*ops.bc_of(bcs.p), None)]
    rng = np.random.default_rng(2)
    arrays = [np.asfortranarray(rng.standard_normal((6, 5, 7))) for _ in rules]
    return bcs, rules, arrays


@pytest.mark.parametrize("preset", ["channel", "cavity", "couette", "periodic"])
def test_a_stack_of_fields_with_different_walls_pads_as_each_field_alone(preset):
    bcs, rules, arrays = _velocity_and_pressure(preset)
    stack = _stacked_pad(np, arrays, rules)
    for i, a in enumerate(arrays):
        alone = ops.pad(a, bcs.components[i], i) if i < 3 else ops.pad(a, bcs.p)
        np.testing.assert_array_equal(stack[i], alone)


@pytest.mark.gpu
@pytest.mark.parametrize("preset", ["channel", "cavity", "couette"])
def test_a_stack_of_fields_pads_the_same_on_the_gpu(preset, cupy):
    _, rules, arrays = _velocity_and_pressure(preset)
    np.testing.assert_array_equal(_stacked_pad(cupy, arrays, rules).get(), _stacked_pad(np, arrays, rules))
