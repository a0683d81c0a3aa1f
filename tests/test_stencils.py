import numpy as np
import pytest

from daskflow import Grid, transforms
from daskflow.bc import BC_PAIRS, Boundaries
from daskflow.stencils import apply_along, control_widths, dense, laplacian_1d


def _ghost_matrix(zf: np.ndarray, bc: str, placement: str) -> np.ndarray:
    """The z Laplacian assembled point by point from positions and ghost rules (independent of
    :func:`laplacian_1d`): flux differences over control volumes."""
    n = zf.size - 1
    zc = 0.5 * (zf[1:] + zf[:-1])
    lz = zf[-1]
    if placement == "c":
        pos, m = zc, n
        # neighbour positions across the walls (mirror images) and ghost factors
        ghost = {"N": 1.0, "D": -1.0}
        lo_pos = -zc[0] if bc[0] != "P" else zc[-1] - lz
        hi_pos = 2 * lz - zc[-1] if bc[1] != "P" else zc[0] + lz
        vol = np.diff(zf)
    else:
        m = n if bc == "PP" else n - 1
        pos = zf[1 : m + 1]
        ghost = {"N": 1.0, "D": 0.0}
        lo_pos = zf[0]  # face 0: the boundary point, or (periodic) the image of face n
        hi_pos = zf[m + 1] if bc != "PP" else zf[1] + lz  # face n (boundary) or face 1 up
    ext = np.concatenate([[lo_pos], pos, [hi_pos]])
    if placement == "f":  # control volume between the neighbouring cell centres
        vol = 0.5 * (ext[2:] - ext[:-2])
    a = np.zeros((m, m))
    for k in range(m):
        lo = 1.0 / ((ext[k + 1] - ext[k]) * vol[k])
        hi = 1.0 / ((ext[k + 2] - ext[k + 1]) * vol[k])
        a[k, k] -= lo + hi
        for coef, j, end in ((lo, k - 1, 0), (hi, k + 1, 1)):
            if 0 <= j < m:
                a[k, j] += coef
            elif bc == "PP":
                a[k, j % m] += coef
            elif placement == "c" or bc[end] == "N":
                a[k, k] += ghost[bc[end]] * coef if placement == "c" else coef
    return a


@pytest.mark.parametrize("bc", BC_PAIRS)
@pytest.mark.parametrize("placement", ["c", "f"])
def test_z_coefficients_match_an_independent_assembly(bc, placement):
    zf = Grid((2, 2, 9), (1, 1, 2.0), z_stretch=2.0).zf
    op = laplacian_1d(np.diff(zf), bc, placement)
    np.testing.assert_allclose(dense(op), _ghost_matrix(zf, bc, placement), rtol=1e-13, atol=1e-12)


@pytest.mark.parametrize("bc", BC_PAIRS)
@pytest.mark.parametrize("placement", ["c", "f"])
def test_uniform_operator_has_the_transform_eigenvalues(bc, placement):
    n, h = 11, 0.3
    op = laplacian_1d(np.full(n, h), bc, placement)
    ev = np.sort(np.linalg.eigvalsh(dense(op)))
    lam = np.sort(transforms.eigenvalues(bc, placement, n, h, complex_input=True))
    np.testing.assert_allclose(ev, lam, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("bc", BC_PAIRS)
@pytest.mark.parametrize("placement", ["c", "f"])
def test_stretched_operator_is_symmetric_in_the_volume_weighted_sense(bc, placement):
    dzf = np.diff(Grid((2, 2, 10), z_stretch=1.7).zf)
    op = laplacian_1d(dzf, bc, placement)
    weighted = np.diag(control_widths(dzf, bc, placement)) @ dense(op)
    np.testing.assert_allclose(weighted, weighted.T, rtol=1e-12, atol=1e-12)
    if "D" not in bc:  # constants are the null space
        np.testing.assert_allclose(dense(op).sum(axis=1), 0, atol=1e-10)


@pytest.mark.parametrize("axis", [0, 1, 2])
@pytest.mark.parametrize("bc", ["PP", "DN"])
def test_apply_along_matches_dense(axis, bc, rng):
    op = laplacian_1d(rng.uniform(0.5, 1.5, 6), bc, "c")
    x = rng.standard_normal((6, 6, 6))
    expected = np.moveaxis(np.tensordot(dense(op), np.moveaxis(x, axis, 0), axes=1), 0, axis)
    np.testing.assert_allclose(apply_along(x, op, axis), expected, rtol=1e-13, atol=1e-13)


def test_boundaries_parse_errors_name_the_argument():
    with pytest.raises(ValueError, match="bc for axis x"):
        Boundaries.parse(("PN", "PP", "NN"))
    with pytest.raises(ValueError, match="bc for axis z"):
        Boundaries.parse(("PP", "PP", "XX"))
    with pytest.raises(ValueError, match="three two-letter"):
        Boundaries.parse("PPPPNN")
    with pytest.raises(ValueError, match="stagger"):
        Boundaries.parse(("PP", "PP", "NN"), "cc")
    with pytest.raises(ValueError, match="stagger"):
        Boundaries.parse(("PP", "PP", "NN"), "ccx")


@pytest.mark.parametrize("bc", ["NN", "ND", "DN"])
def test_second_order_face_neumann_is_exact_for_wall_quadratics(bc):
    """The z closure reproduces u'' exactly for u = (z - wall)^2 at every Neumann wall."""
    zf = Grid((2, 2, 12), (1, 1, 2.0), z_stretch=2.0).zf
    op = laplacian_1d(np.diff(zf), bc, "f", face_neumann="second_order")
    m = op.diag.size
    assert m == (12 if bc[1] == "N" else 11)
    z = zf[1 : m + 1]
    for end, wall in ((0, 0.0), (1, 2.0)):
        if bc[end] != "N":
            continue
        row = 0 if end == 0 else m - 1
        lap = dense(op) @ (z - wall) ** 2
        assert lap[row] == pytest.approx(2.0, rel=1e-12)
