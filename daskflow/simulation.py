"""``Simulation``: a configured incompressible flow, advanced in time.

    sim = Simulation({"grid": {...}, "physics": {...}, "boundaries": {"preset": "channel"}, ...})
    sim.run(steps=100)
    sim.u, sim.v, sim.w, sim.p          # Dask arrays, logical shape (nx, ny, nz)
    sim.time, sim.step, sim.dt

The configuration schema is :mod:`daskflow.config`. Every pencil of ``solver.pencils`` is owned
by one participant that runs the bodies of :mod:`daskflow.ns.runs` on a
:class:`~daskflow.ns.domain.FlowDomain`. Without a client, fields are stored on the device chosen
by ``solver.device`` (CuPy on a GPU, NumPy otherwise) and advanced in this process: one pencil by
this thread, several by a :class:`~daskflow.pencils.team.Team` of threads that exchange halos and
solver pieces exactly as workers do. With a ``distributed`` client, every worker owns one pencil
(``py * pz`` must equal the number of workers) and each ``run`` is one task per worker that
advances its pencil, exchanging pieces directly with the other workers
(:mod:`daskflow.ns.distributed`).
"""

from __future__ import annotations

import asyncio
import copy
import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

import numpy as np

from daskflow.backend import cupy_or_none, to_numpy
from daskflow.config import load
from daskflow.grid import Grid
from daskflow.ns import boundaries as nsb
from daskflow.ns import initial, runs
from daskflow.ns.domain import FlowDomain, FlowPlan, wall_face
from daskflow.ns.stepper import State, Stepper
from daskflow.pencils.executor import Member
from daskflow.pencils.graph import live_workers, scatter_per_worker
from daskflow.pencils.layout import pencil_chunks
from daskflow.pencils.team import Team


def check(config: dict) -> None:
    """Everything a configuration implies that :func:`daskflow.config.load` cannot see alone (grid,
    boundaries, forcing, decomposition), without starting anything; raises ``ValueError`` naming the
    setting."""
    from daskflow.bc import Boundaries
    from daskflow.poisson.plan import SpectralPlan

    g = config["grid"]
    grid = Grid(tuple(g["shape"]), tuple(g["lengths"]), g["z_stretch"], g["z_cluster"])
    try:
        bcs = nsb.build(config["boundaries"])
    except ValueError as exc:
        raise ValueError(f"config {exc}") from exc
    kind = config["physics"]["forcing"]["kind"]
    if kind != "none" and not bcs.periodic(0):
        raise ValueError(f"config physics.forcing.kind: {kind!r} needs a periodic x direction")
    if config["initial"]["kind"] == "checkpoint":
        _check_initial_checkpoint(config["initial"]["path"], grid.shape)
    s = config["solver"]
    pencils = (1, 1) if s["pencils"] == "auto" else tuple(s["pencils"])  # auto: [1, 1] fits every valid grid
    methods = ("ptdma", "ftm") if s["poisson"] == "auto" else (s["poisson"],)
    errors = []
    for method in methods:  # poisson: auto needs one method that fits
        try:
            SpectralPlan(grid, Boundaries.parse(bcs.p, "ccc"), 0.0, 1.0, method, pencils, np.dtype(s["dtype"]))
            return
        except ValueError as exc:
            errors.append(exc)
    raise ValueError(f"config solver.{errors[0]}") from errors[0]


def _check_initial_checkpoint(path: str, shape: tuple) -> None:
    """``initial.path`` must hold a complete checkpoint of a run on the same grid shape."""
    from daskflow.io import store

    if not store.has_checkpoint(path):
        raise ValueError(f"config initial.path: {path!r} holds no complete checkpoint")
    stored = tuple(store.root_config(path)["grid"]["shape"])
    if stored != tuple(shape):
        raise ValueError(f"config initial.path: the checkpoint's grid is {list(stored)}, this run's grid.shape is "
                         f"{list(shape)} (they must be equal)")


RESTART_FIXED = (("grid", "shape"), ("grid", "lengths"), ("grid", "z_stretch"), ("grid", "z_cluster"),
                 ("boundaries",), ("physics", "nu"), ("solver", "dtype"))  # what a restart may not change


