"""The flow domain: where the stepper's fields live and every operation that depends on it.

The RK3 stepper (:mod:`daskflow.ns.stepper`) is written once against a :class:`FlowDomain`: one
x-pencil ``(p, q)`` of ``u, v, w, p`` owned by one participant of a pencil run, with the operations
that depend on the layout: padding with halos (boundary conditions at the domain's edges,
neighbours' planes inside, one exchange for all fields), the pressure and implicit solves, the wall
faces it owns, and global reductions. Every exchange goes through the participant's transport
(:class:`~daskflow.pencils.executor.Member`): a cluster worker inside its fused task, a thread of an
in-process :class:`~daskflow.pencils.team.Team`, or, with a single pencil, this process alone (then
the halos are filled locally and the solves are the single-device solvers).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from daskflow.backend import array_module, cupy_or_none, device_constant, is_cupy_array
from daskflow.bc import Boundaries
from daskflow.grid import Grid
from daskflow.ns import halos, implicit
from daskflow.ns import operators as ops
from daskflow.ns.boundaries import ComponentBC, FlowBoundaries
from daskflow.pencils.executor import Member
from daskflow.pencils.kernels import c_contiguous, f_contiguous
from daskflow.pencils.layout import pencil_chunks, split_slices
from daskflow.poisson import HelmholtzSolver, PoissonSolver, algorithms, stages
from daskflow.poisson.plan import SpectralPlan
from daskflow.run_config import ForcingConfig, InitialConfig, OutputConfig, TimeConfig
from daskflow.zsolve import shared, spectral
from daskflow.zsolve.choice import PTDMA, ZSolve

REDUCTIONS = {"sum": sum, "max": max}  # how participants' values combine (in chunk order)


@dataclass
class FlowPlan:
    """What every participant needs to step its pencil (small: shipped once per run). The
    configuration sections are the frozen ones of the run's :class:`~daskflow.run_config.RunConfig`
    (what the client validated), read by attribute."""

    grid: Grid
    bcs: FlowBoundaries
    nu: float
    forcing: ForcingConfig  # physics.forcing
    implicit: str
    time: TimeConfig | None  # the ``time`` section (``None``: a plan for a domain alone, never advanced)
    poisson_plan: SpectralPlan
    device: str
    output: OutputConfig | None = None  # the ``output`` section when a store is written
    z_solve: str = "direct"  # distributed z-implicit diffusion: "direct" (from x-pencils) or "transpose"
    advection: str = "divergence"  # physics.advection: "divergence" or "skew_symmetric"
    initial: InitialConfig | None = None  # the ``initial`` section (what the participants evaluate)


def _operator_order(a, scale: float = 1.0):
    """A solve's solution (a Fortran-ordered logical view) in the operators' memory order
    (:func:`~daskflow.ns.operators.memory_order`), multiplied by ``scale`` (the plan's
    :attr:`~daskflow.poisson.plan.SpectralPlan.inverse_scale`): as it is on NumPy, a C copy on CuPy,
    scaled in that copy."""
    if is_cupy_array(a):
        return c_contiguous(a, None if scale == 1.0 else scale)
    out = np.asarray(a, order=ops.memory_order(np))
    return out if scale == 1.0 else out * scale


def solving_plan(plan: FlowPlan) -> SpectralPlan:
    """The plan a domain's pressure solves run: on the GPU the flow's, its inverse periodic
    transforms left unnormalised (:meth:`~daskflow.poisson.plan.SpectralPlan.unnormalised`: the
    solution is scaled in the layout change it goes through anyway, one pass over the field fewer
    per solve); elsewhere the flow's own."""
    return plan.poisson_plan.unnormalised() if plan.device == "gpu" else plan.poisson_plan


def _fortran(a):
    """``a`` Fortran-ordered, as the local solvers take it (a C-ordered CuPy field through the tiled
    copy, :func:`~daskflow.pencils.kernels.f_contiguous`)."""
    return f_contiguous(a) if is_cupy_array(a) else np.asfortranarray(a)


