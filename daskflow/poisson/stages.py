"""Per-chunk stages of the spectral solve: pure functions of a plan, a chunk index and arrays.

Chunks are in memory order ``(z, y, x)``. The same functions run in-process
(:class:`~daskflow.pencils.executor.LocalExecutor`) and as Dask tasks on CPU or GPU workers; the
array module follows the chunk (NumPy or CuPy).
"""

from __future__ import annotations

import numpy as np

from daskflow import transforms, tridiagonal
from daskflow.backend import array_module, cpu_threads
from daskflow.poisson.plan import SpectralPlan

# ---------------------------------------------------------------- transforms along x and y


def _module(xp):
    """The array module named ``xp`` (or ``xp`` itself)."""
    if isinstance(xp, str):
        import importlib

        return importlib.import_module(xp)
    return xp


def _with_boundary_face(a, axis: int, n: int, bc: str):
    """Append the upper boundary point of a bounded ``f`` axis (D: zero, N: copy of the last)."""
    if a.shape[axis] == n:
        return a
    xp = array_module(a)
    last = xp.take(a, [a.shape[axis] - 1], axis=axis)
    face = last if bc[1] == "N" else xp.zeros_like(last)
    return xp.concatenate([a, face], axis=axis)


def to_memory_order(plan: SpectralPlan, key, a, *_):
    """Logical ``(x, y, z)`` chunk -> the ``(z, y, x)`` view the stages work on."""
    return a.T


def to_logical_order(plan: SpectralPlan, key, a, *_):
    """``(z, y, x)`` chunk -> logical ``(x, y, z)`` view (Fortran-ordered)."""
    return a.T


def forward_x(plan: SpectralPlan, key, a, *_):
    bc, st = plan.boundaries.bc[0], plan.boundaries.stagger[0]
    return array_module(a).ascontiguousarray(transforms.forward(a, -1, bc, st))


def forward_y(plan: SpectralPlan, key, a, *_, overwrite: bool = False):
    bc, st = plan.boundaries.bc[1], plan.boundaries.stagger[1]
    return array_module(a).ascontiguousarray(transforms.forward(a, -2, bc, st, overwrite=overwrite))


def forward_y_owned(plan: SpectralPlan, key, a, *_):
    """:func:`forward_y` of a chunk the chain made itself (assembled pieces): transformed in place
    where the transform allows."""
    return forward_y(plan, key, a, overwrite=True)


def backward_y(plan: SpectralPlan, key, a, *_, overwrite: bool = False):
    bc, st = plan.boundaries.bc[1], plan.boundaries.stagger[1]
    ny = plan.grid.shape[1]
    out = transforms.backward(a, -2, bc, st, ny, real_output=not plan.x_is_complex, overwrite=overwrite)
    return _with_boundary_face(out, -2, ny, bc)


def backward_y_owned(plan: SpectralPlan, key, a, *_):
    """:func:`backward_y` of a chunk the chain owns (the z solve's output, already changed in
    place): transformed in place where the transform allows."""
    return backward_y(plan, key, a, overwrite=True)


def backward_x(plan: SpectralPlan, key, a, *_, overwrite: bool = False):
    bc, st = plan.boundaries.bc[0], plan.boundaries.stagger[0]
    nx = plan.grid.shape[0]
    out = transforms.backward(a, -1, bc, st, nx, real_output=True, overwrite=overwrite)
    return _with_boundary_face(array_module(a).ascontiguousarray(out), -1, nx, bc)


def backward_x_owned(plan: SpectralPlan, key, a, *_):
    """:func:`backward_x` of a chunk the chain made itself (assembled pieces)."""
    return backward_x(plan, key, a, overwrite=True)


def forward_xy(plan: SpectralPlan, key, a, *_):
    """Both transforms on a chunk that holds all of x and y (a fused 2-D FFT when both are PP).
    ``a`` is left unchanged; the x transform's output is transformed along y in place."""
    if plan.boundaries.bc[:2] == ("PP", "PP"):
        xp = array_module(a)
        if xp is np:
            import scipy.fft

            return scipy.fft.rfft2(a, axes=(-2, -1), workers=cpu_threads())
        return xp.ascontiguousarray(xp.fft.rfft2(a, axes=(-2, -1)))
    return forward_y(plan, key, forward_x(plan, key, a), overwrite=True)


def backward_xy(plan: SpectralPlan, key, a, *_, overwrite: bool = False):
    """Inverse of :func:`forward_xy`; with ``overwrite`` the spectral chunk ``a`` is destroyed
    (NumPy: the y transform, and for PP pairs the complex y FFT, run in place in it)."""
    if plan.boundaries.bc[:2] == ("PP", "PP"):
        nx, ny = plan.grid.shape[:2]
        xp = array_module(a)
        if xp is not np:
            return xp.fft.irfft2(a, s=(ny, nx), axes=(-2, -1))
        import scipy.fft

        workers = cpu_threads()
        if overwrite:  # irfft2 in two passes, the first in place: no complex temporary
            a = scipy.fft.ifft(a, axis=-2, overwrite_x=True, workers=workers)
            return scipy.fft.irfft(a, n=nx, axis=-1, workers=workers)
        return scipy.fft.irfft2(a, s=(ny, nx), axes=(-2, -1), workers=workers)
    # backward_y's output is new or (with overwrite) ``a`` itself: backward_x may destroy it
    return backward_x(plan, key, backward_y(plan, key, a, overwrite=overwrite), overwrite=True)


