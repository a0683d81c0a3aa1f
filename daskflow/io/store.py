"""The Zarr (v3) store of a run: layout, creation, checkpoint slots, restart truncation.

Layout (each group opens with ``xarray.open_zarr(store, group=...)``):

* root attributes: ``config`` (the full validated configuration), ``grid``, ``daskflow_version``;
* ``fields``: ``u (time, xf, y, z)``, ``v (time, x, yf, z)``, ``w (time, x, y, zf)``,
  ``p (time, x, y, z)`` and ``step (time)``; Zarr chunks tile the pencils (one writer per chunk:
  the pencil itself for even splits, the common divisor of the pencil sizes for uneven ones);
* ``profiles``: plane averages ``u, v, p, uu, vv, pp, uv`` on ``(time, z)`` and ``w, ww, uw, vw`` on
  ``(time, zf)``, plus ``step``;
* ``scalars``: ``step, dt, cfl, div_max, bulk_velocity, tau_wall_bottom, tau_wall_top, re_tau,
  kinetic_energy`` versus ``time``;
* ``slices/x``, ``slices/y``, ``slices/z``: planes at the cell centres nearest the configured
  coordinates, the cut axis keeping only those centres (``u (time, x, y, z)`` with ``x`` the chosen
  planes for an x cut); components staggered along the cut axis are averaged to the plane;
* ``checkpoint``: two slots ``a`` and ``b`` holding ``u, v, w, p`` and the clock in attributes; the
  file ``checkpoint/CURRENT`` names the slot of the latest *complete* checkpoint. A checkpoint is
  written into the other slot and the name is switched by an atomic rename afterwards, so a crash
  at any instant leaves the previous checkpoint intact. On fsspec URLs (object stores) the name is
  the ``current`` attribute of the ``checkpoint`` group, replaced in one write.

``output.shards: auto`` stores each snapshot as one shard per pencil (even splits), which keeps the
object count low on object stores; chunks inside a shard stay small for reading.

Coordinates hold the grid's exact positions: ``x, y, z`` cell centres, ``xf, yf, zf`` the upper faces
of the cells (where the staggered components live; ``zf[-1]`` is the top wall).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import zarr

from daskflow.grid import Grid

SCALARS = ("step", "dt", "cfl", "div_max", "bulk_velocity", "tau_wall_bottom", "tau_wall_top", "re_tau",
           "kinetic_energy")
PROFILES_CENTRES = ("u", "v", "p", "uu", "vv", "pp", "uv")
PROFILES_FACES = ("w", "ww", "uw", "vw")
FIELD_DIMS = {"u": ("xf", "y", "z"), "v": ("x", "yf", "z"), "w": ("x", "y", "zf"), "p": ("x", "y", "z")}
SLOTS = ("a", "b")


def shards(pencil_chunks: tuple, setting: str) -> tuple[int, int] | None:
    """Shard sizes along y and z: one shard per pencil (``auto``, even splits only: a shard has one
    writer), or ``None`` (no sharding)."""
    if setting != "auto" or any(len(set(sizes)) > 1 for sizes in pencil_chunks[1:]):
        return None
    return tuple(sizes[0] for sizes in pencil_chunks[1:])


def aligned_chunks(pencil_chunks: tuple, pieces: int = 8) -> tuple[int, int]:
    """Zarr chunk sizes along y and z that tile every pencil exactly (one writer per chunk): the
    largest divisor of the pencils' common divisor that still cuts the axis into at least
    ``pieces`` chunks, so a restart on up to ``pieces`` pencils per axis tiles the same store."""
    out = []
    for sizes in pencil_chunks[1:]:
        common, n = int(np.gcd.reduce(np.asarray(sizes))), sum(sizes)
        cap = max(1, n // pieces)
        out.append(max(d for d in range(1, common + 1) if common % d == 0 and d <= cap))
    return tuple(out)


def check_alignment(path: str, pencil_chunks: tuple) -> None:
    """Refuse a decomposition whose pencils would share Zarr chunks of the store's field snapshots
    (checkpoints are re-chunked for the writer's decomposition at every write)."""
    chunks = zarr.open_group(path, mode="r")["fields"]["u"].chunks[1:]
    for axis, sizes in ((1, pencil_chunks[1]), (2, pencil_chunks[2])):
        if any(size % chunks[axis] for size in sizes):
            raise ValueError(f"config solver.pencils: pencils of sizes {list(sizes)} along {'xyz'[axis]} do not tile "
                             f"the store's chunks of {chunks[axis]}; use a decomposition whose splits are "
                             f"multiples of {chunks[axis]}")


def coordinates(grid: Grid) -> dict[str, np.ndarray]:
    return {"x": grid.xc, "y": grid.yc, "z": grid.zc, "xf": grid.xf[1:], "yf": grid.yf[1:], "zf": grid.zf[1:]}


def _compressors(compression: str):
    return zarr.codecs.ZstdCodec(level=3) if compression == "zstd" else None


def create(path: str, config: dict, grid: Grid, pencil_chunks: tuple, version: str) -> None:
    """Create the store (fails if ``path`` exists: a run never overwrites earlier output)."""
    if exists(path):
        raise ValueError(f"config output.store: {path!r} already exists; choose a new store or restart from it")
    root = zarr.open_group(path, mode="w-")
    root.attrs.update({"config": config, "daskflow_version": version,
                       "grid": {"shape": list(grid.shape), "lengths": list(grid.lengths),
                                "z_stretch": grid.z_stretch, "z_cluster": grid.z_cluster}})
    dtype = config["solver"]["dtype"]
    compressors = _compressors(config["output"]["compression"])
    sharded = shards(pencil_chunks, config["output"]["shards"])
    coords = coordinates(grid)
    nx, ny, nz = grid.shape
    y_chunk, z_chunk = aligned_chunks(pencil_chunks)

    def axis_coords(group, names):
        for name in names:
            group.create_array(name, data=coords[name], dimension_names=[name])

    fields = root.create_group("fields")
    axis_coords(fields, coords)
    _time_axis(fields)
    for name, dims in FIELD_DIMS.items():
        fields.create_array(name, shape=(0, nx, ny, nz), chunks=(1, nx, y_chunk, z_chunk), dtype=dtype,
                            dimension_names=["time", *dims], compressors=compressors,
                            shards=None if sharded is None else (1, nx, *sharded))
    profiles = root.create_group("profiles")
    axis_coords(profiles, ("z", "zf"))
    _time_axis(profiles)
    for names, dim in ((PROFILES_CENTRES, "z"), (PROFILES_FACES, "zf")):
        for name in names:
            profiles.create_array(name, shape=(0, nz), chunks=(64, nz), dtype="f8", dimension_names=["time", dim])
    scalars = root.create_group("scalars")
    _time_axis(scalars)
    for name in SCALARS[1:]:
        scalars.create_array(name, shape=(0,), chunks=(4096,), dtype="f8", dimension_names=["time"])
    slices = config["output"].get("slices") or {}
    if slices:
        slice_root = root.create_group("slices")
        for axis_name, planes in slices.items():
            axis = "xyz".index(axis_name)
            index = slice_planes(grid, axis, planes)
            group = slice_root.create_group(axis_name)
            kept = {name: dims for name, dims in coords.items() if name[0] != axis_name}
            axis_coords(group, kept)
            group.create_array(axis_name, data=coords[axis_name][index], dimension_names=[axis_name])
            _time_axis(group)
            for name, dims in FIELD_DIMS.items():
                dims = tuple(axis_name if d[0] == axis_name else d for d in dims)
                shape = [nx, ny, nz]
                shape[axis] = len(index)
                chunks = [nx, y_chunk, z_chunk]
                chunks[axis] = 1
                group.create_array(name, shape=(0, *shape), chunks=(1, *chunks), dtype=dtype,
                                   dimension_names=["time", *dims], compressors=compressors)
    checkpoint = root.create_group("checkpoint")
    for slot in SLOTS:
        prepare_slot(checkpoint, slot, grid.shape, (y_chunk, z_chunk), dtype, config["output"]["compression"])


def prepare_slot(checkpoint, slot: str, shape, chunks, dtype, compression: str) -> None:
    """(Re)create the arrays of checkpoint ``slot`` with chunks tiling the writer's pencils, so any
    decomposition can write a checkpoint (only the other, non-current slot is ever touched)."""
    group = checkpoint.require_group(slot)
    nx, ny, nz = shape
    for name in FIELD_DIMS:
        group.create_array(name, shape=(nx, ny, nz), chunks=(nx, *chunks), dtype=dtype,
                           compressors=_compressors(compression), overwrite=True)


def slice_planes(grid: Grid, axis: int, planes) -> np.ndarray:
    """Indices of the cell centres nearest the coordinates ``planes`` along ``axis`` (sorted, unique)."""
    centres = (grid.xc, grid.yc, grid.zc)[axis]
    return np.unique([int(np.argmin(np.abs(centres - value))) for value in planes])


def _time_axis(group) -> None:
    group.create_array("time", shape=(0,), chunks=(4096,), dtype="f8", dimension_names=["time"])
    group.create_array("step", shape=(0,), chunks=(4096,), dtype="i8", dimension_names=["time"])


def append(group, values: dict) -> None:
    """Append one record along ``time`` to every array of ``values`` (one writer: the caller)."""
    for name, value in values.items():
        array = group[name]
        n = array.shape[0]
        array.resize((n + 1, *array.shape[1:]))
        array[n] = value


def grow_time(group, names) -> int:
    """Add one (unwritten) record to the time axis of ``names``; returns its index."""
    n = group["time"].shape[0]
    for name in names:
        array = group[name]
        array.resize((n + 1, *array.shape[1:]))
    return n


# ------------------------------------------------------------------------------- checkpoints


def is_local(path: str) -> bool:
    """A plain path or ``file://`` URL (other fsspec URLs go through zarr's fsspec store)."""
    return "://" not in str(path) or str(path).startswith("file://")


def exists(path: str) -> bool:
    if is_local(path):
        return Path(str(path).removeprefix("file://")).exists()
    import fsspec

    fs, root = fsspec.core.url_to_fs(str(path))
    return fs.exists(root)


def _pointer(path: str) -> Path:
    return Path(str(path).removeprefix("file://")) / "checkpoint" / "CURRENT"


def current_slot(path: str) -> str | None:
    """Slot of the latest complete checkpoint, or ``None``."""
    if not is_local(path):
        return zarr.open_group(path, mode="r")["checkpoint"].attrs.get("current")
    pointer = _pointer(path)
    return pointer.read_text().strip() if pointer.exists() else None


def next_slot(path: str) -> str:
    current = current_slot(path)
    return SLOTS[0] if current != SLOTS[0] else SLOTS[1]


def commit_checkpoint(path: str, slot: str, clock: dict) -> None:
    """Record the clock in ``slot`` and make it current by an atomic rename (after every pencil of
    the slot is written)."""
    group = zarr.open_group(path, mode="r+")["checkpoint"][slot]
    group.attrs.update({"clock": clock})
    if os.environ.get("DASKFLOW_TEST_KILL_AT_CHECKPOINT_STEP") == str(clock["step"]):
        os.kill(os.getpid(), 9)  # test hook: die after the data, before the switch
    if not is_local(path):  # object stores replace a small object in one PUT
        zarr.open_group(path, mode="r+")["checkpoint"].attrs.update({"current": slot})
        return
    pointer = _pointer(path)
    tmp = pointer.with_suffix(".tmp")
    tmp.write_text(slot)
    os.replace(tmp, pointer)


def read_clock(path: str, slot: str) -> dict:
    return dict(zarr.open_group(path, mode="r")["checkpoint"][slot].attrs["clock"])


def read_checkpoint(path: str) -> tuple[dict, dict]:
    """``(fields, clock)`` of the latest complete checkpoint (host arrays)."""
    slot = current_slot(path)
    if slot is None:
        raise ValueError(f"store {path!r} holds no complete checkpoint to restart from")
    group = zarr.open_group(path, mode="r")["checkpoint"][slot]
    return {name: group[name][...] for name in FIELD_DIMS}, dict(group.attrs["clock"])


def truncate_after(path: str, step: int) -> None:
    """Drop time records written after ``step`` (what a crashed run wrote past its checkpoint), so
    a restart neither loses nor duplicates records."""
    root = zarr.open_group(path, mode="r+")
    for name in ("fields", "profiles", "scalars"):
        group = root[name]
        steps = group["step"][...]
        keep = int(np.searchsorted(steps, step, side="right"))
        for array_name in group.array_keys():
            array = group[array_name]
            if array.metadata.dimension_names and array.metadata.dimension_names[0] == "time":
                array.resize((keep, *array.shape[1:]))


def record_exchanges(path: str, comm: str, workers: int) -> None:
    """Note in the store which transport carried the pencils' exchanges (``cluster.comm`` as
    resolved on the cluster: ``auto`` becomes ``nccl`` or ``mailbox``) and over how many workers;
    a restart on another cluster records its own."""
    zarr.open_group(path, mode="r+").attrs.update({"exchanges": {"comm": comm, "workers": workers}})


def root_config(path: str) -> dict:
    return json.loads(json.dumps(zarr.open_group(path, mode="r").attrs["config"]))
