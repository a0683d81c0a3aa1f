"""A pencil's halo round: its fields padded by one cell into one stack, with the y and z ghosts
from its up to eight neighbours' faces and edges (:mod:`daskflow.pencils.halo`) or, beyond walls,
from the boundary conditions.

On the GPU (the fused kernels) the pieces the neighbours get are cut from the unpadded fields first
(:func:`daskflow.ns.halo_kernels.pack_halo`) and posted, so that over NCCL they move while the
padding kernels run; the ghosts are filled in one launch once they are there
(:func:`daskflow.ns.halo_kernels.fill_ring`). On the CPU the stack is padded first and the pieces are
cut from it. Both give the same values.
"""

from __future__ import annotations

import contextlib

import numpy as np

from daskflow.backend import array_module
from daskflow.ns import operators as ops
from daskflow.pencils import halo


def halo_round(ex, dec, key: tuple[int, int], periodic_yz: tuple[bool, bool], arrays: list, bcs: list,
               value=None) -> tuple:
    """``(stack, gathered)``: the padded stack of ``arrays`` (``bcs[i] = ((pairs, values),
    component)``) of pencil ``key`` of decomposition ``dec``, its ghosts from the exchange through
    executor ``ex``, and every participant's ``value`` riding on it (a host number, or a 0-d device
    array; see :func:`daskflow.pencils.halo.exchange`)."""
    z_walls = wall_sides(dec, key, periodic_yz[1])
    if fused(arrays[0]) and not isinstance(value, (int, float)):  # device pieces only: they move during the padding
        counts = tuple(dec.pencils)
        posted = halo.post(ex, dec, key, periodic_yz, pieces(arrays, bcs, halo.sent(key, counts, periodic_yz)), value)
        try:
            stack, _, rules = prepare(arrays, bcs, z_walls)
        except BaseException:  # the device waits for the transfer before its buffers go back to the pool
            with contextlib.suppress(Exception):
                halo.complete(ex, posted)
            raise
        received, gathered = halo.complete(ex, posted)
    else:
        stack, block, rules = prepare(arrays, bcs, z_walls)
        received, gathered = halo.exchange(ex, dec, key, periodic_yz, block, value)
    fill_halos(stack, rules, received, z_walls)
    return stack, gathered


def wall_sides(dec, key: tuple[int, int], periodic_z: bool) -> tuple[bool, bool]:
    """Which z sides (lower, upper) of pencil ``key`` are walls: no neighbour's plane comes from
    there, so the GPU's padding kernel sets those z ghosts (:func:`prepare`) by the wall rules, in
    the contiguous writes of each padded row, instead of the ring kernel's one element per sector."""
    q = key[1]
    return (not periodic_z and q == 0, not periodic_z and q == dec.pz - 1)


def pieces(arrays: list, bcs: list, offsets) -> dict:
    """The faces and edges of ``arrays`` (``bcs`` as :func:`prepare` takes them) for the ``offsets``
    a pencil sends, cut from the CuPy fields themselves with their x ghosts
    (:func:`daskflow.ns.halo_kernels.pack_halo`: the values :func:`daskflow.pencils.halo.cut` takes
    from the padded stack)."""
    from daskflow.ns import halo_kernels

    x_rules = [_x_rules(pairs, component) for (pairs, _), component in bcs]
    x_walls = [values[0] for (_, values), _ in bcs]
    return halo_kernels.pack_halo(arrays, x_rules, x_walls, offsets)


def _x_rules(pairs, component) -> list[int]:
    """A field's x ghost rules (lower, upper; :func:`daskflow.ns.operators.ghost_rule`)."""
    return [ops.ghost_rule(pairs[0], side, component == 0) for side in (0, 1)]


