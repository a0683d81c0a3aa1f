"""The two distributed Poisson/Helmholtz algorithms, written once against an executor.

``blocks`` maps chunk index ``(p, q)`` to an x-pencil chunk in memory order ``(z, y, x)``. The
executor decides whether stages run now (in-process emulation) or become Dask tasks.

* FTM: x transform, x->y transpose, y transform, y->z transpose, Thomas along z, and back.
* P-TDMA: x transform, x->y transpose, y transform, local cyclic reduction, gather of boundary
  rows into ``pz`` column slices per group, reduced solves, scatter back, reconstruction, and back.

With ``py = 1`` the x-pencils already hold all of y: both transforms run in one stage and no
full-field transpose happens. With ``pz = 1`` P-TDMA is plain Thomas (no reduced system).
"""

from __future__ import annotations

from functools import partial

from daskflow.pencils.layout import assemble, cut
from daskflow.poisson import stages
from daskflow.poisson.plan import SpectralPlan

Z, Y, X = 0, 1, 2  # memory axes of a chunk


def _transpose(ex, plan: SpectralPlan, blocks: dict, kind: str) -> dict:
    """Exchange pieces between layouts: ``x->y``, ``y->x``, ``y->z`` or ``z->y``."""
    dec = plan.decomposition
    keys = dec.indices
    if kind in ("x->y", "y->x"):  # inside each z group q, over p
        sources = lambda d: [(p, d[1]) for p in range(dec.py)]  # noqa: E731
        cut_axis, join_axis = (X, Y) if kind == "x->y" else (Y, X)
        ranges = dec.xs if kind == "x->y" else dec.y
    else:  # inside each x group p, over q
        sources = lambda d: [(d[0], q) for q in range(dec.pz)]  # noqa: E731
        cut_axis, join_axis = (Y, Z) if kind == "y->z" else (Z, Y)
        ranges = dec.ys if kind == "y->z" else dec.z
    index = 0 if kind in ("x->y", "y->x") else 1
    return ex.exchange(
        blocks, keys, sources,
        lambda s, block, d: cut(block, cut_axis, ranges[d[index]]),
        lambda d, pieces: assemble(pieces, join_axis),
    )


def _forward(ex, plan: SpectralPlan, blocks: dict) -> dict:
    """x-pencils (physical) -> y-pencils (spectral in x and y)."""
    keys = plan.decomposition.indices
    if plan.decomposition.py == 1:
        return ex.map(lambda k, b: stages.forward_xy(plan, b), keys, blocks)
    spec_x = ex.map(lambda k, b: stages.forward_x(plan, b), keys, blocks)
    return ex.map(lambda k, b: stages.forward_y(plan, b), keys, _transpose(ex, plan, spec_x, "x->y"))


def _backward(ex, plan: SpectralPlan, blocks: dict) -> dict:
    keys = plan.decomposition.indices
    if plan.decomposition.py == 1:
        return ex.map(lambda k, b: stages.backward_xy(plan, b), keys, blocks)
    phys_y = ex.map(lambda k, b: stages.backward_y(plan, b), keys, blocks)
    return ex.map(lambda k, b: stages.backward_x(plan, b), keys, _transpose(ex, plan, phys_y, "y->x"))


def ftm(ex, plan: SpectralPlan, blocks: dict) -> dict:
    """Full-transpose method; returns x-pencil chunks of the solution."""
    keys = plan.decomposition.indices
    spec = _forward(ex, plan, blocks)
    if plan.decomposition.pz > 1:
        spec = _transpose(ex, plan, spec, "y->z")
    spec = ex.map(partial(stages.thomas, plan), keys, spec)
    if plan.decomposition.pz > 1:
        spec = _transpose(ex, plan, spec, "z->y")
    return _backward(ex, plan, spec)


def ptdma(ex, plan: SpectralPlan, blocks: dict, coefficients: dict, factors: dict) -> dict:
    """Parallel tridiagonal method; ``coefficients[(p, q)]`` are the chunks' Algorithm-2 arrays
    (:func:`stages.ptdma_setup`) and ``factors[(p, s)]`` the factorised reduced systems of the
    column slices ``decomposition.reduced``
    (:func:`stages.reduced_factor`), both computed once where they are used."""
    dec = plan.decomposition
    keys = dec.indices
    spec = _forward(ex, plan, blocks)
    if dec.pz == 1:
        spec = ex.map(partial(stages.thomas, plan), keys, spec)
        return _backward(ex, plan, spec)
    reduced = ex.map(partial(stages.ptdma_reduce, plan), keys, spec, coefficients)

    def cut_rows(src, out, dst):
        _, rows, raw = out
        return rows[:, dec.reduced[dst[1]]].copy(), (raw if dst[1] == 0 else None)

    boundary = ex.exchange(
        reduced, dec.reduced_indices(), lambda d: [(d[0], q) for q in range(dec.pz)], cut_rows,
        lambda d, pieces: stages.reduced_solve(plan, d, factors[d], pieces),
    )

    def cut_solution(src, out, dst):
        x, full = out
        singular = None if full is None else full[plan.z_rows(dst[1])].copy()
        return x[stages.reduced_rows_of(plan, dst[1])].copy(), singular

    solved = ex.exchange(
        boundary, keys, lambda d: [(d[0], s) for s in range(len(dec.reduced))], cut_solution,
        lambda d, pieces: pieces,
    )
    spec = ex.map(
        lambda k, out, chunk, pieces: stages.ptdma_reconstruct(plan, k, out, chunk, pieces),
        keys, reduced, coefficients, solved,
    )
    return _backward(ex, plan, spec)
