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
