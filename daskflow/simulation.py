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
(:mod:`daskflow.ns.distributed`). Fields enter the cluster on the workers: each builds its part of
the initial condition, reads its region of a checkpoint, or evaluates ``set()``'s functions on its
own coordinates (:mod:`daskflow.ns.placement`).
"""

from __future__ import annotations

import copy
import dataclasses
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from daskflow.backend import cupy_or_none, to_numpy
from daskflow.config import load, updated
from daskflow.ns import boundaries as nsb
from daskflow.ns import initial
from daskflow.ns.distributed import WorkerLost, WorkerPencils, removed_workers, worker_device
from daskflow.ns.domain import FlowPlan, wall_face
from daskflow.ns.local import LocalPencils
from daskflow.ns.placement import COMPONENTS
from daskflow.ns.stepper import State, Stepper
from daskflow.pencils.graph import live_workers
from daskflow.pencils.layout import pencil_chunks
from daskflow.run_config import RunConfig

__all__ = ["Simulation", "WorkerLost", "check", "check_restart", "removed_workers"]


def check(config: RunConfig) -> None:
    """Everything a configuration implies that :func:`daskflow.config.load` cannot see alone (grid,
    boundaries, forcing, decomposition), without starting anything; raises ``ValueError`` naming the
    setting."""
    from daskflow.bc import Boundaries
    from daskflow.poisson.plan import SpectralPlan

    grid = config.grid.mesh
    try:
        bcs = nsb.build(config.boundaries)
    except ValueError as exc:
        raise ValueError(f"config {exc}") from exc
    kind = config.physics.forcing.kind
    if kind != "none" and not bcs.periodic(0):
        raise ValueError(f"config physics.forcing.kind: {kind!r} needs a periodic x direction")
    if config.initial.kind == "checkpoint":
        _check_initial_checkpoint(config.initial.path, grid.shape)
    s = config.solver
    pencils = (1, 1) if s.pencils == "auto" else s.pencils  # auto: [1, 1] fits every valid grid
    methods = ("ptdma", "ftm") if s.poisson == "auto" else (s.poisson,)
    errors = []
    for method in methods:  # poisson: auto needs one method that fits
        try:
            SpectralPlan(grid, Boundaries.parse(bcs.p, "ccc"), 0.0, 1.0, method, pencils, np.dtype(s.dtype))
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


def check_restart(store_path: str, config: RunConfig) -> None:
    """Refuse a restart of ``store_path`` with ``config`` (a loaded configuration) that would not
    continue the same flow, naming the setting and both values, or that asks for output the store
    has no place for. The store holds the configuration as a dict: it is compared with ``config``'s."""
    from daskflow.io import store

    stored, plain = store.root_config(store_path), config.to_dict()
    for path in RESTART_FIXED:
        old, new = stored, plain
        for key in path:
            old, new = old[key], new[key]
        if old != new:
            raise ValueError(f"restart: config {'.'.join(path)} is {new!r}, the store's run has {old!r}; a restart "
                             "continues the same flow: only the decomposition, cluster, time and output may change")
    unmatched = store.unmatched_slices(store_path, config.output.slices, config.grid.mesh)
    if unmatched:
        raise ValueError(f"config output.slices: the store has no slices along {', '.join(unmatched)} at these "
                         "planes (it was created without them, or with others); restart with the store's slices, "
                         "or start a new store")


