"""Initial conditions: analytic laminar states, Taylor-Green, and perturbed turbulent channels.

Every condition is evaluated on a *region* (slices of x, y and z: the pencil of one participant, or
the whole grid), with the same arithmetic whatever the region, so a pencil of a decomposed run holds
exactly the values of the same points of a one-pencil run; nothing is built whole and cut.
Perturbations are discrete curls of a streamfunction on the staggered grid, so they are exactly
divergence-free (to round-off) and vanish at the walls in the wall-normal component.
"""

from __future__ import annotations

import numpy as np

from daskflow.grid import Grid
from daskflow.run_config import ForcingConfig, InitialConfig


def positions(grid: Grid, component: int | None, region: Region | None = None):
    """Broadcastable ``(x, y, z)`` of a component's stored points (``None``: cell centres), on
    ``region`` (slices of x, y and z; default: the whole grid)."""
    coords = []
    for axis, (centres, faces) in enumerate(((grid.xc, grid.xf), (grid.yc, grid.yf), (grid.zc, grid.zf))):
        c = faces[1:] if axis == component else centres
        shape = [1, 1, 1]
        shape[axis] = -1
        coords.append(c.reshape(shape))
    return coords if region is None else _cut(coords, _normal(grid, region))


Region = tuple[slice, slice, slice]


def _normal(grid: Grid, region: Region | None) -> Region:
    """``region`` (default: the whole grid) with explicit starts and stops."""
    region = (slice(None),) * 3 if region is None else region
    return tuple(slice(*r.indices(n)[:2]) for r, n in zip(region, grid.shape, strict=True))


def _shape(region: Region) -> tuple[int, int, int]:
    return tuple(r.stop - r.start for r in region)


def _cut(coords, region: Region):
    """Broadcastable coordinates (:func:`positions`) restricted to ``region``."""
    return [c[tuple(r if axis == a else slice(None) for a in range(3))] for axis, (c, r) in
            enumerate(zip(coords, region, strict=True))]


def laminar_channel(grid: Grid, nu: float, forcing: ForcingConfig) -> np.ndarray:
    """Streamwise velocity of plane Poiseuille flow at the u points: a z profile ``(1, 1, nz)``."""
    _, _, z = positions(grid, 0)
    lz = grid.lengths[2]
    if forcing.kind == "flow_rate":
        return 6.0 * forcing.value[0] * z * (lz - z) / lz**2
    return forcing.value[0] / (2.0 * nu) * z * (lz - z)


def couette(grid: Grid, lower: float, upper: float) -> np.ndarray:
    """Streamwise velocity of plane Couette flow at the u points: a z profile ``(1, 1, nz)``."""
    _, _, z = positions(grid, 0)
    return lower + (upper - lower) * z / grid.lengths[2]


def taylor_green(grid: Grid, amplitude: float = 1.0, region: Region | None = None):
    """2-D Taylor-Green vortex in the x-z plane (``u = A sin kx cos kz``, ``w = -A cos kx sin kz``)
    on ``region`` (default: the whole grid)."""
    region = _normal(grid, region)
    kx, kz = 2 * np.pi / grid.lengths[0], 2 * np.pi / grid.lengths[2]
    xu, _, zu = _cut(positions(grid, 0), region)
    xw, _, zw = _cut(positions(grid, 2), region)
    shape = _shape(region)
    u = amplitude * np.sin(kx * xu) * np.cos(kz * zu) * np.ones(shape)
    w = -amplitude * kx / kz * np.cos(kx * xw) * np.sin(kz * zw) * np.ones(shape)
    return u, np.zeros(shape), w


KAPPA = 0.41


def reichardt(z_plus: np.ndarray) -> np.ndarray:
    """Reichardt's mean-velocity law ``U+(z+)``: linear in the viscous sublayer, logarithmic
    (von Karman constant 0.41) beyond the buffer layer."""
    return np.log1p(KAPPA * z_plus) / KAPPA + 7.8 * (1.0 - np.exp(-z_plus / 11.0)
                                                     - z_plus / 11.0 * np.exp(-z_plus / 3.0))


def _wall_distance_plus(z: np.ndarray, lz: float, re_tau: float) -> np.ndarray:
    half = 0.5 * lz
    return np.minimum(z, lz - z) / half * re_tau


def turbulent_channel_mean(grid: Grid, nu: float, forcing: ForcingConfig) -> np.ndarray:
    """Streamwise velocity of a fully developed turbulent channel (Reichardt's law from each wall)
    at the u points: a z profile ``(1, 1, nz)``.

    Constant pressure gradient ``G``: ``u_tau = sqrt(G h)`` (``h`` the half-height). Constant flow
    rate ``U_b``: the friction Reynolds number is the one whose Reichardt profile carries ``U_b``,
    and the discrete profile is scaled so its bulk velocity is ``U_b`` exactly.
    """
    _, _, z = positions(grid, 0)
    lz = grid.lengths[2]
    half = 0.5 * lz
    weights = grid.dzf / lz
    if forcing.kind == "flow_rate":
        bulk = forcing.value[0]
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
        gradient = forcing.value[0] if forcing.kind == "pressure_gradient" else 0.0
        u_tau = np.sqrt(abs(gradient) * half)
        profile = np.sign(gradient) * u_tau * reichardt(_wall_distance_plus(z, lz, u_tau * half / nu))
    return profile