def prepare(arrays: list, bcs: list, z_walls: tuple[bool, bool] = (False, False)) -> tuple:
    """The first part of a halo round: ``(stack, block, rules)``, the padded copies of
    ``arrays`` as one stack with their x ghosts set, its x-padded interior (what the neighbours
    get planes of) and each field's ``(pairs, values, component)`` (``bcs[i] = ((pairs,
    values), component)``). On each z side that ``z_walls`` marks (lower, upper: a wall, no
    neighbour, :func:`wall_sides`) the GPU's padding kernel also sets the z ghosts of the interior
    y rows, which :func:`fill_halos` then leaves as they are."""
    rules = [(pairs, values, component) for (pairs, values), component in bcs]
    if fused(arrays[0]):  # one padding kernel per field; its y (and z) ghosts are refilled by fill_halos
        from daskflow.ns import kernels

        first = arrays[0]
        stack = ops.stacked_fields(array_module(first), len(arrays), tuple(n + 2 for n in first.shape),
                                   first.dtype)
        for a, field, (pairs, values, component) in zip(arrays, stack, rules, strict=True):
            z_rules = [ops.ghost_rule(pairs[2], side, component == 2) if wall else ops.COPY
                       for side, wall in enumerate(z_walls)]
            z_values = [values[2][side] if wall else 0.0 for side, wall in enumerate(z_walls)]
            kernels.pad(a, _x_rules(pairs, component) + [ops.COPY] * 2 + z_rules, [*values[0], 0.0, 0.0, *z_values],
                        out=field)
        return stack, stack[:, :, 1:-1, 1:-1], rules
    stack = ops.padded_copies(arrays)
    block = stack[:, :, 1:-1, 1:-1]
    ops.fill_ghosts_stacked(block, 0, rules)
    return stack, block, rules


def fill_halos(stack, bcs: list, received: dict, z_walls: tuple[bool, bool] = (False, False)) -> None:
    """The y and z ghosts of the padded stack of fields ``stack`` (x ghosts set;
    ``bcs[i] = (pairs, values, component)`` of field ``i``) from the ``received`` pieces of
    :func:`daskflow.pencils.halo.exchange` or, beyond walls, from the boundary conditions: y first
    (on the interior z planes), then z over whole planes, so edges see the y ghosts exactly as
    padding y and then z one after the other would. A received face or edge is one operation for all
    the fields, a wall side one for its whole plane (edges included) per field, or one for all of
    them where their conditions agree; on the GPU one kernel sets them all, with the same values
    (:func:`daskflow.ns.halo_kernels.fill_ring`), there only the corners of the z ghosts on the
    sides where :func:`prepare` set the rest (``z_walls``)."""
    if fused(stack):
        _fill_ring(stack, bcs, received, z_walls)
        return
    plane = {-1: 0, 1: stack.shape[3] - 1}
    row = {-1: 0, 1: stack.shape[2] - 1}
    rows = stack[..., 1:-1]
    for oy in (-1, 1):
        face = received.get((oy, 0))
        if face is None:
            ops.fill_ghosts_stacked(rows, 1, bcs, sides=((oy + 1) // 2,))
        else:
            rows[:, :, row[oy]:row[oy] + 1] = face
    for oz in (-1, 1):
        face = received.get((0, oz))
        k = plane[oz]
        if face is None:
            ops.fill_ghosts_stacked(stack, 2, bcs, sides=((oz + 1) // 2,))
            continue
        stack[:, :, 1:-1, k:k + 1] = face
        for oy in (-1, 1):
            edge = received.get((oy, oz))
            if edge is None:  # a y wall: the neighbour's own y ghost of its face
                ops.fill_ghosts_stacked(stack[..., k:k + 1], 1, bcs, sides=((oy + 1) // 2,))
            else:
                stack[:, :, row[oy]:row[oy] + 1, k:k + 1] = edge


def fused(a) -> bool:
    """Whether ``a``'s halo work runs as the GPU kernels (:mod:`daskflow.ns.kernels`,
    :mod:`daskflow.ns.halo_kernels`)."""
    return array_module(a) is not np and ops.FUSED_GPU


def _fill_ring(stack, bcs: list, received: dict, z_walls: tuple[bool, bool]) -> None:
    """:func:`fill_halos` in one launch: each field's wall rules on y and z, a periodic side always
    from its (possibly own) neighbour's piece."""
    from daskflow.ns import halo_kernels

    rules, walls = [], []
    for pairs, values, component in bcs:
        for axis in (1, 2):
            for side in (0, 1):
                rule = ops.ghost_rule(pairs[axis], side, component == axis)
                key = (2 * side - 1, 0) if axis == 1 else (0, 2 * side - 1)
                if rule == ops.WRAP and key not in received:
                    raise ValueError(f"periodic axis {'xyz'[axis]} without its neighbour's halo piece {key}")
                rules.append(rule)
                walls.append(values[axis][side])
    halo_kernels.fill_ring(stack, rules, walls, received, z_walls)
