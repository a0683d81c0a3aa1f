"""The second-order Laplacian on the staggered grid, as 1-D tridiagonal coefficients per axis.

For ``m`` unknowns along an axis, ``lower[k]``, ``diag[k]``, ``upper[k]`` multiply unknowns
``k - 1``, ``k``, ``k + 1`` (units 1/length^2). Homogeneous boundary conditions are folded into the
boundary rows through ghost points: Neumann copies the neighbour, Dirichlet mirrors it with the
opposite sign (placement ``c``) or pins the boundary face to zero (placement ``f``). For a periodic
axis ``lower[0]`` couples to unknown ``m - 1`` and ``upper[m - 1]`` to unknown 0; otherwise both are
zero. These are the coefficients of DESIGN.md §2 and the seed code.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from daskflow.backend import array_module


class Tridiagonal(NamedTuple):
    """Coefficients of a 1-D operator on ``m`` unknowns (float64 NumPy arrays of length m)."""

    lower: np.ndarray
    diag: np.ndarray
    upper: np.ndarray
    periodic: bool


def laplacian_1d(widths: np.ndarray, bc: str, placement: str) -> Tridiagonal:
    """Second-difference operator along one axis with cell ``widths`` (length n, stretched or not)."""
    h = np.asarray(widths, dtype=np.float64)
    n = h.size
    periodic = bc == "PP"
    if placement == "c":
        # Centre-to-centre distances below/above each cell; a wall mirrors the boundary cell.
        below = 0.5 * (np.roll(h, 1) + h)
        above = 0.5 * (h + np.roll(h, -1))
        if not periodic:
            below[0], above[-1] = h[0], h[-1]
        lower, upper = 1.0 / (h * below), 1.0 / (h * above)
        sign = {"N": 1.0, "D": -1.0}
    else:
        # Unknown k sits on face k + 1, between cells k and k + 1; its control width is `width`.
        nxt = np.roll(h, -1)
        width = 0.5 * (h + nxt)
        lower, upper = 1.0 / (h * width), 1.0 / (nxt * width)
        if not periodic:
            lower, upper = lower[: n - 1], upper[: n - 1]
        sign = {"N": 1.0, "D": 0.0}
    diag = -(lower + upper)
    if not periodic:
        diag[0] += sign[bc[0]] * lower[0]
        diag[-1] += sign[bc[1]] * upper[-1]
        lower[0] = upper[-1] = 0.0
    return Tridiagonal(lower, diag, upper, periodic)


def control_widths(widths: np.ndarray, bc: str, placement: str) -> np.ndarray:
    """Length each unknown represents (its 1-D volume weight), for weighted means."""
    h = np.asarray(widths, dtype=np.float64)
    if placement == "c":
        return h.copy()
    width = 0.5 * (h + np.roll(h, -1))
    return width if bc == "PP" else width[:-1]


def dense(op: Tridiagonal) -> np.ndarray:
    """The operator as a dense ``(m, m)`` matrix (for tests and small direct solves)."""
    m = op.diag.size
    a = np.diag(op.diag) + np.diag(op.upper[:-1], 1) + np.diag(op.lower[1:], -1)
    if op.periodic and m > 1:
        a[0, -1] += op.lower[0]
        a[-1, 0] += op.upper[-1]
    return a


def apply_along(x, op: Tridiagonal, axis: int):
    """``op`` applied along ``axis`` of an NumPy/CuPy array holding exactly its unknowns."""
    xp = array_module(x)
    x = xp.moveaxis(x, axis, -1)
    shape = (1,) * (x.ndim - 1) + (-1,)
    lower, diag, upper = (xp.asarray(c, dtype=x.real.dtype).reshape(shape) for c in op[:3])
    y = diag * x
    if x.shape[-1] > 1:
        y[..., 1:] += lower[..., 1:] * x[..., :-1]
        y[..., :-1] += upper[..., :-1] * x[..., 1:]
        if op.periodic:
            y[..., 0] += lower[..., 0] * x[..., -1]
            y[..., -1] += upper[..., -1] * x[..., 0]
    elif op.periodic:
        y += (lower + upper) * x
    return xp.moveaxis(y, -1, axis)
