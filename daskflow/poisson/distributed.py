"""Poisson/Helmholtz solves of chunked Dask arrays: the pencil algorithms as one task graph.

``solve_dask(solver, b)`` takes a Dask array of logical shape ``(nx, ny, nz)`` (NumPy or CuPy
chunks), brings it to the solver's home layout (x-pencils: one chunk along x, ``pencils = (py,
pz)`` chunks over y and z; a differently chunked input is rechunked first with Dask's task-based
rechunk, and those tasks count in the total), and returns a Dask array with the home chunks.

With a ``distributed`` client the graph is submitted at once, non-blocking (``client.persist``),
with every task pinned to the worker that owns its chunk; the plan and the P-TDMA coefficients
are computed once per solver and client and stay on the workers. A fused solve is a collective
run: every call submits one with keys of its own, even for the same input. Without a client the result is
a lazy Dask array for the local scheduler.
"""

from __future__ import annotations

import contextlib
import operator
import time
import uuid
from dataclasses import dataclass, field

import dask
import dask.array as da
from dask.base import tokenize
from dask.highlevelgraph import HighLevelGraph

from daskflow.backend import is_cupy_array
from daskflow.pencils import control
from daskflow.pencils.direct import abort_here, ensure_mailboxes, ready_marker, run_on_worker
from daskflow.pencils.graph import DaskExecutor, live_workers, placement_annotations, scatter_per_worker
from daskflow.pencils.layout import chunk_owner, pencil_chunks
from daskflow.pencils.transport import CommSpec, choose_comm, comm_failed, make_comm, took_turn, wait_turn
from daskflow.poisson import algorithms, stages
from daskflow.zsolve import spectral
from daskflow.zsolve.choice import PTDMA, ZSolve


def home_chunks(solver) -> tuple[tuple[int, ...], ...]:
    """Logical Dask chunks of the solver's x-pencils."""
    return pencil_chunks(solver.grid.shape, solver.pencils)


def current_client():
    """The active ``distributed`` client, or ``None`` (local scheduler)."""
    try:
        from distributed import get_client

        return get_client()
    except (ImportError, ValueError):
        return None


@dataclass
class ClusterState:
    """What a solver keeps on one cluster: the plan (a copy per worker), coefficient futures, the
    worker list, and the transport of the fused exchanges among the workers that own chunks."""

    workers: list[str]
    plans: dict
    comm: str = "mailbox"
    participants: tuple[str, ...] = ()
    device: str = "cpu"
    coefficients: dict = field(default_factory=dict)
    factors: dict = field(default_factory=dict)
    # worker -> an output block of the last fused solve, while it runs: a finished one is let go at
    # once (holding it kept the solution alive on the workers after its caller dropped it)
    previous: dict = field(default_factory=dict)
    failed: bool = False  # a fused solve since the communicator was made failed or was cancelled
    spec: CommSpec | None = None

    def healthy(self) -> bool:
        """Whether no fused solve since the communicator was made failed, was cancelled or lost a
        worker (the running ones included)."""
        running = list(self.previous.values())  # a copy: callbacks remove entries meanwhile
        return not self.failed and not any(f.status in ("error", "cancelled", "lost") for f in running)

    def communicator(self, client) -> CommSpec:
        """The communicator of the next solve: asked for again (a check on every worker, a new one
        where it was aborted) only at the first solve and after a solve that failed or was cancelled,
        not on every solve."""
        healthy = self.healthy()
        if not healthy:
            comm_failed(client)  # make_comm checks the communicator on every worker again
        if self.spec is None or not healthy:
            self.spec = make_comm(client, self.participants, self.comm, self.device)
            self.failed = False
        return self.spec

    def pending(self, client) -> dict:
        """Per worker, the output of the fused work submitted there last (by any solver or
        simulation) while it is still running: the next solve's task there waits for it
        (:func:`~daskflow.pencils.transport.wait_turn`)."""
        return wait_turn(client, self.participants)

    def remember(self, client, out: da.Array, pz: int, run_id: str) -> None:
        """Watch one output block per worker of the solve ``run_id`` just submitted until it is done:
        a failure aborts the solve on every participant (a worker whose input failed never starts
        its task, and its peers would wait for its pieces) and has the communicator checked before
        the next solve. On a shared communicator the next fused work on a worker waits for this."""
        from distributed import futures_of

        submitted = {chunk_owner(tuple(f.key[-2:]), self.workers, pz): f for f in futures_of(out)}
        self.previous = dict(submitted)
        if self.comm != "mailbox":
            took_turn(client, submitted)
        for worker, future in submitted.items():
            future.add_done_callback(lambda done, worker=worker: self._done(client, run_id, worker, done))

    def _done(self, client, run_id: str, worker: str, future) -> None:
        """A watched output is done (called in the client's callback thread): on a failure abort the
        solve everywhere; let it go."""
        if future.status in ("error", "cancelled"):
            self.failed = True
            with contextlib.suppress(Exception):  # a closing client: its workers go with it
                client.run(abort_here, run_id, workers=list(self.participants))
        previous = self.previous  # remember() replaces the dict meanwhile: check and pop the same one
        if previous.get(worker) is future:
            previous.pop(worker, None)


