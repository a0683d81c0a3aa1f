"""The z solves of one tridiagonal matrix shared by every (x, y) column: the z-implicit diffusion
``(I - alpha L_z) x = b`` of a velocity component, in one pencil or across the ``pz`` pencils of a
column group.

The matrix depends on z only, so it is factorised once per component and ``alpha`` on the host and
reused while ``dt`` stays the same. Across pencils the solve is the seed paper's parallel
tridiagonal method with a shared matrix: local cyclic reduction of each chunk, the reduced system of
the boundary rows (every chunk recomputes the whole group's reduced coefficients itself: none
travel), reconstruction. The components of a substep are solved together, so their boundary rows
share exchange rounds. The solves work on the pencils as they are: no transpose of full fields.
"""

from __future__ import annotations

import numpy as np

from daskflow import tridiagonal
from daskflow.backend import array_module
from daskflow.pencils.layout import split_slices
from daskflow.stencils import Tridiagonal
from daskflow.zsolve.choice import LOCAL, PTDMA, ZSolve
from daskflow.zsolve.group import column_group, factor_reduced, reduced_offsets


def cached(cache: dict, key: tuple, build, keep: int = 3):
    """``cache[key]``, built on a miss; keeps the ``keep`` newest entries per ``key[0]`` (one per RK
    substep: with a fixed ``dt`` the three implicit solvers of a step are reused every step)."""
    if key not in cache:
        same = [k for k in cache if k[0] == key[0]]
        for old in same[: max(0, len(same) - keep + 1)]:
            del cache[old]
        cache[key] = build()
    return cache[key]


def z_columns(field, m: int):
    """The first ``m`` z planes of ``field`` ``(nx, ny, nz)`` as C-contiguous columns ``(m, ny, nx)``:
    a view of a Fortran-ordered field, a copy of a C-ordered one."""
    xp = array_module(field)
    return xp.ascontiguousarray(xp.moveaxis(field[:, :, :m], 2, 0))


def store_columns(field, cols, m: int):
    """Solved ``cols`` back into ``field`` in place (nothing to copy when they are a view of it);
    returns ``field``. The solves overwrite their input: it is the stepper's own temporary, and a
    copy would add one field to the step's peak memory."""
    xp = array_module(field)
    if not xp.may_share_memory(cols, field):
        field[:, :, :m] = xp.moveaxis(cols, 0, 2)
    return field


def add_addend(field, addend, added: int = 0):
    """``field + addend`` into ``field`` (a solved increment and the field it increments: ``u + du``)
    where the solve has not added it in its last pass: a solve along rows adds it to the first
    ``added`` z values (its unknowns), and only the rest, a stored wall face beyond them, is added
    here. Returns ``field`` (itself where ``addend`` is ``None``)."""
    if addend is None:
        return field
    if not added:
        return array_module(field).add(addend, field, out=field)
    if added < field.shape[-1]:
        field[..., added:] += addend[..., added:]
    return field


def _fusable(field, addend):
    """``addend`` where a solve along the rows of ``field`` can add it as it stores, else ``None``."""
    return addend if addend is not None and tridiagonal.addable_along_rows(field, addend) else None


def solve_locally(cache: dict, field, op: Tridiagonal, key: tuple, addend=None):
    """``op`` solved along z for every column of ``field`` (all of z here), in place; the
    factorisation is ``cache[key]``. With ``addend`` (``field``'s shape and order) the result is
    ``addend + x``: on a C-ordered GPU field added in the solve's last pass."""
    m = op.diag.size

    def build():
        lower, diag, upper = (np.asarray(c, dtype=np.float64)[:, None] for c in op[:3])
        return tridiagonal.FactoredTridiagonal.factor(lower, diag, upper, op.periodic).to(array_module(field))

    factored = cached(cache, key, build)
    fused = _fusable(field, addend)
    if tridiagonal.solve_rows_in_place(factored, field, fused):  # a C-ordered GPU field: its z rows
        return add_addend(field, addend, m if fused is not None else 0)
    cols = z_columns(field, m)
    factored.solve(cols, overwrite=True)
    return add_addend(store_columns(field, cols, m), addend)


