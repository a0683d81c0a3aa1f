"""Rectilinear staggered grid: uniform in x and y, optionally stretched in z.

Cells are ``nx x ny x nz``; faces run from 0 to the box length. Logical index order everywhere
in the public API is ``[i, j, k] = [x, y, z]``. Staggered (MAC) positions: pressure at cell
centres, ``u`` on x-faces, ``v`` on y-faces, ``w`` on z-faces; the stored face of cell ``i`` is its
*upper* face ``i + 1`` (so the last stored face is the upper boundary of a bounded axis).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

Z_CLUSTERS = ("both", "lower", "upper", "middle")


def stretching_function(s: np.ndarray, stretch: float, cluster: str) -> np.ndarray:
    """Map uniform ``s`` in [0, 1] to face positions in [0, 1].

    ``stretch = 0`` is uniform; larger values cluster faces more strongly near both walls
    (``both``, a tanh profile), the lower or upper wall (one-sided tanh) or the centre (sinh).
    """
    if cluster not in Z_CLUSTERS:
        raise ValueError(f"z_cluster must be one of {Z_CLUSTERS}, got {cluster!r}")
    if stretch == 0.0:
        return np.asarray(s, dtype=np.float64).copy()
    r = float(stretch)
    if cluster == "both":
        g = 0.5 * (1.0 + np.tanh((s - 0.5) * r) / np.tanh(0.5 * r))
    elif cluster == "lower":
        g = 1.0 + np.tanh((s - 1.0) * r) / np.tanh(r)
    elif cluster == "upper":
        g = np.tanh(s * r) / np.tanh(r)
    else:  # middle
        g = 0.5 * (1.0 + np.sinh((s - 0.5) * r) / np.sinh(0.5 * r))
    g[0], g[-1] = 0.0, 1.0  # exact end points whatever the rounding
    return g


@dataclass(frozen=True)
class Grid:
    """A box ``lengths`` with ``shape`` cells; z faces stretched by ``z_stretch``/``z_cluster``.

    Attributes ``xc, yc, zc`` (cell centres, length n) and ``xf, yf, zf`` (faces, length n + 1,
    from 0 to l) are float64 NumPy arrays; ``dx, dy`` are scalars, ``dzf`` the z cell widths
    (length nz). An axis may have one cell (a quasi-two-dimensional problem); one z cell spans the
    whole box whatever ``z_stretch`` (the end faces are exact), so stretching leaves it unchanged.
    """

    shape: tuple[int, int, int]
    lengths: tuple[float, float, float] = (1.0, 1.0, 1.0)
    z_stretch: float = 0.0
    z_cluster: str = "both"
    zf: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        shape = tuple(self.shape)
        lengths = tuple(self.lengths)
        if len(shape) != 3 or not all(isinstance(n, (int, np.integer)) and n >= 1 for n in shape):
            raise ValueError(f"shape must be three positive integers (nx, ny, nz), got {self.shape!r}")
        if len(lengths) != 3 or not all(np.isfinite(v) and v > 0 for v in lengths):
            raise ValueError(f"lengths must be three positive numbers (lx, ly, lz), got {self.lengths!r}")
        if not (np.isfinite(self.z_stretch) and self.z_stretch >= 0):
            raise ValueError(f"z_stretch must be a number >= 0 (0 = uniform), got {self.z_stretch!r}")
        if self.z_cluster not in Z_CLUSTERS:
            raise ValueError(f"z_cluster must be one of {Z_CLUSTERS}, got {self.z_cluster!r}")
        object.__setattr__(self, "shape", tuple(int(n) for n in shape))
        object.__setattr__(self, "lengths", tuple(float(v) for v in lengths))
        nz = self.shape[2]
        zf = self.lengths[2] * stretching_function(
            np.arange(nz + 1) / nz, float(self.z_stretch), self.z_cluster
        )
        zf.setflags(write=False)
        object.__setattr__(self, "zf", zf)

    @property
    def dx(self) -> float:
        return self.lengths[0] / self.shape[0]

    @property
    def dy(self) -> float:
        return self.lengths[1] / self.shape[1]

    @property
    def xf(self) -> np.ndarray:
        return np.arange(self.shape[0] + 1) * self.dx

    @property
    def yf(self) -> np.ndarray:
        return np.arange(self.shape[1] + 1) * self.dy

    @property
    def xc(self) -> np.ndarray:
        return (np.arange(self.shape[0]) + 0.5) * self.dx

    @property
    def yc(self) -> np.ndarray:
        return (np.arange(self.shape[1]) + 0.5) * self.dy

    @property
    def zc(self) -> np.ndarray:
        return 0.5 * (self.zf[1:] + self.zf[:-1])

    @property
    def dzf(self) -> np.ndarray:
        """z cell widths, length nz."""
        return np.diff(self.zf)

    def widths(self, axis: int) -> np.ndarray:
        """Cell widths along ``axis`` (0, 1, 2) as an array of length n."""
        if axis == 2:
            return self.dzf
        return np.full(self.shape[axis], self.lengths[axis] / self.shape[axis])

    def __repr__(self) -> str:
        return (
            f"Grid(shape={self.shape}, lengths={self.lengths}, z_stretch={self.z_stretch}, "
            f"z_cluster={self.z_cluster!r})"
        )
