"""Where the stepper's fields live: one whole array in this process, or one pencil per worker.

The RK3 stepper (:mod:`daskflow.ns.stepper`) is written once against a *domain* that supplies
the operations that depend on the layout: padding with halos (boundary conditions at the domain's
edges, neighbours' planes inside), the pressure and implicit solves, the wall faces it owns, and
global reductions.

* :class:`LocalDomain`: the whole field in one NumPy/CuPy array.
* :class:`ChunkDomain`: the pencil ``(p, q)`` of one worker inside a fused task; halos, reductions
  and the solves' transposes go through a :class:`~daskflow.pencils.direct.DirectExecutor`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import numpy as np

from daskflow import tridiagonal
from daskflow.backend import array_module
from daskflow.bc import Boundaries
from daskflow.grid import Grid
from daskflow.ns import operators as ops
from daskflow.ns.boundaries import ComponentBC, FlowBoundaries
from daskflow.pencils.layout import split_slices
from daskflow.poisson import HelmholtzSolver, PoissonSolver
from daskflow.stencils import Tridiagonal


def _fortran(a):
    return array_module(a).asfortranarray(a)


def scaled_z_operator(bcs: FlowBoundaries, grid: Grid, component: int, alpha: float) -> Tridiagonal:
    """``I - alpha L_z`` for one velocity component (its z BC and placement)."""
    c = bcs.components[component]
    op = Boundaries.parse(c.pairs, c.stagger(component)).laplacian_1d(2, grid.dzf)
    return Tridiagonal(-alpha * op.lower, 1.0 - alpha * op.diag, -alpha * op.upper, op.periodic)


def no_unknowns(bcs: FlowBoundaries, grid: Grid, component: int, axes) -> bool:
    """Whether velocity ``component`` has no unknowns along one of ``axes``: a bounded axis of one
    cell normal to it, whose only stored face is the wall (the implicit solves leave it to
    :func:`wall_face`)."""
    c = bcs.components[component]
    b = Boundaries.parse(c.pairs, c.stagger(component))
    return any(b.n_unknowns(axis, grid.shape[axis]) < 1 for axis in axes)


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


@dataclass
class LocalDomain:
    """The whole field in this process."""

    grid: Grid
    bcs: FlowBoundaries
    poisson_method: str = "ptdma"
    pencils: tuple[int, int] = (1, 1)
    dtype: str = "float64"

    def __post_init__(self) -> None:
        self.metrics = ops.Metrics.of(self.grid, self.bcs.periodic(2))
        self.poisson = PoissonSolver(self.grid, self.bcs.p, "ccc", self.poisson_method, self.pencils, self.dtype)
        self._helmholtz: dict = {}
        self._z_solvers: dict = {}

    def pad(self, a, bc, component=None):
        return ops.pad(a, bc, component)

    def pad_velocity(self, fields, pressure=None):
        """The three velocity components padded, and the pressure after them when given."""
        out = [self.pad(f, self.bcs.components[i], i) for i, f in enumerate(fields)]
        return out if pressure is None else [*out, self.pad(pressure, self.bcs.p)]

    def pad_and_reduce(self, fields, value: float, op: str, pressure=None):
        """:meth:`pad_velocity` and ``value`` reduced over the domain with ``op`` (here: itself)."""
        return self.pad_velocity(fields, pressure), value

    def solve_pressure(self, rhs):
        return self.poisson.solve(_fortran(rhs))

    def keep_walls(self, f, component: int):
        if self.bcs.components[component].pairs[component] == "PP":
            return f
        return wall_face(f, component, self.bcs.components[component])

    def implicit_z(self, increment, component: int, alpha: float):
        if no_unknowns(self.bcs, self.grid, component, (2,)):
            return increment
        op = scaled_z_operator(self.bcs, self.grid, component, alpha)
        return solve_z_locally(self._z_solvers, increment, op, (component, alpha))

    def implicit_xyz(self, increment, component: int, alpha: float):
        if no_unknowns(self.bcs, self.grid, component, (0, 1, 2)):
            return array_module(increment).zeros_like(increment)
        bc = self.bcs.components[component]
        solver = _cached(self._helmholtz, (component, alpha), lambda: HelmholtzSolver(
            self.grid, bc.pairs, bc.stagger(component), alpha, self.poisson_method, self.pencils, self.dtype))
        return solver.solve(_fortran(increment))

    def dz(self):
        return self.grid.dzf

    def allreduce(self, value: float, op: str) -> float:
        return float(value)

    def allreduce_array(self, values: np.ndarray) -> np.ndarray:
        return values

    def barrier(self) -> None:
        pass

    rank0 = True

    @property
    def region(self) -> tuple[slice, slice, slice]:
        return (slice(None), slice(0, self.grid.shape[1]), slice(0, self.grid.shape[2]))

    @property
    def pencil_chunks(self) -> tuple:
        return tuple((n,) for n in self.grid.shape)


def z_columns(increment, m: int):
    """The first ``m`` z planes of ``increment`` as C-contiguous columns ``(m, ny, nx)``: a view of a
    Fortran-ordered field, a copy of a C-ordered one."""
    xp = array_module(increment)
    return xp.ascontiguousarray(xp.moveaxis(increment[:, :, :m], 2, 0))


def store_columns(increment, cols, m: int):
    """Solved ``cols`` back into ``increment`` in place (nothing to copy when they are a view of it);
    returns ``increment``. The implicit solves overwrite their input: it is the stepper's own
    temporary, and a copy would add one field to the step's peak memory."""
    xp = array_module(increment)
    if not xp.may_share_memory(cols, increment):
        increment[:, :, :m] = xp.moveaxis(cols, 0, 2)
    return increment


