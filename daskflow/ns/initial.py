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


KAPPA = 0.41


def reichardt(z_plus: np.ndarray) -> np.ndarray:
    """Reichardt's mean-velocity law ``U+(z+)``: linear in the viscous sublayer, logarithmic
    (von Karman constant 0.41) beyond the buffer layer."""
    return np.log1p(KAPPA * z_plus) / KAPPA + 7.8 * (1.0 - np.exp(-z_plus / 11.0)
                                                     - z_plus / 11.0 * np.exp(-z_plus / 3.0))


def _wall_distance_plus(z: np.ndarray, lz: float, re_tau: float) -> np.ndarray:
    half = 0.5 * lz
    return np.minimum(z, lz - z) / half * re_tau


def turbulent_channel_mean(grid: Grid, nu: float, forcing: dict) -> np.ndarray:
    """Streamwise velocity of a fully developed turbulent channel (Reichardt's law from each wall)
    at the u points.

    Constant pressure gradient ``G``: ``u_tau = sqrt(G h)`` (``h`` the half-height). Constant flow
    rate ``U_b``: the friction Reynolds number is the one whose Reichardt profile carries ``U_b``,
    and the discrete profile is scaled so its bulk velocity is ``U_b`` exactly.
    """
    _, _, z = positions(grid, 0)
    lz = grid.lengths[2]
    half = 0.5 * lz
    weights = grid.dzf / lz
    if forcing["kind"] == "flow_rate":
        bulk = forcing["value"][0]
        target = abs(bulk) * half / nu  # Re_tau * U_b+ for the profile sought

        def carried(re_tau: float) -> float:
            return re_tau * float((reichardt(_wall_distance_plus(grid.zc, lz, re_tau)) * weights).sum())

        lo, hi = 1e-3, max(target, 1.0)
        for _ in range(200):  # bisection: carried() grows monotonically with Re_tau
            mid = np.sqrt(lo * hi)
            lo, hi = (mid, hi) if carried(mid) < target else (lo, mid)
        profile = reichardt(_wall_distance_plus(z, lz, lo))
        profile = profile * bulk / float((profile.ravel() * weights).sum())
    else:
        gradient = forcing["value"][0] if forcing["kind"] == "pressure_gradient" else 0.0
        u_tau = np.sqrt(abs(gradient) * half)
        profile = np.sign(gradient) * u_tau * reichardt(_wall_distance_plus(z, lz, u_tau * half / nu))
    return np.broadcast_to(profile, grid.shape).copy()


def channel_perturbation(grid: Grid, amplitude: float, seed: int, modes: int = 8):
    """Divergence-free wall-bounded perturbation, discrete curls of streamfunctions in the x-z and
    y-z planes; its largest velocity component has magnitude ``amplitude``.

    Each streamfunction lives on edges (x-face or y-face, z-face) and is a random sum of Fourier
    modes in x and y (wavenumbers up to ``modes``, amplitudes falling as ``1/k``) times two
    wall-normal shapes, symmetric and antisymmetric about the centre plane, that vanish with their
    z-derivative at both walls. The discrete curl makes the perturbation exactly divergence-free
    (to round-off) with zero velocity at the walls.
    """
    rng = np.random.default_rng(seed)
    nx, ny, nz = grid.shape
    lx, ly, lz = grid.lengths
    s = np.sin(np.pi * grid.zf / lz) ** 2
    shapes = (s, s * np.cos(np.pi * grid.zf / lz))  # on z faces, 0 with zero slope at the walls
    u, v, w = (np.zeros(grid.shape) for _ in range(3))
    dzf = grid.dzf[None, None, :]
    xs, ys = (grid.xf[1:], grid.yc), (grid.xc, grid.yf[1:])  # edge positions of the two streamfunctions
    for shape in shapes:
        planes = []
        for x, y in (xs, ys):
            plane = np.zeros((nx, ny))
            for mx in range(0, min(modes, nx // 4) + 1):
                for my in range(0, min(modes, ny // 4) + 1):
                    if mx == my == 0:
                        continue
                    a = rng.standard_normal() / np.hypot(mx, my)
                    px, py = rng.uniform(0, 2 * np.pi, 2)
                    plane += a * np.outer(np.cos(2 * np.pi * mx * x / lx + px), np.cos(2 * np.pi * my * y / ly + py))
            planes.append(plane)
        psi_x = planes[0][:, :, None] * shape[None, None, :]  # u = d psi_x/dz, w = -d psi_x/dx
        psi_y = planes[1][:, :, None] * shape[None, None, :]  # v = d psi_y/dz, w -= d psi_y/dy
        u += np.diff(psi_x, axis=2) / dzf
        v += np.diff(psi_y, axis=2) / dzf
        w -= (psi_x - np.roll(psi_x, 1, axis=0))[:, :, 1:] / grid.dx
        w -= (psi_y - np.roll(psi_y, 1, axis=1))[:, :, 1:] / grid.dy
    scale = amplitude / max(np.abs(u).max(), np.abs(v).max(), np.abs(w).max(), 1e-300)
    return u * scale, v * scale, w * scale
