"""x/y transforms of whole fields, chunked Dask arrays included (any chunks along x, y, z)."""

import dask.array as da
import numpy as np
import pytest

from daskflow.spectral import backward_xy, forward_xy

SHAPE = (10, 12, 6)


@pytest.fixture
def field(rng):
    return rng.standard_normal(SHAPE)


def test_periodic_pair_is_the_2d_real_fft(field):
    np.testing.assert_allclose(forward_xy(field, ("PP", "PP")), np.fft.rfftn(field, axes=(1, 0)), atol=1e-12)


@pytest.mark.parametrize("bc", [("PP", "PP"), ("NN", "DD"), ("DN", "PP"), ("PP", "ND"), ("ND", "NN")])
@pytest.mark.parametrize("stagger", ["cc", "fc", "cf"])
@pytest.mark.parametrize("chunks", [(10, 12, 6), (5, 4, 3), (3, 7, 2)])
def test_dask_transforms_match_in_memory_and_invert(field, bc, stagger, chunks):
    reference = forward_xy(field, bc, stagger)
    spectrum = forward_xy(da.from_array(field, chunks=chunks), bc, stagger)
    assert spectrum.shape == reference.shape and spectrum.dtype == reference.dtype
    assert len(spectrum.chunks[1]) == 1  # y-pencils: all y modes in every chunk
    np.testing.assert_allclose(spectrum.compute(scheduler="sync"), reference, rtol=0, atol=1e-12)
    back = backward_xy(spectrum, SHAPE, bc, stagger)
    assert len(back.chunks[0]) == 1  # x-pencils
    expected = backward_xy(reference, SHAPE, bc, stagger)
    np.testing.assert_allclose(back.compute(scheduler="sync"), expected, rtol=0, atol=1e-12)
    bounded_faces = [s == "f" and b != "PP" for s, b in zip(stagger, bc, strict=True)]
    inner = tuple(slice(0, n - 1 if face else n) for n, face in zip(SHAPE[:2], bounded_faces, strict=True))
    np.testing.assert_allclose(expected[inner], field[inner], rtol=0, atol=1e-12)


def test_transpose_moves_pieces_not_p2p_rechunk(field):
    spectrum = forward_xy(da.from_array(field, chunks=(10, 6, 3)), ("PP", "NN"))
    names = {k[0] if isinstance(k, tuple) else k for k in dict(spectrum.dask)}
    assert any("cut-for-y-pencil" in n for n in names)
    assert not any("p2p" in n or "rechunk" in n for n in names)


PAIRS = [(bx, by) for bx in ("PP", "NN", "DD", "ND", "DN") for by in ("PP", "NN", "DD", "ND", "DN")]


def _built_xy(field, bc, stagger):
    """forward_xy from the FFT-built transforms (CuPy's path), run on NumPy."""
    from daskflow import transforms

    out = field
    for axis in (0, 1):
        m = transforms.n_unknowns(bc[axis], stagger[axis], field.shape[axis])
        out = transforms._built_forward(np, out, axis, bc[axis], stagger[axis], m)
    return out


@pytest.mark.parametrize("threads", ["1", "2"])
@pytest.mark.parametrize("stagger", ["cc", "fc", "cf", "ff"])
@pytest.mark.parametrize("bc", PAIRS)
def test_numpy_stages_match_fft_built_and_owned_chunks(field, bc, stagger, threads, monkeypatch):
    """The NumPy stages (scipy.fft on DASKFLOW_THREADS workers) give the FFT-built spectrum to
    round-off; the backward stages of a chunk the chain owns (the solver's, which may destroy it)
    give what the ones that leave their input alone give."""
    from daskflow.poisson import stages
    from daskflow.spectral import _plan

    monkeypatch.setenv("DASKFLOW_THREADS", threads)
    spectrum = forward_xy(field, bc, stagger)
    np.testing.assert_allclose(spectrum, _built_xy(field, bc, stagger), rtol=0, atol=1e-12)
    plan = _plan(SHAPE, bc, stagger, (1, 1), np.float64)
    a = spectrum.T  # memory order, as the stages see it
    kept = a.copy()
    for plain, owned in [(stages.backward_xy, stages.backward_xy_owned),
                         (stages.backward_y, stages.backward_y_owned)]:
        want = plain(plan, None, a)
        np.testing.assert_array_equal(a, kept)
        got = owned(plan, None, a.copy())
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
    phys_y = stages.backward_y(plan, None, a)
    want = stages.backward_x(plan, None, phys_y)
    np.testing.assert_allclose(stages.backward_x_owned(plan, None, phys_y.copy()), want, rtol=0, atol=1e-12)
    x_spec = stages.forward_x(plan, None, field.T)
    want = stages.forward_y(plan, None, x_spec)
    np.testing.assert_allclose(stages.forward_y_owned(plan, None, x_spec.copy()), want, rtol=0, atol=1e-12)
