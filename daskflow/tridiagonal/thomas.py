"""Batched Thomas solves along axis 0 of ``(m, *cols)`` arrays, NumPy or CuPy.

Two flavours:

* :func:`solve_shifted` — coefficients depend on the row only, plus a per-column diagonal
  ``shift`` (the x/y eigenvalues of the Poisson/Helmholtz problem). Nothing is stored between
  calls; the forward sweep recomputes the elimination factors on the fly.
* :class:`FactoredTridiagonal` — per-column coefficients factorised once (the reduced P-TDMA
  systems); a solve touches only the right-hand side.

Both handle periodic (cyclic) systems by Sherman–Morrison. On CuPy they run one CUDA thread per
column (:mod:`daskflow.tridiagonal.kernels`); on NumPy the sweep over rows is vectorised over
columns, or one compiled pass per row (:mod:`daskflow.tridiagonal.cpu_kernels`: the non-periodic
shifted systems and every factorised sweep), over column ranges on the CPU threads. ``d`` may be
real or complex; coefficients are real.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from daskflow.backend import array_module, compiled_loops, is_cupy_array, upload_together
from daskflow.stencils import Tridiagonal
from daskflow.tridiagonal import cpu_kernels, kernels


def columns_view(x):
    """``x`` viewed as ``(m, ncols)``; the solvers work in place, so it must be C-contiguous."""
    if not x.flags.c_contiguous:
        raise ValueError("the right-hand side must be C-contiguous (solved in place)")
    return x.reshape(x.shape[0], -1)


def solve_shifted(d, op: Tridiagonal, shift):
    """Solve ``(lower, diag + shift, upper) x = d`` for every column, in place; returns ``d``.

    ``d`` has shape ``(m, *cols)``; ``op`` holds 1-D coefficients of length ``m``; ``shift`` is
    broadcastable to ``cols``. A periodic ``op`` is solved as a cyclic system (needs ``m >= 2``).
    """
    xp = array_module(d)
    m = d.shape[0]
    real = d.real.dtype
    cols_shape = d.shape[1:]
    shift = xp.ascontiguousarray(xp.broadcast_to(xp.asarray(shift, dtype=real), cols_shape)).ravel()
    lower, diag, upper = (xp.asarray(c, dtype=real) for c in op[:3])
    x = columns_view(d)
    ncols = x.shape[1]
    if is_cupy_array(d):
        if op.periodic:
            cp, zz = xp.empty((m, ncols), dtype=real), xp.empty((m, ncols), dtype=real)
            kernels.launch("thomas_cyclic_shifted", x.dtype, ncols, x, cp, zz, lower, diag, upper,
                           shift, np.int32(m), np.int64(ncols))
        else:  # one coefficient per segment of rows and column (the kernel recomputes the rest)
            cp = xp.empty((-(-m // kernels.SEGMENT), ncols), dtype=real)
            kernels.launch("thomas_shifted", x.dtype, ncols, x, cp, lower, diag, upper, shift,
                           np.int32(m), np.int64(ncols))
        return d
    if compiled_loops() and not op.periodic:
        cpu_kernels.by_columns(cpu_kernels.thomas_shifted, x, lower, diag, upper, shift,
                               np.empty((m, ncols), dtype=real), per_column=(3, 4))
        return d
    bands = _shifted_bands(lower, diag, upper, shift)
    _solve_numpy(x, *bands, op.periodic)
    return d


def _shifted_bands(lower, diag, upper, shift):
    ncols = shift.size
    return (
        np.broadcast_to(lower[:, None], (lower.size, ncols)),
        diag[:, None] + shift[None, :],
        np.broadcast_to(upper[:, None], (upper.size, ncols)),
    )


def _thomas_numpy(d, lower, diag, upper, x=None):
    """Plain (non-cyclic) Thomas on ``(m, ncols)`` arrays, vectorised over columns, into ``x``."""
    m = d.shape[0]
    x = np.empty_like(d) if x is None else x
    cp = np.empty(diag.shape, dtype=diag.dtype)
    inv = 1.0 / diag[0]
    cp[0] = upper[0] * inv
    x[0] = d[0] * inv
    for k in range(1, m):
        inv = 1.0 / (diag[k] - lower[k] * cp[k - 1])
        cp[k] = upper[k] * inv
        x[k] = (d[k] - lower[k] * x[k - 1]) * inv
    for k in range(m - 2, -1, -1):
        x[k] -= cp[k] * x[k + 1]
    return x


def _solve_numpy(d, lower, diag, upper, periodic: bool):
    if not periodic:
        return _thomas_numpy(d, lower, diag, upper, x=d)
    # Sherman–Morrison: A = T + u v^T with the corners moved into u v^T.
    alpha, beta = lower[0], upper[-1]  # row 0 -> column m-1, row m-1 -> column 0
    gamma = -diag[0]
    diag = diag.copy()
    diag[0] -= gamma
    diag[-1] -= alpha * beta / gamma
    u = np.zeros(diag.shape, dtype=diag.dtype)
    u[0], u[-1] = gamma, beta
    y = _thomas_numpy(d, lower, diag, upper, x=d)
    z = _thomas_numpy(u, lower, diag, upper)
    y -= (y[0] + alpha / gamma * y[-1]) / (1.0 + z[0] + alpha / gamma * z[-1]) * z
    return y


@dataclass
class FactoredTridiagonal:
    """Per-column tridiagonal systems ``(m, ncols)`` factorised once; :meth:`solve` moves only ``d``.

    ``lower[k]`` multiplies unknown ``k - 1`` and ``upper[k]`` unknown ``k + 1``; with
    ``periodic`` the corners ``lower[0]`` (row 0 -> unknown m-1) and ``upper[m-1]`` close the cycle.
    Arrays are kept on the device of ``diag`` (:meth:`to` moves them). Coefficients of one column,
    ``(m, 1)``, are one matrix shared by every column of ``d`` (the z-implicit diffusion solves: no
    per-column workspace at all).
    """

    lower: object
    inv_den: object
    cp: object
    zz: object
    vlast: object
    periodic: bool

    @classmethod
    def factor(cls, lower, diag, upper, periodic: bool) -> FactoredTridiagonal:
        xp = array_module(diag)
        lo, dg, up = (xp.asarray(c, dtype=np.float64).reshape(c.shape[0], -1) for c in (lower, diag, upper))
        dg = dg.copy()
        if periodic:
            alpha, beta = lo[0].copy(), up[-1].copy()
            gamma = -dg[0]
            dg[0] -= gamma
            dg[-1] -= alpha * beta / gamma
        inv_den, cp = _elimination_factors(xp, lo, dg, up)
        zz = vlast = xp.zeros((1, dg.shape[1]))
        if periodic:
            u = xp.zeros_like(dg)
            u[0], u[-1] = gamma, beta
            zz = _factored_sweep(u, lo, inv_den, cp)
            vlast = alpha / gamma
        return cls(lo, inv_den, cp, zz, xp.ascontiguousarray(vlast.reshape(-1)), periodic)

    def to(self, xp) -> FactoredTridiagonal:
        """The same factorisation with its arrays in array module ``xp`` (set-up: one transfer of all
        five, :func:`~daskflow.backend.upload_together`: with a time step that changes every step, the
        z-implicit solves set up three per substep)."""
        if xp is np:
            return self  # factorised on the host: nothing to move
        names = ("lower", "inv_den", "cp", "zz", "vlast")
        arrays = upload_together(xp, [np.asarray(getattr(self, f), dtype=np.float64) for f in names])
        return FactoredTridiagonal(**dict(zip(names, arrays, strict=True)), periodic=self.periodic)

    def solve(self, d, overwrite: bool = False):
        """Solve for ``d`` of shape ``(m, *cols)`` matching the factorised columns (or any columns
        for a shared matrix); into ``d`` itself with ``overwrite`` (it must be C-contiguous)."""
        xp = array_module(d)
        x = columns_view(d) if overwrite else xp.ascontiguousarray(d).reshape(d.shape[0], -1).copy()
        real = x.real.dtype
        lower, inv_den, cp, zz, vlast = (xp.asarray(a, dtype=real) for a in
                                         (self.lower, self.inv_den, self.cp, self.zz, self.vlast))
        one_matrix = self.cp.shape[1] == 1
        shared = one_matrix and x.shape[1] > 1
        if is_cupy_array(d) and shared:
            kernels.launch("thomas_uniform", x.dtype, x.shape[1], x, lower.ravel(), inv_den.ravel(), cp.ravel(),
                           np.int32(x.shape[0]), np.int64(x.shape[1]))
        elif is_cupy_array(d):
            kernels.launch("factored_solve", x.dtype, x.shape[1], x, lower, inv_den, cp,
                           xp.ascontiguousarray(zz), vlast, np.int32(x.shape[0]),
                           np.int64(x.shape[1]), np.int32(self.periodic))
            return x.reshape(d.shape)
        elif compiled_loops():
            cpu_kernels.by_columns(cpu_kernels.factored_sweep, x, lower, inv_den, cp,
                                   per_column=() if one_matrix else (0, 1, 2))
        else:
            _factored_sweep(x, lower, inv_den, cp, out=x)
        if self.periodic:
            x -= (x[0] + vlast * x[-1]) / (1.0 + zz[0] + vlast * zz[-1]) * zz
        return x.reshape(d.shape)


def solve_rows_in_place(factored: FactoredTridiagonal, field, addend=None, geometry: dict | None = None) -> bool:
    """Solve the one matrix of ``factored`` (``m`` unknowns, not periodic) along the last axis of the
    C-contiguous real CuPy array ``field`` ``(..., n)``, ``n >= m``, for the first ``m`` values of
    every row, in place, without a transposed copy; the values of :meth:`FactoredTridiagonal.solve`
    on the columns. With ``addend`` (:func:`rows_addend`) those values leave as ``addend + x``, in the
    solve's last pass; ``geometry`` overrides the kernel's tiles
    (:data:`~daskflow.tridiagonal.row_kernels.GEOMETRY`). Returns ``False`` (nothing done) where
    this path does not apply."""
    m = factored.inv_den.shape[0]
    if (not is_cupy_array(field) or factored.periodic or factored.cp.shape[1] != 1 or field.dtype.kind != "f"
            or not field.flags.c_contiguous or field.shape[-1] < m):
        return False
    xp = array_module(field)
    real = field.dtype
    lower, inv_den, cp = (xp.ascontiguousarray(xp.asarray(a, dtype=real).ravel())
                          for a in (factored.lower, factored.inv_den, factored.cp))
    stride = field.shape[-1]
    rows = field.size // stride
    kernels.launch("thomas_uniform_rows", real, rows, field, lower, inv_den, cp, np.int32(m), np.int64(rows),
                   np.int64(stride), *rows_addend(field, addend), geometry=geometry)
    return True


def addable_along_rows(field, addend) -> bool:
    """Whether a ``_rows`` kernel solving ``field`` can add ``addend`` to its solution as it stores
    it: the same shape and dtype, both C-contiguous."""
    return (addend.shape == field.shape and addend.dtype == field.dtype and addend.flags.c_contiguous
            and field.flags.c_contiguous)


def rows_addend(field, addend) -> tuple:
    """The last two arguments of a ``_rows`` kernel that adds ``addend`` to its solution: the array
    (``field`` itself, unread, where there is none) and a flag. An addend must have ``field``'s
    shape, dtype and C layout: the kernels index it as they index ``field``."""
    if addend is None:
        return field, np.int32(0)
    if not addable_along_rows(field, addend):
        raise ValueError(f"an addend {addend.shape} {addend.dtype} (C-contiguous: {addend.flags.c_contiguous}) "
                         f"cannot be added along the rows of a C-contiguous {field.shape} {field.dtype} field")
    return addend, np.int32(1)


def _elimination_factors(xp, lo, dg, up):
    """``inv_den`` and ``cp`` of the forward elimination, ``(m, ncols)``. One column (a matrix
    shared by every column: the z-implicit diffusion) is a scalar recurrence in Python floats, the
    same operations in the same order as the vector loop, about ten times faster than it."""
    m = dg.shape[0]
    if xp is np and dg.shape[1] == 1:
        lows, diags, ups = (c[:, 0].tolist() for c in (lo, dg, up))
        inv = [1.0 / diags[0]]
        c = [ups[0] * inv[0]]
        for k in range(1, m):
            inv.append(1.0 / (diags[k] - lows[k] * c[k - 1]))
            c.append(ups[k] * inv[k])
        return np.array(inv)[:, None], np.array(c)[:, None]
    inv_den = xp.empty_like(dg)
    cp = xp.empty_like(dg)
    inv_den[0] = 1.0 / dg[0]
    cp[0] = up[0] * inv_den[0]
    for k in range(1, m):  # set-up only: O(m) vector operations
        inv_den[k] = 1.0 / (dg[k] - lo[k] * cp[k - 1])
        cp[k] = up[k] * inv_den[k]
    return inv_den, cp


def _factored_sweep(d, lower, inv_den, cp, out=None):
    """The two sweeps of a factorised solve into ``out`` (may be ``d``); coefficients broadcast
    over the columns of ``d``."""
    xp = array_module(d)
    x = xp.empty_like(d) if out is None else out
    x[0] = d[0] * inv_den[0]
    for k in range(1, d.shape[0]):
        x[k] = (d[k] - lower[k] * x[k - 1]) * inv_den[k]
    for k in range(d.shape[0] - 2, -1, -1):
        x[k] -= cp[k] * x[k + 1]
    return x
