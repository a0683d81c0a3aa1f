"""Records in chunks of the store: which participant writes which chunk of a field snapshot or slice
record, and the exchange that gathers each chunk whole at its writer (see :mod:`daskflow.io.output`)."""

from __future__ import annotations

import itertools

import numpy as np

from daskflow.backend import array_module, to_numpy
from daskflow.io import store

Box = tuple  # (slice, slice, slice): a block of a record, in the record's index space


def pencil_key(domain):
    """The chunk index ``(p, q)`` of this participant's pencil (``(0, 0)`` for a whole field)."""
    return getattr(domain, "key", (0, 0))


def pencil_boxes(pencil_chunks: tuple) -> dict[tuple[int, int], Box]:
    """Every pencil ``(p, q)`` of a decomposition with its block of the field."""
    (nx,), ys, zs = pencil_chunks
    y0, z0 = np.cumsum([0, *ys]), np.cumsum([0, *zs])
    return {(p, q): (slice(0, nx), slice(int(y0[p]), int(y0[p + 1])), slice(int(z0[q]), int(z0[q + 1])))
            for p in range(len(ys)) for q in range(len(zs))}


def planes_box(box: Box, axis: int, planes: np.ndarray) -> Box | None:
    """The block of a slice record (planes ``planes`` along ``axis``, sorted) that the pencil of
    field block ``box`` holds, or ``None`` when it holds none of the planes."""
    lo, hi = np.searchsorted(planes, [box[axis].start, box[axis].stop])
    if lo == hi:
        return None
    out = list(box)
    out[axis] = slice(int(lo), int(hi))
    return tuple(out)


def _intersect(a: Box, b: Box) -> Box | None:
    out = tuple(slice(max(x.start, y.start), min(x.stop, y.stop)) for x, y in zip(a, b, strict=True))
    return out if all(s.start < s.stop for s in out) else None


def _within(inner: Box, outer: Box) -> Box:
    """``inner`` in the index space of the block ``outer`` that contains it."""
    return tuple(slice(i.start - o.start, i.stop - o.start) for i, o in zip(inner, outer, strict=True))


def _size(box: Box) -> int:
    return int(np.prod([s.stop - s.start for s in box]))


def record_units(shape, unit) -> list[Box]:
    """The blocks that tile one record of ``shape`` in units (chunks or shards) of ``unit``."""
    ranges = [[slice(i, min(i + u, n)) for i in range(0, n, u)] for n, u in zip(shape, unit, strict=True)]
    return [tuple(box) for box in itertools.product(*ranges)]


def unit_writers(units: list[Box], boxes: dict) -> list:
    """The participant that writes each unit: the one whose block holds most of it, ties going to
    the one with the least assigned so far, then the lowest key (the same answer on every
    participant)."""
    load = dict.fromkeys(boxes, 0)
    writers = []
    for unit in units:
        held = {key: _size(part) for key, box in boxes.items()
                if box is not None and (part := _intersect(unit, box)) is not None}
        writer = min(held, key=lambda key: (-held[key], load[key], key))
        load[writer] += _size(unit)
        writers.append(writer)
    return writers


def write_record(domain, arrays: dict, index: int, boxes: dict, values: dict | None) -> None:
    """Write record ``index`` of ``arrays`` (zarr arrays of one shape and chunking, along ``time``;
    collective): participant ``key`` holds block ``boxes[key]`` of the record (``None``: nothing)
    and passes its values of every array in ``values``. Each chunk (shard, where the array has
    shards) is gathered whole at its writer (:func:`unit_writers`) in one exchange and written
    once, so no chunk has two writers and none is read back and rewritten."""
    key = pencil_key(domain)
    if len(boxes) == 1:  # one participant: the whole record is here, written in one round trip
        if values is not None:
            store.write_together([(array, (index, *boxes[key]), to_numpy(values[name]))
                                  for name, array in arrays.items()])
        return
    model = next(iter(arrays.values()))
    units = record_units(model.shape[1:], store.write_unit(model)[1:])
    writers = unit_writers(units, boxes)
    mine = {writer: [i for i, w in enumerate(writers) if w == writer] for writer in sorted(set(writers))}

    def sources(dest) -> list:
        return [s for s in sorted(boxes) if boxes[s] is not None
                and any(_intersect(units[i], boxes[s]) for i in mine[dest])]

    def cut(plan, source, block, dest) -> dict:
        box = boxes[source]
        out = {}
        for i in mine[dest]:
            part = _intersect(units[i], box)
            if part is not None:
                out[i] = {name: a[_within(part, box)] for name, a in block.items()}
        return out

    received = domain.ex.exchange({key: values}, list(mine), sources, cut, None)
    writes = []  # every chunk this participant writes, in one round trip (as a single participant's)
    for dest, pieces in received.items():
        parts = list(zip((boxes[s] for s in sources(dest)), pieces, strict=True))
        for i in mine[dest]:
            unit = units[i]
            held = [(_intersect(unit, box), piece[i]) for box, piece in parts if i in piece]
            for name, array in arrays.items():
                sample = held[0][1][name]
                block = array_module(sample).empty([s.stop - s.start for s in unit], dtype=sample.dtype)
                for part, piece in held:
                    block[_within(part, unit)] = piece[name]
                writes.append((array, (index, *unit), to_numpy(block)))
    store.write_together(writes)