#: seconds a solver reuses the worker list it last asked the scheduler for (:func:`cluster_state`)
WORKERS_TRUSTED = 1.0


def cluster_state(solver, client, xp_name: str) -> ClusterState:
    """Scatter the plan and compute the P-TDMA set-up on the workers, once per solver and client.

    Asking the scheduler for its workers is two round trips, which chained solves paid every time
    (about 15 ms per solve on a 2-core host, more than a small solve itself); the list is asked
    again only after :data:`WORKERS_TRUSTED` seconds or when the last solve failed."""
    cache = solver.__dict__.setdefault("_cluster_states", {})
    recent = solver.__dict__.setdefault("_recent_cluster_states", {})  # (client, xp) -> (when, state)
    when, state = recent.get((client.id, xp_name), (None, None))
    if state is not None and time.monotonic() - when < WORKERS_TRUSTED and state.healthy():
        return state
    workers = live_workers(client)  # chunks are dealt round-robin: any number of workers
    cache_key = (client.id, xp_name, tuple(workers))
    if cache_key in cache:
        recent[(client.id, xp_name)] = (time.monotonic(), cache[cache_key])
        return cache[cache_key]
    plans = scatter_per_worker(client, solver.plan, workers)
    ensure_mailboxes(client)
    control.shorten(client)
    dec = solver.plan.decomposition
    owners = {chunk_owner(k, workers, dec.pz) for k in dec.indices}
    participants = tuple(w for w in workers if w in owners)
    device = "gpu" if xp_name == "cupy" else "cpu"
    comm = "mailbox"
    if solver.granularity == "fused":
        comm = choose_comm(client, participants, solver.comm, device, setting=f"{type(solver).__name__} comm")
    state = ClusterState(workers, plans, comm, participants, device)
    if ZSolve.of(solver.method, dec.pz).kind == PTDMA:
        factor_keys = spectral.reduced_factor_keys(solver.plan)
        for table, setup, keys in ((state.coefficients, spectral.ptdma_setup, dec.indices),
                                   (state.factors, spectral.reduced_factor_at, factor_keys)):
            for k in keys:
                owner = chunk_owner(k, workers, dec.pz)
                table[k] = client.submit(setup, plans[owner], k, xp_name, workers=[owner],
                                         allow_other_workers=False, pure=False)
    cache[cache_key] = state
    recent[(client.id, xp_name)] = (time.monotonic(), state)
    return state


