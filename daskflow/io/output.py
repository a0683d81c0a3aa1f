"""Output from inside the time loop: scalars, profiles, field snapshots and checkpoints.

:class:`Output` is called after every step with the stepper and the state, on every participant of
the domain (the whole array in process, or every worker's pencil inside the fused task): the
reductions it needs are collectives of the domain, one participant (``domain.rank0``) keeps the
small records, and every participant writes the checkpoint chunks of its pencil. Field snapshots
and slices are stored in chunks sized for analysis, which span several pencils: each chunk is
gathered at one participant in an exchange of the run and written whole by it
(:func:`daskflow.io.chunks.write_record`). CuPy pieces travel as device arrays and are copied to the host by the
writer. Nothing passes through the client.

The small records (scalars, profiles) are buffered on ``rank0`` and appended in blocks: one resize
and one write per array for many records instead of per step. ``rank0`` commits the store
(:func:`daskflow.io.store.commit`: what readers see) after every field snapshot and slice record,
before every checkpoint, when :data:`FLUSH_RECORDS` records or :data:`FLUSH_SECONDS` have gone by, and at the end
of every run segment (:meth:`Output.finish`). A checkpoint is written only from a finite state.

The store's side of each of these goes through a :class:`~daskflow.io.writes.WriteQueue`. A run of
one pencil takes host copies of what is due and goes on stepping while a thread of the writer's own
writes them, in order (dask config ``daskflow.output-thread``); with several pencils, whose writes
are collective, every participant writes before its next step. Either way the end of a segment
waits for every write.
"""

from __future__ import annotations

import contextlib
import time

import numpy as np

from daskflow import settings
from daskflow.backend import array_module, device_constant, is_cupy_array, to_numpy
from daskflow.io import store
from daskflow.io.chunks import pencil_boxes, pencil_key, planes_box, write_record
from daskflow.io.writes import WriteQueue
from daskflow.ns import operators as ops
from daskflow.run_config import OutputConfig

C, LO, HI = ops.C, ops.LO, ops.HI


SCALAR_PARTS = ("rate", "div_max", "bottom", "top", "energy", "u_dz")  # what a pencil adds to a scalars record
COMBINE = ("max", "max", "sum", "sum", "sum", "sum")  # how the pencils' parts combine


def scalar_parts(stepper, state) -> list:
    """This pencil's parts of the ``scalars`` record, in :data:`SCALAR_PARTS` order, as 0-d arrays
    where the fields live (no wait for the device): the largest advective rate and divergence, the
    first cells' sums of u at each wall, the kinetic energy and the sum of ``u dz``. Pads the
    velocity (a halo exchange on pencils)."""
    from daskflow.ns.domain import weighted_sum

    domain, m, grid = stepper.domain, stepper.metrics, stepper.grid
    xp = array_module(state.u)
    dz = device_constant(xp, domain.dz())[None, None, :]  # uploaded once, not at every record
    rate = stepper.local_rate(state, host=False)  # before the padded copies exist (its temporaries)
    padded = domain.pad_velocity([state.u, state.v, state.w])

    def wall_sum(plane: int, holds_wall: bool):
        return state.u[:, :, plane].sum() if holds_wall else xp.zeros((), dtype=state.u.dtype)

    return [rate, abs(ops.divergence(*padded, m)).max(),
            wall_sum(0, domain.region[2].start == 0), wall_sum(-1, domain.region[2].stop == grid.shape[2]),
            (0.5 * (state.u**2 + state.v**2 + state.w**2) * dz).sum(), weighted_sum(state.u, domain.dz())]


def flow_scalars(stepper, state, nu: float) -> dict:
    """The ``scalars`` record of a state (collective: every participant calls it): ``dt``, ``cfl``
    (dt times the largest advective rate), ``div_max``, ``bulk_velocity``, wall shear stresses from
    the first cell at each wall, ``re_tau`` (half-height based) and ``kinetic_energy`` per volume.
    Two rounds: the halo exchange the divergence needs, and one reduction of everything else."""
    parts = scalar_parts(stepper, state)
    local = [float(v) for v in to_numpy(array_module(state.u).stack(parts))]  # one wait for the device
    totals = dict(zip(SCALAR_PARTS, stepper.domain.allreduce_many(local, COMBINE), strict=True))
    return scalars_record(stepper, state.dt, totals, nu)