def wall_face(f, component: int, bc: ComponentBC, one_cell: bool | None = None):
    """Reset the stored upper boundary face of a bounded normal axis (D: value, N: copy of the face
    below; on an axis of one cell, ``one_cell`` (default: ``f`` has one plane), that is the lower
    wall face: its value if D, else left as it is)."""
    pair = bc.pairs[component]
    sl = [slice(None)] * 3
    sl[component] = slice(-1, None)
    if one_cell is None:
        one_cell = f.shape[component] == 1
    if pair[1] == "D":
        f[tuple(sl)] = bc.values[component][1]
    elif one_cell:
        if pair[0] == "D":
            f[tuple(sl)] = bc.values[component][0]
    else:
        below = [slice(None)] * 3
        below[component] = slice(-2, -1)
        f[tuple(sl)] = f[tuple(below)]
    return f


def pencil_region(dec, key: tuple[int, int]) -> tuple[slice, slice, slice]:
    """The region (slices of x, y, z) of x-pencil ``key`` of decomposition ``dec``."""
    return slice(None), dec.y[key[0]], dec.z[key[1]]


def holds_wall(bcs: FlowBoundaries, counts: tuple[int, int], key: tuple[int, int], component: int) -> bool:
    """Whether pencil ``key`` (of ``counts = (py, pz)``) holds the stored upper wall face of
    ``component``: its normal axis is bounded, and along y or z only the last pencil holds it."""
    if bcs.components[component].pairs[component] == "PP":
        return False
    return component == 0 or key[component - 1] == counts[component - 1] - 1


def keep_pencil_walls(bcs: FlowBoundaries, grid: Grid, counts: tuple[int, int], key: tuple[int, int], f,
                      component: int):
    """``f`` (pencil ``key``'s part of ``component``) with its stored upper wall face reset where
    the pencil holds it (:func:`wall_face`)."""
    if not holds_wall(bcs, counts, key, component):
        return f
    return wall_face(f, component, bcs.components[component], one_cell=grid.shape[component] == 1)


def _value(v):
    """A reduction's value as it travels: a host float, or a 0-d array kept where it lives."""
    return float(v) if isinstance(v, (int, float, np.number)) else v


def weighted_sum(u, dz):
    """``sum(u * dz)`` over a field with z widths ``dz``: a 0-d array where ``u`` lives (no wait for
    the device; ``float()`` it where the host needs the number)."""
    xp = array_module(u)
    if xp is not np and ops.FUSED_GPU and u.flags.c_contiguous:  # one kernel, one read of u
        from daskflow.ns import kernels

        return kernels.z_weighted_sum(u, device_constant(xp, dz))
    return (u * device_constant(xp, dz)[None, None, :]).sum()


def _combine(gathered: list, op: str):
    """Every participant's value combined with ``op`` in chunk order: host numbers on the host,
    device values on the device (a 0-d array, no wait)."""
    if isinstance(gathered[0], (int, float)):
        return REDUCTIONS[op](gathered)
    stacked = array_module(gathered[0]).stack(gathered)
    return stacked.max() if op == "max" else stacked.sum()


