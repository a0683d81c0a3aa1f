"""The two distributed Poisson/Helmholtz algorithms, written once against an executor.

``blocks`` maps chunk index ``(p, q)`` to an x-pencil chunk in memory order ``(z, y, x)``. The
executor (:mod:`daskflow.pencils.executor`) decides whether stages run now (in-process emulation)
or become Dask tasks. All local work between two exchanges is fused into one task per chunk: a
*chain* of stage functions ``fn(plan, key, x, *extras)`` applied in order.

* FTM: x transform | x->y | y transform | y->z | Thomas | z->y | y transform back | y->x | x back.
* P-TDMA: x transform | x->y | y transform + local cyclic reduction | gather of boundary rows
  into column slices | reduced solves | scatter | reconstruction + y back | y->x | x back.

With ``py = 1`` the x-pencils hold all of y: both transforms run in one stage and there is no
full-field transpose. With ``pz = 1`` both methods are plain Thomas with no reduced system.
"""

from __future__ import annotations

from daskflow.pencils.layout import assemble, cut
from daskflow.poisson import stages
from daskflow.poisson.plan import SpectralPlan

Z, Y, X = 0, 1, 2  # memory axes of a chunk

# -------------------------------------------------------------- pieces and their assembly


def cut_for_y_pencil(plan: SpectralPlan, src, block, dst):
    return cut(block, X, plan.decomposition.xs[dst[0]])


def cut_for_x_pencil(plan: SpectralPlan, src, block, dst):
    return cut(block, Y, plan.decomposition.y[dst[0]])


def cut_for_z_pencil(plan: SpectralPlan, src, block, dst):
    return cut(block, Y, plan.decomposition.ys[dst[1]])


def cut_for_y_from_z(plan: SpectralPlan, src, block, dst):
    return cut(block, Z, plan.decomposition.z[dst[1]])


def assemble_x(plan, key, pieces, *_):
    return assemble(pieces, X)


def assemble_y(plan, key, pieces, *_):
    return assemble(pieces, Y)


def assemble_z(plan, key, pieces, *_):
    return assemble(pieces, Z)


def cut_boundary_rows(plan: SpectralPlan, src, reduced_out, dst):
    """Boundary rows of chunk ``src = (p, q)`` for reduced slice ``dst = (p, s)``."""
    _, rows, raw = reduced_out
    return rows[:, plan.decomposition.reduced[dst[1]]].copy(), (raw if dst[1] == 0 else None)


def cut_solution_rows(plan: SpectralPlan, src, solved, dst):
    """Solved boundary rows of slice ``src = (p, s)`` that belong to chunk ``dst = (p, q)``."""
    x, full = solved
    singular = None if full is None else full[plan.z_rows(dst[1])].copy()
    return x[stages.reduced_rows_of(plan, dst[1])].copy(), singular


def cut_all_boundary_rows(plan: SpectralPlan, src, reduced_out, dst):
    """All boundary rows of chunk ``src`` (every column) and its singular right-hand side, for a
    chunk ``dst`` of the same x group that solves every reduced system itself."""
    _, rows, raw = reduced_out
    return rows, raw


def solve_gathered(plan: SpectralPlan, key, pieces, factor):
    """The reduced systems of every column of x group ``key[0]``, solved at chunk ``key`` from the
    boundary rows of the whole group (``pieces``, in z order); ``factor`` is
    :func:`stages.reduced_factor` over all columns. Returns this chunk's solved rows as
    :func:`stages.ptdma_reconstruct` takes them (one slice: every column)."""
    whole = (key[0], 0)  # the singular column, if any, is column 0 of the first slice
    return [cut_solution_rows(plan, whole, stages.reduced_solve(plan, whole, pieces, factor), key)]


def _groups(dec, along: str):
    """``sources(dst)``: the chunks that exchange with ``dst`` (same z group or same x group)."""
    if along == "p":
        return lambda d: [(p, d[1]) for p in range(dec.py)]
    return lambda d: [(d[0], q) for q in range(dec.pz)]


# -------------------------------------------------------------- the algorithms


def _forward_chain(plan: SpectralPlan, ex, blocks: dict, then: list, extras=(), head=()) -> dict:
    """x-pencils -> spectral y-pencils with ``head`` fused before the x transform and ``then``
    after the y transform."""
    dec = plan.decomposition
    if dec.py == 1:
        return ex.map([*head, stages.forward_xy, *then], dec.indices, blocks, extras)
    spec_x = ex.map([*head, stages.forward_x], dec.indices, blocks)
    return ex.exchange(spec_x, dec.indices, _groups(dec, "p"), cut_for_y_pencil,
                       [assemble_y, stages.forward_y_owned, *then], extras, site="x-to-y")


