"""The time records of a run's store: appending them, what the committed view holds, and the
truncation a restart makes (see :mod:`daskflow.io.store` for the layout and what readers see)."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import zarr

from daskflow.grid import Grid
from daskflow.io.access import commit, committed, open_for_write
from daskflow.io.layout import slice_planes
from daskflow.run_config import SlicesConfig


def together(operations) -> None:
    """Await zarr coroutines (array resizes and writes) all in flight together: one round trip to
    zarr's event loop instead of one each (every one is a hop to zarr's thread and back, which cost
    a run writing often on a GPU more than its steps). Arrays must be resolved before: a group's
    lookups are zarr calls of their own, which cannot run inside the loop's coroutine."""
    from zarr.core.sync import sync

    async def gathered() -> list:
        return await asyncio.gather(*operations, return_exceptions=True)  # every one done before a failure is raised

    for outcome in sync(gathered()):
        if isinstance(outcome, BaseException):
            raise outcome


def write_together(writes) -> None:
    """``array[selection] = values`` for every ``(array, selection, values)`` of ``writes``, in one
    round trip (:func:`together`)."""
    together([array.async_array.setitem(selection, values) for array, selection, values in writes])


def append_records(arrays, records: list[dict]) -> None:
    """Append ``records`` (dicts of the same names) along ``time`` to the live arrays of a records
    group (the group, or its arrays by name), one resize and one write per array, every array's in
    flight together (:func:`together`); one writer: the caller; visible after :func:`commit`."""
    if not records:
        return
    n = arrays["time"].shape[0]
    targets = {name: (arrays[name], np.stack([np.asarray(record[name]) for record in records]))
               for name in records[0]}

    async def append(array, values) -> None:
        await array.async_array.resize((n + len(records), *array.shape[1:]))
        await array.async_array.setitem(slice(n, None), values)

    together([append(array, values) for array, values in targets.values()])


def grow_time(arrays, names, time: float, step: int) -> int:
    """Add one record to the time axis of ``names`` (arrays of a records group by name, or the
    group) and write its ``time`` and ``step``; returns its index. The resizes go together, then the
    clock's two writes (:func:`together`): two round trips for any number of arrays."""
    n = arrays["time"].shape[0]
    resized = {name: arrays[name] for name in names}
    together([array.async_array.resize((n + 1, *array.shape[1:])) for array in resized.values()])
    write_together([(resized["time"], n, np.float64(time)), (resized["step"], n, np.int64(step))])
    return n


def time_groups(root) -> list[str]:
    """Paths of the groups that grow along ``time`` (fields, profiles, scalars, slices/x|y|z)."""
    paths = [name for name in ("fields", "profiles", "scalars") if name in root]
    if "slices" in root:
        paths += [f"slices/{axis}" for axis in sorted(root["slices"].group_keys())]
    return paths


def truncate_after(path: str, step: int) -> None:
    """Drop the time records after ``step`` and any record that was never committed (what a crashed
    run wrote past its checkpoint, or half-wrote), so a restart neither loses, duplicates nor trusts
    a torn record; then commit."""
    from zarr.core.sync import sync

    view, live = committed(path), open_for_write(path)
    for name in time_groups(view):
        n = view[name]["time"].shape[0]
        steps = live[name]["step"][:n]  # committed records are complete and in step order
        keep = int(np.searchsorted(steps, step, side="right"))
        group = live[name]
        for array_name in group.array_keys():
            array = group[array_name]
            if array.metadata.dimension_names and array.metadata.dimension_names[0] == "time":
                # chunks past the new end stay until overwritten: deleting them before the commit
                # would put fill values inside the committed length for a reader meanwhile
                sync(array.async_array.resize((keep, *array.shape[1:]), delete_outside_chunks=False))
    commit(path)


def record_exchanges(path: str, comm: str, workers: int, chosen: str = "setting") -> None:
    """Note in the store which transport carried the pencils' exchanges (``cluster.comm`` as
    resolved on the cluster), over how many workers, and how it was ``chosen``: ``"timed"`` (``auto``
    timed by the autotuner, whose table ``daskflow run`` prints) or ``"setting"`` (named in the
    configuration, or ``auto`` untimed: NCCL where usable, else the mailbox). A restart on another
    cluster records its own."""
    zarr.open_group(path, mode="r+").attrs.update({"exchanges": {"comm": comm, "workers": workers,  # keeps the
                                                                 "chosen": chosen}})
    commit(path)  # committed view: the root is rewritten with its consolidated metadata


def first_step(path: str) -> int:
    """The step the store's run started from (0 for stores written before it was recorded)."""
    return int(committed(path).attrs.get("first_step", 0))


def root_config(path: str) -> dict:
    """The configuration the store was created with (plain JSON types)."""
    return json.loads(json.dumps(zarr.open_group(path, mode="r").attrs["config"]))


def last_step(path: str, group: str) -> int | None:
    """The step of the last committed record of ``group``, or ``None``."""
    steps = committed(path)[group]["step"]
    return int(steps[steps.shape[0] - 1]) if steps.shape[0] else None


def unmatched_slices(path: str, slices: SlicesConfig, grid: Grid) -> list[str]:
    """The slice axes of ``slices`` (the ``output.slices`` section) the store cannot hold: no group for the axis,
    or other planes than the ones it stores (compared as the cell centres they select)."""
    root = committed(path)
    have = root["slices"] if "slices" in root else {}
    out = []
    for axis_name, planes in slices.planes.items():
        axis = "xyz".index(axis_name)
        wanted = (grid.xc, grid.yc, grid.zc)[axis][slice_planes(grid, axis, planes)]
        if axis_name not in have or not np.array_equal(have[axis_name][axis_name][...], wanted):
            out.append(axis_name)
    return sorted(out)
