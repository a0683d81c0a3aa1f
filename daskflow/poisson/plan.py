"""Set-up of a spectral Poisson/Helmholtz solve: eigenvalues, z operator, decomposition.

The solved operator is ``identity * I + scale * L`` with ``L`` the staggered Laplacian:
Poisson is ``(0, 1)``, Helmholtz ``(I - alpha L)`` is ``(1, -alpha)``. After the x and y
transforms every spectral column ``(j, i)`` is a tridiagonal system along z with 1-D row
coefficients (:attr:`SpectralPlan.z_op`) plus the column's diagonal shift
``scale * (lambda_x[i] + lambda_y[j])``.

Spectral chunks are stored in memory order ``(z, y, x)`` where a chunk holds all of y from the start
(``py = 1``), and ``(z, x, y)`` in the y-pencils of a transpose (``py > 1``): the y transform then
runs along the last, contiguous axis (no copies in and out of the FFT), and the pieces are swapped
while they are cut for the transpose, the copy that packs them anyway.
:attr:`SpectralPlan.y_axis` and :meth:`SpectralPlan.column_shift` follow that layout.

Everything here is small (1-D arrays, one ``nz x nz`` matrix for the singular mode) so a plan can
be shipped to Dask workers; heavy per-chunk coefficients are computed where the chunk lives.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from daskflow import transforms
from daskflow.bc import Boundaries
from daskflow.grid import Grid
from daskflow.pencils import Decomposition
from daskflow.stencils import Tridiagonal, dense

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
    # False: the inverse periodic transforms are not divided by their lengths, and the solution
    # comes out multiplied by 1 / inverse_scale (its caller scales it in a pass it makes anyway)
    normalised: bool = True
    _device_cache: dict = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        nx, ny, nz = self.grid.shape
        (bx, by, _), (sx, sy, _) = self.boundaries.bc, self.boundaries.stagger
        self.x_is_complex = bx == "PP"  # data is complex after the x transform
        self.complex = bx == "PP" or by == "PP"
        nxs = transforms.spectral_size(bx, sx, nx, complex_input=False)
        nys = transforms.spectral_size(by, sy, ny, complex_input=self.x_is_complex)
        self.decomposition = Decomposition(self.grid.shape, (nxs, nys), self.pencils)
        py, pz = self.pencils
        for axis, parts, name, what in ((0, py, "py", "the y-pencils split the x modes, and one cell has one"),
                                        (1, py, "py", "a one-cell axis cannot be split"),
                                        (2, pz, "pz", "a one-cell axis cannot be split")):
            if self.grid.shape[axis] == 1 and parts > 1:
                raise ValueError(f"pencils: {name} = {parts}, but grid.shape[{axis}] = 1: {what} (use {name} = 1)")
        # with pz = 1, P-TDMA is plain Thomas (no reduced system): its two-points-per-chunk rule
        # does not apply, so a one-cell z axis is fine
        self.decomposition.check(self.method if self.pencils[1] > 1 else "ftm")
        lam_x = transforms.eigenvalues(bx, sx, nx, self.grid.dx, complex_input=False)
        lam_y = transforms.eigenvalues(by, sy, ny, self.grid.dy, complex_input=self.x_is_complex)
        lap = self.boundaries.laplacian_1d(2, self.grid.dzf)
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
            self.z_null = _left_null_vector(self.z_op)
            self.singular_solution = _singular_map(
                self.z_op, self.z_null, self.boundaries.control_widths(2, self.grid.dzf)
            )
        self.shift = shift

    def unnormalised(self) -> SpectralPlan:
        """This plan with :attr:`normalised` False, made once and kept with it (outside the cache
        the two share, so that dropping this plan frees its device arrays at once)."""
        if not self.normalised:
            return self
        copy = self.__dict__.get("_unnormalised")
        if copy is None:
            copy = self.__dict__["_unnormalised"] = dataclasses.replace(self, normalised=False)
        return copy

    @property
    def inverse_scale(self) -> float:
        """What a solution of this plan is to be multiplied by: 1 where :attr:`normalised`, else
        ``1 / (nx ny)`` over the periodic ones of x and y (the transforms whose inverses leave out
        their ``1 / n``; the others are normalised either way)."""
        if self.normalised:
            return 1.0
        (nx, ny, _), (bx, by, _) = self.grid.shape, self.boundaries.bc
        return 1.0 / ((nx if bx == "PP" else 1) * (ny if by == "PP" else 1))

    @property
    def y_last(self) -> bool:
        """Whether spectral y-pencils are stored ``(z, x, y)``: those of an x->y transpose (``py > 1``)."""
        return self.pencils[0] > 1

    @property
    def y_axis(self) -> int:
        """Memory axis of y in a spectral y-pencil chunk (x is the other of 1 and 2)."""
        return 2 if self.y_last else 1

    @property
    def shift_xy(self) -> np.ndarray:
        """:attr:`shift` indexed ``[x mode, y mode]``."""
        return self.shift.T

    def column_shift(self, xp, ys: slice, xs: slice):
        """The diagonal shift of the spectral columns ``ys`` x ``xs`` in a y-pencil chunk's layout."""
        return self.device("shift_xy", xp, (xs, ys)) if self.y_last else self.device("shift", xp, (ys, xs))

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
        """A plan array (``shift``, ``shift_xy``, ``lower``/``diag``/``upper`` of ``z_op``, ``singular_solution``)
        on the device of ``xp`` in the working precision, optionally sliced; cached."""
        dev = xp.cuda.runtime.getDevice() if xp.__name__ == "cupy" else None
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
        state.pop("_unnormalised", None)
        return state


def _left_null_vector(op: Tridiagonal) -> np.ndarray:
    """``l`` with ``l^T A = 0`` for the singular z operator ``A`` (normalised to sum 1).

    For symmetric-in-volume operators this is the volume weights; the second-order face Neumann
    closure breaks that symmetry in its boundary rows, so it is computed.
    """
    a = dense(op).T
    null = np.ones(a.shape[0])
    null[:-1] = np.linalg.solve(a[:-1, :-1], -a[:-1, -1])
    return null / null.sum()


def _singular_map(op: Tridiagonal, null: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Dense ``(m, m)`` map from a singular column's right-hand side to its solution.

    Projects out the incompatible part of the right-hand side (along the constants, so that it
    becomes orthogonal to the left null vector ``null``), solves with the last unknown pinned to
    zero, then removes the ``weights``-weighted mean of the solution.
    """
    m = op.diag.size
    ones = np.ones(m)
    pinned = dense(op)
    pinned[-1, :] = 0.0
    pinned[-1, -1] = 1.0
    rhs = np.eye(m) - np.outer(ones, null) / null.sum()
    rhs[-1, :] = 0.0
    return (np.eye(m) - np.outer(ones, weights) / weights.sum()) @ np.linalg.solve(pinned, rhs)