def _y_back(plan: SpectralPlan, tail) -> list:
    """The stages after the last z-solve step of a y-pencil, up to the end when ``py = 1``. They
    follow the z solve in its chain, whose chunk (changed in place by it) they may destroy."""
    if plan.decomposition.py == 1:
        return [stages.backward_xy_owned, *tail]
    return [stages.backward_y_owned]


def _finish(plan: SpectralPlan, ex, blocks: dict, tail) -> dict:
    """Physical-in-y y-pencils -> x-pencils (the y->x transpose when ``py > 1``)."""
    dec = plan.decomposition
    if dec.py == 1:
        return blocks
    return ex.exchange(blocks, dec.indices, _groups(dec, "p"), cut_for_x_pencil,
                       [assemble_x, stages.backward_x_owned, *tail], site="y-to-x")


def ftm(ex, plan: SpectralPlan, blocks: dict, head=(), tail=()) -> dict:
    """Full-transpose method; returns x-pencil chunks of the solution. ``head`` and ``tail`` are
    stages fused before the first and after the last stage (layout conversions of a caller)."""
    dec = plan.decomposition
    if dec.pz == 1:
        out = _forward_chain(plan, ex, blocks, [stages.thomas, *_y_back(plan, tail)], head=head)
    else:
        spec = _forward_chain(plan, ex, blocks, [], head=head)
        by_x_group = _groups(dec, "q")
        spec = ex.exchange(spec, dec.indices, by_x_group, cut_for_z_pencil, [assemble_z, stages.thomas], site="y-to-z")
        out = ex.exchange(spec, dec.indices, by_x_group, cut_for_y_from_z, [assemble_y, *_y_back(plan, tail)],
                          site="z-to-y")
    return _finish(plan, ex, out, tail)


def ptdma(ex, plan: SpectralPlan, blocks: dict, coefficients: dict, factors: dict, head=(), tail=(),
          gather: bool = False) -> dict:
    """Parallel tridiagonal method; ``coefficients[(p, q)]`` are the chunks' Algorithm-2 arrays
    (:func:`stages.ptdma_setup`) and ``factors[(p, s)]`` the factorised reduced systems of the
    column slices ``decomposition.reduced`` (:func:`stages.reduced_factor`), both computed once
    where they are used.

    The reduced systems are solved either by slice, each at the participant that owns it (the
    boundary rows go there and the solutions come back: two rounds), or with ``gather`` by every
    chunk for all columns of its x group from all the group's boundary rows (one round, the same
    bytes at ``pz = 2``; ``factors[(p, q)]`` is then the chunk's :func:`stages.reduced_factor`
    over all columns)."""
    dec = plan.decomposition
    if dec.pz == 1:
        return ftm(ex, plan, blocks, head, tail)
    reduced = _forward_chain(plan, ex, blocks, [stages.ptdma_reduce], (coefficients,), head=head)
    if gather:
        pieces = ex.exchange(reduced, dec.indices, _groups(dec, "q"), cut_all_boundary_rows, [solve_gathered],
                             (factors,), site="all-rows")
    else:
        solved = ex.exchange(reduced, dec.reduced_indices(), _groups(dec, "q"), cut_boundary_rows,
                             [stages.reduced_solve], (factors,), site="rows")
        pieces = ex.exchange(solved, dec.indices, lambda d: [(d[0], s) for s in range(len(dec.reduced))],
                             cut_solution_rows, None, site="solutions")
    back = [stages.ptdma_reconstruct, *_y_back(plan, tail)]
    out = ex.map(back, dec.indices, reduced, (coefficients, pieces))
    return _finish(plan, ex, out, tail)


def transpose_chain(ex, plan: SpectralPlan, blocks: dict, count: int) -> dict:
    """``count`` dependent transposes, alternately x->y and y->x, with no arithmetic between them
    (the exchange benchmark). Needs a plan whose x transform keeps ``nx`` points (x not PP)."""
    dec = plan.decomposition
    for i in range(count):
        cut_fn, join = (cut_for_y_pencil, [assemble_y]) if i % 2 == 0 else (cut_for_x_pencil, [assemble_x])
        blocks = ex.exchange(blocks, dec.indices, _groups(dec, "p"), cut_fn, join,
                             site="x-to-y" if i % 2 == 0 else "y-to-x")
    return blocks
