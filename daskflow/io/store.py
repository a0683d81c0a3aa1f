"""The Zarr (v3) store of a run: layout, creation, checkpoint slots, restart truncation.

Layout (each group opens with ``xarray.open_zarr(store, group=...)``):

* root attributes: ``config`` (the full validated configuration), ``grid``, ``daskflow_version``,
  ``first_step`` (the step of the run's initial state), ``exchanges`` (the transport that ran);
* ``fields``: ``u (time, xf, y, z)``, ``v (time, x, yf, z)``, ``w (time, x, y, zf)``,
  ``p (time, x, y, z)`` and ``step (time)``, from the initial state on; one Zarr chunk holds whole
  x-y planes of one snapshot, as many z planes as fit in :data:`CHUNK_BYTES` (a plane larger than
  that is cut along y), so a small snapshot is a single chunk (:func:`record_chunks`);
* ``profiles``: plane averages ``u, v, p, uu, vv, pp, uv`` on ``(time, z)`` and ``w, ww, uw, vw`` on
  ``(time, zf)``, plus ``step``;
* ``scalars``: ``step, dt, cfl, div_max, bulk_velocity, tau_wall_bottom, tau_wall_top, re_tau,
  kinetic_energy`` versus ``time``;
* ``slices/x``, ``slices/y``, ``slices/z``: planes at the cell centres nearest the configured
  coordinates, the cut axis keeping only those centres (``u (time, x, y, z)`` with ``x`` the chosen
  planes for an x cut); components staggered along the cut axis are averaged to the plane;
* ``checkpoint``: two slots ``a`` and ``b`` holding ``u, v, w, p`` and the clock in attributes; the
  file ``checkpoint/CURRENT`` names the slot of the latest *complete* checkpoint. A checkpoint is
  written into the other slot (whose clock is removed first) and the name is switched by an atomic
  rename after its files are synced to disk, so a crash at any instant leaves the previous
  checkpoint intact. On fsspec URLs (object stores) the name is the ``current`` attribute of the
  ``checkpoint`` group, replaced in one write. Every checkpoint chunk carries a CRC32C checksum;
  :func:`read_checkpoint` verifies them and that no chunk is missing, and falls back to the other
  slot when the current one is damaged. It reads the fields itself, or lets the workers of a
  cluster read and verify the region each owns (:func:`read_region`) from the slot it chose.

**What readers see.** The store's metadata is consolidated at its root, and the consolidated copy
is the *committed* view: a record (scalars, profiles, a field snapshot, slices) is written into the
arrays first and becomes visible only when the writer consolidates again (:func:`commit`), after
all of its arrays hold it. ``xarray.open_zarr(store, group=...)`` and ``zarr.open_group`` read that
view, so a store killed at any instant opens with the records committed before the kill, every
time dimension consistent. Writers open the live arrays with :func:`open_for_write`; a restart
drops whatever lies beyond the committed length (:func:`truncate_after`).

**Who writes a chunk.** Chunks are sized for analysis, not for the decomposition: one chunk
usually spans several pencils. Every chunk of a record has exactly one writer, the participant
holding most of it (ties go to the one with the least to write), which receives the other parts
from the pencils that hold them in one exchange of the run and writes the whole chunk at once
(:func:`daskflow.io.chunks.write_record`): no chunk is ever written by two participants, nor
read back and rewritten. The same holds for any decomposition and any store, so a restart may
use other pencils than the run that created the store (stores written before kept chunks tiling
their pencils; they are written the same way). Sharded arrays of older stores are written shard
by shard. ``output.shards`` is accepted for older configurations: new stores need no shards,
their chunks being already few and large.

Every variable and coordinate carries CF-style ``long_name`` and ``units`` attributes
(:func:`attributes`). Coordinates hold the grid's exact positions: ``x, y, z`` cell centres,
``xf, yf, zf`` the upper faces of the cells (where the staggered components live; ``zf[-1]`` is
the top wall).

This module creates a store and keeps its checkpoints; the names of the stored variables and their
attributes are in :mod:`daskflow.io.layout`, where a store lives and its two views in
:mod:`daskflow.io.access`, the time records in :mod:`daskflow.io.records` (all of them also
importable from here).
"""