@dataclass
class SolveGraph:
    """A solve as tasks: ``tasks`` (the per-solve graph), ``setup`` (plan and P-TDMA set-up tasks
    when no client holds them), the output layer ``name``, and task placement on ``workers``."""

    tasks: dict
    setup: dict
    name: str
    placement: dict
    workers: list[str]
    state: ClusterState | None = None  # fused solves: where the solve is watched
    run_id: str = ""  # fused solves: the run id of their exchanges


def build_graph(solver, b: da.Array, client=None) -> SolveGraph:
    """The solve of ``b`` (already in home chunks) as a graph."""
    plan = solver.plan
    dec = plan.decomposition
    xp_name = "cupy" if is_cupy_array(b._meta) else "numpy"
    token = tokenize(b.name, solver.token)
    setup: dict = {}
    if client is not None:
        state = cluster_state(solver, client, xp_name)
        plan_ref, workers = state.plans, state.workers
        coefficients, factors = state.coefficients, state.factors
        owner = lambda k: chunk_owner(k, workers, dec.pz)  # noqa: E731
    else:
        plan_ref, workers, owner = ("daskflow-plan-" + token,), [], None
        setup[plan_ref] = plan
        coefficients = {k: ("daskflow-coefficients-" + token, *k) for k in dec.indices}
        factors = {k: ("daskflow-factors-" + token, *k) for k in spectral.reduced_factor_keys(plan)}
        if ZSolve.of(solver.method, dec.pz).kind == PTDMA:
            setup.update({v: (spectral.ptdma_setup, plan_ref, k, xp_name) for k, v in coefficients.items()})
            setup.update({v: (spectral.reduced_factor_at, plan_ref, k, xp_name) for k, v in factors.items()})
    blocks = {(p, q): (b.name, 0, p, q) for p, q in dec.indices}
    head, tail = [stages.to_memory_order], [stages.to_logical_order]
    algorithm, uses_setup = algorithms.for_method(solver.method, dec.pz, head, tail)
    extra = (coefficients, factors) if uses_setup else ()
    if solver.granularity == "fused" and client is not None:
        # keys of their own at every submission: a fused solve is a collective run, not a pure
        # function of its input; the same solve submitted again (after a failure, or while the
        # scheduler still holds some keys of the last one) must not meet the tasks of an earlier
        # run, whose peers are gone
        token = tokenize(token, uuid.uuid4().hex)
        g = _fused_graph(algorithm, plan_ref, token, workers, dec, blocks, extra, state.communicator(client),
                         state.pending(client), _inputs_may_fail(b), f"{solver.token}-{b.dtype}-{'-'.join(workers)}")
        g.state = state
        return g
    ex = DaskExecutor(plan_ref, token, owner)
    out = algorithm(ex, plan, blocks, *extra)
    return SolveGraph(ex.graph, setup, out[(0, 0)][0], ex.placement, workers)


def solution_layer(token: str) -> str:
    """The name of a fused solve's output layer (its keys are ``(name, 0, p, q)``)."""
    return f"daskflow-solution-{token}"


