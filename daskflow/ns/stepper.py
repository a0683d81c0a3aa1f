"""Wray's low-storage RK3 with fractional-step projection (seed paper eqs. 5-12), on whole arrays.

One :class:`Stepper` advances NumPy or CuPy fields ``(u, v, w, p)`` by substeps of the tableau
:data:`WRAY`. Diffusion is explicit, Crank-Nicolson implicit along z (a tridiagonal solve per
(x, y) column; coefficients change with ``dt``), or implicit in x, y and z (a Helmholtz solve).
Because wall values do not change in time, the implicit solves run on the increment
``u* - u^k``, which has homogeneous boundary conditions.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from daskflow import tridiagonal
from daskflow.backend import array_module
from daskflow.bc import Boundaries
from daskflow.grid import Grid
from daskflow.ns import operators as ops
from daskflow.ns.boundaries import FlowBoundaries
from daskflow.poisson import HelmholtzSolver, PoissonSolver
from daskflow.stencils import Tridiagonal


@dataclass(frozen=True)
class Tableau:
    alpha: tuple[float, ...]
    beta: tuple[float, ...]

    @property
    def gamma(self) -> tuple[float, ...]:
        return tuple(a + b for a, b in zip(self.alpha, self.beta, strict=True))


WRAY = Tableau(alpha=(8 / 15, 5 / 12, 3 / 4), beta=(0.0, -17 / 60, -5 / 12))


@dataclass
class State:
    """Fields (logical ``(nx, ny, nz)``), time, step and the explicit right-hand sides of the
    previous substep (the RK history)."""

    u: object
    v: object
    w: object
    p: object
    time: float = 0.0
    step: int = 0
    dt: float = 0.0
    history: list = field(default_factory=list)
    forcing_gradient: float = 0.0  # mean streamwise pressure gradient applied by flow-rate forcing


class Stepper:
    """Advance a :class:`State` in time for one grid, set of boundaries and physics."""

    def __init__(self, grid: Grid, bcs: FlowBoundaries, nu: float, forcing: dict, implicit: str,
                 poisson: str = "ptdma", pencils=(1, 1), dtype="float64") -> None:
        self.grid, self.bcs, self.nu, self.forcing, self.implicit = grid, bcs, nu, forcing, implicit
        self.metrics = ops.Metrics.of(grid, bcs.periodic(2))
        self.poisson = PoissonSolver(grid, bcs.p, "ccc", poisson, pencils, dtype)
        self.poisson_method, self.pencils, self.dtype = poisson, tuple(pencils), dtype
        self.tableau = WRAY
        self._helmholtz: dict = {}
        self._z_ops = [Boundaries.parse(c.pairs, c.stagger(i)).laplacian_1d(2, grid.dzf)
                       for i, c in enumerate(bcs.components)]

    # ------------------------------------------------------------------ time step size

    def stable_dt(self, state: State, cfl: float, dt_max: float) -> float:
        """CFL (and, for explicit diffusion, diffusive) limit of the RK3 scheme, times ``cfl``."""
        xp = array_module(state.u)
        m = self.metrics
        dz = xp.asarray(m.dzf[1:-1])[None, None, :]
        rate = float((xp.abs(state.u) / m.dx + xp.abs(state.v) / m.dy + xp.abs(state.w) / dz).max())
        dt = dt_max if rate == 0 else min(dt_max, cfl * np.sqrt(3.0) / rate)
        inv2 = {"none": 1 / m.dx**2 + 1 / m.dy**2 + 1 / self.grid.dzf.min() ** 2,
                "z": 1 / m.dx**2 + 1 / m.dy**2, "xyz": 0.0}[self.implicit]
        if inv2 > 0:
            dt = min(dt, cfl * 2.5 / (4 * self.nu * inv2))
        return dt

    # ------------------------------------------------------------------ one step

    def padded(self, state: State):
        comps = self.bcs.components
        return tuple(ops.pad(f, comps[i], i) for i, f in enumerate((state.u, state.v, state.w)))

    def explicit_terms(self, padded):
        """Advection plus the explicitly treated diffusion, per component."""
        advect = ops.advection(*padded, self.metrics)
        axes = {"none": (0, 1, 2), "z": (0, 1), "xyz": ()}[self.implicit]
        if not axes:
            return list(advect)
        return [a + self.nu * ops.laplacian(f, self.metrics, i, axes) for i, (a, f) in enumerate(zip(
            advect, padded, strict=True))]

    def step(self, state: State, dt: float) -> State:
        for s in range(3):
            self.substep(state, s, dt)
        state.time += dt
        state.step += 1
        state.dt = dt
        return state

    def substep(self, state: State, s: int, dt: float) -> None:
        a, b, g = self.tableau.alpha[s], self.tableau.beta[s], self.tableau.gamma[s]
        m = self.metrics
        fields = [state.u, state.v, state.w]
        padded = self.padded(state)
        rhs = self.explicit_terms(padded)
        P = ops.pad(state.p, self.bcs.p)
        implicit_axes = {"none": (), "z": (2,), "xyz": (0, 1, 2)}[self.implicit]
        body = [self.forcing["value"][0] if self.forcing["kind"] == "pressure_gradient" else 0.0,
                self.forcing["value"][1] if self.forcing["kind"] == "pressure_gradient" else 0.0, 0.0]
        stars = []
        for i, f in enumerate(fields):
            increment = dt * a * rhs[i] + g * dt * (body[i] - ops.gradient(P, m, i))
            if b:
                increment = increment + dt * b * state.history[i]
            if implicit_axes:
                increment = increment + g * dt * self.nu * ops.laplacian(padded[i], m, i, implicit_axes)
                increment = self._implicit_solve(increment, i, g * dt * self.nu / 2)
            stars.append(self._keep_walls(f + increment, i))
        state.history = rhs
        Ustar, Vstar, Wstar = (ops.pad(f, self.bcs.components[i], i) for i, f in enumerate(stars))
        phi = self.poisson.solve(_fortran(ops.divergence(Ustar, Vstar, Wstar, m) / (g * dt)))
        Phi = ops.pad(phi, self.bcs.p)
        for i in range(3):
            stars[i] = self._keep_walls(stars[i] - g * dt * ops.gradient(Phi, m, i), i)
        state.u, state.v, state.w = stars
        state.p = state.p + phi
        if implicit_axes:
            state.p = state.p - g * dt * self.nu / 2 * ops.laplacian(Phi, m, 3, implicit_axes)
        if self.forcing["kind"] == "flow_rate":
            correction = self.forcing["value"][0] - self.bulk_velocity(state.u)
            state.u = state.u + correction
            state.forcing_gradient = correction / (g * dt)

    def _keep_walls(self, f, component: int):
        """Reset the stored boundary face of a bounded normal axis to its wall value."""
        bc = self.bcs.components[component]
        pair = bc.pairs[component]
        if pair == "PP":
            return f
        sl = [slice(None)] * 3
        sl[component] = slice(-1, None)
        if pair[1] == "D":
            f[tuple(sl)] = bc.values[component][1]
        else:
            below = [slice(None)] * 3
            below[component] = slice(-2, -1)
            f[tuple(sl)] = f[tuple(below)]
        return f

    def _implicit_solve(self, increment, component: int, alpha: float):
        """``(I - alpha L) x = increment`` with homogeneous BCs (z only, or all axes)."""
        if self.implicit == "z":
            op = self._z_ops[component]
            m = op.diag.size
            scaled = Tridiagonal(-alpha * op.lower, 1.0 - alpha * op.diag, -alpha * op.upper, op.periodic)
            xp = array_module(increment)
            cols = xp.ascontiguousarray(xp.moveaxis(increment[:, :, :m], 2, 0))
            tridiagonal.solve_shifted(cols, scaled, 0.0)
            out = increment.copy()
            out[:, :, :m] = xp.moveaxis(cols, 0, 2)
            return out
        bc = self.bcs.components[component]
        key = (component, round(alpha, 15))
        if key not in self._helmholtz:
            self._helmholtz = {k: v for k, v in self._helmholtz.items() if k[0] != component}
            self._helmholtz[key] = HelmholtzSolver(self.grid, bc.pairs, bc.stagger(component), alpha,
                                                   self.poisson_method, self.pencils, self.dtype)
        return self._helmholtz[key].solve(_fortran(increment))

    def bulk_velocity(self, u) -> float:
        xp = array_module(u)
        dz = xp.asarray(self.grid.dzf)[None, None, :]
        return float((u * dz).sum() / (u.shape[0] * u.shape[1] * self.grid.lengths[2]))


def _fortran(a):
    return array_module(a).asfortranarray(a)
