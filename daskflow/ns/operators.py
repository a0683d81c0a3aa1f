"""Second-order staggered operators of the Navier-Stokes equations on NumPy/CuPy arrays.

Fields have logical shape ``(nx, ny, nz)``: ``u[i, j, k]`` on the upper x-face of cell
``(i, j, k)``, likewise ``v`` in y and ``w`` in z; ``p`` at centres. Every operator works on a
*padded* field (one ghost layer per side, :func:`pad`) so the same code serves a whole array or a
pencil with halos. Advection is in divergence form with midpoint averages (conservative), diffusion
and gradients follow the stretched z metric of :mod:`daskflow.stencils`, so that the divergence of
the gradient is exactly the Poisson operator of :mod:`daskflow.poisson`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from daskflow.backend import array_module
from daskflow.grid import Grid
from daskflow.ns.boundaries import ComponentBC

C, HI, LO = slice(1, -1), slice(2, None), slice(None, -2)


@dataclass(frozen=True)
class Metrics:
    """Spacings with one ghost cell per side (z mirrored at walls, wrapped if periodic)."""

    dx: float
    dy: float
    dzf: np.ndarray  # cell widths, length nz + 2 (padded)
    dzc: np.ndarray  # centre-to-centre distances, length nz + 1: dzc[k] between padded centres k, k+1

    @classmethod
    def of(cls, grid: Grid, z_periodic: bool) -> Metrics:
        h = grid.dzf
        lo, hi = (h[-1], h[0]) if z_periodic else (h[0], h[-1])
        dzf = np.concatenate([[lo], h, [hi]])
        return cls(grid.dx, grid.dy, dzf, 0.5 * (dzf[1:] + dzf[:-1]))


def _take(a, axis: int, index):
    sl = [slice(None)] * 3
    sl[axis] = index
    return a[tuple(sl)]


def ghost_plane(a, axis: int, side: int, letter: str, value: float, face: bool):
    """The ghost plane beyond ``side`` (0 lower, 1 upper) of a bounded ``axis`` for one BC letter.

    ``face`` marks the component stored on faces normal to ``axis``: face 0 is the wall itself
    (D: its value; N: copy of face 1) and the ghost beyond the stored upper face is never used by an
    update (a copy). Centred values mirror to ``value`` (D) or copy (N).
    """
    xp = array_module(a)
    n = a.shape[axis]
    edge = _take(a, axis, slice(0, 1) if side == 0 else slice(n - 1, n))
    if face:
        return xp.full_like(edge, value) if (side == 0 and letter == "D") else edge
    return 2 * value - edge if letter == "D" else edge


def bc_of(bc) -> tuple:
    """``(pairs, values)`` of a component's :class:`ComponentBC` or a pressure pair tuple."""
    return (bc.pairs, bc.values) if isinstance(bc, ComponentBC) else (tuple(bc), ((0.0, 0.0),) * 3)


def pad_axis(a, axis: int, pair: str, values, face: bool):
    """``a`` with one ghost layer on both sides of ``axis`` (periodic: wrap)."""
    xp = array_module(a)
    n = a.shape[axis]
    if pair == "PP":
        lo, hi = _take(a, axis, slice(n - 1, n)), _take(a, axis, slice(0, 1))
    else:
        lo, hi = (ghost_plane(a, axis, side, pair[side], values[side], face) for side in (0, 1))
    return xp.concatenate([lo, a, hi], axis=axis)


def pad(a, bc: ComponentBC | tuple[str, str, str], component: int | None = None):
    """``a`` with one ghost layer per side filled from the boundary conditions.

    ``bc`` is a velocity component's :class:`ComponentBC` (with ``component`` its axis, 0-2) or,
    for the pressure, a tuple of pairs (Neumann: copy; Dirichlet: mirror to zero; homogeneous).
    Axes are padded in order x, y, z, so edges and corners see the ghosts of earlier axes.
    """
    pairs, values = bc_of(bc)
    for axis in range(3):
        a = pad_axis(a, axis, pairs[axis], values[axis], axis == component)
    return a


def _z(arr, xp, dtype):
    return xp.asarray(arr, dtype=dtype)[None, None, :]


