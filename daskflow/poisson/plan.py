"""Set-up of a spectral Poisson/Helmholtz solve: eigenvalues, z operator, decomposition.

The solved operator is ``identity * I + scale * L`` with ``L`` the staggered Laplacian:
Poisson is ``(0, 1)``, Helmholtz ``(I - alpha L)`` is ``(1, -alpha)``. After the x and y
transforms every spectral column ``(j, i)`` is a tridiagonal system along z with 1-D row
coefficients (:attr:`SpectralPlan.z_op`) plus the column's diagonal shift
``scale * (lambda_x[i] + lambda_y[j])``.

Everything here is small (1-D arrays, one ``nz x nz`` matrix for the singular mode) so a plan can
be shipped to Dask workers; heavy per-chunk coefficients are computed where the chunk lives.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from daskflow import transforms
from daskflow.bc import Boundaries
from daskflow.grid import Grid
from daskflow.pencils import Decomposition
from daskflow.stencils import Tridiagonal, control_widths, dense, laplacian_1d

METHODS = ("ptdma", "ftm")
DTYPES = ("float64", "float32")


@dataclass
class SpectralPlan:
    grid: Grid
    boundaries: Boundaries
    identity: float
    scale: float
    method: str
    pencils: tuple[int, int]
    dtype: np.dtype
    _device_cache: dict = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        nx, ny, nz = self.grid.shape
        (bx, by, bz), (sx, sy, sz) = self.boundaries.bc, self.boundaries.stagger
        self.x_is_complex = bx == "PP"  # data is complex after the x transform
        self.complex = bx == "PP" or by == "PP"
        nxs = transforms.spectral_size(bx, sx, nx, complex_input=False)
        nys = transforms.spectral_size(by, sy, ny, complex_input=self.x_is_complex)
        self.decomposition = Decomposition(self.grid.shape, (nxs, nys), self.pencils)
        self.decomposition.check(self.method)
        lam_x = transforms.eigenvalues(bx, sx, nx, self.grid.dx, complex_input=False)
        lam_y = transforms.eigenvalues(by, sy, ny, self.grid.dy, complex_input=self.x_is_complex)
        lap = laplacian_1d(self.grid.dzf, bz, sz)
        self.z_op = Tridiagonal(self.scale * lap.lower, self.identity + self.scale * lap.diag,
                                self.scale * lap.upper, lap.periodic)
        self.nz_unknowns = lap.diag.size
        shift = self.scale * (lam_y[:, None] + lam_x[None, :])
        self.singular = self.identity == 0 and self.boundaries.singular
        self.singular_solution = None
        if self.singular:
            # The (0, 0) column is singular: solve it apart with a dense map (projection of the
            # right-hand side, pinned solve, zero weighted mean). Any non-singular shift keeps the
            # batched kernels finite for that column; its result is overwritten.
            shift[0, 0] = -np.abs(self.z_op.diag).max()
            self.singular_solution = _singular_map(self.z_op, control_widths(self.grid.dzf, bz, sz))
        self.shift = shift

    @property
    def real_dtype(self) -> np.dtype:
        return np.dtype(self.dtype)

    @property
    def spectral_dtype(self) -> np.dtype:
        return np.result_type(self.dtype, np.complex64) if self.complex else np.dtype(self.dtype)

    def z_rows(self, q: int) -> slice:
        """Unknown rows (global z indices) stored in z-chunk ``q``."""
        z = self.decomposition.z[q]
        return slice(z.start, min(z.stop, self.nz_unknowns))

    def device(self, name: str, xp, index=None):
        """A plan array (``shift``, ``lower``/``diag``/``upper`` of ``z_op``, ``singular_solution``)
        on the device of ``xp`` in the working precision, optionally sliced; cached."""
        dev = xp.cuda.Device().id if xp.__name__ == "cupy" else None
        key = (name, xp.__name__, dev, repr(index))
        if key not in self._device_cache:
            host = getattr(self.z_op, name) if name in ("lower", "diag", "upper") else getattr(self, name)
            if index is not None:
                host = host[index]
            dtype = self.spectral_dtype if name == "singular_solution" else self.real_dtype
            self._device_cache[key] = xp.ascontiguousarray(xp.asarray(host, dtype=dtype))
        return self._device_cache[key]

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_device_cache"] = {}
        return state


def _singular_map(op: Tridiagonal, weights: np.ndarray) -> np.ndarray:
    """Dense ``(m, m)`` map from a singular column's right-hand side to its solution.

    Removes the weighted mean of the right-hand side (its incompatible part), solves with the last
    unknown pinned to zero, then removes the weighted mean of the solution.
    """
    m = op.diag.size
    project = np.eye(m) - np.outer(np.ones(m), weights) / weights.sum()
    pinned = dense(op)
    pinned[-1, :] = 0.0
    pinned[-1, -1] = 1.0
    rhs = project.copy()
    rhs[-1, :] = 0.0
    return project @ np.linalg.solve(pinned, rhs)
