import numpy as np
import pytest

from daskflow import Grid
from daskflow.grid import Z_CLUSTERS


def test_uniform_grid_coordinates():
    g = Grid((4, 5, 8), (2.0, 1.0, 4.0))
    np.testing.assert_allclose(g.xf, np.linspace(0, 2, 5))
    np.testing.assert_allclose(g.yc, (np.arange(5) + 0.5) / 5)
    np.testing.assert_allclose(g.zf, np.linspace(0, 4, 9), atol=1e-15)
    np.testing.assert_allclose(g.dzf, 0.5)
    assert g.dx == 0.5 and g.dy == 0.2
    assert g.zc.shape == (8,) and g.zf.shape == (9,)


@pytest.mark.parametrize("cluster", Z_CLUSTERS)
def test_stretched_faces_are_monotone_and_exact_at_ends(cluster):
    g = Grid((2, 2, 64), (1.0, 1.0, 2.0), z_stretch=3.0, z_cluster=cluster)
    assert g.zf[0] == 0.0 and g.zf[-1] == 2.0
    assert np.all(np.diff(g.zf) > 0)
    np.testing.assert_allclose(g.zc, 0.5 * (g.zf[1:] + g.zf[:-1]))


@pytest.mark.parametrize(
    "cluster, finest",
    [("both", [0, -1]), ("lower", [0]), ("upper", [-1]), ("middle", [31, 32])],
)
def test_clustering_puts_the_finest_cells_where_asked(cluster, finest):
    dz = Grid((2, 2, 64), (1.0, 1.0, 1.0), z_stretch=2.5, z_cluster=cluster).dzf
    assert dz[finest].max() <= dz.min() * (1 + 1e-12)
    assert dz.max() / dz.min() > 1.5


def test_zero_stretch_is_uniform_for_every_cluster():
    for cluster in Z_CLUSTERS:
        np.testing.assert_allclose(Grid((2, 2, 10), z_cluster=cluster).dzf, 0.1)


@pytest.mark.parametrize(
    "kwargs, word",
    [
        ({"shape": (4, 4)}, "shape"),
        ({"shape": (4, 0, 4)}, "shape"),
        ({"shape": (4, 4, 4), "lengths": (1, -1, 1)}, "lengths"),
        ({"shape": (4, 4, 4), "z_stretch": -1.0}, "z_stretch"),
        ({"shape": (4, 4, 4), "z_cluster": "top"}, "z_cluster"),
    ],
)
def test_bad_grid_arguments_name_the_setting(kwargs, word):
    with pytest.raises(ValueError, match=word):
        Grid(**kwargs)
