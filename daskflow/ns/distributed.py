"""The time loop on a Dask cluster: one pencil per worker, whole runs as one task per worker.

Every worker holds one x-pencil of ``u, v, w, p``. ``run`` submits one fused task per worker
(:func:`run_on_worker`) that advances its pencil through all requested steps with the bodies of
:mod:`daskflow.ns.runs`: halos, CFL and bulk-velocity reductions, the pressure Poisson solve (FTM or
P-TDMA) and the implicit diffusion solves all exchange pieces directly between workers through the
run's transport (:mod:`daskflow.pencils.transport`). No field passes through the client or the
scheduler during a run.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable

import numpy as np

from daskflow.backend import cupy_or_none, to_numpy
from daskflow.ns import runs
from daskflow.ns.domain import FlowDomain, FlowPlan
from daskflow.ns.placement import load_modules, placed, read_pencil, set_pencil, to_device
from daskflow.ns.stepper import State
from daskflow.pencils.executor import Member
from daskflow.pencils.layout import chunk_owner, pencil_chunks
from daskflow.profiling import PhaseClock, TimedDomain, merge, phase_clock, phases_enabled


def _on_worker(plan: FlowPlan, run_id: str, workers: list[str], pencil: dict, body, comm=None, scope=None):
    """Run ``body(stepper, state, worker)`` for this worker's pencil as one collective task: outside
    the thread pool, aborting the run on every peer if it fails; ``comm`` (a
    :class:`~daskflow.pencils.transport.CommSpec`) carries its exchanges, whose layouts ``scope``
    names (the same in every run of one placement of the plan: described to the receivers once)."""
    from distributed import get_worker

    from daskflow.pencils.direct import collective, gpu_switch_interval
    from daskflow.pencils.link import exchange_timeout
    from daskflow.pencils.transport import communicator

    worker = get_worker()
    state = runs.state_of(pencil)
    with collective(worker, run_id, workers, gpu_switch_interval() if plan.device == "gpu" else None):
        transport = communicator(worker, comm, exchange_timeout(), run_id)
        clock = phase_clock(plan.device) if phases_enabled() else None
        # with a clock, every executor of the run times its exchanges' cuts and transfers as phases
        member = Member(worker.address, workers, plan.poisson_plan.decomposition.pz, transport, run_id, scope, clock)
        domain = FlowDomain(plan, member)
        stepper = runs.stepper_for(plan, domain if clock is None else TimedDomain(domain, clock))
        if clock is None:
            out = body(stepper, state, worker)
        else:
            with clock("task"):
                out = body(stepper, state, worker)
            _record_phases(worker, clock, domain)
        domain.finish()
    return out


def _record_phases(worker, clock: PhaseClock, domain: FlowDomain) -> None:
    """Add this task's phase times, and its waits for peers, to ``worker.daskflow_phases``."""
    clock.add("waiting: halos, reductions, z solves", domain.ex.waited)
    clock.add("waiting: pressure solve", domain.ex_pressure.waited)
    worker.daskflow_phases = merge(getattr(worker, "daskflow_phases", {}), clock.report())


def run_on_worker(plan: FlowPlan, run_id: str, workers: list[str], pencil: dict, ready: list, steps, until,
                  stoppable: bool = False, comm=None, report_clock: bool = False, scope=None) -> dict:
    """Body of the fused task: advance this worker's pencil; returns the new pencil state.
    ``ready`` (ignored) holds markers of the other workers' pencils while they may still fail, so a
    failed one fails all tasks. ``stoppable``: the run ends after the step in which any worker
    received :func:`request_stop` for it (:func:`daskflow.ns.runs.advance_pencil`).
    ``report_clock``: publish the clock after the run to the client (:data:`CLOCK_TOPIC`)."""
    def body(stepper, state, worker):
        requests = worker.__dict__.setdefault("daskflow_stop_requests", set())
        asked = (lambda: run_id in requests) if stoppable else None
        runs.advance_pencil(plan, stepper, state, steps, until, asked, hook=_test_kill_hook)
        requests.discard(run_id)
        pencil = runs.pencil_of(state, stepper.domain)
        if report_clock:
            worker.log_event(CLOCK_TOPIC, [run_id, _clock(pencil)])
        return pencil

    return _on_worker(plan, run_id, workers, pencil, body, comm, scope)


