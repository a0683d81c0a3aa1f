"""The z solves of the spectral Poisson/Helmholtz systems: one tridiagonal matrix per (kx, ky)
wavenumber (the z operator shifted by the column's x/y eigenvalue), the same at every solve.

Stages ``fn(plan, key, x, *extras)`` for an executor (:mod:`daskflow.pencils.executor`) on spectral
chunks in memory order ``(z, y, x)``, or ``(z, x, y)`` for the y-pencils of a transpose
(:attr:`~daskflow.poisson.plan.SpectralPlan.y_axis`: the stages follow it), fused by
:mod:`daskflow.poisson.algorithms` with the transforms around them:

* :func:`thomas`: the whole z column of a z-pencil (FTM, or any method at ``pz = 1``);
* P-TDMA on a y-pencil of a column group: :func:`ptdma_reduce` (local cyclic reduction),
  :func:`exchange_rows` (the boundary rows' rounds and the reduced solves), then
  :func:`ptdma_reconstruct`. Its coefficients (:func:`ptdma_setup`) and reduced factorisations
  (:func:`reduced_factor`) never change: they are computed once, where they are used.

The singular (0, 0) column of a pure-Neumann/periodic problem is solved apart with the plan's dense
map. NumPy and CuPy share every line; the array module follows the chunk.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from daskflow import tridiagonal
from daskflow.backend import array_module
from daskflow.pencils.layout import cut
from daskflow.stencils import Tridiagonal
from daskflow.zsolve.choice import PTDMA, ZSolve
from daskflow.zsolve.group import column_group, factor_reduced, reduced_offsets

if TYPE_CHECKING:
    from daskflow.poisson.plan import SpectralPlan


def _module(xp):
    """The array module named ``xp`` (or ``xp`` itself)."""
    return importlib.import_module(xp) if isinstance(xp, str) else xp


def _holds_singular_column(plan: SpectralPlan, p: int, ys: slice | None) -> bool:
    dec = plan.decomposition
    return plan.singular and dec.xs[p].start == 0 and (ys is None or ys.start == 0)


def _fill_top_face(block, m: int) -> None:
    """Zero the stored upper boundary face of a Dirichlet ``f`` z axis (rows beyond the unknowns)."""
    if m < block.shape[0]:
        block[m:] = 0


def _z_op(plan: SpectralPlan, xp, rows: slice = slice(None)) -> Tridiagonal:
    return Tridiagonal(*(plan.device(n, xp, rows) for n in ("lower", "diag", "upper")), plan.z_op.periodic)


def _z_rows(plan: SpectralPlan) -> list[slice]:
    """Unknown rows of every z-chunk, in z order."""
    return [plan.z_rows(q) for q in range(plan.decomposition.pz)]


def _singular_solve(plan: SpectralPlan, xp, raw):
    """The singular column's solution from its raw right-hand side ``raw`` (``m``): the plan's dense
    map applied as a product and a sum over its rows, kernels a CUDA graph can capture (CuPy's
    cuBLAS calls cannot be, :mod:`daskflow.ns.graphs`)."""
    return (plan.device("singular_solution", xp) * raw[None, :]).sum(axis=1)


# ---------------------------------------------------------------- whole columns


def thomas(plan: SpectralPlan, key, block, *_):
    """Solve the whole z column of z-pencil ``key = (p, q)`` (spectral ``(nz, ys_q, xs_p)``, or
    ``(nz, xs_p, ys_q)`` y-last) in place."""
    xp = array_module(block)
    p, q = key
    dec = plan.decomposition
    m = plan.nz_unknowns
    d = block[:m]
    shift = plan.column_shift(xp, dec.ys[q], dec.xs[p])
    singular = _holds_singular_column(plan, p, dec.ys[q])
    raw = d[:, 0, 0].copy() if singular else None
    tridiagonal.solve_shifted(d, _z_op(plan, xp), shift)
    if singular:
        d[:, 0, 0] = _singular_solve(plan, xp, raw)
    _fill_top_face(block, m)
    return block


# ---------------------------------------------------------------- P-TDMA: set-up


def ptdma_setup(plan: SpectralPlan, key, xp, columns: slice = slice(None)) -> tridiagonal.ReducedChunk:
    """Algorithm-2 coefficients of y-pencil ``key = (p, q)`` (restricted to spectral-y ``columns``).

    ``xp`` is the array module or its name (``"numpy"``/``"cupy"``, as set-up tasks receive it).
    """
    xp = _module(xp)
    p, q = key
    rows = plan.z_rows(q)
    op = _z_op(plan, xp, rows)
    shift = plan.column_shift(xp, columns, plan.decomposition.xs[p])
    return tridiagonal.precompute(op.lower, op.diag, op.upper, shift).in_precision(plan.real_dtype)


def reduced_factor(plan: SpectralPlan, key, xp, columns: slice | None = None) -> tridiagonal.FactoredTridiagonal:
    """Factorised reduced systems of column slice ``key = (p, s)`` (spectral y ``ys[s]``, x ``xs[p]``;
    with ``columns``, those spectral y columns of x group ``p`` instead).

    Each reduced task recomputes the boundary coefficients of all ``pz`` chunks for its own
    columns — cheap, and no coefficient ever travels.
    """
    xp = _module(xp)
    p, s = key
    dec = plan.decomposition
    columns = dec.reduced[s] if columns is None else columns
    return factor_reduced([ptdma_setup(plan, (p, q), xp, columns) for q in range(dec.pz)], plan.z_op.periodic)


def gathers(plan: SpectralPlan) -> bool:
    """Whether a P-TDMA solve on the plan's decomposition gathers every boundary row of an x group
    at each of its chunks (one round; :attr:`ZSolve.gathers`) rather than solving the reduced
    systems by column slice (two rounds)."""
    return ZSolve.of(PTDMA, plan.decomposition.pz).gathers


def reduced_factor_at(plan: SpectralPlan, key, xp) -> tridiagonal.FactoredTridiagonal:
    """The factorised reduced systems a P-TDMA solve on the plan's decomposition uses at ``key``
    (one of :func:`reduced_factor_keys`): chunk ``key``'s, over all columns of its x group, where
    the solve :func:`gathers`; else column slice ``key = (p, s)``'s."""
    return reduced_factor(plan, key, xp, columns=slice(None) if gathers(plan) else None)