class Simulation:
    """An incompressible DNS configured by ``config``: a :class:`~daskflow.run_config.RunConfig`, a dict
    or a YAML path (validated by :func:`daskflow.config.load`); ``self.config`` is the ``RunConfig``."""

    def __init__(self, config: RunConfig | dict | str | Path, client=None, _restart: bool = False,
                 _stored_solver=None) -> None:
        self.config = load(config)
        check(self.config)
        self.autotune = None  # the AutotuneResult when solver.pencils, solver.poisson or cluster.comm was auto
        self._tuned_comm = None  # the exchanges' backend the autotuner timed fastest (cluster.comm: auto)
        # cluster.comm: auto is timed on a cluster of several workers (one exchanges nothing)
        time_comm = client is not None and self.config.cluster.comm == "auto" and len(live_workers(client)) > 1
        if "auto" in (self.config.solver.pencils, self.config.solver.poisson) or time_comm:
            self._resolve_auto(client, _stored_solver, time_comm)
        cfg = self.config
        self.grid = cfg.grid.mesh
        self.boundaries = nsb.build(cfg.boundaries)
        device = cfg.solver.device
        gpu = cupy_or_none() if device in ("auto", "gpu") else None
        if device == "gpu" and gpu is None:
            raise ValueError("config solver.device: 'gpu' needs CuPy and a CUDA device")
        self.xp = gpu or np
        self.client = client
        s = cfg.solver
        if client is not None:
            self.xp = np  # the host view of the fields (the workers hold them: set() and restarts place them there)
        elif self.xp is not np:  # the GPU transforms' modules are loaded with the set-up, not in the first step
            from daskflow.poisson.stages import gpu_irfft2

            gpu_irfft2()
        zeros = [self.xp.zeros(self.grid.shape, dtype=s.dtype, order="F") for _ in range(4)]
        self.state = State(*zeros)
        self.store = cfg.output.store
        self._local: LocalPencils | None = None  # in process: made at the first use
        self._cluster: WorkerPencils | None = None  # on a cluster: made below
        self._flow_plan = self._make_plan("cpu" if self.xp is np else "gpu")
        if client is not None:
            self._flow_plan = self._make_plan(worker_device(client, device))
            self._cluster = WorkerPencils(client, self._flow_plan, self._tuned_comm or cfg.cluster.comm, self.store)
        if _restart:
            self._load_checkpoint()
        else:
            self._initial()
            if self.store is not None:
                from daskflow.io import store
                from daskflow.version import __version__

                store.create(self.store, self.config, self.grid, pencil_chunks(self.grid.shape, s.pencils),
                             __version__, first_step=self.state.step)
        # the step this run started from (time.steps counts from it, restarts included)
        self.first_step = self._first_step() if _restart else self.state.step
        if self._cluster is not None and self.store is not None:
            from daskflow.io import store

            store.record_exchanges(self.store, self._cluster.comm, len(self._cluster.workers),
                                   "timed" if self._tuned_comm else "setting")
        if not _restart and self.store is not None and cfg.output.fields_every:
            self._initial_fields()

    def _initial_fields(self) -> None:
        """The field snapshot of the initial state (the run's first record of ``fields``)."""
        self._pencils_here.final(self.state, True, False)

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

    def _resolve_auto(self, client, stored: dict | None, time_comm: bool) -> None:
        """Replace ``solver.pencils: auto`` / ``solver.poisson: auto`` by concrete values in
        ``self.config`` (so the store and restarts record them), and resolve ``cluster.comm: auto`` on
        a cluster by timing: the checkpoint's own pencils and method when a restart runs on the same
        cluster shape (``py * pz`` workers; in process one), else the autotuner's
        (:mod:`daskflow.autotune`; in process ``pencils: auto`` is ``[1, 1]``). The backend the
        autotuner picks is not written into the configuration (the store and restarts keep
        ``auto``, which another cluster resolves by its own timing); the store notes it apart.
        ``time_comm``: whether ``cluster.comm: auto`` is to be timed here."""
        from daskflow import autotune

        s = self.config.solver
        pencils, poisson, note = s.pencils, s.poisson, ""
        workers = 1 if client is None else len(live_workers(client))
        if stored is not None and stored["pencils"] != "auto" and stored["poisson"] != "auto":
            same_shape = stored["pencils"][0] * stored["pencils"][1] == workers
            if same_shape and s.pencils in ("auto", tuple(stored["pencils"])):
                pencils = tuple(stored["pencils"])
                poisson = stored["poisson"] if s.poisson == "auto" else s.poisson
                note = "pencils and poisson kept from the checkpoint: same cluster shape"
                if not time_comm:
                    self.autotune = autotune.AutotuneResult(pencils, poisson, note=note)
                    self._choose(self.autotune)
                    return
        if s.device == "gpu" and client is None and cupy_or_none() is None:
            raise ValueError("config solver.device: 'gpu' needs CuPy and a CUDA device")
        try:
            self.autotune = autotune.autotune(self.config.grid.mesh, nsb.build(self.config.boundaries).p, s.dtype,
                                              client, pencils, poisson, s.device, comm=self.config.cluster.comm)
        except ValueError as exc:
            raise ValueError(f"config {exc}") from exc
        if note:
            self.autotune.note = note
        if self.config.cluster.comm == "auto" and len({row["comm"] for row in self.autotune.table}) > 1:
            self._tuned_comm = self.autotune.comm  # timed among several backends (else the setting decides)
        self._choose(self.autotune)

    def _choose(self, result) -> None:
        """``self.config`` with the decomposition and pressure solver of an :class:`AutotuneResult`."""
        solver = dataclasses.replace(self.config.solver, pencils=tuple(result.pencils), poisson=result.method)
        self.config = dataclasses.replace(self.config, solver=solver)

    def _load_checkpoint(self) -> None:
        from daskflow.io import store

        fields, clock = self._read_checkpoint(self.store)
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

    def _read_checkpoint(self, path: str) -> tuple[dict | list, dict]:
        """The latest intact checkpoint of ``path`` (:func:`daskflow.io.store.read_checkpoint`): its
        fields read here, or, on a cluster, its pencils read and verified by their workers from the
        slot chosen here (only the slots' metadata is read here), and its clock."""
        from daskflow.io import store

        if self._cluster is None:
            return store.read_checkpoint(path)
        return store.read_checkpoint(path, lambda slot, clock: self._cluster.read(path, slot, clock))

    def _start_from(self, fields: dict | list, clock: dict) -> None:
        """Set the fields (on a cluster already placed by :meth:`_read_checkpoint`) and the clock
        (time, step, dt, forcing gradient) of a checkpoint."""
        if self._cluster is None:
            self.set(**fields)
        self.state.time, self.state.step = clock["time"], clock["step"]
        self.state.dt, self.state.forcing_gradient = clock["dt"], clock["forcing_gradient"]

    # ------------------------------------------------------------------ cluster

    def _make_plan(self, device: str) -> FlowPlan:
        """What every participant needs to step its pencil on ``device`` (``cpu`` or ``gpu``)."""
        from daskflow.bc import Boundaries
        from daskflow.poisson.plan import SpectralPlan

        cfg = self.config
        s, physics = cfg.solver, cfg.physics
        pressure = SpectralPlan(self.grid, Boundaries.parse(self.boundaries.p, "ccc"), 0.0, 1.0, s.poisson,
                                s.pencils, np.dtype(s.dtype))
        return FlowPlan(self.grid, self.boundaries, physics.nu, physics.forcing, cfg.time.implicit_diffusion, cfg.time,
                        pressure, device, cfg.output if self.store else None, s.z_solve, physics.advection,
                        cfg.initial)

    # ------------------------------------------------------------------ where the pencils are

    @property
    def _pencils_here(self) -> LocalPencils | WorkerPencils:
        """The pencils' owners: the cluster's workers, or participants in this process."""
        return self._cluster if self._cluster is not None else self._local_pencils()

    def _local_pencils(self) -> LocalPencils:
        if self._local is None:
            self._local = LocalPencils(self._flow_plan)
        return self._local

    @property
    def stepper(self) -> Stepper:
        """The stepper of the first in-process participant (the whole field with one pencil)."""
        return self._local_pencils().steppers[0]

    @property
    def comm(self) -> str | None:
        """The transport of the exchanges between workers (``None`` in process)."""
        return None if self._cluster is None else self._cluster.comm

    @comm.setter
    def comm(self, value: str) -> None:
        self._cluster.comm = value

    # ------------------------------------------------------------------ fields

    def _array(self, values) -> Any:
        """A Fortran-ordered copy on the simulation's device (the caller's array is never kept)."""
        return self.xp.array(values, dtype=self.config.solver.dtype, order="F", copy=True)

    def set(self, **fields: Any) -> None:
        """Set ``u, v, w, p`` from arrays ``(nx, ny, nz)`` or functions ``f(x, y, z)`` evaluated at
        each variable's own staggered position (broadcastable coordinate arrays, see
        :func:`daskflow.ns.initial.positions`). The other fields are kept.

        On a cluster, the functions are sent to the workers (pickled: lambdas and closures work) and
        every worker evaluates them on the coordinates of its own pencil, so a function must compute
        each point from that point's coordinates alone (pointwise, as NumPy's ufuncs and
        broadcasting do); no field passes through the client for them. Arrays are cut into pencils
        here and each pencil is sent from here to its worker."""
        for name in fields:
            if name not in ("u", "v", "w", "p"):
                raise ValueError(f"set(): unknown field {name!r} (allowed: u, v, w, p)")
        arrays = {name: self._checked(name, value) for name, value in fields.items() if not callable(value)}
        if self._cluster is not None:
            self._cluster.set(self.state, arrays, {name: f for name, f in fields.items() if callable(f)})
            return
        for name, value in fields.items():
            if callable(value):
                value = self._checked(name, np.broadcast_to(value(*initial.positions(self.grid, COMPONENTS[name])),
                                                            self.grid.shape))
            else:
                value = arrays[name]
            setattr(self.state, name, self._array(value))
        for i, name in enumerate(("u", "v", "w")):  # the stored upper wall faces hold the wall values
            bc = self.boundaries.components[i]
            if bc.pairs[i] != "PP":
                setattr(self.state, name, wall_face(getattr(self.state, name), i, bc))

    def _checked(self, name: str, value) -> np.ndarray:
        """``value`` as a host array of the grid's shape (else ``ValueError``)."""
        value = to_numpy(value)
        if value.shape != self.grid.shape:
            raise ValueError(f"set(): {name} must have shape {self.grid.shape}, got {value.shape}")
        return value

    def _initial(self) -> None:
        """The initial condition of ``config.initial``: evaluated by every participant on its own
        pencil, or the fields and clock of another run's checkpoint (on a cluster, read by the
        workers, each its own pencil: no field passes through the client)."""
        ini = self.config.initial
        if ini.kind == "checkpoint":  # fields and clock of another run (a new run, its own store)
            self._start_from(*self._read_checkpoint(ini.path))
            return
        self._pencils_here.initialize(self.state)

    def _dask(self, name: str):
        """Field ``name`` as a Dask array in x-pencil chunks (from the workers' pencils when the
        simulation runs on a cluster)."""
        import dask.array as da

        cluster = self._cluster
        if cluster is None or cluster.pencils is None:
            chunks = pencil_chunks(self.grid.shape, self.config.solver.pencils)
            return da.from_array(getattr(self.state, name), chunks=chunks, asarray=False)
        return cluster.field(name, self.config.solver.dtype, f"daskflow-{name}-{id(self)}-{cluster.runs}")

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

        if self._cluster is None:
            return f"in process on {device_name(self.xp)}"
        n = len(self._cluster.workers)
        return f"{n} {self._flow_plan.device} worker{'s' if n > 1 else ''}"

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
        t = self.config.time
        until = until if until is not None else (t.end_time if steps is None else None)
        steps = steps if steps is not None else (None if until is not None else t.steps)
        if self._cluster is None:
            self._pencils_here.advance(self.state, steps, until, stop)
        else:
            self._cluster.advance(self.state, steps, until, stop, self.config.cluster.max_failures, self._recover)
        return self

    def set_time(self, **values: Any) -> None:
        """Change ``time`` settings (``dt``, ``cfl``, ``dt_max``, ``steps``, ``end_time``) for the runs that
        follow, validated as a configuration is: ``sim.set_time(dt=0.01)``."""
        self.config = updated(self.config, time=values)
        self._flow_plan.time = self.config.time
        if self._cluster is not None:
            self._cluster.place_plans()

    def _recover(self, lost: Exception) -> None:
        """After a worker loss: wait for replacement workers, reload the last checkpoint, re-place
        the pencils (the next run continues from there)."""
        if self.store is None or not self.config.output.checkpoint_every:
            raise RuntimeError(f"daskflow: {lost}; no checkpoints are written (output.checkpoint_every), so the "
                               "run cannot recover") from lost
        self._cluster.rejoin()
        self._load_checkpoint()

    def checkpoint(self) -> None:
        """Write a checkpoint of the current state now (needs ``output.store``)."""
        if self.store is None:
            raise ValueError("checkpoint(): config output.store is not set")
        self._pencils_here.checkpoint(self.state)

    def finish(self) -> None:
        """End a run's output: a field snapshot of the current step (when ``output.fields_every`` is
        set) and a checkpoint of it, each unless the store already holds this step's; a no-op
        without ``output.store``."""
        if self.store is None:
            return
        from daskflow.io import store

        fields = bool(self.config.output.fields_every) and store.last_step(self.store, "fields") != self.step
        slot = store.current_slot(self.store)
        checkpoint = slot is None or (store.read_clock(self.store, slot) or {}).get("step") != self.step
        if not (fields or checkpoint):
            return
        self._pencils_here.final(self.state, fields, checkpoint)

    def diagnostics(self) -> dict:
        """The current ``scalars`` record: dt, CFL, max |div u|, bulk velocity, wall shear stresses,
        Re_tau, kinetic energy (reduced across the workers on a cluster)."""
        return self._pencils_here.diagnostics(self.state)

    def divergence_max(self) -> float:
        """Largest |div u| over the cells (reduced across workers on a cluster)."""
        return self.diagnostics()["div_max"]

    def bulk_velocity(self) -> float:
        """Volume-averaged streamwise velocity."""
        return self.diagnostics()["bulk_velocity"]
