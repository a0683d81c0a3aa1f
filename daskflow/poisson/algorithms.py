"""The two distributed Poisson/Helmholtz algorithms, written once against an executor.

``blocks`` maps chunk index ``(p, q)`` to an x-pencil chunk in memory order ``(z, y, x)``; the
y-pencils of a transpose are ``(z, x, y)`` (:class:`~daskflow.poisson.plan.SpectralPlan`), and
the transposes' cuts swap the two axes as they pack the pieces. The
executor (:mod:`daskflow.pencils.executor`) decides whether stages run now (in-process emulation)
or become Dask tasks. All local work between two exchanges is fused into one task per chunk: a
*chain* of stage functions ``fn(plan, key, x, *extras)`` applied in order.

* FTM: x transform | x->y | y transform | y->z | Thomas | z->y | y transform back | y->x | x back.
* P-TDMA: x transform | x->y | y transform + local cyclic reduction | the boundary rows' rounds
  and reduced solves | reconstruction + y back | y->x | x back.

With ``py = 1`` the x-pencils hold all of y: both transforms run in one stage and there is no
full-field transpose. With ``pz = 1`` both methods are plain Thomas with no reduced system. Which
one runs is :class:`~daskflow.zsolve.choice.ZSolve`'s choice; the z solves themselves are
:mod:`daskflow.zsolve.spectral`'s stages.
"""

from __future__ import annotations

from functools import partial

from daskflow.pencils.layout import assemble, cut, cut_swapped, cut_swapped_local
from daskflow.poisson import stages
from daskflow.poisson.plan import SpectralPlan
from daskflow.zsolve import spectral
from daskflow.zsolve.choice import FTM, LOCAL, PTDMA, ZSolve
from daskflow.zsolve.group import column_group

Z, X = 0, 2  # memory axes of an x-pencil chunk (z, y, x)

# -------------------------------------------------------------- pieces and their assembly


def cut_for_y_pencil(plan: SpectralPlan, src, block, dst):
    """x-pencil ``(z, y, x modes)`` -> piece ``(z, x modes of dst, y)`` of a y-pencil (``py > 1``:
    stored y-last, :class:`SpectralPlan`). Its ``local`` variant (a chunk's piece for its own
    participant) defers the copy to the assembly (:class:`~daskflow.pencils.layout.SwappedPiece`)."""
    return cut_swapped(block, plan.decomposition.xs[dst[0]])


def cut_for_x_pencil(plan: SpectralPlan, src, block, dst):
    """y-pencil ``(z, x modes, y)`` -> piece ``(z, y of dst, x modes)`` of an x-pencil (``local``:
    as :func:`cut_for_y_pencil`'s)."""
    return cut_swapped(block, plan.decomposition.y[dst[0]])


def _rows_range(plan: SpectralPlan, dst) -> slice:
    """The y range of :func:`cut_for_x_pencil_with_rows`'s piece for ``dst``: its own rows and one
    more on each side, running past an end of y where they wrap around (y periodic)."""
    y = plan.decomposition.y[dst[0]]
    return slice(y.start - 1, y.stop + 1)


def cut_for_x_pencil_with_rows(plan: SpectralPlan, src, block, dst):
    """:func:`cut_for_x_pencil` with one row more on each side of the destination's y range, its
    neighbours' (y periodic): ``(z, y of dst + 2, x modes)``. The destination pads its solution
    with them instead of a halo exchange. Its ``local`` variant defers the copy to the assembly, as
    :func:`cut_for_y_pencil`'s does (wrapped rows included: one swap)."""
    return cut_swapped(block, _rows_range(plan, dst))


cut_for_y_pencil.local = lambda plan, src, block, dst: cut_swapped_local(block, plan.decomposition.xs[dst[0]])
cut_for_x_pencil.local = lambda plan, src, block, dst: cut_swapped_local(block, plan.decomposition.y[dst[0]])
cut_for_x_pencil_with_rows.local = lambda plan, src, block, dst: cut_swapped_local(block, _rows_range(plan, dst))


def cut_for_z_pencil(plan: SpectralPlan, src, block, dst):
    return cut(block, plan.y_axis, plan.decomposition.ys[dst[1]])


def cut_for_y_from_z(plan: SpectralPlan, src, block, dst):
    return cut(block, Z, plan.decomposition.z[dst[1]])


def assemble_x(plan, key, pieces, *_, out=None):
    return assemble(pieces, X, out)


def assemble_y(plan, key, pieces, *_, out=None):
    return assemble(pieces, plan.y_axis, out)


def assemble_z(plan, key, pieces, *_):
    return assemble(pieces, Z)


def _z_group(dec):
    """``sources(dst)``: the chunks with the z range of ``dst`` (a transpose x<->y exchanges among them)."""
    return lambda d: [(p, d[1]) for p in range(dec.py)]


# -------------------------------------------------------------- the algorithms


def _forward_chain(plan: SpectralPlan, ex, blocks: dict, then: list, extras=(), head=()) -> dict:
    """x-pencils -> spectral y-pencils with ``head`` fused before the x transform and ``then``
    after the y transform."""
    dec = plan.decomposition
    if dec.py == 1:
        return ex.map([*head, stages.forward_xy, *then], dec.indices, blocks, extras)
    return ex.transpose(blocks, dec.indices, _z_group(dec), head, [stages.forward_x], cut_for_y_pencil,
                        [assemble_y, stages.forward_y_owned], then, extras, site="x-to-y")