def initial_on_worker(plan: FlowPlan, run_id: str, workers: list[str], pencil: dict, ready: list,
                      comm=None, scope=None) -> dict:
    """Evaluate the initial condition ``plan.initial`` on this worker's pencil (all workers together)."""
    def body(stepper, state, worker):
        runs.initialize_pencil(plan, stepper, state)
        return runs.pencil_of(state, stepper.domain)

    return _on_worker(plan, run_id, workers, pencil, body, comm, scope)


def empty_pencil(plan: FlowPlan, key: tuple[int, int], clock: dict) -> dict:
    """Zero fields of pencil ``key`` on this worker's device (in the operators' memory order) and
    ``clock``; the modules its runs will use are loaded with them (:func:`load_modules`)."""
    from daskflow.ns.operators import memory_order

    load_modules(plan)
    dec = plan.poisson_plan.decomposition
    shape = (plan.grid.shape[0], dec.y[key[0]].stop - dec.y[key[0]].start, dec.z[key[1]].stop - dec.z[key[1]].start)
    xp, order = np, "F"  # as a scattered host pencil
    if plan.device == "gpu":
        import cupy as xp

        order = memory_order(xp)
    return {**{name: xp.zeros(shape, dtype=plan.poisson_plan.dtype, order=order) for name in runs.FIELDS}, **clock}


def request_stop(run_id: str, dask_worker=None) -> None:
    """Ask this worker's part of run ``run_id`` to stop after the current step (see
    :func:`run_on_worker`); sent by the client to every worker of the run."""
    dask_worker.__dict__.setdefault("daskflow_stop_requests", set()).add(run_id)


def final_on_worker(plan: FlowPlan, run_id: str, workers: list[str], pencil: dict, ready: list, fields: bool,
                    checkpoint: bool, comm=None, scope=None) -> dict:
    """Write the final field snapshot and/or checkpoint of this worker's pencil (all workers
    together); returns the pencil."""
    def body(stepper, state, worker):
        runs.final_output(plan, stepper, state, fields, checkpoint)
        return pencil

    return _on_worker(plan, run_id, workers, pencil, body, comm, scope)


def checkpoint_on_worker(plan: FlowPlan, run_id: str, workers: list[str], pencil: dict, ready: list,
                         comm=None, scope=None) -> dict:
    """Write this worker's pencil into a new checkpoint (all workers together); returns the pencil."""
    def body(stepper, state, worker):
        runs.write_checkpoint(plan, stepper, state)
        return pencil

    return _on_worker(plan, run_id, workers, pencil, body, comm, scope)


def diagnostics_on_worker(plan: FlowPlan, run_id: str, workers: list[str], pencil: dict, ready: list,
                          comm=None, scope=None) -> dict:
    """The scalars record (CFL, divergence, bulk velocity, Re_tau, ...) reduced across the pencils."""
    def body(stepper, state, worker):
        return runs.diagnostics(plan, stepper, state)

    return _on_worker(plan, run_id, workers, pencil, body, comm, scope)


def _test_kill_hook(state, domain) -> None:
    """Test hook: ``DASKFLOW_TEST_KILL_WORKER=step:marker_dir:times`` kills the process owning chunk
    (0, last) right after ``step``, at most ``times`` times in all (counted with files), so worker
    loss happens at a deterministic point of a run."""
    import os

    spec = os.environ.get("DASKFLOW_TEST_KILL_WORKER")
    if not spec:
        return
    step, marker_dir, times = spec.split(":")
    if state.step != int(step) or domain.key != (0, domain.counts[1] - 1):
        return
    done = len(os.listdir(marker_dir))
    if done < int(times):
        open(os.path.join(marker_dir, f"kill-{done}"), "w").close()
        os.kill(os.getpid(), 9)