from __future__ import annotations

import itertools
import os
import shutil
import uuid
from pathlib import Path

import numpy as np
import zarr

from daskflow.grid import Grid
from daskflow.io.access import commit, exists, is_local, open_for_write
from daskflow.io.layout import (
    FIELD_DIMS,
    LONG_NAMES,
    PROFILES_CENTRES,
    PROFILES_FACES,
    SCALARS,
    UNITS,
    attributes,
    compressors,
    coordinates,
    slice_planes,
    write_unit,
)
from daskflow.io.records import (
    append_records,
    first_step,
    grow_time,
    last_step,
    record_exchanges,
    root_config,
    time_groups,
    truncate_after,
    unmatched_slices,
    write_together,
)
from daskflow.run_config import RunConfig

__all__ = [
    "CHUNK_BYTES", "CREATED_HERE", "FIELD_DIMS", "LONG_NAMES", "PROFILES_CENTRES", "PROFILES_FACES", "SCALARS",
    "SLOTS", "UNITS", "CheckpointError", "append_records", "attributes", "checkpoint_chunks", "clear_slot", "commit",
    "commit_checkpoint", "coordinates", "create", "current_slot", "exists", "first_step", "grow_time",
    "has_checkpoint", "is_local", "last_step", "next_slot", "open_for_write", "prepare_slot", "read_checkpoint",
    "read_clock", "read_region", "record_chunks", "record_exchanges", "root_config", "set_current", "slice_planes",
    "slot_clock", "sync_to_disk", "time_groups", "truncate_after", "unmatched_slices", "write_together",
    "write_unit",
]

SLOTS = ("a", "b")

#: bytes a chunk of a field snapshot or slice aims at (see :func:`record_chunks`)
CHUNK_BYTES = 16 << 20