def backward_xy_owned(plan: SpectralPlan, key, a, *_):
    """:func:`backward_xy` of a chunk the chain owns (the z solve's output, already changed in
    place): no temporaries beyond the result where the transforms allow."""
    return backward_xy(plan, key, a, overwrite=True)


# ---------------------------------------------------------------- z solves


def _holds_singular_column(plan: SpectralPlan, p: int, ys: slice | None) -> bool:
    dec = plan.decomposition
    return plan.singular and dec.xs[p].start == 0 and (ys is None or ys.start == 0)


def _fill_top_face(block, m: int) -> None:
    """Zero the stored upper boundary face of a Dirichlet ``f`` z axis (rows beyond the unknowns)."""
    if m < block.shape[0]:
        block[m:] = 0


def thomas(plan: SpectralPlan, key, block, *_):
    """FTM: solve the whole z column of z-pencil ``key = (p, q)`` (spectral ``(nz, ys_q, xs_p)``)."""
    xp = array_module(block)
    p, q = key
    dec = plan.decomposition
    m = plan.nz_unknowns
    d = block[:m]
    shift = plan.device("shift", xp, (dec.ys[q], dec.xs[p]))
    singular = _holds_singular_column(plan, p, dec.ys[q])
    raw = d[:, 0, 0].copy() if singular else None
    tridiagonal.solve_shifted(d, _z_op(plan, xp), shift)
    if singular:
        d[:, 0, 0] = plan.device("singular_solution", xp) @ raw
    _fill_top_face(block, m)
    return block


def _z_op(plan: SpectralPlan, xp, rows: slice = slice(None)):
    from daskflow.stencils import Tridiagonal

    return Tridiagonal(*(plan.device(n, xp, rows) for n in ("lower", "diag", "upper")), plan.z_op.periodic)


def ptdma_setup(plan: SpectralPlan, key, xp, columns: slice = slice(None)) -> tridiagonal.ReducedChunk:
    """Algorithm-2 coefficients of y-pencil ``key = (p, q)`` (restricted to spectral-y ``columns``).

    ``xp`` is the array module or its name (``"numpy"``/``"cupy"``, as set-up tasks receive it).
    """
    xp = _module(xp)
    p, q = key
    rows = plan.z_rows(q)
    op = _z_op(plan, xp, rows)
    shift = plan.device("shift", xp, (columns, plan.decomposition.xs[p]))
    chunk = tridiagonal.precompute(op.lower, op.diag, op.upper, shift)
    real = plan.real_dtype
    return tridiagonal.ReducedChunk(*(v.astype(real, copy=False) for v in chunk))


def ptdma_reduce(plan: SpectralPlan, key, block, chunk: tridiagonal.ReducedChunk, *_):
    """P-TDMA step 4 on y-pencil ``key``: local reduction in place.

    Returns ``(block, boundary_rows, singular_rhs)``: the rows that leave the chunk, shape
    ``(1 or 2, nys, nxs_p)``, and the raw right-hand side of the singular column (or ``None``).
    """
    m = chunk.a.shape[0]
    d = block[:m]
    raw = d[:, 0, 0].copy() if _holds_singular_column(plan, key[0], None) else None
    rows = tridiagonal.reduce(d, chunk)
    return block, rows, raw


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
    chunks = [ptdma_setup(plan, (p, q), xp, columns) for q in range(dec.pz)]
    lower, diag, upper = tridiagonal.reduced_system(chunks)
    return tridiagonal.FactoredTridiagonal.factor(lower, diag, upper, plan.z_op.periodic)


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
        full = plan.device("singular_solution", xp) @ xp.concatenate([raw for _, raw in pieces])
        offset = 0
        for q in range(plan.decomposition.pz):
            rows = plan.z_rows(q)
            count = tridiagonal.boundary_rows(rows.stop - rows.start)
            x[offset, 0, 0] = full[rows.start]
            x[offset + count - 1, 0, 0] = full[rows.stop - 1]
            offset += count
    return x, full


def reduced_rows_of(plan: SpectralPlan, q: int) -> slice:
    """Rows of z-chunk ``q`` in the stacked reduced system."""
    counts = [tridiagonal.boundary_rows((r := plan.z_rows(i)).stop - r.start) for i in range(q + 1)]
    return slice(sum(counts[:-1]), sum(counts))


def ptdma_reconstruct(plan: SpectralPlan, key, reduced_out, chunk, pieces):
    """P-TDMA step 6: rebuild y-pencil ``key = (p, q)`` from its solved boundary rows.

    ``reduced_out`` is the chunk's :func:`ptdma_reduce` result; ``pieces`` lists, over slices
    ``s``, ``(rows, singular_piece)``: rows ``(1 or 2, ys_s, xs_p)``.
    """
    xp = array_module(pieces[0][0])
    block = reduced_out[0]
    rows = xp.concatenate([r for r, _ in pieces], axis=1)
    m = chunk.a.shape[0]
    tridiagonal.reconstruct(block[:m], rows[0], rows[-1], chunk)
    for _, singular in pieces:
        if singular is not None:
            block[:m, 0, 0] = singular
    _fill_top_face(block, m)
    return block