def solve_z_locally(cache: dict, increment, op: Tridiagonal, key: tuple):
    """``op`` solved along z for every column of ``increment`` (all of z here), in place. The
    matrix is the same for every column: factorised once per ``key`` (component, alpha) on the host
    into 1-D arrays, moved to the device once, reused while ``dt`` stays the same."""
    m = op.diag.size
    cols = z_columns(increment, m)

    def build():
        lower, diag, upper = (np.asarray(c, dtype=np.float64)[:, None] for c in op[:3])
        return tridiagonal.FactoredTridiagonal.factor(lower, diag, upper, op.periodic).to(array_module(cols))

    _cached(cache, key, build).solve(cols, overwrite=True)
    return store_columns(increment, cols, m)


def _fill_halos(out, name: str, bc, received: dict) -> None:
    """The y and z ghosts of the padded ``out`` (x ghosts set) from ``received`` pieces or, beyond
    walls, from the boundary conditions: y first (on the interior z planes), then z over whole
    planes, so edges see the y ghosts exactly as padding y and then z one after the other would.
    A wall side takes one operation for its whole plane, edges included."""
    (pairs, values), component = bc
    plane = {-1: 0, 1: out.shape[2] - 1}
    row = {-1: 0, 1: out.shape[1] - 1}
    rows = out[:, :, 1:-1]
    for oy in (-1, 1):
        face = received.get((name, oy, 0))
        if face is None:
            ops.fill_ghosts(rows, 1, pairs[1], values[1], component == 1, sides=((oy + 1) // 2,))
        else:
            rows[:, row[oy]:row[oy] + 1] = face
    for oz in (-1, 1):
        face = received.get((name, 0, oz))
        k = plane[oz]
        if face is None:
            ops.fill_ghosts(out, 2, pairs[2], values[2], component == 2, sides=((oz + 1) // 2,))
            continue
        out[:, 1:-1, k:k + 1] = face
        for oy in (-1, 1):
            edge = received.get((name, oy, oz))
            if edge is None:  # a y wall: the neighbour's own y ghost of its face
                ops.fill_ghosts(out[:, :, k:k + 1], 1, pairs[1], values[1], component == 1, sides=((oy + 1) // 2,))
            else:
                out[:, row[oy]:row[oy] + 1, k:k + 1] = edge


def _cached(cache: dict, key: tuple, build, keep: int = 3):
    """``cache[key]``, built on a miss; keeps the ``keep`` newest entries per ``key[0]`` (one per RK
    substep: with a fixed ``dt`` the three implicit solvers of a step are reused every step)."""
    if key not in cache:
        same = [k for k in cache if k[0] == key[0]]
        for old in same[: max(0, len(same) - keep + 1)]:
            del cache[old]
        cache[key] = build()
    return cache[key]


def weighted_sum(u, dz) -> float:
    """``sum(u * dz)`` over a field with z widths ``dz`` (a host float)."""
    xp = array_module(u)
    return float((u * xp.asarray(dz)[None, None, :]).sum())


# ---------------------------------------------------------------------------- one pencil per worker


REDUCTIONS = {"sum": sum, "max": max}  # how workers' scalars combine (in chunk order)
OFFSETS = tuple((oy, oz) for oy in (-1, 0, 1) for oz in (-1, 0, 1) if (oy, oz) != (0, 0))


def _neighbour(key, offset, counts, periodic) -> tuple | None:
    """The chunk at ``offset = (oy, oz)`` from ``key`` (wrapped on periodic axes), or ``None``
    beyond a wall."""
    out = []
    for index, step, n, wrap in zip(key, offset, counts, periodic, strict=True):
        j = index + step
        if wrap:
            j %= n
        if not 0 <= j < n:
            return None
        out.append(j)
    return tuple(out)


def _halo_sources(domain, key) -> list:
    """Every chunk that sends ``key`` halo planes: its neighbours along y and z and diagonally."""
    out = []
    for offset in OFFSETS:
        other = _neighbour(key, offset, domain.counts, domain.periodic_yz)
        if other is not None and other not in out:
            out.append(other)
    return out


def _cut_halos(domain, src, blocks, dst) -> dict:
    """The planes (faces) and lines (edges) of ``src``'s x-padded fields that ``dst`` needs, keyed
    ``(name, oy, oz)`` by where ``src`` sits relative to ``dst``."""
    pieces = {}
    for oy, oz in OFFSETS:
        if _neighbour(dst, (oy, oz), domain.counts, domain.periodic_yz) != src:
            continue
        for name, a in blocks.items():
            ny, nz = a.shape[1], a.shape[2]
            ys = slice(ny - 1, ny) if oy < 0 else slice(0, 1) if oy > 0 else slice(None)
            zs = slice(nz - 1, nz) if oz < 0 else slice(0, 1) if oz > 0 else slice(None)
            pieces[(name, oy, oz)] = array_module(a).ascontiguousarray(a[:, ys, zs])
    return pieces


def _cut_halos_and_value(domain, src, payload, dst) -> tuple[dict, float]:
    """:func:`_cut_halos` (empty for a chunk that is no neighbour) and the scalar riding along."""
    blocks, value = payload
    return _cut_halos(domain, src, blocks, dst), value


class ChunkDomain:
    """The pencil ``(p, q)`` owned by this worker, inside a fused task (one chunk per worker)."""

    def __init__(self, ns_plan, worker, run_id: str, workers: list[str], transport=None) -> None:
        from daskflow.pencils.direct import DirectExecutor
        from daskflow.pencils.graph import chunk_owner

        self.plan = ns_plan
        self.grid, self.bcs = ns_plan.grid, ns_plan.bcs
        self.poisson_plan = ns_plan.poisson_plan
        dec = self.poisson_plan.decomposition
        self.dec, self.counts = dec, dec.pencils
        self.periodic_yz = (self.bcs.periodic(1), self.bcs.periodic(2))
        self.owner = lambda k: chunk_owner(k, workers, dec.pz)  # noqa: E731
        mine = [k for k in dec.indices if self.owner(k) == worker.address]
        if len(mine) != 1:
            raise ValueError(f"solver.pencils {dec.pencils} must give exactly one chunk per worker "
                             f"({len(workers)} workers)")
        self.key = mine[0]
        p, q = self.key
        self.z = dec.z[q]
        full = ops.Metrics.of(self.grid, self.bcs.periodic(2))
        self.metrics = ops.Metrics(full.dx, full.dy, full.dzf[self.z.start:self.z.stop + 2],
                                   full.dzc[self.z.start:self.z.stop + 1])
        self.worker, self.run_id = worker, run_id
        # one transport for every exchange of the run (default: the mailbox)
        self.ex = DirectExecutor(self, worker, f"{run_id}/ns", self.owner, transport=transport)
        self.transport = self.ex.transport
        self.ex_pressure = DirectExecutor(self.poisson_plan, worker, f"{run_id}/p", self.owner,
                                          transport=self.transport)
        self._solves = 0
        self._helmholtz: dict = {}
        self._z_solvers: dict = {}
        self._pressure_setup_cache = None

    def finish(self) -> None:
        """Let every send of this task leave before the task returns, and drop the solver set-ups:
        the domain and its executors reference each other, so without this they would wait for a
        full garbage collection, and the set-ups of several runs (P-TDMA coefficients of the size of
        the spectral field) piled up in a worker between collections."""
        self.transport.finish()
        self._helmholtz.clear()
        self._z_solvers.clear()
        self._pressure_setup_cache = None

    # ---------------------------------------------------------------- halos

    def pad_many(self, fields: dict, bcs: dict, reduce: tuple[float, str] | None = None):
        """``fields[name]`` padded by one cell, ``bcs[name] = ((pairs, values), component)``.

        x is padded locally; the y and z ghosts, edges included, arrive in one exchange with the up
        to eight neighbours (faces from the y and z neighbours, edge lines from the diagonal ones).
        Where a side is a wall the ghosts follow the boundary conditions, y before z, exactly as
        padding y and then z one after the other would give them. With ``reduce = (value, op)``
        every worker also sends ``value`` to every other in the same round, and the result is
        ``(padded, op over the workers' values in chunk order)`` (``op``: ``sum`` or ``max``): a
        reduction without a round of its own."""
        padded, blocks = {}, {}
        for name, a in fields.items():
            (pairs, values), component = bcs[name]
            out = ops.padded_copy(a)
            block = out[:, 1:-1, 1:-1]  # the x-padded field: what the neighbours get planes of
            ops.fill_ghosts(block, 0, pairs[0], values[0], component == 0)
            padded[name], blocks[name] = out, block
        received, scalars = {}, []
        if reduce is None:
            pieces = self.ex.exchange({self.key: blocks}, self.dec.indices, partial(_halo_sources, self),
                                      _cut_halos, None)[self.key]
        else:
            pieces = self.ex.exchange({self.key: (blocks, float(reduce[0]))}, self.dec.indices,
                                      lambda d: self.dec.indices, _cut_halos_and_value, None)[self.key]
        for piece in pieces:
            if reduce is not None:
                piece, value = piece
                scalars.append(value)
            received.update(piece)
        for name, out in padded.items():
            _fill_halos(out, name, bcs[name], received)
        return padded if reduce is None else (padded, REDUCTIONS[reduce[1]](scalars))

    def pad(self, a, bc, component=None):
        return self.pad_many({"f": a}, {"f": (ops.bc_of(bc), component)})["f"]

    def pad_velocity(self, fields, pressure=None):
        """The three velocity components padded, and the pressure after them when given: one halo
        exchange for all of them."""
        names, blocks, bcs = self._velocity_blocks(fields, pressure)
        out = self.pad_many(blocks, bcs)
        return [out[n] for n in names]

    def pad_and_reduce(self, fields, value: float, op: str, pressure=None):
        """:meth:`pad_velocity` and ``value`` reduced over all workers with ``op``, in one exchange."""
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
        combine = REDUCTIONS[op]
        out = self.ex.exchange({self.key: float(value)}, self.dec.indices, lambda d: self.dec.indices,
                               lambda plan, s, block, d: block, None)[self.key]
        return float(combine(out))

    def allreduce_array(self, values: np.ndarray) -> np.ndarray:
        """Element-wise sum of a host array over all workers."""
        out = self.ex.exchange({self.key: values}, self.dec.indices, lambda d: self.dec.indices,
                               lambda plan, s, block, d: block, None)[self.key]
        return np.sum(out, axis=0)

    def barrier(self) -> None:
        self.allreduce(0.0, "sum")

    @property
    def rank0(self) -> bool:
        return self.key == (0, 0)

    @property
    def region(self) -> tuple[slice, slice, slice]:
        return (slice(None), self.dec.y[self.key[0]], self.dec.z[self.key[1]])

    @property
    def pencil_chunks(self) -> tuple:
        """Logical Dask-style chunk sizes of all pencils."""
        from daskflow.pencils.layout import pencil_chunks

        return pencil_chunks(self.grid.shape, self.dec.pencils)

    def keep_walls(self, f, component: int):
        bc = self.bcs.components[component]
        if bc.pairs[component] == "PP":
            return f
        if component > 0 and self.key[component - 1] != self.counts[component - 1] - 1:
            return f  # the upper wall face belongs to the last chunk along that axis
        return wall_face(f, component, bc, one_cell=self.grid.shape[component] == 1)

    def dz(self):
        return self.grid.dzf[self.z]

    # ---------------------------------------------------------------- solves

    def _ptdma_setup(self, plan):
        from daskflow.backend import cupy_or_none
        from daskflow.poisson import stages

        xp_name = "cupy" if self.plan.device == "gpu" and cupy_or_none() is not None else "numpy"
        if plan.method != "ptdma" or plan.decomposition.pz == 1:
            return ()
        coefficients = {self.key: stages.ptdma_setup(plan, self.key, xp_name)}
        factors = {k: stages.reduced_factor(plan, k, xp_name)
                   for k in plan.decomposition.reduced_indices() if self.owner(k) == self.worker.address}
        return coefficients, factors

    def _spectral_solve(self, plan, executor, rhs, setup):
        from daskflow.poisson import algorithms, stages

        head, tail = [stages.to_memory_order], [stages.to_logical_order]
        if setup:
            out = algorithms.ptdma(executor, plan, {self.key: rhs}, *setup, head=head, tail=tail)
        else:
            out = algorithms.ftm(executor, plan, {self.key: rhs}, head=head, tail=tail)
        # the solve's logical view is Fortran-ordered: a copy only where the operators want C (CuPy)
        return array_module(rhs).asarray(out[self.key], order=ops.memory_order(array_module(rhs)))

    def solve_pressure(self, rhs):
        if self._pressure_setup_cache is None:  # computed on first use (not in checkpoint/diagnostic tasks)
            self._pressure_setup_cache = self._ptdma_setup(self.poisson_plan)
        return self._spectral_solve(self.poisson_plan, self.ex_pressure, rhs, self._pressure_setup_cache)

    def implicit_xyz(self, increment, component: int, alpha: float):
        from daskflow.pencils.direct import DirectExecutor
        from daskflow.poisson.plan import SpectralPlan

        if no_unknowns(self.bcs, self.grid, component, (0, 1, 2)):
            return array_module(increment).zeros_like(increment)
        bc = self.bcs.components[component]

        def build():
            plan = SpectralPlan(self.grid, Boundaries.parse(bc.pairs, bc.stagger(component)), 1.0, -alpha,
                                self.poisson_plan.method, self.poisson_plan.pencils, self.poisson_plan.dtype)
            self._solves += 1
            executor = DirectExecutor(plan, self.worker, f"{self.run_id}/h{self._solves}", self.owner,
                                      transport=self.transport)
            return plan, executor, self._ptdma_setup(plan)

        plan, executor, setup = _cached(self._helmholtz, (component, alpha), build)
        return self._spectral_solve(plan, executor, increment, setup)

    def implicit_z(self, increment, component: int, alpha: float):
        """``(I - alpha L_z)`` solve along z across the ``pz`` chunks of this column group.

        ``solver.z_solve: direct`` (default) works on the x-pencils as they are: local cyclic
        reduction, the boundary rows exchanged inside the column group, reduced solve,
        reconstruction (no full-field transpose). ``transpose`` first transposes the field x->y
        (y-pencils split in x) and back afterwards, the two-step path of the seed code, kept to
        measure what the direct path saves."""
        if no_unknowns(self.bcs, self.grid, component, (2,)):
            return increment
        if self.plan.z_solve == "transpose" and self.counts[0] > 1:
            return self._y_to_x(self._z_solve(self._x_to_y(increment), component, alpha))
        return self._z_solve(increment, component, alpha)

    def _x_to_y(self, a):
        """This x-pencil ``(nx, ny_p, nz_q)`` -> the y-pencil ``(nx_p, ny, nz_q)`` of the same key."""
        xs = split_slices(self.grid.shape[0], self.counts[0])
        xp = array_module(a)
        pieces = self.ex.exchange({self.key: a}, self.dec.indices, self._row_group,
                                  lambda plan, s, block, d: xp.asfortranarray(block[xs[d[0]]]), None)[self.key]
        return xp.asfortranarray(xp.concatenate(pieces, axis=1))

    def _y_to_x(self, a):
        xp = array_module(a)
        pieces = self.ex.exchange({self.key: a}, self.dec.indices, self._row_group,
                                  lambda plan, s, block, d: xp.asfortranarray(block[:, self.dec.y[d[0]]]),
                                  None)[self.key]
        return xp.asfortranarray(xp.concatenate(pieces, axis=0))

    def _row_group(self, d):
        """The chunks with the same z range as ``d`` (a transpose x<->y exchanges among them)."""
        return [(p, d[1]) for p in range(self.counts[0])]

    def _column_group(self, d):
        """The chunks with the same y range as ``d`` (they share z columns)."""
        return [(d[0], q) for q in range(self.counts[1])]

    def _z_solve(self, increment, component: int, alpha: float):
        """Distributed z solve of a chunk whose z range is ``dec.z[q]``: local cyclic reduction,
        reduced system, reconstruction. With ``pz <= 2`` every chunk of the column group gathers
        all boundary rows and solves the whole reduced system (one exchange); with ``pz > 2`` the
        rows go to the chunk that owns their slice of columns, which solves and returns them (two
        exchanges, but every worker moves ``2/pz`` of the all-gather's bytes: the paper's x->z
        transpose of the reduced rows)."""
        op = scaled_z_operator(self.bcs, self.grid, component, alpha)
        xp = array_module(increment)
        q, pz = self.key[1], self.counts[1]
        m_global = op.diag.size
        rows = [slice(self.dec.z[i].start, min(self.dec.z[i].stop, m_global)) for i in range(pz)]
        m = rows[q].stop - rows[q].start
        if pz == 1:
            return solve_z_locally(self._z_solvers, increment, op, (component, alpha))
        cols = z_columns(increment, m)
        # A chunk may hold no unknown at all (the top wall face of w in a one-point chunk): it sends
        # an empty piece and has nothing to reconstruct.
        ncols = cols.shape[1] * cols.shape[2]

        def build():  # coefficients change with alpha only: reused while dt stays the same
            # The matrix is the same in every column: its reduction coefficients are one column,
            # (m, 1), set up on the host in O(m) and moved once; with a CFL-adaptive dt this
            # runs at every solve, so it must not cost field-sized device work or memory.
            shift = np.zeros(1)
            chunks = {i: tridiagonal.precompute(op.lower[r], op.diag[r], op.upper[r], shift)
                      for i, r in enumerate(rows) if r.stop > r.start}
            system = tridiagonal.reduced_system(list(chunks.values()))
            reduced = tridiagonal.FactoredTridiagonal.factor(*system, op.periodic).to(xp)
            # keep only this chunk's coefficients: the others served their boundary rows
            own = chunks.get(q)
            return (None if own is None else tridiagonal.ReducedChunk(*(xp.asarray(f) for f in own))), reduced

        own, reduced = _cached(self._z_solvers, (component, alpha), build)
        counts = [tridiagonal.boundary_rows(r.stop - r.start) if r.stop > r.start else 0 for r in rows]
        boundary = tridiagonal.reduce(cols, own).reshape(-1, ncols) if m else xp.zeros((0, ncols), cols.dtype)
        if pz <= 2:
            pieces = self.ex.exchange({self.key: boundary}, self.dec.indices, self._column_group,
                                      lambda plan, s, block, d: block, None)[self.key]
            x = reduced.solve(xp.concatenate(pieces))
            mine = x[sum(counts[:q]):sum(counts[:q + 1])]
        else:
            slices = split_slices(ncols, pz)  # the columns whose reduced systems each chunk solves
            pieces = self.ex.exchange({self.key: boundary}, self.dec.indices, self._column_group,
                                      lambda plan, s, block, d: xp.ascontiguousarray(block[:, slices[d[1]]]),
                                      None)[self.key]
            rhs = xp.concatenate(pieces)
            x = reduced.solve(rhs) if rhs.shape[1] else rhs
            offsets = np.cumsum([0, *counts])
            back = self.ex.exchange({self.key: x}, self.dec.indices, self._column_group,
                                    lambda plan, s, block, d: block[offsets[d[1]]:offsets[d[1] + 1]].copy(),
                                    None)[self.key]
            mine = xp.concatenate(back, axis=1)
        if m:
            tridiagonal.reconstruct(cols, mine[0].reshape(cols.shape[1:]), mine[-1].reshape(cols.shape[1:]), own)
        return store_columns(increment, cols, m)
