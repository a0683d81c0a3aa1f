"""How a piece of an exchange travels over a link that moves raw device buffers (NCCL, UCX).

A piece is whatever an algorithm's ``cut`` returns: an array, or tuples, lists and dicts of arrays,
floats, host arrays and ``None``. :func:`flatten` splits it into a *spec* (its structure, ``None``
included, and the shape, dtype and memory order of every device array: hashable, the same from one
step to the next), the device arrays themselves (sent as raw bytes, received into buffers the spec
sizes) and the host values (pickled into the small header that precedes the payload).

:class:`SpecBook` keeps the specs a sender has already described to each peer, so that a header
carries a small integer instead of the spec once a piece's layout has been seen: in a time step
every exchange repeats the layouts of the step before.
"""

from __future__ import annotations

import math
import pickle
from collections.abc import Callable
from typing import Any

import numpy as np

ARRAY, TUPLE, LIST, DICT, HOST, NONE = "a", "t", "l", "d", "h", "n"


def flatten(piece: Any, is_device: Callable[[Any], bool]) -> tuple[tuple, list, list]:
    """``(spec, device_leaves, host_values)`` of ``piece``; device leaves come out contiguous (a
    copy only for a strided one), in the order :func:`unflatten` consumes them."""
    device: list = []
    host: list = []

    def walk(x):
        if is_device(x):
            if not (x.flags.c_contiguous or x.flags.f_contiguous):
                x = x.copy(order="C")
            order = "C" if x.flags.c_contiguous else "F"
            device.append(x)
            return (ARRAY, tuple(x.shape), x.dtype.str, order)
        if isinstance(x, tuple):
            return (TUPLE, tuple(walk(v) for v in x))
        if isinstance(x, list):
            return (LIST, tuple(walk(v) for v in x))
        if isinstance(x, dict):
            return (DICT, tuple(x), tuple(walk(v) for v in x.values()))
        if x is None:  # structure, not a value: a missing part stays missing from one step to the next
            return (NONE,)
        host.append(x)
        return (HOST,)

    return walk(piece), device, host


def device_layouts(spec: tuple) -> list[tuple[tuple, str, str]]:
    """``(shape, dtype, order)`` of the device leaves of ``spec``, in flattening order."""
    if spec[0] == ARRAY:
        return [spec[1:]]
    if spec[0] in (HOST, NONE):
        return []
    children = spec[2] if spec[0] == DICT else spec[1]
    return [layout for child in children for layout in device_layouts(child)]


def layout_nbytes(layout: tuple) -> int:
    """The bytes of a device leaf of layout ``(shape, dtype, order)``."""
    shape, dtype, _ = layout
    return math.prod(shape) * np.dtype(dtype).itemsize


def unflatten(spec: tuple, device: list, host: list) -> Any:
    """The piece of ``spec`` rebuilt from its device leaves and host values (both consumed)."""
    device_iter, host_iter = iter(device), iter(host)

    def build(s):
        kind = s[0]
        if kind == ARRAY:
            return next(device_iter)
        if kind == HOST:
            return next(host_iter)
        if kind == NONE:
            return None
        if kind == DICT:
            return {k: build(v) for k, v in zip(s[1], s[2], strict=True)}
        values = [build(v) for v in s[1]]
        return tuple(values) if kind == TUPLE else values

    return build(spec)


class SpecBook:
    """Specs described so far, per peer and direction: a sender numbers each new spec it sends to
    a peer, the receiver stores it under that number. Both sides see the same sequence of headers,
    so their numbering agrees without any extra message."""

    def __init__(self) -> None:
        self._sent: dict[int, dict[tuple, int]] = {}
        self._known: dict[int, dict[int, tuple]] = {}

    def describe(self, peer: int, spec: tuple) -> tuple[int, tuple | None]:
        """``(number, spec or None)``: the spec travels only the first time ``peer`` gets it."""
        sent = self._sent.setdefault(peer, {})
        if spec in sent:
            return sent[spec], None
        sent[spec] = len(sent)
        return sent[spec], spec

    def resolve(self, peer: int, number: int, spec: tuple | None) -> tuple:
        known = self._known.setdefault(peer, {})
        if spec is not None:
            known[number] = spec
        return known[number]


def encode_header(entries: list) -> bytes:
    """A peer's header: one ``(number, spec or None, host values)`` entry per piece."""
    return pickle.dumps(entries, protocol=pickle.HIGHEST_PROTOCOL)


def decode_header(data: bytes) -> list:
    return pickle.loads(data)