def _fused_graph(algorithm, plan_ref, token: str, workers: list[str], dec, blocks: dict, setup: tuple,
                 comm: CommSpec, after: dict, markers: bool, scope: str) -> SolveGraph:
    """One task per worker running the whole algorithm with direct exchanges.

    Every dependency between tasks costs a round trip to the scheduler, which in chained solves
    adds up to more than a small solve itself, so the path from one solve to the next is one task
    per worker: a worker that owns one chunk (the home layout) returns that chunk's output block
    as the solution's own key; one that owns several returns them all and one ``getitem`` per
    chunk exposes them. A fused task depends on its own inputs and on ``after`` there (the fused
    work submitted to that worker before). With ``markers`` (inputs that may still fail) it also
    waits for a tiny marker of each of the other workers' inputs, so that a failed input fails
    every task with its own error; without, a task whose input failed never starts and the client
    aborts the others (:meth:`ClusterState.remember`). ``scope`` names the exchanges' layouts (one
    per solver and worker set: its solves' pieces are described to the receivers once)."""
    fused_name, name = f"daskflow-fused-{token}", solution_layer(token)
    run_id = token  # the exchanges' run (an aborted run stays aborted on the workers: one per submission)
    owner = {k: chunk_owner(k, workers, dec.pz) for d in (blocks, *setup) for k in d}
    tasks, placement, ready_of = {}, {}, {}
    if markers and len({owner[k] for k in blocks}) > 1:
        for k, block in blocks.items():
            ready_of[k] = (f"daskflow-ready-{token}", *k)
            tasks[ready_of[k]] = (ready_marker, block)
            placement[ready_of[k]] = owner[k]
    for i, worker in enumerate(workers):
        inputs = [([list(k) for k in d if owner[k] == worker], [v for k, v in d.items() if owner[k] == worker])
                  for d in (blocks, *setup)]
        mine = inputs[0][0]
        if not mine:
            continue  # a worker without chunks takes no part
        ready = [marker for k, marker in ready_of.items() if owner[k] != worker]
        ready += [after[worker]] if worker in after else []
        args = (algorithm, plan_ref[worker], run_id, workers, dec.pz, inputs, ready, comm, scope)
        if len(mine) == 1:
            tasks[(name, 0, *mine[0])] = (_run_for_one_chunk, *args)
            placement[(name, 0, *mine[0])] = worker
            continue
        tasks[(fused_name, i)] = (run_on_worker, *args)
        placement[(fused_name, i)] = worker
        for k in mine:
            tasks[(name, 0, *k)] = (operator.getitem, (fused_name, i), tuple(k))
            placement[(name, 0, *k)] = worker
    return SolveGraph(tasks, {}, name, placement, workers, run_id=run_id)


def _inputs_may_fail(b: da.Array) -> bool:
    """Whether a chunk of ``b`` may still fail with an error of its own: not when ``b`` is the
    output of a fused solve (its failures abort the solves that follow it) or is persisted and
    computed."""
    from distributed import futures_of

    if b.name.startswith(solution_layer("")):
        return False
    futures = futures_of(b)
    return len(futures) != b.npartitions or any(f.status != "finished" for f in futures)


def _run_for_one_chunk(*args) -> object:
    """:func:`~daskflow.pencils.direct.run_on_worker` for a worker that owns one chunk: that
    chunk's output block itself."""
    [block] = run_on_worker(*args).values()
    return block


def solve_dask(solver, b: da.Array) -> da.Array:
    """See the module docstring."""
    chunks = home_chunks(solver)
    if b.chunks != chunks:
        b = b.rechunk(chunks, method="tasks")
    client = current_client()
    g = build_graph(solver, b, client)
    hlg = HighLevelGraph.from_collections(g.name, {**g.setup, **g.tasks}, dependencies=[b])
    out = da.Array(hlg, g.name, chunks, dtype=solver.dtype, meta=b._meta)
    if client is None:
        return out
    with dask.annotate(**placement_annotations(g.placement, g.workers)):
        out = client.persist(out, optimize_graph=False)
    if g.state is not None:
        g.state.remember(client, out, solver.plan.decomposition.pz, g.run_id)
    return out


def persist_home(solver, b, client) -> da.Array:
    """``b`` (a NumPy/CuPy or Dask array) persisted in the solver's home chunks, each chunk on the
    worker that owns it — the layout fields keep between solves."""
    chunks = home_chunks(solver)
    arr = b if isinstance(b, da.Array) else da.from_array(b, chunks=chunks, asarray=False)
    arr = arr.rechunk(chunks, method="tasks") if arr.chunks != chunks else arr
    workers = live_workers(client)  # chunks are dealt round-robin: any number of workers
    pz = solver.plan.decomposition.pz
    placement = {(arr.name, 0, p, q): chunk_owner((p, q), workers, pz)
                 for p in range(len(chunks[1])) for q in range(len(chunks[2]))}
    with dask.annotate(**placement_annotations(placement, workers)):
        return client.persist(arr, optimize_graph=False)
