"""The second-order Laplacian on the staggered grid, as 1-D tridiagonal coefficients per axis.

For ``m`` unknowns along an axis, ``lower[k]``, ``diag[k]``, ``upper[k]`` multiply unknowns
``k - 1``, ``k``, ``k + 1`` (units 1/length^2). Homogeneous boundary conditions are folded into the
boundary rows through ghost points: for placement ``c`` Neumann copies the neighbour and Dirichlet
mirrors it with the opposite sign; for placement ``f`` Dirichlet pins the boundary face to zero.
For a periodic axis ``lower[0]`` couples to unknown ``m - 1`` and ``upper[m - 1]`` to unknown 0;
otherwise both are zero. These are the coefficients of the seed paper (section 2.2) and the CaNS code.

Neumann on a face-placed unknown (placement ``f``) has two closures:

* ``"copy"`` (the seed code's, used along x and y): the boundary face copies its neighbour. The
  operator stays symmetric, so the fast sine/cosine transforms diagonalise it, but the closure is
  only first-order accurate.
* ``"second_order"`` (used along z, where any tridiagonal matrix is solvable): at the upper end
  the stored boundary face is an unknown with a mirror ghost (half control volume); at the lower
  end (face 0 is not stored) a quadratic with zero slope at the wall eliminates face 0 from the
  first row. Both keep second-order accuracy on stretched grids.

An axis of one cell gives a 1 x 1 operator: 0 when periodic (the cell is its own neighbour on both
sides) or Neumann at both ends, the ghost values of the boundary rows otherwise (``-4/h^2`` for
Dirichlet, ``-2/h^2`` for mixed ends at cell centres). Face placement on a bounded one-cell axis has
no unknown, except the upper face of a Neumann upper end under the second-order closure.
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


FACE_NEUMANN = ("copy", "second_order")


def n_unknowns(n: int, bc: str, placement: str, face_neumann: str = "copy") -> int:
    """Unknowns along an axis with ``n`` stored points (the last face is a boundary value unless
    the axis is periodic, or Neumann with the second-order closure)."""
    if placement == "c" or bc == "PP" or (face_neumann == "second_order" and bc[1] == "N"):
        return n
    return n - 1


def laplacian_1d(widths: np.ndarray, bc: str, placement: str, face_neumann: str = "copy") -> Tridiagonal:
    """Second-difference operator along one axis with cell ``widths`` (length n, stretched or not)."""
    h = np.asarray(widths, dtype=np.float64)
    n = h.size
    periodic = bc == "PP"
    if n_unknowns(n, bc, placement, face_neumann) < 1:
        raise ValueError(f"placement {placement!r} with bc {bc!r} on {n} cell(s) leaves no unknowns "
                         "(the only stored face is the boundary)")
    if periodic and n == 1:
        # One periodic cell is its own neighbour on both sides: the row sums to zero (the mode is
        # constant along the axis). Kept as a 1 x 1 plain system: cyclic solvers need m >= 2.
        zero = np.zeros(1)
        return Tridiagonal(zero, zero.copy(), zero.copy(), False)
    if placement == "f" and not periodic and face_neumann == "second_order" and "N" in bc:
        return _face_laplacian_second_order(h, bc)
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


def _face_laplacian_second_order(h: np.ndarray, bc: str) -> Tridiagonal:
    """Face placement, bounded, with at least one Neumann end under the second-order closure."""
    if h.size == 1:
        # One cell: the only unknown is the upper face (upper end Neumann; an upper Dirichlet face
        # leaves none). Below it, face 0 is a Dirichlet zero, or for a Neumann end equal to face 1
        # (zero slope at both ends of one cell: the quadratic closure is the constant).
        last = 2.0 / h[0] ** 2
        diag = -last if bc[0] == "D" else 0.0
        return Tridiagonal(np.zeros(1), np.array([diag]), np.zeros(1), False)
    op = laplacian_1d(h, bc[0] + "D", "f")  # interior rows and the lower end (Neumann fixed below)
    lower, diag, upper = op.lower, op.diag, op.upper
    if bc[0] == "N":
        # face 0 = u1 - h1^2 (u2 - u1) / D from u(z) = A + B z^2: the row becomes k (u2 - u1).
        h1, h2 = h[0], h[1]
        a0 = 1.0 / (h1 * 0.5 * (h1 + h2))
        k = upper[0] - a0 * h1**2 / ((h1 + h2) ** 2 - h1**2)
        diag[0], upper[0] = -k, k
    if bc[1] == "N":  # face n joins the unknowns, with a mirror ghost and half a control volume
        upper[-1] = 1.0 / (h[-1] * 0.5 * (h[-2] + h[-1]))  # face n-1 now couples to face n
        last = 2.0 / h[-1] ** 2
        lower, diag, upper = np.append(lower, last), np.append(diag, -last), np.append(upper, 0.0)
    return Tridiagonal(lower, diag, upper, False)


def control_widths(widths: np.ndarray, bc: str, placement: str, face_neumann: str = "copy") -> np.ndarray:
    """Length each unknown represents (its 1-D volume weight), for weighted means."""
    h = np.asarray(widths, dtype=np.float64)
    if placement == "c":
        return h.copy()
    width = 0.5 * (h + np.roll(h, -1))
    if bc == "PP":
        return width
    width = width[:-1]
    if face_neumann == "second_order" and h.size == 1 and bc[1] == "N":
        # the upper face of one cell: half the cell, or all of it when face 0 copies it (NN)
        return np.array([h[0] if bc[0] == "N" else 0.5 * h[0]])
    if face_neumann == "second_order":
        if bc[0] == "N":
            width[0] += 0.5 * h[0]
        if bc[1] == "N":
            width = np.append(width, 0.5 * h[-1])
    return width


def dense(op: Tridiagonal) -> np.ndarray:
    """The operator as a dense ``(m, m)`` matrix (for tests and small direct solves)."""
    a = np.diag(op.diag) + np.diag(op.upper[:-1], 1) + np.diag(op.lower[1:], -1)
    if op.periodic:  # with m = 1 both corners land on the diagonal
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
