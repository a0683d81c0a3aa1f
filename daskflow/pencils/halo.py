"""The halo exchange of x-pencils: faces, edges and corners from the up to eight neighbours.

A chunk ``(p, q)`` of an x-pencil decomposition has neighbours along y (``p +- 1``), along z
(``q +- 1``) and diagonally; on periodic axes the indices wrap, beyond a wall there is none (the
flow domain fills those ghosts from the boundary conditions). One exchange moves, for every field,
the planes a neighbour needs (faces) and the lines a diagonal neighbour needs (edges; x is whole,
so corners are the ends of the edges), and can carry small host values to every participant in the
same round (a reduction without a round of its own).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from daskflow.backend import array_module

OFFSETS = tuple((oy, oz) for oy in (-1, 0, 1) for oz in (-1, 0, 1) if (oy, oz) != (0, 0))


@functools.cache
def neighbour(key: tuple[int, int], offset: tuple[int, int], counts: tuple[int, int],
              periodic: tuple[bool, bool]) -> tuple[int, int] | None:
    """The chunk at ``offset = (oy, oz)`` from ``key`` (wrapped on periodic axes), or ``None``
    beyond a wall. Cached: a halo round asks for the same few neighbours every time."""
    out = []
    for index, step, n, wrap in zip(key, offset, counts, periodic, strict=True):
        j = index + step
        if wrap:
            j %= n
        if not 0 <= j < n:
            return None
        out.append(j)
    return tuple(out)


@functools.cache
def sources(key: tuple[int, int], counts: tuple[int, int], periodic: tuple[bool, bool]) -> tuple:
    """Every chunk that sends ``key`` halo planes: its neighbours along y and z and diagonally."""
    out = []
    for offset in OFFSETS:
        other = neighbour(key, offset, counts, periodic)
        if other is not None and other not in out:
            out.append(other)
    return tuple(out)


def cut(src, block, dst, counts: Sequence[int], periodic: Sequence[bool]) -> dict:
    """The planes (faces) and lines (edges) of ``src``'s x-padded stack of fields ``block`` that
    ``dst`` needs, keyed ``(oy, oz)`` by where ``src`` sits relative to ``dst`` (empty for a chunk
    that is no neighbour of ``dst``); each piece is contiguous, ``(count, nx + 2, 1 or ny, 1 or nz)``."""
    xp = array_module(block)
    counts, periodic = tuple(counts), tuple(periodic)
    ny, nz = block.shape[-2], block.shape[-1]
    pieces = {}
    for oy, oz in OFFSETS:
        if neighbour(dst, (oy, oz), counts, periodic) != src:
            continue
        ys = slice(ny - 1, ny) if oy < 0 else slice(0, 1) if oy > 0 else slice(None)
        zs = slice(nz - 1, nz) if oz < 0 else slice(0, 1) if oz > 0 else slice(None)
        pieces[(oy, oz)] = xp.ascontiguousarray(block[..., ys, zs])
    return pieces


@functools.cache
def sent(key: tuple[int, int], counts: tuple[int, int], periodic: tuple[bool, bool]) -> tuple:
    """The offsets ``(oy, oz)`` of the pieces chunk ``key`` sends (:func:`cut`'s keys): one per
    neighbour it has at ``(-oy, -oz)``, itself included on a periodic axis it spans alone."""
    return tuple(o for o in OFFSETS if neighbour(key, (-o[0], -o[1]), counts, periodic) is not None)


def select(src, packed: dict, dst, counts: Sequence[int], periodic: Sequence[bool]) -> dict:
    """:func:`cut` from the pieces ``packed`` cut beforehand (``{(oy, oz): piece}``, every offset of
    :func:`sent`): those that ``dst`` gets from ``src``."""
    counts, periodic = tuple(counts), tuple(periodic)
    return {o: piece for o, piece in packed.items() if neighbour(dst, o, counts, periodic) == src}


def post(ex, dec, key: tuple[int, int], periodic: Sequence[bool], packed: dict, value=None) -> tuple:
    """:func:`exchange` of pieces cut beforehand (``packed``: every offset of :func:`sent`), posted
    through the executor's :meth:`~daskflow.pencils.executor.DirectExecutor.post` so that they move
    while the caller pads its fields; ``value`` (a 0-d device array, or none) rides along.
    :func:`complete` returns what :func:`exchange` does."""
    counts, periodic = tuple(dec.pencils), tuple(periodic)
    fields = next(iter(packed.values())).shape[0] if packed else 0
    site = f"halo{fields}" if value is None else f"halo{fields}+value"
    if value is None:
        handle = ex.post({key: packed}, dec.indices, lambda d: sources(d, counts, periodic),
                         lambda plan, s, b, d: select(s, b, d, counts, periodic), site=site)
    else:
        handle = ex.post({key: (packed, value.reshape(1))}, dec.indices, lambda d: dec.indices,
                         lambda plan, s, b, d: (select(s, b[0], d, counts, periodic), b[1]), site=site)
    return handle, key, value is not None


def complete(ex, posted: tuple) -> tuple[dict, list]:
    """The received faces and edges of a :func:`post` and every participant's value (as
    :func:`exchange`)."""
    handle, key, with_value = posted
    pieces = ex.complete(handle)[key]
    if with_value:
        return _merged(p for p, _ in pieces), [v.reshape(()) for _, v in pieces]
    return _merged(pieces), []


def _merged(pieces) -> dict:
    received = {}
    for piece in pieces:
        received.update(piece)
    return received


def exchange(ex, dec, key: tuple[int, int], periodic: Sequence[bool], block, value=None) -> tuple[dict, list]:
    """One halo round through executor ``ex`` for this participant's chunk ``key`` of
    decomposition ``dec`` and its x-padded stack of fields ``block``: returns the received faces and
    edges ``{(oy, oz): array}`` and, when ``value`` is given, every participant's ``value`` in chunk
    order (everyone sends it to everyone in the same round). ``value`` is a host number, or a 0-d
    array that travels on its device with the faces. Without a host number the pieces' layouts are
    the same at every round with as many fields, so the transport may skip describing them again
    (``site``)."""
    counts, periodic = tuple(dec.pencils), tuple(periodic)  # hashable: the neighbour lookups are cached
    site = f"halo{block.shape[0]}"
    if value is None:
        pieces = ex.exchange({key: block}, dec.indices, lambda d: sources(d, counts, periodic),
                             lambda plan, s, b, d: cut(s, b, d, counts, periodic), None, site=site)[key]
        gathered = []
    else:
        on_device = not isinstance(value, (int, float))

        def cut_with_value(plan, s, payload, d):
            return cut(s, payload[0], d, counts, periodic), payload[1]

        out = ex.exchange({key: (block, value.reshape(1) if on_device else value)}, dec.indices,
                          lambda d: dec.indices, cut_with_value, None, site=f"{site}+value" if on_device else None)[key]
        pieces = [p for p, _ in out]
        gathered = [v.reshape(()) if on_device else v for _, v in out]
    return _merged(pieces), gathered