def record_chunks(shape, itemsize: int, target: int | None = None) -> tuple[int, int, int]:
    """Zarr chunk of one record of shape ``(nx, ny, nz)`` (a field snapshot, or a slice whose cut
    axis holds its planes): whole along x and y, as many z planes as fit in ``target`` bytes
    (:data:`CHUNK_BYTES`), split evenly; when one x-y plane is larger than ``target``, one z plane
    cut evenly along y. A record smaller than ``target`` is one chunk; any other chunk holds at
    least half of ``target``."""
    target = CHUNK_BYTES if target is None else int(target)
    nx, ny, nz = (int(n) for n in shape)

    def even(n: int, most: int) -> int:  # the size that cuts n into equal chunks of at most `most`
        most = max(1, min(n, most))
        return -(-n // -(-n // most))

    plane = nx * ny * itemsize
    if plane <= target:
        return nx, ny, even(nz, target // plane)
    return nx, even(ny, target // (nx * itemsize)), 1


def checkpoint_chunks(pencil_chunks: tuple) -> tuple[int, int]:
    """Chunks of a checkpoint slot along y and z: one per pencil (the pencils' common divisor for
    uneven splits), so every participant writes its own chunks. Slots are re-chunked for whichever
    decomposition writes them, so nothing else constrains them, and few large chunks keep a
    checkpoint's writes, syncs and checksums cheap."""
    return tuple(int(np.gcd.reduce(np.asarray(sizes))) for sizes in pencil_chunks[1:])


def create(path: str, config: RunConfig, grid: Grid, pencil_chunks: tuple, version: str, first_step: int = 0) -> None:
    """Create the store of a run of ``config`` on ``grid`` (its ``config.to_dict()`` in the root
    attributes). Fails if ``path`` exists: a run never overwrites earlier output;
    ``first_step`` is the step of the run's initial state (non-zero when it starts from another
    run's checkpoint). A local store is built beside ``path`` and renamed into place once complete,
    so an interrupted creation never leaves a half-made store behind."""
    if exists(path):
        raise ValueError(f"config output.store: {path!r} already exists; choose a new store or restart from it")
    if not is_local(path):
        _build(path, config, grid, pencil_chunks, version, first_step)
    else:
        final = Path(str(path).removeprefix("file://"))
        building = final.with_name(f".{final.name}.{uuid.uuid4().hex[:8]}.creating")
        try:
            _build(str(building), config, grid, pencil_chunks, version, first_step)
            os.rename(building, final)
        finally:
            shutil.rmtree(building, ignore_errors=True)
    CREATED_HERE.add(str(path))


#: stores this process created (only those may be removed after a start that failed)
CREATED_HERE: set[str] = set()


def _build(path: str, config: RunConfig, grid: Grid, pencil_chunks: tuple, version: str, first_step: int) -> None:
    root = zarr.open_group(path, mode="w-", use_consolidated=False)
    root.attrs.update({"config": config.to_dict(), "daskflow_version": version, "first_step": int(first_step),
                       "grid": {"shape": list(grid.shape), "lengths": list(grid.lengths),
                                "z_stretch": grid.z_stretch, "z_cluster": grid.z_cluster}})
    dtype = config.solver.dtype
    codecs = compressors(config.output.compression)
    coords = coordinates(grid)
    nx, ny, nz = grid.shape
    itemsize = np.dtype(dtype).itemsize

    def axis_coords(group, names):
        for name in names:
            group.create_array(name, data=coords[name], dimension_names=[name], attributes=attributes(name))

    fields = root.create_group("fields")
    axis_coords(fields, coords)
    _time_axis(fields)
    for name, dims in FIELD_DIMS.items():
        fields.create_array(name, shape=(0, nx, ny, nz), chunks=(1, *record_chunks(grid.shape, itemsize)),
                            dtype=dtype, dimension_names=["time", *dims], compressors=codecs,
                            attributes=attributes(name))
    profiles = root.create_group("profiles")
    axis_coords(profiles, ("z", "zf"))
    _time_axis(profiles)
    for names, dim in ((PROFILES_CENTRES, "z"), (PROFILES_FACES, "zf")):
        for name in names:
            profiles.create_array(name, shape=(0, nz), chunks=(64, nz), dtype="f8", dimension_names=["time", dim],
                                  attributes=attributes(name, "profiles"))
    scalars = root.create_group("scalars")
    _time_axis(scalars)
    for name in SCALARS[1:]:
        scalars.create_array(name, shape=(0,), chunks=(4096,), dtype="f8", dimension_names=["time"],
                             attributes=attributes(name))
    slices = config.output.slices.to_dict()
    if slices:
        slice_root = root.create_group("slices")
        for axis_name, planes in slices.items():
            axis = "xyz".index(axis_name)
            index = slice_planes(grid, axis, planes)
            group = slice_root.create_group(axis_name)
            kept = {name: dims for name, dims in coords.items() if name[0] != axis_name}
            axis_coords(group, kept)
            group.create_array(axis_name, data=coords[axis_name][index], dimension_names=[axis_name],
                               attributes=attributes(axis_name))
            _time_axis(group)
            for name, dims in FIELD_DIMS.items():
                dims = tuple(axis_name if d[0] == axis_name else d for d in dims)
                shape = [nx, ny, nz]
                shape[axis] = len(index)
                group.create_array(name, shape=(0, *shape), chunks=(1, *record_chunks(shape, itemsize)), dtype=dtype,
                                   dimension_names=["time", *dims], compressors=codecs,
                                   attributes=attributes(name))
    checkpoint = root.create_group("checkpoint")
    for slot in SLOTS:
        prepare_slot(checkpoint, slot, grid.shape, checkpoint_chunks(pencil_chunks), dtype,
                     config.output.compression)
    commit(path)


def prepare_slot(checkpoint, slot: str, shape, chunks, dtype, compression: str) -> tuple:
    """Make checkpoint ``slot`` ready for a new checkpoint: its clock goes first (a slot without a
    clock is never read, so one left half-written by a crash cannot pass for the checkpoint it
    replaced), then its arrays are (re)created with chunks tiling the writer's pencils, unless they
    already have that layout (the new checkpoint rewrites every chunk). Only the other, non-current
    slot is ever touched. Returns the slot's group and its arrays by name."""
    group = checkpoint.require_group(slot)
    if "clock" in group.attrs:
        del group.attrs["clock"]
    nx, ny, nz = shape
    codecs = compressors(compression, checksum=True)
    arrays = {}
    existing = dict(group.arrays())  # one listing: every array's metadata read together
    for name in FIELD_DIMS:
        array = existing.get(name)
        if array is None or not _same_layout(array, (nx, ny, nz), (nx, *chunks), dtype, codecs):
            array = group.create_array(name, shape=(nx, ny, nz), chunks=(nx, *chunks), dtype=dtype,
                                       compressors=codecs, overwrite=True)
        arrays[name] = array
    return group, arrays


def _same_layout(array, shape, chunks, dtype, codecs) -> bool:
    return (array.shape == tuple(shape) and array.chunks == tuple(chunks) and array.dtype == np.dtype(dtype)
            and tuple(array.compressors) == tuple(codecs))


def _time_axis(group) -> None:
    group.create_array("time", shape=(0,), chunks=(4096,), dtype="f8", dimension_names=["time"],
                       attributes=attributes("time"))
    group.create_array("step", shape=(0,), chunks=(4096,), dtype="i8", dimension_names=["time"],
                       attributes=attributes("step"))


# ------------------------------------------------------------------------------- checkpoints


def _pointer(path: str) -> Path:
    return Path(str(path).removeprefix("file://")) / "checkpoint" / "CURRENT"


def current_slot(path: str) -> str | None:
    """Slot of the latest complete checkpoint as the pointer names it, or ``None`` (no pointer, or
    one that names no slot: :func:`read_checkpoint` then looks at both slots)."""
    if not is_local(path):
        slot = zarr.open_group(path, mode="r", use_consolidated=False)["checkpoint"].attrs.get("current")
    else:
        pointer = _pointer(path)
        slot = pointer.read_text(errors="replace").strip() if pointer.exists() else None
    return slot if slot in SLOTS else None


def next_slot(path: str) -> str:
    """The slot the next checkpoint overwrites: never the current one (nor, without a pointer,
    the one with the later clock)."""
    current = current_slot(path)
    if current is None:
        steps = {slot: (_quiet_clock(path, slot) or {}).get("step", -1) for slot in SLOTS}
        return min(SLOTS, key=steps.__getitem__)
    return SLOTS[0] if current != SLOTS[0] else SLOTS[1]


def sync_to_disk(directory: Path) -> None:
    """``fsync`` every file under ``directory`` and the directories themselves, so what a pointer
    is about to name has reached the disk before the pointer moves."""
    for folder, _, files in os.walk(directory):
        for name in files:
            fd = os.open(os.path.join(folder, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _sync_directory(folder)


def _sync_directory(folder) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def commit_checkpoint(path: str, slot: str, clock: dict, group) -> None:
    """Record the clock in ``slot`` (its open ``group``) and make it current (after every pencil of
    the slot is written): on a local store the slot's files are synced to disk, then the pointer is
    replaced by an atomic rename and its folder synced."""
    group.attrs.update({"clock": clock})
    if os.environ.get("DASKFLOW_TEST_KILL_AT_CHECKPOINT_STEP") == str(clock["step"]):
        os.kill(os.getpid(), 9)  # test hook: die after the data, before the switch
    if is_local(path):
        sync_to_disk(_pointer(path).parent / slot)
    set_current(path, slot)


def set_current(path: str, slot: str) -> None:
    """Point the store at ``slot`` (an atomic rename on a local store, synced; one PUT on an
    object store)."""
    if not is_local(path):
        open_for_write(path)["checkpoint"].attrs.update({"current": slot})
        return
    pointer = _pointer(path)
    tmp = pointer.with_suffix(".tmp")
    with open(tmp, "w") as f:
        f.write(slot)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, pointer)
    _sync_directory(pointer.parent)


class CheckpointError(ValueError):
    """No intact checkpoint in a store: the message names the store, the slots and the broken files."""


def read_clock(path: str, slot: str) -> dict | None:
    """The clock of ``slot``, or ``None`` for a slot never completed (or being rewritten)."""
    clock = zarr.open_group(path, mode="r", use_consolidated=False)["checkpoint"][slot].attrs.get("clock")
    return None if clock is None else dict(clock)


def read_checkpoint(path: str, read=None) -> tuple[dict, dict]:
    """``(fields, clock)`` of the latest intact checkpoint. The slot the pointer names is verified
    (every chunk present, every checksum right); when it is damaged, the other slot is read instead
    and ``clock["fallback"]`` says why. ``clock["slot"]`` names the slot used. ``read(slot,
    clock)`` reads and verifies the fields of a slot whose clock is intact and returns them, raising
    :class:`CheckpointError` for damage; by default :func:`read_region` of the whole slot, here
    (host arrays). Only the slots' metadata is read here when ``read`` reads elsewhere."""
    current = current_slot(path)
    if current is None and not any(_quiet_clock(path, slot) for slot in SLOTS):
        raise CheckpointError(f"store {path!r} holds no complete checkpoint to restart from")
    order = [current, *(s for s in SLOTS if s != current)] if current else _newest_first(path)
    problems = []
    for slot in order:
        try:
            clock = slot_clock(path, slot)
            fields = read_region(path, slot) if read is None else read(slot, clock)
        except CheckpointError as exc:  # verified damage (other errors are not the slot's: they propagate)
            problems.append(f"slot {slot}: {exc}")
            continue
        clock["slot"] = slot
        if problems:
            clock["fallback"] = "; ".join(problems)
        return fields, clock
    raise CheckpointError(f"store {path!r} holds no intact checkpoint ({'; '.join(problems)})")


def clear_slot(path: str, slot: str, like: str) -> None:
    """Replace a damaged ``slot`` by empty arrays laid out like slot ``like`` (no clock: it is never
    read before the next checkpoint fills it), so the store's metadata reads again."""
    from zarr.core.sync import sync

    checkpoint = open_for_write(path)["checkpoint"]
    sync(checkpoint.store_path.store.delete_dir(f"{checkpoint.path}/{slot}"))
    model = checkpoint[like]["u"]
    codecs = [codec for codec in model.compressors if isinstance(codec, zarr.codecs.ZstdCodec)]
    prepare_slot(checkpoint, slot, model.shape, model.chunks[1:], model.dtype, "zstd" if codecs else "none")


def has_checkpoint(path: str) -> bool:
    """Whether ``path`` exists and a slot was ever completed (intact or not: :func:`read_checkpoint`
    verifies)."""
    return exists(path) and (current_slot(path) is not None or any(_quiet_clock(path, slot) for slot in SLOTS))


def _quiet_clock(path: str, slot: str) -> dict | None:
    try:
        return read_clock(path, slot)
    except (OSError, ValueError, KeyError):
        return None


def _newest_first(path: str) -> list[str]:
    """Both slots, the one with the later clock first (when the pointer is missing or damaged)."""
    steps = {slot: (_quiet_clock(path, slot) or {}).get("step", -1) for slot in SLOTS}
    return sorted(SLOTS, key=lambda slot: -steps[slot])


def _where(path: str, slot: str) -> str:
    return f"{str(path).rstrip('/')}/checkpoint/{slot}"


def _damage(message: str, order: tuple[int, int]) -> CheckpointError:
    """A :class:`CheckpointError` with ``order``: (field, chunk) in the order a whole read meets
    them (``(-1, -1)`` for the slot itself, chunk ``-1`` for a field's metadata), so the damage a
    whole read reports first can be picked among the errors of readers of several regions."""
    error = CheckpointError(message)
    error.order = order
    return error


def _slot_group(path: str, slot: str):
    try:
        return zarr.open_group(path, mode="r", use_consolidated=False)["checkpoint"][slot]
    except (OSError, ValueError, KeyError) as exc:
        raise _damage(f"{_where(path, slot)}/zarr.json cannot be read ({type(exc).__name__}: {exc})",
                      (-1, -1)) from exc


def slot_clock(path: str, slot: str) -> dict:
    """The clock of checkpoint ``slot`` (its metadata only: no field is read); raises
    :class:`CheckpointError` naming the file when the slot's metadata cannot be read or the slot
    was never completed."""
    clock = _slot_group(path, slot).attrs.get("clock")
    if clock is None:
        raise _damage(f"{_where(path, slot)} was never completed (no clock)", (-1, -1))
    return dict(clock)


def read_region(path: str, slot: str, region: tuple | None = None) -> dict:
    """Fields ``u, v, w, p`` of checkpoint ``slot`` on ``region`` (slices of x, y, z; default the
    whole grid) as host arrays, every chunk the region touches verified (present, checksum right);
    a reader of each pencil's region verifies the whole slot between them. Errors name the file
    that is missing or damaged; their ``order`` says which one a whole read meets first."""
    group = _slot_group(path, slot)
    fields = {}
    for number, name in enumerate(FIELD_DIMS):
        try:
            array = group[name]
        except (OSError, ValueError, KeyError) as exc:
            raise _damage(f"{_where(path, slot)}/{name}/zarr.json cannot be read ({type(exc).__name__})",
                          (number, -1)) from exc
        fields[name] = _read_array(array, f"{_where(path, slot)}/{name}", number, region)
    return fields


def _read_array(array, where: str, number: int, region: tuple | None) -> np.ndarray:
    """``array[region]``, chunk by chunk, in the order of the array's chunks."""
    from zarr.core.sync import sync

    region = tuple(slice(*(r or slice(None)).indices(n)[:2]) for r, n in
                   zip(region or (None,) * 3, array.shape, strict=True))
    out = np.empty(tuple(r.stop - r.start for r in region), dtype=array.dtype)
    # checksummed slots have every chunk written (write_empty_chunks), so a missing one is damage;
    # slots of older stores may lack all-zero chunks
    complete = any(isinstance(codec, zarr.codecs.Crc32cCodec) for codec in array.compressors)
    touched = [range(r.start // c, -(-r.stop // c)) for r, c in zip(region, array.chunks, strict=True)]
    for index in itertools.product(*touched):
        order = (number, int(np.ravel_multi_index(index, array.cdata_shape)))
        key = array.metadata.encode_chunk_key(index)
        if complete and not sync(array.store_path.store.exists(f"{array.path}/{key}")):
            raise _damage(f"{where}/{key} is missing", order)
        part = tuple(slice(max(i * c, r.start), min((i + 1) * c, r.stop)) for i, c, r in
                     zip(index, array.chunks, region, strict=True))
        try:
            out[tuple(slice(p.start - r.start, p.stop - r.start) for p, r in zip(part, region, strict=True))] = \
                array[part]
        except (MemoryError, OSError):  # not damage of the slot: nothing is cleared for it
            raise
        except Exception as exc:  # a checksum mismatch, a truncated or undecodable chunk
            raise _damage(f"{where}/{key} is damaged ({type(exc).__name__}: {exc})", order) from exc
    return out