class FlowDomain:
    """The pencil of participant ``member`` (exactly one chunk per participant)."""

    def __init__(self, plan: FlowPlan, member: Member) -> None:
        self.plan = plan
        self.grid, self.bcs = plan.grid, plan.bcs
        self.poisson_plan = solving_plan(plan)
        dec = self.poisson_plan.decomposition
        self.dec, self.counts = dec, dec.pencils
        self.periodic_yz = (self.bcs.periodic(1), self.bcs.periodic(2))
        self.member = member
        mine = [k for k in dec.indices if member.owner(k) == member.me]
        if len(mine) != 1:
            raise ValueError(f"solver.pencils {dec.pencils} must give exactly one chunk per participant "
                             f"({len(member.workers)} participants)")
        self.key = mine[0]
        self.single = dec.pencils == (1, 1)  # the whole field here: halos and solves are local
        self.z = dec.z[self.key[1]]
        full = ops.Metrics.of(self.grid, self.bcs.periodic(2))
        self.metrics = ops.Metrics(full.dx, full.dy, full.dzf[self.z.start:self.z.stop + 2],
                                   full.dzc[self.z.start:self.z.stop + 1])
        self.ex = member.executor(self, "ns")
        self.ex_pressure = member.executor(self.poisson_plan, "p")
        self.transport = member.transport
        self._solves = 0
        self._helmholtz: dict = {}
        # the z-implicit factorisations and reduction coefficients per (component, alpha), kept with
        # the worker's plan: a new run with the same time step reuses them instead of building and
        # uploading them again in its first step
        self._z_solvers: dict = self.poisson_plan._device_cache.setdefault(("z-solvers", self.key), {})
        self._pressure = None  # the pressure solver (or its P-TDMA set-up), made on first use
        self._carried: float | None = None  # a flag riding on the next reduction (:meth:`carry`)
        self.carried_result: float | None = None

    @property
    def largest_pencil_points(self) -> int:
        """The points of the decomposition's largest pencil (the same number on every participant)."""
        dec = self.dec
        return dec.shape[0] * max(s.stop - s.start for s in dec.y) * max(s.stop - s.start for s in dec.z)

    def pipeline_pressure_transposes(self, slabs: int | None) -> None:
        """Run the pressure solve's transposes in ``slabs`` z slabs from now on (every participant
        alike, before its first solve), whatever ``daskflow.transpose-slabs`` says; ``None``: as it
        says."""
        self.ex_pressure.slab_count = slabs

    def finish(self) -> None:
        """Let every send of this task leave, and drop the Helmholtz solvers and the pressure set-up
        it holds (the z solvers' few columns stay with the plan): the domain and its executors
        reference each other, so without this they would wait for a full garbage collection, and
        the set-ups of several runs (P-TDMA coefficients of the size of the spectral field) piled up
        in a worker between collections."""
        self.transport.finish()
        self._helmholtz.clear()
        self._pressure = None

    # ---------------------------------------------------------------- halos

    def pad_many(self, fields: dict, bcs: dict, reduce: tuple[float, str] | None = None):
        """``fields[name]`` padded by one cell, ``bcs[name] = ((pairs, values), component)``.

        x is padded locally; the y and z ghosts, edges included, arrive in one exchange with the up
        to eight neighbours (:mod:`daskflow.pencils.halo`). Where a side is a wall the ghosts follow
        the boundary conditions, y before z, exactly as padding y and then z one after the other
        would give them. With ``reduce = (value, op)`` every participant also sends ``value`` to
        every other in the same round, and the result is ``(padded, op over the participants'
        values in chunk order)`` (``op``: ``sum`` or ``max``): a reduction without a round of its
        own. A host number is reduced on the host; a 0-d array stays on its device (the round
        then waits for nothing on the host)."""
        if self.single:
            padded = {name: ops.pad_with(a, *bcs[name][0], bcs[name][1]) for name, a in fields.items()}
            return padded if reduce is None else (padded, _value(reduce[0]))
        names = list(fields)
        values = None if reduce is None else _value(reduce[0])
        stack, gathered = halos.halo_round(self.ex, self.dec, self.key, self.periodic_yz, [fields[n] for n in names],
                                           [bcs[n] for n in names], values)
        padded = dict(zip(names, stack, strict=True))
        return padded if reduce is None else (padded, _combine(gathered, reduce[1]))

    def pad(self, a, bc, component=None):
        return self.pad_many({"f": a}, {"f": (ops.bc_of(bc), component)})["f"]

    def pad_velocity(self, fields, pressure=None):
        """The three velocity components padded, and the pressure after them when given: one halo
        exchange for all of them."""
        names, blocks, bcs = self._velocity_blocks(fields, pressure)
        out = self.pad_many(blocks, bcs)
        return [out[n] for n in names]

    def pad_and_reduce(self, fields, value: float, op: str, pressure=None):
        """:meth:`pad_velocity` and ``value`` reduced over all participants with ``op``, in one exchange."""
        names, blocks, bcs = self._velocity_blocks(fields, pressure)
        out, reduced = self.pad_many(blocks, bcs, reduce=(value, op))
        return [out[n] for n in names], reduced

    def _velocity_blocks(self, fields, pressure):
        names = ["u", "v", "w"]
        bcs = {n: (ops.bc_of(self.bcs.components[i]), i) for i, n in enumerate(names)}
        blocks = dict(zip(names, fields, strict=True))
        if pressure is not None:
            names.append("p")
            bcs["p"], blocks["p"] = (ops.bc_of(self.bcs.p), None), pressure
        return names, blocks, bcs

    # ---------------------------------------------------------------- reductions and walls

    def allreduce(self, value: float, op: str) -> float:
        """``value`` combined over all participants with ``op`` (``sum`` or ``max``): one small round."""
        return float(self.allreduce_many([value], [op])[0])

    def allreduce_array(self, values: np.ndarray) -> np.ndarray:
        """Element-wise sum of a host array (any shape) over all participants: one small round."""
        values = np.asarray(values, dtype=np.float64)
        return np.asarray(self.allreduce_many(values.ravel(), ["sum"] * values.size)).reshape(values.shape)

    def allreduce_many(self, values, combine) -> list[float]:
        """``values[i]`` combined over all participants with ``combine[i]`` (``sum`` or ``max``),
        every entry in the same small round (with a flag :meth:`carry` left for it)."""
        values, combine = np.asarray(values, dtype=np.float64).ravel(), list(combine)
        carried = self._carried is not None
        if carried:
            values = np.append(values, self._carried)
            combine.append("max")
        if not self.single:  # every participant's vector, stacked in chunk order, combined column-wise
            gathered = np.stack(self.ex.exchange({self.key: values}, self.dec.indices, lambda d: self.dec.indices,
                                                 lambda plan, s, block, d: block, None)[self.key])
            values = np.where(np.array(combine) == "max", gathered.max(axis=0), gathered.sum(axis=0))
        out = [float(v) for v in values]
        if carried:
            self._carried, self.carried_result = None, out.pop()
        return out

    def carry(self, flag: float) -> None:
        """Let ``flag`` ride on the next reduction round (combined with ``max``); its result is then
        :attr:`carried_result`. Every participant must carry at the same point."""
        self._carried, self.carried_result = float(flag), None

    def barrier(self) -> None:
        """Every participant has reached this point: one small round."""
        if not self.single:
            self.allreduce(0.0, "sum")

    @property
    def rank0(self) -> bool:
        return self.key == (0, 0)

    @property
    def region(self) -> tuple[slice, slice, slice]:
        return pencil_region(self.dec, self.key)

    @property
    def pencil_chunks(self) -> tuple:
        """Logical Dask-style chunk sizes of all pencils."""
        return pencil_chunks(self.grid.shape, self.dec.pencils)

    def keep_walls(self, f, component: int):
        return keep_pencil_walls(self.bcs, self.grid, self.counts, self.key, f, component)

    def dz(self):
        return self.grid.dzf[self.z]

    # ---------------------------------------------------------------- solves

    def _xp_name(self) -> str:
        return "cupy" if self.plan.device == "gpu" and cupy_or_none() is not None else "numpy"

    def _ptdma_setup(self, plan: SpectralPlan):
        """This chunk's P-TDMA coefficients and the reduced systems it solves (``()`` where the z
        solve is not P-TDMA). They depend on the plan alone, so they are kept with it: a worker's
        plan outlives the runs of a simulation, and recomputing them took about 0.25 s per run at
        pencils (2, 2) (512 x 1024 x 144 on four H100s)."""
        if ZSolve.of(plan.method, plan.decomposition.pz).kind != PTDMA:
            return ()
        member, xp_name = self.member, self._xp_name()
        # every column of this chunk's x group where the solve gathers the rows, else its slices
        reduced = tuple(k for k in spectral.reduced_factor_keys(plan) if member.owner(k) == member.me)
        cache_key = ("flow-ptdma", self.key, xp_name, reduced)
        setup = plan._device_cache.get(cache_key)
        if setup is None:
            coefficients = {self.key: spectral.ptdma_setup(plan, self.key, xp_name)}
            factors = {k: spectral.reduced_factor_at(plan, k, xp_name) for k in reduced}
            setup = plan._device_cache[cache_key] = (coefficients, factors)
        return setup

    def _spectral_solve(self, plan: SpectralPlan, executor, rhs, setup, rows: bool = False):
        head, tail = [stages.to_memory_order], [stages.to_logical_order]
        out = algorithms.solve(executor, plan, {self.key: rhs}, plan.method, setup, head=head, tail=tail, rows=rows)
        return _operator_order(out[self.key], plan.inverse_scale)

    def _local_solver(self, cls, bc: tuple, stagger: str, *args):
        p = self.poisson_plan
        return cls(self.grid, bc, stagger, *args, p.method, (1, 1), p.dtype, normalised=p.normalised)

    def solve_pressure(self, rhs):
        if self.single:
            if self._pressure is None:
                self._pressure = self._local_solver(PoissonSolver, self.bcs.p, "ccc")
            return _operator_order(self._pressure.solve(_fortran(rhs)), self._pressure.plan.inverse_scale)
        return self._distributed_pressure(rhs)

    def _distributed_pressure(self, rhs, rows: bool = False):
        """The pencils' pressure solve (with ``rows``: :meth:`solve_pressure_padded`'s)."""
        if self._pressure is None:  # computed on first use (not in checkpoint or diagnostic tasks)
            self._pressure = self._ptdma_setup(self.poisson_plan)
        return self._spectral_solve(self.poisson_plan, self.ex_pressure, rhs, self._pressure, rows)

    @property
    def pressure_rows_in_transpose(self) -> bool:
        """Whether the pressure solve's y->x transpose brings each chunk its y neighbours' rows, so
        that the solution is padded without a halo exchange: pencils ``(py, 1)`` with ``py > 1``
        and a periodic y (the z ghosts are then the walls' or this chunk's own wrap)."""
        return not self.single and self.counts[0] > 1 and self.counts[1] == 1 and ops.bc_of(self.bcs.p)[0][1] == "PP"

    def solve_pressure_padded(self, rhs):
        """Where :attr:`pressure_rows_in_transpose`: the pressure solve's solution ``phi`` and its
        padded copy ``Phi`` (``phi`` a view of it), padded from the rows the transpose brought (one
        exchange round fewer per substep than :meth:`solve_pressure` and :meth:`pad`, the same
        values)."""
        if not self.pressure_rows_in_transpose:
            raise ValueError("solve_pressure_padded: the pressure's rows come with its transpose only at pencils "
                             "(py, 1), py > 1, with a periodic y; use solve_pressure and pad")
        with_rows = self._distributed_pressure(rhs, rows=True)
        Phi = ops.pad_with(with_rows, *ops.bc_of(self.bcs.p))[:, 1:-1, :]  # y: the rows, not the wrap
        return Phi[1:-1, 1:-1, 1:-1], Phi

    def implicit_xyz(self, increment, component: int, alpha: float):
        if implicit.no_unknowns(self.bcs, self.grid, component, (0, 1, 2)):
            return array_module(increment).zeros_like(increment)
        bc = self.bcs.components[component]
        if self.single:
            solver = shared.cached(self._helmholtz, (component, alpha), lambda: self._local_solver(
                HelmholtzSolver, bc.pairs, bc.stagger(component), alpha))
            return _operator_order(solver.solve(_fortran(increment)), solver.plan.inverse_scale)

        def build():
            p = self.poisson_plan
            plan = SpectralPlan(self.grid, Boundaries.parse(bc.pairs, bc.stagger(component)), 1.0, -alpha,
                                p.method, p.pencils, p.dtype, p.normalised)
            self._solves += 1
            return plan, self.member.executor(plan, f"h{self._solves}"), self._ptdma_setup(plan)

        plan, executor, setup = shared.cached(self._helmholtz, (component, alpha), build)
        return self._spectral_solve(plan, executor, increment, setup)

    @property
    def shares_implicit_rounds(self) -> bool:
        """Whether the z-implicit solves of a substep's three components are worth handing over
        together (their exchanges share rounds); else each is solved as soon as it is ready, which
        keeps one increment alive at a time instead of three."""
        return self.counts[1] > 1

    def implicit_z(self, increments: dict, alpha: float, addends: dict | None = None) -> dict:
        """``(I - alpha L_z)`` solves along z of ``increments[component]`` across the ``pz`` chunks
        of this column group, all components in the same exchange rounds; in place, plus
        ``addends[component]`` where given (``u + du``, added in the solves' last pass where they
        can: :func:`daskflow.zsolve.shared.solve_distributed`).

        ``solver.z_solve: direct`` (default) works on the x-pencils as they are
        (:func:`daskflow.zsolve.shared.solve_distributed`: no full-field transpose). ``transpose``
        first transposes the fields x->y (y-pencils split in x) and back afterwards, the two-step
        path of the seed code, kept to measure what the direct path saves."""
        addends = addends or {}
        todo = {c: a for c, a in increments.items() if not implicit.no_unknowns(self.bcs, self.grid, c, (2,))}
        transpose = self.plan.z_solve == "transpose" and self.counts[0] > 1
        solved = {}
        if todo:
            if transpose:
                todo = {c: self._x_to_y(a) for c, a in todo.items()}
            operators = {c: implicit.scaled_z_operator(self.bcs, self.grid, c, alpha) for c in todo}
            solved = shared.solve_distributed(self.ex, self.dec, self.key, self._z_solvers, todo, operators,
                                              alpha, None if transpose else addends)
        if transpose:
            solved = {c: self._y_to_x(a) for c, a in solved.items()}
        for c in increments:  # added apart: nothing solved them (no unknowns), or in another layout
            if transpose or c not in solved:
                solved[c] = shared.add_addend(solved.get(c, increments[c]), addends.get(c))
        return solved

    def _x_to_y(self, a):
        """This x-pencil ``(nx, ny_p, nz_q)`` -> the y-pencil ``(nx_p, ny, nz_q)`` of the same key."""
        xs = split_slices(self.grid.shape[0], self.counts[0])
        xp = array_module(a)
        pieces = self.ex.exchange({self.key: a}, self.dec.indices, self._row_group,
                                  lambda plan, s, block, d: xp.asfortranarray(block[xs[d[0]]]), None,
                                  site="x-to-y")[self.key]
        return xp.asfortranarray(xp.concatenate(pieces, axis=1))

    def _y_to_x(self, a):
        xp = array_module(a)
        pieces = self.ex.exchange({self.key: a}, self.dec.indices, self._row_group,
                                  lambda plan, s, block, d: xp.asfortranarray(block[:, self.dec.y[d[0]]]),
                                  None, site="y-to-x")[self.key]
        return xp.asfortranarray(xp.concatenate(pieces, axis=0))

    def _row_group(self, d):
        """The chunks with the same z range as ``d`` (a transpose x<->y exchanges among them)."""
        return [(p, d[1]) for p in range(self.counts[0])]


def whole_domain(grid: Grid, bcs: FlowBoundaries, method: str = "ptdma", dtype: str = "float64",
                 device: str = "cpu") -> FlowDomain:
    """The whole field as one pencil of this process, for a bare :class:`~daskflow.ns.stepper.Stepper`
    (the physics lives in the stepper; the domain needs the grid, boundaries and solver choice)."""
    from daskflow.pencils.team import Team

    pressure = SpectralPlan(grid, Boundaries.parse(bcs.p, "ccc"), 0.0, 1.0, method, (1, 1), np.dtype(dtype))
    plan = FlowPlan(grid, bcs, 0.0, ForcingConfig("none", None), "none", None, pressure, device)
    team = Team(1)
    return FlowDomain(plan, Member(team.members[0], team.members, 1, team.transports[team.members[0]], "local"))