def channel_perturbation(grid: Grid, seed: int, region: Region | None = None, modes: int = 8):
    """Divergence-free wall-bounded perturbation on ``region`` (default: the whole grid), discrete
    curls of streamfunctions in the x-z and y-z planes, *unscaled*: :func:`scale_perturbation`
    gives it its amplitude from the largest component over the whole grid.

    Each streamfunction lives on edges (x-face or y-face, z-face) and is a random sum of Fourier
    modes in x and y (wavenumbers up to ``modes``, amplitudes falling as ``1/k``) times two
    wall-normal shapes, symmetric and antisymmetric about the centre plane, that vanish with their
    z-derivative at both walls. The discrete curl makes the perturbation exactly divergence-free
    (to round-off) with zero velocity at the walls. Every participant draws the same modes (one
    seed) and evaluates its own region (x whole: the pencils are x-pencils).
    """
    region = _normal(grid, region)
    rng = np.random.default_rng(seed)
    nx, ny, nz = grid.shape
    lx, ly, lz = grid.lengths
    ys, zs = region[1], region[2]
    faces = grid.zf[zs.start:zs.stop + 1]  # the z faces around the region's cells
    s = np.sin(np.pi * faces / lz) ** 2
    shapes = (s, s * np.cos(np.pi * faces / lz))  # on z faces, 0 with zero slope at the walls
    u, v, w = (np.zeros(_shape(region)) for _ in range(3))
    dzf = grid.dzf[None, None, zs]
    rows = np.arange(ys.start - 1, ys.stop) % ny  # the region's y rows and the one below (periodic)
    edges = (grid.xf[1:], grid.yc), (grid.xc, grid.yf[1:])  # edge positions of the two streamfunctions
    for shape in shapes:
        planes = []
        for x, y in edges:
            plane = np.zeros((nx, ny))
            for mx in range(0, min(modes, nx // 4) + 1):
                for my in range(0, min(modes, ny // 4) + 1):
                    if mx == my == 0:
                        continue
                    a = rng.standard_normal() / np.hypot(mx, my)
                    px, py = rng.uniform(0, 2 * np.pi, 2)
                    plane += a * np.outer(np.cos(2 * np.pi * mx * x / lx + px), np.cos(2 * np.pi * my * y / ly + py))
            planes.append(plane)
        psi_x = planes[0][:, ys, None] * shape[None, None, :]  # u = d psi_x/dz, w = -d psi_x/dx
        psi_y = planes[1][:, rows, None] * shape[None, None, :]  # v = d psi_y/dz, w -= d psi_y/dy
        u += np.diff(psi_x, axis=2) / dzf
        v += np.diff(psi_y[:, 1:], axis=2) / dzf
        w -= (psi_x - np.roll(psi_x, 1, axis=0))[:, :, 1:] / grid.dx
        w -= (psi_y[:, 1:] - psi_y[:, :-1])[:, :, 1:] / grid.dy
    return u, v, w


def perturbation_peak(fields) -> float:
    """The largest magnitude of any component of (a region of) a perturbation (host float)."""
    return max(float(np.abs(f).max()) if f.size else 0.0 for f in fields)


def scale_perturbation(fields, amplitude: float, peak: float):
    """The perturbation scaled so its largest component over the whole grid (``peak``, the
    maximum of :func:`perturbation_peak` over every region) has magnitude ``amplitude``."""
    scale = amplitude / max(peak, 1e-300)
    return tuple(f * scale for f in fields)


def velocity(grid: Grid, wall_values, nu: float, forcing: ForcingConfig, ini: InitialConfig,
             region: Region | None = None, peak=None):
    """The initial velocity ``(u, v, w)`` of the ``initial`` config section ``ini`` on ``region``
    (host arrays). ``wall_values``: u's z wall values (Couette). A turbulent channel's perturbation
    is scaled by its largest component over the whole grid: ``peak(local_peak)`` returns it (on a
    decomposed run, a reduction over the participants)."""
    region = _normal(grid, region)
    kind, shape = ini.kind, _shape(region)
    zero = np.zeros(shape)
    if kind == "zero":
        return zero, zero.copy(), zero.copy()
    if kind == "uniform":
        return tuple(np.full(shape, float(value)) for value in ini.value)
    if kind == "taylor_green":
        return taylor_green(grid, ini.amplitude or 1.0, region)
    if kind in ("poiseuille", "couette"):
        profile = (laminar_channel(grid, nu, forcing) if kind == "poiseuille" else couette(grid, *wall_values))
        return np.broadcast_to(profile[:, :, region[2]], shape).copy(), zero, zero.copy()
    if kind == "turbulent_channel":
        mean = {"log_law": turbulent_channel_mean, "laminar": laminar_channel}[ini.mean](grid, nu, forcing)
        fields = channel_perturbation(grid, ini.seed, region)
        top = perturbation_peak(fields)
        du, dv, dw = scale_perturbation(fields, ini.amplitude * max(np.abs(mean).max(), 1.0),
                                        top if peak is None else peak(top))
        return np.broadcast_to(mean[:, :, region[2]], shape) + du, dv, dw
    raise ValueError(f"initial.kind {kind!r} has no field formula (a checkpoint is read, not computed)")
