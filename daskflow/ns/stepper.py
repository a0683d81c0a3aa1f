"""Wray's low-storage RK3 with fractional-step projection (seed paper eqs. 5-12).

One :class:`Stepper` advances NumPy or CuPy fields ``(u, v, w, p)`` by substeps of the tableau
:data:`WRAY`, on a *domain* (:mod:`daskflow.ns.domain`): the whole field in this process, or one
pencil per worker inside a fused task. Diffusion is explicit, Crank-Nicolson implicit along z (a
tridiagonal solve per (x, y) column; coefficients change with ``dt``), or implicit in x, y and z
(a Helmholtz solve). Because wall values do not change in time, the implicit solves run on the
increment ``u* - u^k``, which has homogeneous boundary conditions.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from daskflow.backend import array_module, device_constant, is_cupy_array
from daskflow.ns import advection as adv
from daskflow.ns import operators as ops
from daskflow.ns.domain import weighted_sum
from daskflow.run_config import ForcingConfig


@dataclass(frozen=True)
class Tableau:
    alpha: tuple[float, ...]
    beta: tuple[float, ...]

    @property
    def gamma(self) -> tuple[float, ...]:
        return tuple(a + b for a, b in zip(self.alpha, self.beta, strict=True))


WRAY = Tableau(alpha=(8 / 15, 5 / 12, 3 / 4), beta=(0.0, -17 / 60, -5 / 12))
IMPLICIT_AXES = {"none": (), "z": (2,), "xyz": (0, 1, 2)}


@dataclass
class State:
    """Fields (logical ``(nx, ny, nz)`` or one pencil of them), time, step and the explicit
    right-hand sides of the previous substep (the RK history)."""

    u: object
    v: object
    w: object
    p: object
    time: float = 0.0
    step: int = 0
    dt: float = 0.0
    history: list = field(default_factory=list)
    forcing_gradient: float = 0.0  # mean streamwise pressure gradient applied by flow-rate forcing


VELOCITY = ("u", "v", "w")
_UNSET = object()


class Stepper:
    """Advance a :class:`State` for one grid, set of boundaries and physics on ``domain``."""

    def __init__(self, domain, nu: float, forcing: ForcingConfig, implicit: str, advection: str = "divergence") -> None:
        if advection not in adv.ADVECTION:
            raise ValueError(f"advection must be one of {', '.join(adv.ADVECTION)}; got {advection!r}")
        self.domain = domain
        self.grid, self.bcs = domain.grid, domain.bcs
        self.nu, self.forcing, self.implicit = nu, forcing, implicit
        self.advection = advection
        self.tableau = WRAY
        self.graphs = _UNSET  # CUDA graphs of the step (daskflow.ns.graphs), decided at the first step

    @property
    def metrics(self) -> ops.Metrics:
        return self.domain.metrics

    # ------------------------------------------------------------------ time step size

    def local_rate(self, state: State, host: bool = True):
        """``max(|u|/dx + |v|/dy + |w|/dz)`` over this domain's points (1/s): the advective rate, a
        number, or with ``host=False`` a 0-d array where the fields live (no wait for the device)."""
        xp = array_module(state.u)
        m = self.metrics
        dz = device_constant(xp, m.dzf[1:-1])
        if xp is not np and ops.FUSED_GPU:  # one reduction kernel, the same maximum
            from daskflow.ns import kernels

            rate = kernels.advective_rate(state.u, state.v, state.w, m.dx, m.dy, dz)
        else:
            rate = (xp.abs(state.u) / m.dx + xp.abs(state.v) / m.dy + xp.abs(state.w) / dz[None, None, :]).max()
        return float(rate) if host else rate

    def dt_limit(self, rate: float, cfl: float, dt_max: float) -> float:
        """CFL (and, for explicit diffusion, diffusive) limit of the RK3 scheme, times ``cfl``, from
        the domain-wide advective ``rate`` (:meth:`local_rate`'s maximum over the domain)."""
        m = self.metrics
        dt = dt_max if rate == 0 else min(dt_max, cfl * np.sqrt(3.0) / rate)
        inv2 = {"none": 1 / m.dx**2 + 1 / m.dy**2 + 1 / self.grid.dzf.min() ** 2,
                "z": 1 / m.dx**2 + 1 / m.dy**2, "xyz": 0.0}[self.implicit]
        if inv2 > 0:
            dt = min(dt, cfl * 2.5 / (4 * self.nu * inv2))
        return dt

    # ------------------------------------------------------------------ one step

    def explicit_terms(self, padded):
        """Advection (``self.advection``: divergence or skew-symmetric form) plus the explicitly
        treated diffusion, per component. CuPy fields in divergence form: one fused CUDA kernel;
        in skew-symmetric form the array code of :func:`daskflow.ns.advection.explicit_terms`
        (a few dozen elementwise kernels and temporaries): measured on one H200 (channel, z-implicit)
        13.5 -> 17.1 ms per step at 128^3 and 37.3 -> 56.5 ms at 256^3. On the CPU (blocked NumPy
        path, one thread) the skew terms cost about 1.4x the divergence ones, +11% per step at
        64 x 32 x 48."""
        axes = {"none": (0, 1, 2), "z": (0, 1), "xyz": ()}[self.implicit]
        if self.advection == "divergence" and is_cupy_array(padded[0]):
            from daskflow.ns.kernels import explicit_terms

            return explicit_terms(*padded, self.metrics, self.nu, axes)
        return adv.explicit_terms(*padded, self.metrics, self.nu, axes, advection=self.advection)

    def step(self, state: State, dt) -> State:
        """One RK3 step of size ``dt``, or of ``dt(rate)`` when ``dt`` is a function of the
        domain-wide advective rate (:meth:`local_rate` maximised over the domain): that maximum then
        rides on the step's first halo exchange instead of a reduction round of its own. A GPU
        step may replay a CUDA graph of itself (:mod:`daskflow.ns.graphs`); a step of pencils
        whose graph exists reduces the rate first, so that a CFL step keeping the step size replays
        too."""
        if self.graphs is _UNSET:
            from daskflow.ns import graphs

            self.graphs = graphs.for_stepper(self, state)
            if self.graphs is not None and self.graphs.collective:
                # a replay pays no host time per slab: the transfers of one slab overlap the
                # transforms of the next (on four H200s 2-5 % of a 512 x 256 x 144 step per GPU)
                self.domain.pipeline_pressure_transposes(graphs.transpose_slabs(self.domain))
        graphs = self.graphs
        if graphs is not None:
            if callable(dt) and not (graphs.collective and graphs.graph is None):
                # The rate first, then a step of known size that a graph may replay: one pencil has
                # nothing to exchange; pencils with a graph reduce it in a small round of their own
                # (a replay cannot take it from the step's first halo round). Pencils without one
                # keep it riding on that round.
                rate = self.local_rate(state)
                dt = dt(self.domain.allreduce(rate, "max") if graphs.collective else rate)
            if not callable(dt) and graphs.step(self, state, dt):
                return state
        self.finish_step(state, self.substeps(state, dt))
        return state

    def detach(self, state: State) -> None:
        """At the end of a run: ``state``'s fields its own, not the buffers of a CUDA graph of the
        step that a later run may replay (:meth:`daskflow.ns.graphs.StepGraphs.detach`)."""
        if self.graphs is not None and self.graphs is not _UNSET:
            self.graphs.detach(state)

    def substeps(self, state: State, dt) -> float:
        """The three substeps of :meth:`step` (the device's work, nothing waits for it); returns
        the step size used."""
        for s in range(3):
            dt = self.substep(state, s, dt)
        state.history = []  # beta[0] = 0: no right-hand side is needed across steps
        return dt

    def finish_step(self, state: State, dt: float) -> None:
        """The host's part of a step of size ``dt``: its clock. The forcing gradient stays where the
        substeps left it (a 0-d array on the GPU; :func:`daskflow.ns.runs.advance_pencil` makes it a
        number once per run): a number at every step made the host wait for the step's end, and the
        pencils' hosts then queued each step's first kernels in step with their devices, so that
        their jitter reached the devices as waits at the step's first exchange."""
        state.time += dt
        state.step += 1
        state.dt = dt

    def _implicit_stars(self, state: State, increments: dict, alpha: float) -> None:
        """``u* = u + (I - alpha L)^-1 increment`` per component of ``increments`` into ``state``, in
        the increments' buffers (the old components are spent). The z solves add ``u`` in their last
        pass (:func:`daskflow.zsolve.shared.solve_distributed`)."""
        olds = {i: getattr(state, VELOCITY[i]) for i in increments}
        if self.implicit == "z":
            stars = self.domain.implicit_z(increments, alpha, olds)
        else:
            xp = array_module(state.u)
            stars = {}
            for i, a in increments.items():
                solved = self.domain.implicit_xyz(a, i, alpha)
                stars[i] = xp.add(olds[i], solved, out=solved)
        del olds
        for i, star in stars.items():
            setattr(state, VELOCITY[i], self.domain.keep_walls(star, i))

    def substep(self, state: State, s: int, dt) -> float:
        """Substep ``s`` (0-2) of :meth:`step`; returns the step size used (``dt`` or ``dt(rate)``)."""
        domain = self.domain
        # Memory: every field-sized array is released as soon as the substep is done with it (the
        # previous substep's terms, the padded velocity, the old velocity components), so the peak
        # stays near the state plus this substep's explicit terms and a few temporaries.
        if callable(dt):
            (*padded, P), rate = domain.pad_and_reduce([state.u, state.v, state.w], self.local_rate(state), "max",
                                                       pressure=state.p)
            dt = dt(rate)
        else:
            *padded, P = domain.pad_velocity([state.u, state.v, state.w], state.p)
        self._predict(state, s, dt, padded, P)
        del padded, P
        self._project(state, self.tableau.gamma[s] * dt)
        return dt

    def _predict(self, state: State, s: int, dt: float, padded: list, P) -> None:
        """The intermediate velocity ``u*`` of substep ``s`` into ``state`` (from the padded velocity
        and pressure; ``padded`` is emptied as its components are used)."""
        a, b, g = self.tableau.alpha[s], self.tableau.beta[s], self.tableau.gamma[s]
        m, domain = self.metrics, self.domain
        rhs = self.explicit_terms(padded)
        implicit_axes = IMPLICIT_AXES[self.implicit]
        if not implicit_axes:
            padded.clear()  # only the explicit terms needed it
        pressure_gradient = self.forcing.kind == "pressure_gradient"
        body = [self.forcing.value[i] if pressure_gradient else 0.0 for i in (0, 1)] + [0.0]
        history, state.history = list(state.history), rhs
        # The implicit solves of the three components share their exchange rounds where the domain
        # says so (z split across pencils); else each is solved as soon as it is ready, so that one
        # increment is alive at a time.
        together = bool(implicit_axes) and domain.shares_implicit_rounds
        pending = {}
        for i, name in enumerate(VELOCITY):
            # u* = u + (dt a rhs + g dt (body - grad p) [+ dt b rhs_prev] [+ implicit part])
            terms = ((dt * a, rhs[i]),) + (((dt * b, history[i]),) if b else ())
            if implicit_axes:  # the implicit part's explicit half, in the same pass on the GPU
                increment = ops.update(None, P, m, i, g * dt, body[i], terms,
                                       diffusion=(padded[i], implicit_axes, g * dt * self.nu))
                del terms
                padded[i] = None
                pending[i] = increment
                del increment
                if not together:
                    self._implicit_stars(state, pending, g * dt * self.nu / 2)
                    pending = {}
            else:
                star = ops.update(getattr(state, name), P, m, i, g * dt, body[i], terms)
                del terms
                setattr(state, name, domain.keep_walls(star, i))  # the old component is spent
                del star
            if b:
                history[i] = None
        if pending:
            self._implicit_stars(state, pending, g * dt * self.nu / 2)

    def _project(self, state: State, gdt: float) -> None:
        """Project ``state``'s intermediate velocity onto divergence-free fields (substep weight
        ``gdt = gamma dt``), update the pressure, and hold the flow rate when it is forced."""
        m, domain = self.metrics, self.domain
        implicit_axes = IMPLICIT_AXES[self.implicit]
        stars = [state.u, state.v, state.w]
        flow_rate = self.forcing.kind == "flow_rate"
        if flow_rate:
            # The projection below leaves the bulk velocity as it is (the x-differences of phi sum
            # to zero around a periodic x axis), so u* is summed now, riding on the halo exchange
            # instead of costing a reduction round of its own; on a GPU the sum, its reduction and
            # the correction stay on the device (no wait for the host at every substep). The
            # correction is added by u's update, before its walls are kept: a wall face of u (x
            # bounded) keeps its wall value.
            padded_stars, total = domain.pad_and_reduce(stars, weighted_sum(state.u, domain.dz()), "sum")
        else:
            padded_stars = domain.pad_velocity(stars)
        divergence = ops.divergence(*padded_stars, m, gdt)
        del padded_stars  # before the solve, which has its own work arrays
        if domain.pressure_rows_in_transpose:  # the solve brings the rows its padding needs
            phi, Phi = domain.solve_pressure_padded(divergence)
        else:
            phi = domain.solve_pressure(divergence)
            Phi = domain.pad(phi, self.bcs.p)
        del divergence
        # the flow-rate correction of u is added by its update (in the same pass on the GPU)
        correction = self.forcing.value[0] - self.bulk_from_sum(total) if flow_rate else None
        for i in range(3):
            offset = correction if i == 0 else None
            stars[i] = domain.keep_walls(ops.update(stars[i], Phi, m, i, gdt, out=stars[i], offset=offset), i)
        state.u, state.v, state.w = stars
        state.p = ops.pressure_update(state.p, phi, Phi, m, implicit_axes, gdt * self.nu / 2)
        if flow_rate:
            state.forcing_gradient = correction / gdt

    def bulk_velocity(self, u) -> float:
        """Volume-averaged streamwise velocity over the whole domain."""
        return self.bulk_from_sum(self.domain.allreduce(float(weighted_sum(u, self.domain.dz())), "sum"))

    def bulk_from_sum(self, total: float) -> float:
        """The bulk velocity from the domain-wide sum of ``u dz`` (:func:`weighted_sum`)."""
        nx, ny, _ = self.grid.shape
        return total / (nx * ny * self.grid.lengths[2])

    def divergence_max(self, state: State) -> float:
        padded = self.domain.pad_velocity([state.u, state.v, state.w])
        local = float(abs(ops.divergence(*padded, self.metrics)).max())
        return self.domain.allreduce(local, "max")