def field_of(pencil: dict, name: str):
    return pencil[name]


# ------------------------------------------------------------------------------------ client side


class WorkerLost(RuntimeError):
    """A worker holding a pencil disappeared during a run."""


def removed_workers(client, addresses: list[str]) -> list[str]:
    """The workers among ``addresses`` that the scheduler has removed: those whose latest membership
    event (the scheduler logs ``add-worker`` and ``remove-worker`` under each worker's address) is
    their removal. Evidence, not a poll of who is listed: a slow or momentarily empty reply of the
    scheduler never counts as a loss."""
    async def events():
        return await asyncio.gather(*(client.scheduler.events(topic=address) for address in addresses))

    removed = []
    for address, log in zip(addresses, client.sync(events), strict=True):
        actions = [msg.get("action") for _, msg in log if isinstance(msg, dict)]
        membership = [a for a in actions if a in ("add-worker", "remove-worker")]
        if membership and membership[-1] == "remove-worker":
            removed.append(address)
    return removed


def _has_gpu() -> bool:
    return cupy_or_none() is not None


def worker_device(client, requested: str) -> str:
    """``solver.device`` on ``client``'s workers: ``auto`` is ``gpu`` when every worker has one."""
    if requested != "auto":
        return requested
    return "gpu" if all(client.run(_has_gpu).values()) else "cpu"


#: the event topic on which the first pencil of a run publishes the clock after it (:func:`run_on_worker`)
CLOCK_TOPIC = "daskflow-clock"
_CLOCKS: dict[str, dict] = {}  # client id -> {run id: clock} as the events arrive


def _clock(pencil: dict) -> tuple[float, int, float, float]:
    """A pencil's time, step, dt and forcing gradient, as plain Python numbers."""
    return (float(pencil["time"]), int(pencil["step"]), float(pencil["dt"]),
            float(pencil["forcing_gradient"]))


def clocks_of(client) -> dict:
    """The clocks published on ``client``'s cluster by runs, by run id (subscribed to once per
    client). A clock travels ahead of its task's completion on the same streams (worker to
    scheduler, scheduler to client), so it is here when the client sees the task done: a run costs
    no task and no round trip after it to learn where it ended."""
    clocks = _CLOCKS.get(client.id)
    if clocks is None:
        clocks = _CLOCKS[client.id] = {}
        client.subscribe_topic(CLOCK_TOPIC, lambda event: clocks.__setitem__(event[1][0], tuple(event[1][1])))
    return clocks


def _raise_root_cause(futures: list) -> None:
    """Raise the error of a failed run: the task that failed first, not the peers it aborted (whose
    error only says that a peer failed)."""
    from daskflow.pencils.link import PeerAborted

    errors = [f.exception() for f in futures if f.status == "error"]
    if errors:
        raise next((e for e in errors if not isinstance(e, PeerAborted)), errors[0])