def reduced_factor_keys(plan: SpectralPlan) -> list:
    """Where a P-TDMA solve on the plan's decomposition solves reduced systems: every chunk where
    it :func:`gathers`, else every column slice ``(p, s)``."""
    dec = plan.decomposition
    return list(dec.indices) if gathers(plan) else dec.reduced_indices()


# ---------------------------------------------------------------- P-TDMA: run time


def ptdma_reduce(plan: SpectralPlan, key, block, chunk: tridiagonal.ReducedChunk, *_):
    """P-TDMA step 4 on y-pencil ``key``: local reduction in place.

    Returns ``(block, boundary_rows, singular_rhs)``: the rows that leave the chunk, shape
    ``(1 or 2, nys, nxs_p)`` (y-last: ``(1 or 2, nxs_p, nys)``), and the raw right-hand side of the
    singular column (or ``None``).
    """
    m = chunk.rows
    d = block[:m]
    raw = d[:, 0, 0].copy() if _holds_singular_column(plan, key[0], None) else None
    rows = tridiagonal.reduce(d, chunk)
    return block, rows, raw


def reduced_solve(plan: SpectralPlan, key, pieces, factor):
    """Solve the reduced systems of slice ``key = (p, s)`` from every chunk's boundary rows.

    ``factor`` is the slice's :func:`reduced_factor`; ``pieces`` lists, in z order,
    ``(rows, singular_rhs)`` cut for this slice. Returns
    ``(solution_rows, singular_solution)``; the latter is the whole singular column or ``None``.
    """
    xp = array_module(pieces[0][0])
    x = factor.solve(xp.concatenate([rows for rows, _ in pieces]))
    full = None
    if _holds_singular_column(plan, key[0], plan.decomposition.reduced[key[1]]):
        full = _singular_solve(plan, xp, xp.concatenate([raw for _, raw in pieces]))
        z_rows = _z_rows(plan)
        offsets = reduced_offsets(z_rows)
        for q, rows in enumerate(z_rows):
            x[offsets[q], 0, 0] = full[rows.start]
            x[offsets[q + 1] - 1, 0, 0] = full[rows.stop - 1]
    return x, full