def scalars_record(stepper, dt: float, totals: dict, nu: float) -> dict:
    """The ``scalars`` record (see :func:`flow_scalars`) of a step of size ``dt`` from the domain's
    ``totals`` of :data:`SCALAR_PARTS`."""
    grid = stepper.grid
    area = grid.shape[0] * grid.shape[1]
    u_walls, h = stepper.bcs.u.values[2], grid.dzf
    tau_bottom = nu * (totals["bottom"] / area - u_walls[0]) / (0.5 * h[0])
    tau_top = nu * (totals["top"] / area - u_walls[1]) / (0.5 * h[-1])
    tau = 0.5 * (abs(tau_bottom) + abs(tau_top))
    return {"dt": dt, "cfl": dt * totals["rate"], "div_max": totals["div_max"],
            "bulk_velocity": stepper.bulk_from_sum(totals["u_dz"]), "tau_wall_bottom": tau_bottom,
            "tau_wall_top": tau_top,
            "re_tau": float(np.sqrt(tau) * 0.5 * grid.lengths[2] / nu),
            "kinetic_energy": totals["energy"] / (area * grid.lengths[2])}


FLUSH_RECORDS = 256  # buffered scalars/profiles records appended in one block
FLUSH_SECONDS = 5.0  # ... or this often, so a live run can be watched


class StoreError(RuntimeError):
    """Writing the run's store failed (disk full, permissions, store removed)."""


class NonFiniteState(RuntimeError):
    """The flow is no longer finite: no checkpoint is written from it."""


def last_checkpoint(path: str) -> str:
    """What a restart of ``path`` would start from, in words."""
    if not store.exists(path):
        return "the store is gone, and its checkpoints with it"
    try:
        slot = store.current_slot(path)
        clock = None if slot is None else store.read_clock(path, slot)
    except (OSError, ValueError, KeyError):
        return "the store cannot be read"
    return "no checkpoint was written yet" if clock is None else f"the checkpoint of step {clock['step']} is kept"


@contextlib.contextmanager
def store_errors(path: str, step: int):
    """Turn an ``OSError`` of the store into a :class:`StoreError` naming the store, the step and
    what a restart would start from."""
    try:
        yield
    except (OSError, KeyError) as exc:  # KeyError: zarr found a node of the store missing
        reason = exc if isinstance(exc, OSError) else (
            "it was removed" if not store.exists(path) else f"its node {exc} is missing")
        raise StoreError(f"output store {path!r} failed at step {step} ({reason}); {last_checkpoint(path)}: free "
                         "space or fix the store, then restart") from exc


