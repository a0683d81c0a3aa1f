"""Manufactured smooth solutions of the Poisson problem for every boundary condition (``rhs`` is the
continuous Laplacian of ``u``, so the discrete solution differs from ``u`` by the discretisation error).

Each axis carries a factor that satisfies its BC pair exactly at the physical boundary, so the
product ``u`` obeys ``L u = -k^2 u`` with ``k^2`` the sum of the axes' squared wavenumbers. Used
by the self-check demo (``daskflow poisson``) and the convergence tests.
"""

from __future__ import annotations

import numpy as np

from daskflow.grid import Grid

FACTORS = {  # pair -> (factor of s = x / L, wavenumber times L)
    "PP": (lambda s: np.cos(2 * np.pi * s) + np.sin(2 * np.pi * s), 2 * np.pi),
    "NN": (lambda s: np.cos(np.pi * s), np.pi),
    "DD": (lambda s: np.sin(np.pi * s), np.pi),
    "ND": (lambda s: np.cos(0.5 * np.pi * s), 0.5 * np.pi),
    "DN": (lambda s: np.sin(0.5 * np.pi * s), 0.5 * np.pi),
    "const": (lambda s: np.ones_like(s), 0.0),  # on a periodic axis: no variation
}


def positions(grid: Grid, axis: int, placement: str) -> np.ndarray:
    """Coordinates of the stored points along ``axis``: centres, or the upper face of each cell."""
    centres, faces = [(grid.xc, grid.xf), (grid.yc, grid.yf), (grid.zc, grid.zf)][axis]
    return centres if placement == "c" else faces[1:]


def manufactured(grid: Grid, bc, stagger: str = "ccc", active=(0, 1, 2)) -> tuple[np.ndarray, np.ndarray]:
    """``(u, rhs)`` with ``rhs = L u`` exactly, as Fortran-ordered float64 ``(nx, ny, nz)`` arrays.

    Axes not in ``active`` must be periodic and carry a constant factor.
    """
    parts, k2 = [], 0.0
    for axis in range(3):
        kind = bc[axis] if axis in active else "const"
        if kind == "const" and bc[axis] != "PP":
            raise ValueError(f"an inactive axis must be periodic, got bc {bc[axis]!r} on axis {axis}")
        f, k = FACTORS[kind]
        parts.append(f(positions(grid, axis, stagger[axis]) / grid.lengths[axis]))
        k2 += (k / grid.lengths[axis]) ** 2
    u = parts[0][:, None, None] * parts[1][None, :, None] * parts[2][None, None, :]
    return np.asfortranarray(u), np.asfortranarray(-k2 * u)
