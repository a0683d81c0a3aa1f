"""Initial conditions: analytic laminar states, Taylor-Green, and perturbed turbulent channels.

Perturbations are discrete curls of a streamfunction on the staggered grid, so they are exactly
divergence-free (to round-off) and vanish at the walls in the wall-normal component.
"""

from __future__ import annotations

import numpy as np

from daskflow.grid import Grid


def positions(grid: Grid, component: int | None):
    """Broadcastable ``(x, y, z)`` of a component's stored points (``None``: cell centres)."""
    coords = []
    for axis, (centres, faces) in enumerate(((grid.xc, grid.xf), (grid.yc, grid.yf), (grid.zc, grid.zf))):
        c = faces[1:] if axis == component else centres
        shape = [1, 1, 1]
        shape[axis] = -1
        coords.append(c.reshape(shape))
    return coords


def laminar_channel(grid: Grid, nu: float, forcing: dict) -> np.ndarray:
    """Streamwise velocity of plane Poiseuille flow at the u points."""
    _, _, z = positions(grid, 0)
    lz = grid.lengths[2]
    if forcing["kind"] == "flow_rate":
        profile = 6.0 * forcing["value"][0] * z * (lz - z) / lz**2
    else:
        profile = forcing["value"][0] / (2.0 * nu) * z * (lz - z)
    return np.broadcast_to(profile, grid.shape).copy()


def couette(grid: Grid, lower: float, upper: float) -> np.ndarray:
    _, _, z = positions(grid, 0)
    return np.broadcast_to(lower + (upper - lower) * z / grid.lengths[2], grid.shape).copy()


def taylor_green(grid: Grid, amplitude: float = 1.0):
    """2-D Taylor-Green vortex in the x-z plane (``u = A sin kx cos kz``, ``w = -A cos kx sin kz``)."""
    kx, kz = 2 * np.pi / grid.lengths[0], 2 * np.pi / grid.lengths[2]
    xu, _, zu = positions(grid, 0)
    xw, _, zw = positions(grid, 2)
    u = amplitude * np.sin(kx * xu) * np.cos(kz * zu) * np.ones(grid.shape)
    w = -amplitude * kx / kz * np.cos(kx * xw) * np.sin(kz * zw) * np.ones(grid.shape)
    return u, np.zeros(grid.shape), w


def channel_perturbation(grid: Grid, amplitude: float, seed: int):
    """Divergence-free wall-bounded perturbation from streamfunctions in the x-z and y-z planes.

    ``psi`` lives on edges (x-face or y-face, z-face) and vanishes with its z-derivative at both
    walls; a few random Fourier modes in x and y with smooth wall-normal shape.
    """
    rng = np.random.default_rng(seed)
    nx, ny, nz = grid.shape
    lx, ly, lz = grid.lengths
    shape_z = np.sin(np.pi * grid.zf / lz) ** 2  # on z faces, 0 with zero slope at the walls
    u, v, w = (np.zeros(grid.shape) for _ in range(3))
    dzf = grid.dzf[None, None, :]
    for mx in range(1, 4):
        for my in range(0, 3):
            a, phase_x, phase_y = rng.standard_normal(), rng.uniform(0, 2 * np.pi), rng.uniform(0, 2 * np.pi)
            # x-z streamfunction at (xf[1:], yc, zf): u = d psi/dz, w = -d psi/dx
            px = a * np.sin(2 * np.pi * mx * grid.xf[1:, None, None] / lx + phase_x) \
                * np.cos(2 * np.pi * my * grid.yc[None, :, None] / ly + phase_y) * shape_z[None, None, :]
            u += np.diff(px, axis=2) / dzf
            w += -(px - np.roll(px, 1, axis=0))[:, :, 1:] / grid.dx
            # y-z streamfunction at (xc, yf[1:], zf): v = d psi/dz, w -= d psi/dy
            b = rng.standard_normal()
            py_ = b * np.cos(2 * np.pi * mx * grid.xc[:, None, None] / lx + phase_y) \
                * np.sin(2 * np.pi * (my + 1) * grid.yf[None, 1:, None] / ly + phase_x) * shape_z[None, None, :]
            v += np.diff(py_, axis=2) / dzf
            w += -(py_ - np.roll(py_, 1, axis=1))[:, :, 1:] / grid.dy
    scale = amplitude / max(np.abs(u).max(), np.abs(v).max(), np.abs(w).max(), 1e-300)
    return u * scale, v * scale, w * scale