class Output:
    """The writer of the store ``path`` on a schedule of ``every`` (the run's ``output`` section)."""

    def __init__(self, path: str, every: OutputConfig, nu: float, background: bool = False) -> None:
        self.path, self.every, self.nu = path, every, nu
        self._background = background  # writes on a thread of their own (a run of one pencil)
        self._root = None
        self._pending: dict[str, list[dict]] = {"scalars": [], "profiles": []}  # the loop's, not yet handed over
        self._on_device: list[tuple] = []  # (time, step, dt, parts) of scalars records still on the GPU (scalars)
        self._stepper = None  # the stepper those records are of (one per run)
        self._touched: set[str] = set()  # groups whose metadata changed since the last commit (rank0; writes only)
        self._arrays: dict[str, dict] = {}  # records groups' arrays, opened at their first flush
        self._flushed = time.monotonic()
        self._queue: WriteQueue | None = None  # made at the first write
        self._copy: tuple = (None, None)  # (state and step, its host copy) of the last background write

    def _writes(self) -> WriteQueue:
        """The queue of this writer's store writes: in the background for a run of one pencil (no
        other participant waits on its writes), unless ``daskflow.output-thread`` is off."""
        if self._queue is None:
            self._queue = WriteQueue(self._background and settings.get("output-thread"))
        return self._queue

    def _submit(self, step: int, write) -> None:
        """Hand ``write`` (the store's side of an output of step ``step``) to the queue; its store
        errors name that step."""
        def guarded() -> None:
            with store_errors(self.path, step):
                write()

        self._writes().submit(guarded)

    def _host(self, arrays: dict) -> dict:
        """``arrays`` as a background write may hold them: host copies the loop cannot change
        (the arrays themselves when the writes are not in the background)."""
        if not self._writes().background:
            return arrays
        return {name: a.get() if is_cupy_array(a) else np.array(a) for name, a in arrays.items()}

    def _state_fields(self, state) -> dict:
        """The four fields of ``state`` as :meth:`_host` hands them to a write; a snapshot and a
        checkpoint of the same step share one host copy."""
        key = (id(state), state.step)
        if self._copy[0] != key:
            self._copy = (key, self._host({name: getattr(state, name) for name in store.FIELD_DIMS}))
        return self._copy[1]

    def _take_records(self) -> dict[str, list[dict]]:
        """The buffered records, handed over to a write (the loop buffers the next ones anew)."""
        if self._on_device:  # every record kept on the GPU since the last take, in one wait
            rows = to_numpy(array_module(self._on_device[0][-1]).stack([parts for *_, parts in self._on_device]))
            for (when, step, dt, _), row in zip(self._on_device, rows, strict=True):
                totals = dict(zip(SCALAR_PARTS, map(float, row), strict=True))
                self._pending["scalars"].append({"time": when, "step": step,
                                                 **scalars_record(self._stepper, dt, totals, self.nu)})
            self._on_device = []
        taken, self._pending = self._pending, {name: [] for name in self._pending}
        return taken

    @property
    def root(self):
        if self._root is None:
            self._root = store.open_for_write(self.path)
        return self._root

    def _due(self, kind: str, step: int) -> bool:
        n = getattr(self.every, f"{kind}_every")
        return n > 0 and step % n == 0

    def __call__(self, stepper, state) -> None:
        with store_errors(self.path, state.step):
            self._write_due(stepper, state)
            buffered = sum(map(len, self._pending.values())) + len(self._on_device)
            if stepper.domain.rank0 and (buffered >= FLUSH_RECORDS
                                         or time.monotonic() - self._flushed >= FLUSH_SECONDS):
                self.flush(state.step)

    def flush(self, step: int, commit: bool = False) -> None:
        """Append the buffered records and commit the store when there were any, when metadata
        changed since the last commit, or when ``commit`` (``rank0`` only: the other participants
        buffer and change nothing)."""
        records = self._take_records()
        self._flushed = time.monotonic()
        self._submit(step, lambda: self._append_and_commit(records, commit))

    def _append_and_commit(self, records: dict[str, list[dict]], commit: bool) -> None:
        """The store's side of :meth:`flush` (a write: on the queue's thread)."""
        if not (commit or self._touched or any(records.values())):
            return
        for name, rows in records.items():
            if rows:
                store.append_records(self._record_arrays(name), rows)
                self._touched.add(name)
        store.commit(self.path, changed=self._touched)
        self._touched.clear()

    def _record_arrays(self, group: str) -> dict:
        """The arrays of a records group (``scalars``, ``fields``, ``slices/z``, ...) by name, opened
        once per writer: each opening reads the array's metadata from the store. Only ``rank0`` grows
        the records, through these arrays, so their lengths stay current."""
        if group not in self._arrays:
            self._arrays[group] = dict(self.root[group].arrays())  # one listing: every member's metadata
        return self._arrays[group]

    def _reopened(self, groups, names) -> dict:
        """The arrays ``names`` of each group of ``groups`` as the store has them now, from one
        opening (a participant other than ``rank0``, after ``rank0`` grew or made them)."""
        root = store.open_for_write(self.path)
        return {group: {name: root[group][name] for name in names} for group in groups}

    def _grown(self, domain, groups, when: float, step: int) -> dict:
        """Each records group of ``groups`` one record longer, holding ``when`` and ``step``
        (``rank0`` grows them; collective): per group, its arrays as every participant writes them."""
        names = ("time", "step", *store.FIELD_DIMS)
        if domain.rank0:
            for group in groups:
                store.grow_time(self._record_arrays(group), names, when, step)
        domain.barrier()  # the time axes have grown before anyone writes into them
        if domain.rank0:
            return {group: self._record_arrays(group) for group in groups}
        return self._reopened(groups, names)

    def _write_snapshot(self, domain, arrays: dict, boxes: dict, values, by_field: bool = False) -> None:
        """The fields ``values`` (this pencil's blocks ``boxes``) into the last record of a records
        group's ``arrays`` (:meth:`_grown`; collective): every chunk is written by one participant
        (:func:`daskflow.io.chunks.write_record`), the four fields together, or one at a time when
        ``by_field`` and several participants (a writer then holds at most its chunks of one field)."""
        index = arrays["time"].shape[0] - 1
        batches = [(name,) for name in store.FIELD_DIMS] if by_field and not domain.single else [store.FIELD_DIMS]
        for batch in batches:
            write_record(domain, {name: arrays[name] for name in batch}, index, boxes,
                         None if values is None else {name: values[name] for name in batch})

    def final(self, stepper, state, fields: bool, checkpoint: bool) -> None:
        """The end of a run: the last field snapshot and a checkpoint of the last step (each only
        where the run's schedule did not already write it; collective)."""
        with self.closing_on_error(), store_errors(self.path, state.step):
            if fields:
                self.fields(stepper, state)
            if checkpoint:
                self.checkpoint(stepper, state)
        self.finish(stepper.domain, state.step)  # the last checkpoint's clock (rank0: nothing elsewhere)

    def finish(self, domain, step: int) -> None:
        """End of a run segment: everything written is committed, and every write is done."""
        with self.closing_on_error(), store_errors(self.path, step):
            if domain.rank0:
                self.flush(step)
        self.close()

    @contextlib.contextmanager
    def closing_on_error(self):
        """On an error inside, wait for the writes handed over so far and end the writer's thread
        (their own failure logged, not raised: the error inside is the run's), then raise it."""
        try:
            yield
        except BaseException:
            self.close(raise_errors=False)
            raise

    def close(self, raise_errors: bool = True) -> None:
        """Wait for every write handed over so far (a run stopping on an error: without
        ``raise_errors``, so that a failed write does not hide the run's own error)."""
        self._copy = (None, None)  # the last host copy goes with the writes that held it
        if self._queue is not None:
            self._queue.close(raise_errors)
            self._queue = None

    def _write_due(self, stepper, state) -> None:
        step = state.step
        if self._due("scalars", step):
            self.scalars(stepper, state)
        if self._due("profiles", step):
            self.profiles(stepper, state)
        if self._due("fields", step):
            self.fields(stepper, state)
        if self._due("slices", step) and self.every.slices.planes:
            self.slices(stepper, state)
        if self._due("checkpoint", step):
            self.checkpoint(stepper, state)

    # ------------------------------------------------------------------ records

    def scalars(self, stepper, state) -> None:
        if stepper.domain.single and is_cupy_array(state.u):
            # one pencil on a GPU has nothing to combine: the record's parts stay on the device until
            # the next flush takes them all in one wait, instead of a wait for the device at every
            # step (the main job writes one every step)
            self._stepper = stepper
            parts = array_module(state.u).stack(scalar_parts(stepper, state))
            self._on_device.append((state.time, state.step, state.dt, parts))
            return
        values = flow_scalars(stepper, state, self.nu)
        if stepper.domain.rank0:
            self._pending["scalars"].append({"time": state.time, "step": state.step, **values})

    def profiles(self, stepper, state) -> None:
        domain, grid = stepper.domain, stepper.grid
        U, V, W = domain.pad_velocity([state.u, state.v, state.w])
        P = state.p
        uc = 0.5 * (U[C, C, C] + U[LO, C, C])  # u at cell centres (x-average)
        vc = 0.5 * (V[C, C, C] + V[C, LO, C])
        uf = 0.5 * (uc + 0.5 * (U[C, C, HI] + U[LO, C, HI]))  # u at centre-x, z faces
        vf = 0.5 * (vc + 0.5 * (V[C, C, HI] + V[C, LO, HI]))
        w = W[C, C, C]
        terms = {"u": state.u, "v": state.v, "p": P, "uu": state.u**2, "vv": state.v**2, "pp": P**2, "uv": uc * vc,
                 "w": w, "ww": w**2, "uw": uf * w, "vw": vf * w}
        nz = grid.shape[2]
        names = store.PROFILES_CENTRES + store.PROFILES_FACES
        sums = np.zeros((len(names), nz))
        z = domain.region[2]
        for row, name in enumerate(names):
            sums[row, z] = to_numpy(terms[name].sum(axis=(0, 1)))
        sums = domain.allreduce_array(sums) / (grid.shape[0] * grid.shape[1])
        if domain.rank0:
            self._pending["profiles"].append({"time": state.time, "step": state.step,
                                              **dict(zip(names, sums, strict=True))})

    def fields(self, stepper, state) -> None:
        domain = stepper.domain
        values = self._state_fields(state)
        when, step = state.time, state.step  # now: the loop goes on before the write runs
        self._submit(step, lambda: self._write_fields(domain, when, step, values))

    def _write_fields(self, domain, when: float, step: int, values: dict) -> None:
        arrays = self._grown(domain, ["fields"], when, step)["fields"]
        self._write_snapshot(domain, arrays, pencil_boxes(domain.pencil_chunks), values, by_field=True)
        domain.barrier()
        if domain.rank0:  # every chunk of the snapshot is written: readers may see it (the records wait)
            self._touched.add("fields")
            self._append_and_commit({}, commit=True)

    def slices(self, stepper, state) -> None:
        """Planes of every field at the chosen cell centres, gathered into whole chunks."""
        domain, grid = stepper.domain, stepper.grid
        padded = domain.pad_velocity([state.u, state.v, state.w])  # collective: on every participant
        pencils = pencil_boxes(domain.pencil_chunks)
        mine = pencils[pencil_key(domain)]
        xp = array_module(state.u)
        records = {}  # axis name: (the pencils' boxes of its record, this pencil's planes or None)
        for axis_name, planes in self.every.slices.planes.items():
            axis = "xyz".index(axis_name)
            ks = store.slice_planes(grid, axis, planes)
            boxes = {key: planes_box(box, axis, ks) for key, box in pencils.items()}
            box = boxes[pencil_key(domain)]
            values = None
            if box is not None:  # this pencil holds planes box[axis] of the slice
                start = mine[axis].start
                values = self._host({
                    name: xp.stack([_plane(getattr(state, name), padded[c] if c < 3 else None, axis,
                                           int(ks[n]) - start, c == axis)
                                    for n in range(box[axis].start, box[axis].stop)], axis=axis)
                    for c, name in enumerate(store.FIELD_DIMS)})
            records[axis_name] = (boxes, values)
        del padded
        when, step = state.time, state.step
        self._submit(step, lambda: self._write_slices(domain, when, step, records))

    def _write_slices(self, domain, when: float, step: int, records: dict) -> None:
        grown = self._grown(domain, [f"slices/{axis_name}" for axis_name in records], when, step)
        for axis_name, (boxes, values) in records.items():
            self._write_snapshot(domain, grown[f"slices/{axis_name}"], boxes, values)
        domain.barrier()
        if domain.rank0:
            self._touched.add("slices")
            self._append_and_commit({}, commit=True)

    def checkpoint(self, stepper, state) -> None:
        """Write the state into the other slot and make it current. Refused (``NonFiniteState``, on
        every participant) when any value is NaN or infinite: the slots keep the last finite state."""
        domain = stepper.domain
        finite = all(bool(array_module(a).isfinite(a).all()) for a in (state.u, state.v, state.w, state.p))
        if domain.allreduce(0.0 if finite else 1.0, "max") > 0.0:  # one small round, on checkpoint steps only
            if domain.rank0:
                self.flush(state.step, commit=True)  # the records up to the blow-up: they show how it came
            self._writes().drain()
            raise NonFiniteState(f"the flow is no longer finite at step {state.step}: no checkpoint is written; "
                                 f"{last_checkpoint(self.path)}")
        values = self._state_fields(state)
        records = self._take_records()  # committed with the new slot, before the slot is written
        clock = {"time": state.time, "step": state.step, "dt": state.dt,
                 "forcing_gradient": float(state.forcing_gradient)}
        shape = stepper.grid.shape
        self._submit(clock["step"], lambda: self._write_checkpoint(domain, shape, values, records, clock))

    def _write_checkpoint(self, domain, shape: tuple, values: dict, records: dict, clock: dict) -> None:
        slot = store.next_slot(self.path)
        if domain.rank0:
            group, arrays = store.prepare_slot(self.root["checkpoint"], slot, shape,
                                               store.checkpoint_chunks(domain.pencil_chunks), values["u"].dtype,
                                               self.every.compression)
            self._touched.add("checkpoint")
            self._append_and_commit(records, commit=True)  # the records up to this step and the new slot first
        domain.barrier()
        if not domain.rank0:  # the slot as rank0 prepared it
            arrays = self._reopened([f"checkpoint/{slot}"], store.FIELD_DIMS)[f"checkpoint/{slot}"]
        # every chunk on disk, a missing one is damage: set on these arrays alone (zarr's global setting
        # is shared by the threads of an in-process team)
        every_chunk = {"write_empty_chunks": True}
        store.write_together([(arrays[name].with_config(every_chunk), domain.region, to_numpy(values[name]))
                              for name in store.FIELD_DIMS])
        domain.barrier()  # every pencil of the slot is on disk
        if domain.rank0:
            store.commit_checkpoint(self.path, slot, clock, group)
            self._touched.add("checkpoint")  # the slot's clock: in the next commit
        domain.barrier()


def _plane(field, padded, axis: int, k: int, staggered: bool):
    """Plane ``k`` (local index) of ``field`` along ``axis``; a component stored on faces normal to
    ``axis`` is averaged from its two faces to the cell centre, the lower one read from ``padded``
    (the component with one ghost layer, so the halo or wall face below the chunk is there)."""
    sl = [slice(None)] * 3
    sl[axis] = k
    if not staggered:
        return field[tuple(sl)]
    inner = [slice(1, -1)] * 3
    below, above = list(inner), list(inner)
    below[axis], above[axis] = k, k + 1  # padded index k is the face below plane k
    return 0.5 * (padded[tuple(below)] + padded[tuple(above)])