def reduced_rows_of(plan: SpectralPlan, q: int) -> slice:
    """Rows of z-chunk ``q`` in the stacked reduced system."""
    offsets = reduced_offsets(_z_rows(plan))
    return slice(int(offsets[q]), int(offsets[q + 1]))


def ptdma_reconstruct(plan: SpectralPlan, key, reduced_out, chunk, pieces):
    """P-TDMA step 6: rebuild y-pencil ``key = (p, q)`` from its solved boundary rows.

    ``reduced_out`` is the chunk's :func:`ptdma_reduce` result; ``pieces`` lists, over slices
    ``s``, ``(rows, singular_piece)``: rows ``(1 or 2, ys_s, xs_p)`` (y-last: ``(1 or 2, xs_p, ys_s)``).
    """
    xp = array_module(pieces[0][0])
    block = reduced_out[0]
    rows = xp.concatenate([r for r, _ in pieces], axis=plan.y_axis)
    m = chunk.rows
    tridiagonal.reconstruct(block[:m], rows[0], rows[-1], chunk)
    for _, singular in pieces:
        if singular is not None:
            block[:m, 0, 0] = singular
    _fill_top_face(block, m)
    return block


# ---------------------------------------------------------------- P-TDMA: the boundary rows' rounds


def cut_boundary_rows(plan: SpectralPlan, src, reduced_out, dst):
    """Boundary rows of chunk ``src = (p, q)`` for reduced slice ``dst = (p, s)``."""
    _, rows, raw = reduced_out
    return cut(rows, plan.y_axis, plan.decomposition.reduced[dst[1]]), (raw if dst[1] == 0 else None)


def cut_solution_rows(plan: SpectralPlan, src, solved, dst):
    """Solved boundary rows of slice ``src = (p, s)`` that belong to chunk ``dst = (p, q)``."""
    x, full = solved
    singular = None if full is None else full[plan.z_rows(dst[1])].copy()
    return x[reduced_rows_of(plan, dst[1])].copy(), singular


def cut_all_boundary_rows(plan: SpectralPlan, src, reduced_out, dst):
    """All boundary rows of chunk ``src`` (every column) and its singular right-hand side, for a
    chunk ``dst`` of the same x group that solves every reduced system itself."""
    _, rows, raw = reduced_out
    return rows, raw


def solve_gathered(plan: SpectralPlan, key, pieces, factor):
    """The reduced systems of every column of x group ``key[0]``, solved at chunk ``key`` from the
    boundary rows of the whole group (``pieces``, in z order); ``factor`` is :func:`reduced_factor`
    over all columns. Returns this chunk's solved rows as :func:`ptdma_reconstruct` takes them (one
    slice: every column)."""
    whole = (key[0], 0)  # the singular column, if any, is column 0 of the first slice
    return [cut_solution_rows(plan, whole, reduced_solve(plan, whole, pieces, factor), key)]


def exchange_rows(ex, plan: SpectralPlan, reduced: dict, factors: dict) -> dict:
    """P-TDMA step 5: the boundary rows of every chunk's :func:`ptdma_reduce` output (``reduced``)
    to the reduced solves and their solutions back; returns, per chunk, the pieces
    :func:`ptdma_reconstruct` takes. ``factors`` are :func:`reduced_factor_at` at
    :func:`reduced_factor_keys`.

    Where the solve :func:`gathers` (``pz <= 2``), every chunk solves all columns of its x group
    from all the group's rows (``factors[(p, q)]``): one round, the same bytes as two at ``pz = 2``.
    Else by slice (``factors[(p, s)]``), each solved at the participant that owns it: two rounds,
    each participant moving ``2/pz`` of an all-gather's bytes."""
    dec = plan.decomposition
    group = column_group(dec.pz)
    if gathers(plan):
        return ex.exchange(reduced, dec.indices, group, cut_all_boundary_rows, [solve_gathered], (factors,),
                           site="all-rows")
    solved = ex.exchange(reduced, dec.reduced_indices(), group, cut_boundary_rows, [reduced_solve], (factors,),
                         site="rows")
    return ex.exchange(solved, dec.indices, lambda d: [(d[0], s) for s in range(len(dec.reduced))],
                       cut_solution_rows, None, site="solutions")