def check_restart(store_path: str, config: dict) -> None:
    """Refuse a restart of ``store_path`` with ``config`` (a loaded configuration) that would not
    continue the same flow, naming the setting and both values, or that asks for output the store
    has no place for."""
    from daskflow.io import store

    stored = store.root_config(store_path)
    for path in RESTART_FIXED:
        old, new = stored, config
        for key in path:
            old, new = old[key], new[key]
        if old != new:
            raise ValueError(f"restart: config {'.'.join(path)} is {new!r}, the store's run has {old!r}; a restart "
                             "continues the same flow: only the decomposition, cluster, time and output may change")
    g = config["grid"]
    grid = Grid(tuple(g["shape"]), tuple(g["lengths"]), g["z_stretch"], g["z_cluster"])
    unmatched = store.unmatched_slices(store_path, config["output"]["slices"], grid)
    if unmatched:
        raise ValueError(f"config output.slices: the store has no slices along {', '.join(unmatched)} at these "
                         "planes (it was created without them, or with others); restart with the store's slices, "
                         "or start a new store")


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


def _abort(run_id: str, dask_worker=None) -> None:
    dask_worker.daskflow_mailbox.put(("daskflow-abort", run_id), None)


def _has_gpu() -> bool:
    return cupy_or_none() is not None


def _clock(pencil: dict) -> tuple:
    return pencil["time"], pencil["step"], pencil["dt"], pencil["forcing_gradient"]


def _raise_root_cause(futures: list) -> None:
    """Raise the error of a failed run: the task that failed first, not the peers it aborted (whose
    error only says that a peer failed)."""
    from daskflow.pencils.link import PeerAborted

    errors = [f.exception() for f in futures if f.status == "error"]
    if errors:
        raise next((e for e in errors if not isinstance(e, PeerAborted)), errors[0])