def _y_back(plan: SpectralPlan, ex, tail) -> list:
    """The stages after the last z-solve step of a y-pencil, up to the end when ``py = 1``. They
    follow the z solve in its chain, whose chunk (changed in place by it) they may destroy; the
    y transform back moves into the y->x transpose where that is pipelined in slabs (``_finish``)."""
    if plan.decomposition.py == 1:
        return [stages.backward_xy_owned, *tail]
    return [] if ex.slabs() > 1 else [stages.backward_y_owned]


def _finish(plan: SpectralPlan, ex, blocks: dict, tail, rows: bool = False) -> dict:
    """Physical-in-y y-pencils (spectral in y where the transpose is pipelined: :func:`_y_back`) ->
    x-pencils (the y->x transpose when ``py > 1``; with ``rows``, each with its neighbours' rows:
    :func:`cut_for_x_pencil_with_rows`)."""
    dec = plan.decomposition
    if dec.py == 1:
        return blocks
    before = [stages.backward_y_owned] if ex.slabs() > 1 else []
    return ex.transpose(blocks, dec.indices, _z_group(dec), [], before,
                        cut_for_x_pencil_with_rows if rows else cut_for_x_pencil,
                        [assemble_x, stages.backward_x_owned], tail, site="y-to-x-rows" if rows else "y-to-x")


def solve(ex, plan: SpectralPlan, blocks: dict, method: str, setup=(), head=(), tail=(),
          rows: bool = False) -> dict:
    """x-pencil chunks of the solution by ``method`` (``"ptdma"`` or ``"ftm"``) on the plan's
    decomposition: local Thomas at ``pz = 1`` whatever the method (:class:`ZSolve`). ``setup`` is
    P-TDMA's ``(coefficients, factors)`` (see :func:`ptdma`); ``head`` and ``tail`` are stages fused
    before the first and after the last stage (layout conversions of a caller). With ``rows``
    (``py > 1``, y periodic) each chunk also holds the y row beyond each end of its range:
    ``(z, ny_p + 2, nx)`` in memory order."""
    dec = plan.decomposition
    kind = ZSolve.of(method, dec.pz).kind
    if kind == LOCAL:
        out = _forward_chain(plan, ex, blocks, [spectral.thomas, *_y_back(plan, ex, tail)], head=head)
    elif kind == FTM:
        spec = _forward_chain(plan, ex, blocks, [], head=head)
        by_x_group = column_group(dec.pz)
        spec = ex.exchange(spec, dec.indices, by_x_group, cut_for_z_pencil, [assemble_z, spectral.thomas],
                           site="y-to-z")
        out = ex.exchange(spec, dec.indices, by_x_group, cut_for_y_from_z, [assemble_y, *_y_back(plan, ex, tail)],
                          site="z-to-y")
    else:
        coefficients, factors = setup
        reduced = _forward_chain(plan, ex, blocks, [spectral.ptdma_reduce], (coefficients,), head=head)
        pieces = spectral.exchange_rows(ex, plan, reduced, factors)
        out = ex.map([spectral.ptdma_reconstruct, *_y_back(plan, ex, tail)], dec.indices, reduced,
                     (coefficients, pieces))
    return _finish(plan, ex, out, tail, rows)


def ftm(ex, plan: SpectralPlan, blocks: dict, head=(), tail=()) -> dict:
    """Full-transpose method (local Thomas at ``pz = 1``); returns x-pencil chunks of the solution."""
    return solve(ex, plan, blocks, FTM, head=head, tail=tail)


def ptdma(ex, plan: SpectralPlan, blocks: dict, coefficients: dict, factors: dict, head=(), tail=()) -> dict:
    """Parallel tridiagonal method (local Thomas at ``pz = 1``); ``coefficients[(p, q)]`` are the
    chunks' Algorithm-2 arrays (:func:`~daskflow.zsolve.spectral.ptdma_setup`) and ``factors`` the
    factorised reduced systems (:func:`~daskflow.zsolve.spectral.reduced_factor_at`, keyed by
    :func:`~daskflow.zsolve.spectral.reduced_factor_keys`), both computed once where they are used:
    every chunk's, over all columns of its x group, where the solve gathers all boundary rows
    (``pz <= 2``), else every column slice's, each solved at the participant that owns it
    (:func:`~daskflow.zsolve.spectral.exchange_rows`)."""
    return solve(ex, plan, blocks, PTDMA, (coefficients, factors), head, tail)


def for_method(method: str, pz: int, head=(), tail=()) -> tuple:
    """The algorithm ``(ex, plan, blocks, *setup)`` a solve by ``method`` runs on ``pz`` z-chunks
    (:class:`ZSolve`), and whether it takes P-TDMA's ``(coefficients, factors)`` as ``setup``."""
    if ZSolve.of(method, pz).kind == PTDMA:
        return partial(ptdma, head=head, tail=tail), True
    return partial(ftm, head=head, tail=tail), False


def transpose_chain(ex, plan: SpectralPlan, blocks: dict, count: int) -> dict:
    """``count`` dependent transposes, alternately x->y and y->x, with no arithmetic between them
    (the exchange benchmark). Needs a plan whose x transform keeps ``nx`` points (x not PP)."""
    dec = plan.decomposition
    for i in range(count):
        cut_fn, join = (cut_for_y_pencil, [assemble_y]) if i % 2 == 0 else (cut_for_x_pencil, [assemble_x])
        blocks = ex.transpose(blocks, dec.indices, _z_group(dec), [], [], cut_fn, join,
                              site="x-to-y" if i % 2 == 0 else "y-to-x")
    return blocks