class _Part:
    """One component's share of a distributed z solve on one chunk: its columns, its reduction
    coefficients, its reduced system and the boundary rows it sends."""

    def __init__(self, cache: dict, field, op: Tridiagonal, key: tuple, rows: list[slice], q: int) -> None:
        xp = array_module(field)
        self.field = field
        self.m = rows[q].stop - rows[q].start

        def build():  # coefficients change with alpha only: reused while dt stays the same
            # The matrix is the same in every column: its reduction coefficients are one column,
            # (m, 1), set up on the host in O(m) and moved once; with a CFL-adaptive dt this
            # runs at every solve, so it must not cost field-sized device work or memory.
            shift = np.zeros(1)
            chunks = {i: tridiagonal.precompute(op.lower[r], op.diag[r], op.upper[r], shift)
                      for i, r in enumerate(rows) if r.stop > r.start}
            reduced = factor_reduced(chunks.values(), op.periodic).to(xp)
            own = chunks.get(q)  # only this chunk's coefficients: the others served their boundary rows
            return (None if own is None else own.to(xp)), reduced

        self.own, self.reduced = cached(cache, key, build)
        self.offsets = reduced_offsets(rows)
        # A C-ordered GPU field is reduced along its z rows; other fields as columns, a transposed
        # copy for a C-ordered CPU field. Every chunk of a group decides alike, so the boundary rows'
        # columns come in one order everywhere (x-major along rows, y-major as columns).
        self.along_rows = self.own is not None and tridiagonal.along_rows(field, self.m, self.own)
        if self.along_rows:
            self.boundary = tridiagonal.reduce_rows(field, self.m, self.own)
            return
        self.cols = z_columns(field, self.m)
        # A chunk may hold no unknown at all (the top wall face of w in a one-point chunk): it sends
        # an empty piece and has nothing to reconstruct.
        ncols = self.cols.shape[1] * self.cols.shape[2]
        self.boundary = (tridiagonal.reduce(self.cols, self.own).reshape(-1, ncols) if self.m
                         else xp.zeros((0, ncols), self.cols.dtype))

    def finish(self, mine, addend=None):
        """Reconstruct from this chunk's solved boundary rows ``mine``; returns the solved field
        (plus ``addend``, :func:`add_addend`)."""
        if self.along_rows:
            fused = _fusable(self.field, addend)
            field = tridiagonal.reconstruct_rows(self.field, mine[0], mine[-1], self.m, self.own, fused)
            return add_addend(field, addend, self.m if fused is not None else 0)
        if self.m:
            shape = self.cols.shape[1:]
            tridiagonal.reconstruct(self.cols, mine[0].reshape(shape), mine[-1].reshape(shape), self.own)
        return add_addend(store_columns(self.field, self.cols, self.m), addend)


def solve_distributed(ex, dec, key: tuple[int, int], cache: dict, fields: dict, operators: dict,
                      alpha: float, addends: dict | None = None) -> dict:
    """z solves of this chunk's ``fields[component]`` with ``operators[component]`` (``I - alpha
    L_z``) across the chunks of its column group, all components in the same exchange rounds; in
    place, returns the solved fields, plus ``addends[component]`` where given (``u + du`` in the
    solves' last pass on C-ordered GPU fields). With ``pz = 1`` a local solve each. Else every chunk of the
    group gathers all boundary rows and solves the whole reduced systems (one round), or, where
    :attr:`ZSolve.gathers` says not, the rows go to the chunk that owns their slice of columns,
    which solves and returns them (two rounds: the paper's x->z transpose of the reduced rows)."""
    q, pz = key[1], dec.pencils[1]
    how = ZSolve.of(PTDMA, pz)
    addends = addends or {}
    if how.kind == LOCAL:
        return {c: solve_locally(cache, f, operators[c], (c, alpha), addends.get(c)) for c, f in fields.items()}
    components = list(fields)
    parts = []
    for c in components:
        rows = [slice(z.start, min(z.stop, operators[c].diag.size)) for z in dec.z]
        parts.append(_Part(cache, fields[c], operators[c], (c, alpha), rows, q))
    group = column_group(pz)
    xp = array_module(parts[0].field)
    if how.gathers:
        pieces = ex.exchange({key: [part.boundary for part in parts]}, dec.indices, group,
                             lambda plan, s, block, d: block, None, site=f"z-rows{len(parts)}")[key]
        mine = []
        for j, part in enumerate(parts):  # each right-hand side a new array: solved in it
            x = part.reduced.solve(xp.concatenate([piece[j] for piece in pieces]), overwrite=True)
            mine.append(x[part.offsets[q]:part.offsets[q + 1]])
    else:
        ncols = parts[0].boundary.shape[1]
        slices = split_slices(ncols, pz)  # the columns whose reduced systems each chunk solves
        pieces = ex.exchange({key: [part.boundary for part in parts]}, dec.indices, group,
                             lambda plan, s, block, d: [xp.ascontiguousarray(b[:, slices[d[1]]]) for b in block],
                             None, site=f"z-rows{len(parts)}")[key]
        solved = []
        for j, part in enumerate(parts):
            rhs = xp.concatenate([piece[j] for piece in pieces])
            solved.append(part.reduced.solve(rhs, overwrite=True) if rhs.shape[1] else rhs)

        def cut_back(plan, s, block, d):
            return [x[part.offsets[d[1]]:part.offsets[d[1] + 1]].copy() for x, part in zip(block, parts, strict=True)]

        back = ex.exchange({key: solved}, dec.indices, group, cut_back, None, site=f"z-solutions{len(parts)}")[key]
        mine = [xp.concatenate([piece[j] for piece in back], axis=1) for j in range(len(parts))]
    return {c: part.finish(rows, addends.get(c)) for c, part, rows in zip(components, parts, mine, strict=True)}