def divergence(U, V, W, m: Metrics):
    """Divergence at cell centres from padded face velocities; shape of the interior."""
    xp = array_module(U)
    dzf = _z(m.dzf[1:-1], xp, U.dtype)
    return ((U[C, C, C] - U[LO, C, C]) / m.dx + (V[C, C, C] - V[C, LO, C]) / m.dy
            + (W[C, C, C] - W[C, C, LO]) / dzf)


def gradient(P, m: Metrics, axis: int):
    """Component ``axis`` of the pressure gradient on that axis's faces (padded ``P``)."""
    xp = array_module(P)
    if axis == 0:
        return (P[HI, C, C] - P[C, C, C]) / m.dx
    if axis == 1:
        return (P[C, HI, C] - P[C, C, C]) / m.dy
    return (P[C, C, HI] - P[C, C, C]) / _z(m.dzc[1:], xp, P.dtype)


def laplacian(A, m: Metrics, component: int, axes=(0, 1, 2)):
    """Second differences along ``axes`` of padded component ``component`` (3: a centred field)."""
    xp = array_module(A)
    out = 0
    if 0 in axes:
        out = out + (A[HI, C, C] - 2 * A[C, C, C] + A[LO, C, C]) / m.dx**2
    if 1 in axes:
        out = out + (A[C, HI, C] - 2 * A[C, C, C] + A[C, LO, C]) / m.dy**2
    if 2 in axes:
        if component == 2:  # faces: differences over cells, divided by the face's control width
            up, down, width = m.dzf[2:], m.dzf[1:-1], m.dzc[1:]
        else:  # centres: differences over centre distances, divided by the cell width
            up, down, width = m.dzc[1:], m.dzc[:-1], m.dzf[1:-1]
        up, down, width = (_z(v, xp, A.dtype) for v in (up, down, width))
        out = out + ((A[C, C, HI] - A[C, C, C]) / up - (A[C, C, C] - A[C, C, LO]) / down) / width
    return out


def advection(U, V, W, m: Metrics):
    """``-(div(u u))`` for each component at its own faces (conservative divergence form)."""
    xp = array_module(U)
    dzf, dzc = _z(m.dzf[1:-1], xp, U.dtype), _z(m.dzc[1:], xp, U.dtype)
    avg = lambda a, b: 0.5 * (a + b)  # noqa: E731
    # u at x-faces
    uu = avg(U[C, C, C], U[HI, C, C]) ** 2 - avg(U[LO, C, C], U[C, C, C]) ** 2
    uv = (avg(U[C, C, C], U[C, HI, C]) * avg(V[C, C, C], V[HI, C, C])
          - avg(U[C, LO, C], U[C, C, C]) * avg(V[C, LO, C], V[HI, LO, C]))
    uw = (avg(U[C, C, C], U[C, C, HI]) * avg(W[C, C, C], W[HI, C, C])
          - avg(U[C, C, LO], U[C, C, C]) * avg(W[C, C, LO], W[HI, C, LO]))
    au = -(uu / m.dx + uv / m.dy + uw / dzf)
    # v at y-faces
    vu = (avg(V[C, C, C], V[HI, C, C]) * avg(U[C, C, C], U[C, HI, C])
          - avg(V[LO, C, C], V[C, C, C]) * avg(U[LO, C, C], U[LO, HI, C]))
    vv = avg(V[C, C, C], V[C, HI, C]) ** 2 - avg(V[C, LO, C], V[C, C, C]) ** 2
    vw = (avg(V[C, C, C], V[C, C, HI]) * avg(W[C, C, C], W[C, HI, C])
          - avg(V[C, C, LO], V[C, C, C]) * avg(W[C, C, LO], W[C, HI, LO]))
    av = -(vu / m.dx + vv / m.dy + vw / dzf)
    # w at z-faces
    wu = (avg(W[C, C, C], W[HI, C, C]) * avg(U[C, C, C], U[C, C, HI])
          - avg(W[LO, C, C], W[C, C, C]) * avg(U[LO, C, C], U[LO, C, HI]))
    wv = (avg(W[C, C, C], W[C, HI, C]) * avg(V[C, C, C], V[C, C, HI])
          - avg(W[C, LO, C], W[C, C, C]) * avg(V[C, LO, C], V[C, LO, HI]))
    ww = avg(W[C, C, C], W[C, C, HI]) ** 2 - avg(W[C, C, LO], W[C, C, C]) ** 2
    aw = -(wu / m.dx + wv / m.dy + ww / dzc)
    return au, av, aw