class Simulation:
    """An incompressible DNS configured by ``config`` (dict or YAML path)."""

    def __init__(self, config: dict | str, client=None, _restart: bool = False, _stored_solver=None) -> None:
        self.config = load(config)
        check(self.config)
        self.autotune = None  # the AutotuneResult when solver.pencils or solver.poisson was auto
        if "auto" in (self.config["solver"]["pencils"], self.config["solver"]["poisson"]):
            self._resolve_auto(client, _restart, _stored_solver)
        cfg = self.config
        g = cfg["grid"]
        self.grid = Grid(tuple(g["shape"]), tuple(g["lengths"]), g["z_stretch"], g["z_cluster"])
        self.boundaries = nsb.build(cfg["boundaries"])
        device = cfg["solver"]["device"]
        gpu = cupy_or_none() if device in ("auto", "gpu") else None
        if device == "gpu" and gpu is None:
            raise ValueError("config solver.device: 'gpu' needs CuPy and a CUDA device")
        self.xp = gpu or np
        self.client = client
        s = cfg["solver"]
        if client is not None:
            self.xp = np  # initial fields are built on the host, then scattered as pencils
        zeros = [self.xp.zeros(self.grid.shape, dtype=s["dtype"], order="F") for _ in range(4)]
        self.state = State(*zeros)
        self._pencils: list | None = None
        self._runs = 0
        output = cfg["output"]
        self.store = output["store"]
        self._flow_plan = self._make_plan("cpu" if self.xp is np else "gpu")  # a cluster's: in _connect
        self._team: Team | None = None
        self._steppers: list[Stepper] = []
        if _restart:
            self._load_checkpoint()
        else:
            self._initial()
            if self.store is not None:
                from daskflow.io import store
                from daskflow.version import __version__

                store.create(self.store, self.config, self.grid, pencil_chunks(self.grid.shape, s["pencils"]),
                             __version__, first_step=self.state.step)
        # the step this run started from (time.steps counts from it, restarts included)
        self.first_step = self._first_step() if _restart else self.state.step
        if client is not None:
            self._connect(client, device)
        if not _restart and self.store is not None and output["fields_every"]:
            self._initial_fields()

    def _initial_fields(self) -> None:
        """The field snapshot of the initial state (the run's first record of ``fields``)."""
        if self.client is None:
            self._in_process(lambda stepper, state: runs.writer_for(self._flow_plan).fields(stepper, state))
            return
        from daskflow.ns.distributed import final_on_worker

        self._pencils = self._submit(final_on_worker, True, False)

    @classmethod
    def restart(cls, store_path: str, client=None, **overrides) -> Simulation:
        """Continue the run saved in ``store_path`` from its latest complete checkpoint. Records the
        crashed run wrote after that checkpoint are dropped (they will be written again).
        ``overrides`` replace config sections (for example ``solver={...}`` or ``time={...}``)."""
        from daskflow.io import store

        stored = store.root_config(store_path)
        config = copy.deepcopy(stored)
        config["output"]["store"] = str(store_path)
        for section, values in overrides.items():
            config.setdefault(section, {}).update(values)
        config = load(config)
        check_restart(store_path, config)
        return cls(config, client=client, _restart=True, _stored_solver=stored["solver"])

    def _resolve_auto(self, client, restart: bool, stored: dict | None) -> None:
        """Replace ``solver.pencils: auto`` / ``solver.poisson: auto`` by concrete values in
        ``self.config`` (so the store and restarts record them): the checkpoint's own choice when a
        restart runs on the same cluster shape (``py * pz`` workers; in process one), else the
        autotuner's (:mod:`daskflow.autotune`; in process ``pencils: auto`` is ``[1, 1]``)."""
        from daskflow import autotune

        s = self.config["solver"]
        workers = 1 if client is None else len(live_workers(client))
        if stored is not None and stored["pencils"] != "auto" and stored["poisson"] != "auto":
            same_shape = stored["pencils"][0] * stored["pencils"][1] == workers
            if same_shape and s["pencils"] in ("auto", stored["pencils"]):
                s["pencils"] = list(stored["pencils"])
                if s["poisson"] == "auto":
                    s["poisson"] = stored["poisson"]
                self.autotune = autotune.AutotuneResult(tuple(s["pencils"]), s["poisson"],
                                                        note="kept from the checkpoint: same cluster shape")
                return
        accept = None
        out = self.config["output"]
        if restart and (out["fields_every"] or out["slices_every"]):
            from daskflow.io import store

            def accept(pencils):  # the pencils must tile the store's field chunks
                try:
                    store.check_alignment(out["store"], pencil_chunks(tuple(self.config["grid"]["shape"]), pencils))
                except ValueError:
                    return False
                return True
        g = self.config["grid"]
        grid = Grid(tuple(g["shape"]), tuple(g["lengths"]), g["z_stretch"], g["z_cluster"])
        device = s["device"]
        if device == "gpu" and client is None and cupy_or_none() is None:
            raise ValueError("config solver.device: 'gpu' needs CuPy and a CUDA device")
        try:
            result = autotune.autotune(grid, nsb.build(self.config["boundaries"]).p, s["dtype"], client,
                                       s["pencils"], s["poisson"], device, accept=accept)
        except ValueError as exc:
            raise ValueError(f"config {exc}") from exc
        s["pencils"], s["poisson"] = list(result.pencils), result.method
        self.autotune = result

    def _load_checkpoint(self) -> None:
        from daskflow.io import store

        if self.config["output"]["fields_every"] or self.config["output"]["slices_every"]:
            store.check_alignment(self.store, pencil_chunks(self.grid.shape, self.config["solver"]["pencils"]))
        fields, clock = store.read_checkpoint(self.store)
        if "fallback" in clock:  # the newer slot is damaged: say so, clear it, never overwrite the one in use
            damaged = next(slot for slot in store.SLOTS if slot != clock["slot"])
            logging.getLogger("daskflow").warning("restarting from checkpoint slot %s (step %d): %s; slot %s is "
                                                  "cleared for the next checkpoint", clock["slot"], clock["step"],
                                                  clock["fallback"], damaged)
            store.clear_slot(self.store, damaged, like=clock["slot"])
            store.set_current(self.store, clock["slot"])
        store.truncate_after(self.store, clock["step"])
        self._start_from(fields, clock)

    def _first_step(self) -> int:
        from daskflow.io import store

        return store.first_step(self.store)

    def _start_from(self, fields: dict, clock: dict) -> None:
        """Set the fields and the clock (time, step, dt, forcing gradient) of a checkpoint."""
        self.set(**fields)
        self.state.time, self.state.step = clock["time"], clock["step"]
        self.state.dt, self.state.forcing_gradient = clock["dt"], clock["forcing_gradient"]

    # ------------------------------------------------------------------ cluster

    def _make_plan(self, device: str) -> FlowPlan:
        """What every participant needs to step its pencil on ``device`` (``cpu`` or ``gpu``)."""
        from daskflow.bc import Boundaries
        from daskflow.poisson.plan import SpectralPlan

        cfg = self.config
        s, physics = cfg["solver"], cfg["physics"]
        pressure = SpectralPlan(self.grid, Boundaries.parse(self.boundaries.p, "ccc"), 0.0, 1.0, s["poisson"],
                                tuple(s["pencils"]), np.dtype(s["dtype"]))
        return FlowPlan(self.grid, self.boundaries, physics["nu"], physics["forcing"],
                        cfg["time"]["implicit_diffusion"], cfg["time"], pressure, device,
                        cfg["output"] if self.store else None, s["z_solve"], physics["advection"])

    # ------------------------------------------------------------------ in process

    @property
    def stepper(self) -> Stepper:
        """The stepper of the first in-process participant (the whole field with one pencil)."""
        return self._local_steppers()[0]

    def _local_steppers(self) -> list[Stepper]:
        """One stepper per pencil, each on its participant's domain (made at the first use)."""
        if self._team is None:
            py, pz = self.config["solver"]["pencils"]
            team = Team(py * pz)
            members = [Member(me, team.members, pz, team.transports[me], "local") for me in team.members]
            self._steppers = [runs.stepper_for(self._flow_plan, FlowDomain(self._flow_plan, m)) for m in members]
            self._team = team
        return self._steppers

    def _in_process(self, body: Callable[[Stepper, State], Any]) -> list:
        """``body(stepper, state)`` for every in-process participant; returns their results. One
        pencil is the whole field (no copy); with several, the fields are cut into pencils for the
        team and put back together after it."""
        steppers = self._local_steppers()
        if len(steppers) == 1:
            return [body(steppers[0], self.state)]
        xp, st = self.xp, self.state
        states = []
        for stepper in steppers:
            region = stepper.domain.region
            fields = [xp.asfortranarray(getattr(st, name)[region]) for name in runs.FIELDS]
            states.append(State(*fields, st.time, st.step, st.dt, [], st.forcing_gradient))
        try:
            return self._team.run(lambda i: body(steppers[i], states[i]))
        finally:  # the pencils as far as they got (every step is collective: all reach the same step unless one fails)
            for stepper, state in zip(steppers, states, strict=True):
                for name in runs.FIELDS:
                    getattr(st, name)[stepper.domain.region] = getattr(state, name)
            st.time, st.step, st.dt = states[0].time, states[0].step, states[0].dt
            st.forcing_gradient = states[0].forcing_gradient

    # ------------------------------------------------------------------ cluster

    def _connect(self, client, device: str) -> None:
        from daskflow.pencils.direct import ensure_mailboxes
        from daskflow.pencils.transport import choose_comm

        cfg = self.config
        s = cfg["solver"]
        py, pz = s["pencils"]
        self._workers = live_workers(client, py * pz)
        if py * pz != len(self._workers):
            raise ValueError(f"config solver.pencils: {py} x {pz} pencils need exactly {py * pz} workers "
                             f"(one pencil per worker); the cluster has {len(self._workers)}")
        if device == "auto":
            device = "gpu" if all(client.run(_has_gpu).values()) else "cpu"
        self._flow_plan = self._make_plan(device)
        ensure_mailboxes(client)
        self._plans = scatter_per_worker(client, self._flow_plan, self._workers)
        self.comm = choose_comm(client, self._workers, cfg["cluster"]["comm"], device)  # the exchanges' transport
        self._comm_spec = None  # its communicator (:func:`make_comm` before every run)
        if self.store is not None:
            from daskflow.io import store

            store.record_exchanges(self.store, self.comm, len(self._workers))

    def _owner(self, key) -> str:
        from daskflow.pencils.layout import chunk_owner

        return chunk_owner(key, self._workers, self.config["solver"]["pencils"][1])

    def _scatter(self) -> None:
        """Send the host fields as pencils to their workers (after construction or ``set``)."""
        from daskflow.ns.distributed import to_device

        dec = self._flow_plan.poisson_plan.decomposition
        self._pencils = []
        for key in dec.indices:
            y, z = dec.y[key[0]], dec.z[key[1]]
            pencil = {name: np.asfortranarray(to_numpy(getattr(self.state, name))[:, y, z]) for name in "uvwp"}
            pencil.update(time=self.state.time, step=self.state.step, dt=self.state.dt,
                          forcing_gradient=self.state.forcing_gradient)
            owner = self._owner(key)
            # a list, not the dict itself: a scattered dict becomes one future per item keyed by the
            # item names ("u", "v", ...), so every pencil would overwrite the previous one's keys
            [future] = self.client.scatter([pencil], workers=[owner], hash=False)
            self._pencils.append(self.client.submit(to_device, future, self._flow_plan.device, workers=[owner],
                                                    allow_other_workers=False, pure=False))

    def _submit(self, fn, *args, clock: bool = False, stop: Callable[[], bool] | None = None) -> list:
        """One fused task per pencil running ``fn``; waits for them (watching the scheduler's removal
        events for lost workers, :func:`removed_workers`, and forwarding a ``stop`` request) and
        returns the new pencils, and with ``clock`` the state's clock after them (fetched by a task
        queued behind the first pencil's, so the run costs one round trip from here, not two)."""
        from distributed import wait

        from daskflow.pencils.direct import ready_marker
        from daskflow.pencils.transport import make_comm, took_turn, wait_turn

        if self._pencils is None:
            self._scatter()
        # the workers' shared communicator, or a new one where a failed run aborted it
        self._comm_spec = make_comm(self.client, self._workers, self.comm, self._flow_plan.device)

        self._runs += 1
        run_id = uuid.uuid4().hex
        dec = self._flow_plan.poisson_plan.decomposition
        owners = [self._owner(key) for key in dec.indices]
        markers = [self.client.submit(ready_marker, pencil, workers=[owner], pure=False)
                   for pencil, owner in zip(self._pencils, owners, strict=True)]
        after = wait_turn(self.client, owners)  # fused work of solvers still running on these workers
        futures = [self.client.submit(fn, self._plans[owner], run_id, self._workers, pencil,
                                      [*markers, *([after[owner]] if owner in after else [])], *args,
                                      comm=self._comm_spec, workers=[owner], allow_other_workers=False, pure=False)
                   for pencil, owner in zip(self._pencils, owners, strict=True)]
        took_turn(self.client, dict(zip(owners, futures, strict=True)))
        extra = [self.client.submit(_clock, futures[0], workers=[owners[0]], pure=False)] if clock else []
        stop_sent = False
        while True:  # wait, watching for a pencil's worker to disappear and for a stop request
            try:
                wait(futures + extra, timeout=0.25 if stop is not None else 1.0)
                break
            except TimeoutError:
                if stop is not None and not stop_sent and stop():
                    from daskflow.ns.distributed import request_stop

                    self.client.run(request_stop, run_id, workers=sorted(set(owners)))
                    stop_sent = True
                gone = removed_workers(self.client, sorted(set(owners)))
                if gone:
                    alive = sorted(set(self.client.scheduler_info(n_workers=-1)["workers"]) - set(gone))
                    self.client.run(_abort, run_id, workers=alive)
                    self.client.cancel(futures + markers + extra, force=True)
                    raise WorkerLost(f"worker {gone[0]} was lost during a run") from None
        # outside the loop: a task's own TimeoutError (a peer's piece never came) must reach the caller
        _raise_root_cause(futures)
        return (futures, extra[0].result()) if clock else futures

    # ------------------------------------------------------------------ fields

    def _array(self, values) -> Any:
        """A Fortran-ordered copy on the simulation's device (the caller's array is never kept)."""
        return self.xp.array(values, dtype=self.config["solver"]["dtype"], order="F", copy=True)

    def set(self, **fields: Any) -> None:
        """Set ``u, v, w, p`` from arrays ``(nx, ny, nz)`` or functions ``f(x, y, z)`` evaluated at
        each variable's own staggered position."""
        if self._pencils is not None:  # on a cluster after a run: bring the current fields back first
            for name in "uvwp":
                setattr(self.state, name, np.asfortranarray(to_numpy(self._dask(name).compute())))
            self._pencils = None
        for name, value in fields.items():
            if name not in ("u", "v", "w", "p"):
                raise ValueError(f"set(): unknown field {name!r} (allowed: u, v, w, p)")
            component = {"u": 0, "v": 1, "w": 2, "p": None}[name]
            if isinstance(value, Callable):
                value = np.broadcast_to(value(*initial.positions(self.grid, component)), self.grid.shape)
            value = to_numpy(value)
            if value.shape != self.grid.shape:
                raise ValueError(f"set(): {name} must have shape {self.grid.shape}, got {value.shape}")
            setattr(self.state, name, self._array(value))
        for i, name in enumerate(("u", "v", "w")):  # the stored upper wall faces hold the wall values
            bc = self.boundaries.components[i]
            if bc.pairs[i] != "PP":
                setattr(self.state, name, wall_face(getattr(self.state, name), i, bc))

    def _initial(self) -> None:
        ini, physics = self.config["initial"], self.config["physics"]
        kind = ini["kind"]
        if kind == "uniform":
            self.set(**{c: np.full(self.grid.shape, v) for c, v in zip("uvw", ini["value"], strict=True)})
        elif kind == "poiseuille":
            self.set(u=initial.laminar_channel(self.grid, physics["nu"], physics["forcing"]))
        elif kind == "couette":
            self.set(u=initial.couette(self.grid, *self.boundaries.u.values[2]))
        elif kind == "taylor_green":
            u, v, w = initial.taylor_green(self.grid, ini["amplitude"] or 1.0)
            self.set(u=u, v=v, w=w)
        elif kind == "checkpoint":  # fields and clock of another run (a new run, its own store)
            from daskflow.io import store

            self._start_from(*store.read_checkpoint(ini["path"]))
        elif kind == "turbulent_channel":
            mean = {"log_law": initial.turbulent_channel_mean, "laminar": initial.laminar_channel}[ini["mean"]]
            base = mean(self.grid, physics["nu"], physics["forcing"])
            du, dv, dw = initial.channel_perturbation(self.grid, ini["amplitude"] * max(np.abs(base).max(), 1.0),
                                                      ini["seed"])
            self.set(u=base + du, v=dv, w=dw)

    def _dask(self, name: str):
        """Field ``name`` as a Dask array in x-pencil chunks (from the workers' pencils when the
        simulation runs on a cluster)."""
        import dask.array as da

        chunks = pencil_chunks(self.grid.shape, self.config["solver"]["pencils"])
        if self.client is None or self._pencils is None:
            return da.from_array(getattr(self.state, name), chunks=chunks, asarray=False)
        from dask.highlevelgraph import HighLevelGraph

        from daskflow.ns.distributed import field_of

        label = f"daskflow-{name}-{id(self)}-{self._runs}"
        dec = self._flow_plan.poisson_plan.decomposition
        graph = {(label, 0, *key): (field_of, pencil, name) for key, pencil in zip(dec.indices, self._pencils,
                                                                                    strict=True)}
        meta = np.empty((0, 0, 0), dtype=self.config["solver"]["dtype"])
        if self._flow_plan.device == "gpu":
            import cupy

            meta = cupy.empty((0, 0, 0), dtype=meta.dtype)
        return da.Array(HighLevelGraph.from_collections(label, graph), label, chunks, meta=meta)

    @property
    def u(self):
        return self._dask("u")

    @property
    def v(self):
        return self._dask("v")

    @property
    def w(self):
        return self._dask("w")

    @property
    def p(self):
        return self._dask("p")

    @property
    def where(self) -> str:
        """Where the simulation computes: ``in process on <device>`` or ``<n> cpu|gpu workers``."""
        from daskflow.backend import device_name

        if self.client is None:
            return f"in process on {device_name(self.xp)}"
        return f"{len(self._workers)} {self._flow_plan.device} workers"

    @property
    def time(self) -> float:
        return self.state.time

    @property
    def step(self) -> int:
        return self.state.step

    @property
    def dt(self) -> float:
        return self.state.dt

    # ------------------------------------------------------------------ running

    def run(self, steps: int | None = None, until: float | None = None,
            stop: Callable[[], bool] | None = None) -> Simulation:
        """Advance ``steps`` steps (default ``time.steps``) or until time ``until`` (default
        ``time.end_time`` when set); the last step is shortened to land on ``until``. ``stop``:
        polled while the run goes on; once it returns True the run ends after the current step
        (every pencil at the same step)."""
        from daskflow.ns.distributed import run_on_worker

        t = self.config["time"]
        until = until if until is not None else (t["end_time"] if steps is None else None)
        steps = steps if steps is not None else (None if until is not None else t["steps"])
        if self.client is None:
            self._in_process(lambda stepper, state: runs.advance_pencil(self._flow_plan, stepper, state, steps, until,
                                                                        stop))
            return self
        target = None if steps is None else self.state.step + steps
        failures = 0
        while True:
            try:
                remaining = None if target is None else target - self.state.step
                self._pencils, clock = self._submit(run_on_worker, remaining, until, stop is not None, clock=True,
                                                    stop=stop)
                break
            except WorkerLost as lost:
                failures += 1
                if failures > self.config["cluster"]["max_failures"]:
                    raise RuntimeError(f"daskflow: lost workers {failures} times ({lost}); giving up (cluster."
                                       f"max_failures = {self.config['cluster']['max_failures']}). The last complete "
                                       f"checkpoint in {self.store!r} is intact: resume with daskflow run --restart"
                                       ) from lost
                self._recover(lost)
        self.state.time, self.state.step, self.state.dt, self.state.forcing_gradient = clock
        return self

    def _recover(self, lost: Exception) -> None:
        """After a worker loss: wait for replacement workers, reload the last checkpoint, re-place
        the pencils (the next run continues from there)."""
        if self.store is None or not self.config["output"]["checkpoint_every"]:
            raise RuntimeError(f"daskflow: {lost}; no checkpoints are written (output.checkpoint_every), so the "
                               "run cannot recover") from lost
        logging.getLogger("daskflow").warning("%s; recovering from the last checkpoint", lost)
        n = len(self._workers)
        for attempt in range(10):  # the worker list can still change while the cluster recovers
            self.client.wait_for_workers(n, timeout=300)
            self._workers = live_workers(self.client, n)[:n]
            try:
                self._plans = scatter_per_worker(self.client, self._flow_plan, self._workers)  # new ones have none
                break
            except (KeyError, TimeoutError):  # a worker of that list left (or is paused) again
                if attempt == 9:
                    raise
                time.sleep(1.0)
        self._pencils = None  # the pencils are gone: the checkpoint replaces them
        self._load_checkpoint()

    def checkpoint(self) -> None:
        """Write a checkpoint of the current state now (needs ``output.store``)."""
        if self.store is None:
            raise ValueError("checkpoint(): config output.store is not set")
        if self.client is None:
            self._in_process(lambda stepper, state: runs.write_checkpoint(self._flow_plan, stepper, state))
            return
        from daskflow.ns.distributed import checkpoint_on_worker

        self._pencils = self._submit(checkpoint_on_worker)

    def finish(self) -> None:
        """End a run's output: a field snapshot of the current step (when ``output.fields_every`` is
        set) and a checkpoint of it, each unless the store already holds this step's; a no-op
        without ``output.store``."""
        if self.store is None:
            return
        from daskflow.io import store

        fields = bool(self.config["output"]["fields_every"]) and store.last_step(self.store, "fields") != self.step
        slot = store.current_slot(self.store)
        checkpoint = slot is None or (store.read_clock(self.store, slot) or {}).get("step") != self.step
        if not (fields or checkpoint):
            return
        if self.client is None:
            self._in_process(lambda stepper, state: runs.final_output(self._flow_plan, stepper, state, fields,
                                                                      checkpoint))
            return
        from daskflow.ns.distributed import final_on_worker

        self._pencils = self._submit(final_on_worker, fields, checkpoint)

    def diagnostics(self) -> dict:
        """The current ``scalars`` record: dt, CFL, max |div u|, bulk velocity, wall shear stresses,
        Re_tau, kinetic energy (reduced across the workers on a cluster)."""
        from daskflow.ns.distributed import diagnostics_on_worker

        if self.client is None:
            return self._in_process(lambda stepper, state: runs.diagnostics(self._flow_plan, stepper, state))[0]
        return self.client.gather(self._submit(diagnostics_on_worker)[0])

    def divergence_max(self) -> float:
        """Largest |div u| over the cells (reduced across workers on a cluster)."""
        return self.diagnostics()["div_max"]

    def bulk_velocity(self) -> float:
        """Volume-averaged streamwise velocity."""
        return self.diagnostics()["bulk_velocity"]