class WorkerPencils:
    """``plan``'s pencils on ``client``'s workers, one per worker, each call one fused task per
    worker; the pencils stay on the workers between calls (:attr:`pencils`: their futures, in
    decomposition order, or ``None`` until the fields are first placed)."""

    def __init__(self, client, plan: FlowPlan, comm: str, store: str | None) -> None:
        from daskflow.pencils import control
        from daskflow.pencils.direct import ensure_mailboxes
        from daskflow.pencils.graph import live_workers
        from daskflow.pencils.transport import choose_comm

        py, pz = plan.poisson_plan.pencils
        self.client, self.plan, self.store = client, plan, store
        self.workers = live_workers(client, py * pz)
        if py * pz != len(self.workers):
            raise ValueError(f"config solver.pencils: {py} x {pz} pencils need exactly {py * pz} workers "
                             f"(one pencil per worker); the cluster has {len(self.workers)}")
        ensure_mailboxes(client)
        control.shorten(client)
        self.place_plans()
        self.comm = choose_comm(client, self.workers, comm, plan.device)  # the exchanges' transport
        self.comm_spec = None  # its communicator (:func:`make_comm` before every run)
        self.pencils: list | None = None
        self._spent: list | None = None  # futures to let go with the next submission (see submit)
        self.runs = 0

    def place_plans(self) -> None:
        """Send :attr:`plan` to every worker (again after it changed, or to new workers)."""
        from daskflow.pencils.graph import scatter_per_worker

        self.plans = scatter_per_worker(self.client, self.plan, self.workers)
        self.scope = uuid.uuid4().hex  # the layouts of this placement's exchanges, the same in all its runs

    def owner(self, key) -> str:
        return chunk_owner(key, self.workers, self.plan.poisson_plan.pencils[1])

    def scatter(self, state: State) -> None:
        """Send ``state``'s host fields as pencils to their workers."""
        dec = self.plan.poisson_plan.decomposition
        self.pencils, self._spent = [], None  # new pencils: the old ones' data go now
        for key in dec.indices:
            y, z = dec.y[key[0]], dec.z[key[1]]
            pencil = {name: np.asfortranarray(to_numpy(getattr(state, name))[:, y, z]) for name in runs.FIELDS}
            pencil.update(time=state.time, step=state.step, dt=state.dt, forcing_gradient=state.forcing_gradient)
            owner = self.owner(key)
            # a list, not the dict itself: a scattered dict becomes one future per item keyed by the
            # item names ("u", "v", ...), so every pencil would overwrite the previous one's keys
            [future] = self.client.scatter([pencil], workers=[owner], hash=False)
            self.pencils.append(self.client.submit(to_device, future, self.plans[owner], workers=[owner],
                                                   allow_other_workers=False, pure=False))

    def create(self, state: State) -> None:
        """Empty pencils (zeros, ``state``'s clock) made on their workers."""
        clock = {"time": state.time, "step": state.step, "dt": state.dt, "forcing_gradient": state.forcing_gradient}
        self._spent = None
        self.pencils = [self.client.submit(empty_pencil, self.plans[self.owner(key)], key, clock,
                                           workers=[self.owner(key)], allow_other_workers=False, pure=False)
                        for key in self.plan.poisson_plan.decomposition.indices]

    def read(self, path: str, slot: str, clock: dict) -> list:
        """Pencils read by their workers from checkpoint ``slot`` of the store ``path`` (the slot
        the client chose from the slots' metadata; each worker verifies the chunks of its own
        region), with ``clock``; a damaged region raises the
        :class:`~daskflow.io.store.CheckpointError` a whole read would (:func:`placed`)."""
        clock = {name: clock[name] for name in ("time", "step", "dt", "forcing_gradient")}
        self._spent = None
        futures = [self.client.submit(read_pencil, self.plans[self.owner(key)], key, path, slot, clock,
                                      workers=[self.owner(key)], allow_other_workers=False, pure=False)
                   for key in self.plan.poisson_plan.decomposition.indices]
        self.pencils = placed(self.client, futures)
        return self.pencils

    def set(self, state: State, arrays: dict, functions: dict) -> None:
        """Replace fields of the pencils on their workers: ``functions`` evaluated there on each
        pencil's coordinates, ``arrays`` (whole host arrays) cut here into pencils, each sent to its
        worker; the other fields stay where they are (zeros with ``state``'s clock if none are)."""
        if self.pencils is None:
            self.create(state)
        self._spent = None
        dec = self.plan.poisson_plan.decomposition
        futures = []
        for key, pencil in zip(dec.indices, self.pencils, strict=True):
            owner = self.owner(key)
            parts = None
            if arrays:  # a list, not the dict itself (see scatter)
                [parts] = self.client.scatter([{name: np.asfortranarray(a[:, dec.y[key[0]], dec.z[key[1]]])
                                                for name, a in arrays.items()}], workers=[owner], hash=False)
            futures.append(self.client.submit(set_pencil, self.plans[owner], key, pencil, parts, functions,
                                              workers=[owner], allow_other_workers=False, pure=False))
        self.pencils = placed(self.client, futures)

    def submit(self, fn, *args, state: State, clock: bool = False, stop: Callable[[], bool] | None = None):
        """One fused task per pencil running ``fn``; waits for them (watching the scheduler's removal
        events for lost workers, :func:`removed_workers`, and forwarding a ``stop`` request) and
        keeps the new pencils; with ``clock`` (``fn`` is :func:`run_on_worker`) returns the state's
        clock after them, published by the first pencil's task (:func:`clocks_of`), else the tasks'
        futures.

        Every dependency costs a round trip to the scheduler, so a task depends on its own pencil
        and, only while another worker's pencil may still fail (placed but not yet computed), on a
        tiny marker of it: a failed pencil then fails every task instead of leaving its peers
        waiting for pieces."""

        from daskflow.pencils.direct import ready_marker
        from daskflow.pencils.transport import comm_failed, make_comm, submit_together, took_turn, wait_turn

        if self.pencils is None:
            self.scatter(state)
        # the workers' shared communicator, or a new one where a failed run aborted it
        self.comm_spec = make_comm(self.client, self.workers, self.comm, self.plan.device)
        self.runs += 1
        run_id = uuid.uuid4().hex
        clocks = clocks_of(self.client) if clock else None
        owners = [self.owner(key) for key in self.plan.poisson_plan.decomposition.indices]
        markers = {}  # owner -> the marker of its pencil
        if len(owners) > 1 and any(pencil.status != "finished" for pencil in self.pencils):
            markers = {owner: self.client.submit(ready_marker, pencil, workers=[owner], pure=False)
                       for pencil, owner in zip(self.pencils, owners, strict=True)}
        after = wait_turn(self.client, owners)  # fused work of solvers still running on these workers
        calls = []
        for i, (pencil, owner) in enumerate(zip(self.pencils, owners, strict=True)):
            ready = [marker for other, marker in markers.items() if other != owner]
            ready += [after[owner]] if owner in after else []
            extra = {"report_clock": True} if clock and i == 0 else {}
            calls.append((owner, fn, (self.plans[owner], run_id, self.workers, pencil, ready, *args),
                          {"comm": self.comm_spec, "scope": self.scope, **extra}))
        # Futures done with (the inputs of the run before, a record's tasks) are let go in the same
        # batch as this call's tasks, not when they were done with: a release sent just before the
        # submission held the tasks back by the client's batching interval (the 2-GPU channel step's
        # tasks entered their workers 10 ms after the submission, 4 ms now). Their workers free them
        # as this call's tasks arrive, before its steps allocate anything.
        spent, self._spent = self._spent or [], None
        futures = submit_together(self.client, calls, spent)
        took_turn(self.client, dict(zip(owners, futures, strict=True)))
        self._spent = list(self.pencils)  # this call's inputs: done with once it succeeds
        try:
            self._wait(futures, list(markers.values()), run_id, sorted(set(owners)), stop)
        except BaseException:
            comm_failed(self.client)  # the next run checks the communicator on every worker
            raise
        if fn is not diagnostics_on_worker:
            self.pencils = futures
        else:  # the caller gathers the record; the futures go with the next submission
            self._spent = [*self.pencils, *futures]
        if not clock:
            return futures
        reported = clocks.pop(run_id, None)
        # the event precedes the task's completion on the same streams; should it ever be lost (a
        # reconnected stream), the first pencil still holds the clock
        return reported if reported is not None else self.client.submit(_clock, futures[0], pure=False).result()

    def _wait(self, futures: list, others: list, run_id: str, owners: list[str], stop) -> None:
        from distributed import wait

        from daskflow.pencils.direct import abort_here

        stop_sent = False
        while True:  # wait, watching for a pencil's worker to disappear and for a stop request
            try:
                wait(futures + others, timeout=0.25 if stop is not None else 1.0)
                break
            except TimeoutError:
                if stop is not None and not stop_sent and stop():
                    self.client.run(request_stop, run_id, workers=owners)
                    stop_sent = True
                gone = removed_workers(self.client, owners)
                if gone:
                    alive = sorted(set(self.client.scheduler_info(n_workers=-1)["workers"]) - set(gone))
                    self.client.run(abort_here, run_id, workers=alive)
                    self.client.cancel(futures + others, force=True)
                    raise WorkerLost(f"worker {gone[0]} was lost during a run") from None
        # outside the loop: a task's own TimeoutError (a peer's piece never came) must reach the caller
        _raise_root_cause(futures)

    def rejoin(self) -> None:
        """After a worker loss: wait for as many workers as before and place the plan on them; the
        pencils are gone (a checkpoint replaces them)."""
        from daskflow.pencils.graph import live_workers

        n = len(self.workers)
        for attempt in range(10):  # the worker list can still change while the cluster recovers
            self.client.wait_for_workers(n, timeout=300)
            self.workers = live_workers(self.client, n)[:n]
            try:
                self.place_plans()  # new workers have none
                break
            except (KeyError, TimeoutError):  # a worker of that list left (or is paused) again
                if attempt == 9:
                    raise
                time.sleep(1.0)
        self.pencils = self._spent = None

    def field(self, name: str, dtype: str, label: str):
        """Field ``name`` as a Dask array in x-pencil chunks, from the workers' pencils."""
        import dask.array as da
        from dask.highlevelgraph import HighLevelGraph

        dec = self.plan.poisson_plan.decomposition
        graph = {(label, 0, *key): (field_of, pencil, name) for key, pencil in zip(dec.indices, self.pencils,
                                                                                    strict=True)}
        meta = np.empty((0, 0, 0), dtype=dtype)
        if self.plan.device == "gpu":
            import cupy

            meta = cupy.empty((0, 0, 0), dtype=meta.dtype)
        chunks = pencil_chunks(self.plan.grid.shape, dec.pencils)
        return da.Array(HighLevelGraph.from_collections(label, graph), label, chunks, meta=meta)

    # the simulation's operations, as the in-process pencils offer them (:class:`~daskflow.ns.local.LocalPencils`)

    def advance(self, state: State, steps: int | None, until: float | None, stop=None, max_failures: int = 0,
                recover: Callable[[Exception], None] | None = None) -> None:
        """Advance the pencils; after a lost worker ``recover(lost)`` (which must put ``state`` back
        at the last checkpoint, see :meth:`rejoin`) and go on, at most ``max_failures`` times."""
        target = None if steps is None else state.step + steps
        failures = 0
        while True:
            try:
                remaining = None if target is None else target - state.step
                clock = self.submit(run_on_worker, remaining, until, stop is not None, state=state, clock=True,
                                    stop=stop)
                break
            except WorkerLost as lost:
                failures += 1
                if failures > max_failures or recover is None:
                    raise RuntimeError(f"daskflow: lost workers {failures} times ({lost}); giving up (cluster."
                                       f"max_failures = {max_failures}). The last complete checkpoint in "
                                       f"{self.store!r} is intact: resume with daskflow run --restart") from lost
                logging.getLogger("daskflow").warning("%s; recovering from the last checkpoint", lost)
                recover(lost)
        state.time, state.step, state.dt, state.forcing_gradient = clock

    def initialize(self, state: State) -> None:
        """The initial condition of the plan (``initial`` section) evaluated on the workers, each on
        its own pencil."""
        self.create(state)
        self.submit(initial_on_worker, state=state)

    def final(self, state: State, fields: bool, checkpoint: bool) -> None:
        self.submit(final_on_worker, fields, checkpoint, state=state)

    def checkpoint(self, state: State) -> None:
        self.submit(checkpoint_on_worker, state=state)

    def diagnostics(self, state: State) -> dict:
        return self.client.gather(self.submit(diagnostics_on_worker, state=state)[0])


__all__ = ["WorkerLost", "WorkerPencils", "checkpoint_on_worker", "diagnostics_on_worker", "empty_pencil",
           "field_of", "final_on_worker", "initial_on_worker", "removed_workers", "request_stop", "run_on_worker",
           "to_device", "worker_device"]
