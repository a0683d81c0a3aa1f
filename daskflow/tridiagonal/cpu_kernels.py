"""Compiled CPU loops (Numba) for the batched tridiagonal work of the Poisson/Helmholtz z solves.

The NumPy sweeps of :func:`daskflow.tridiagonal.thomas.solve_shifted`, of a factorised solve
(:meth:`daskflow.tridiagonal.thomas.FactoredTridiagonal.solve`: the z-implicit diffusion) and of
P-TDMA's local cyclic reduction (:func:`daskflow.tridiagonal.cyclic_reduction.reduce` and
``reconstruct``) make a few array operations per row, each with a temporary; these loops make one
pass per row with none, the CPU twins of the ``thomas_shifted``, ``thomas_uniform`` /
``factored_solve``, ``cr_reduce`` and ``cr_reconstruct`` CUDA kernels. Used when
:func:`daskflow.backend.compiled_loops` says so. Columns are independent: :func:`by_columns` runs a
loop over column ranges on daskflow's CPU threads (the loops release the GIL).
"""

from __future__ import annotations

from collections.abc import Callable

from daskflow.backend import compiled, cpu_threads, even_ranges, run_in_threads

MIN_COLUMNS = 1024  # columns per thread below which one thread does the whole solve


def by_columns(loop: Callable, x, *arrays, per_column=()) -> None:
    """``loop(x, *arrays)`` over ranges of the columns of the ``(m, ncols)`` array ``x`` on
    :func:`~daskflow.backend.cpu_threads` threads; ``per_column`` lists the positions in ``arrays``
    of those that have a column per column of ``x`` (sliced with it: ``(m, ncols)`` or ``(ncols,)``);
    the others are passed whole (a matrix shared by every column)."""
    ncols = x.shape[1]
    threads = min(cpu_threads(), max(1, ncols // MIN_COLUMNS))

    def part(c0: int, c1: int) -> None:
        sliced = [a[..., c0:c1] if i in per_column else a for i, a in enumerate(arrays)]
        loop(x[:, c0:c1], *sliced)

    if threads == 1:
        loop(x, *arrays)
        return
    run_in_threads(part, even_ranges(ncols, threads), threads)


@compiled
def thomas_shifted(x, lower, diag, upper, shift, cp):
    """Solve ``(lower, diag + shift[c], upper) y = x[:, c]`` for every column ``c`` of the
    C-contiguous ``(m, ncols)`` array ``x`` (real or complex), in place; ``lower, diag, upper``
    have length ``m`` (``lower[0]`` and ``upper[m-1]`` unused), ``cp`` is ``(m, ncols)`` real
    workspace for the elimination factors."""
    m, n = x.shape
    for c in range(n):
        inv = 1.0 / (diag[0] + shift[c])
        cp[0, c] = upper[0] * inv
        x[0, c] *= inv
    for k in range(1, m):
        lo, dg, up = lower[k], diag[k], upper[k]
        for c in range(n):
            inv = 1.0 / (dg + shift[c] - lo * cp[k - 1, c])
            cp[k, c] = up * inv
            x[k, c] = (x[k, c] - lo * x[k - 1, c]) * inv
    for k in range(m - 2, -1, -1):
        for c in range(n):
            x[k, c] -= cp[k, c] * x[k + 1, c]


@compiled
def cr_reduce(x, lower, upper, inv_b):
    """Algorithm 2, step 2, on the C-contiguous ``(m, ncols)`` chunk ``x`` in place: eliminate the
    interior couplings downwards then upwards (the ``cr_reduce`` CUDA kernel's sweep). ``inv_b``
    is ``(m, ncols)``, or ``(m, 1)`` for one matrix shared by every column."""
    m, n = x.shape
    per_column = 1 if inv_b.shape[1] > 1 else 0
    for k in range(2, m):
        lo = lower[k]
        for c in range(n):
            x[k, c] -= lo * x[k - 1, c] * inv_b[k - 1, c * per_column]
    for k in range(m - 3, -1, -1):
        up = upper[k]
        for c in range(n):
            x[k, c] -= up * x[k + 1, c] * inv_b[k + 1, c * per_column]


@compiled
def cr_reconstruct(x, first, last, a, c, inv_b):
    """Algorithm 2, step 4, in place: the interior rows of ``x`` from the solved first and last
    unknowns of every column (coefficients ``(m, ncols)`` or, shared, ``(m, 1)``)."""
    m, n = x.shape
    per_column = 1 if inv_b.shape[1] > 1 else 0
    for k in range(1, m - 1):
        for j in range(n):
            jc = j * per_column
            x[k, j] = (x[k, j] - a[k, jc] * first[j] - c[k, jc] * last[j]) * inv_b[k, jc]
    for j in range(n):
        x[0, j] = first[j]
        x[m - 1, j] = last[j]


@compiled
def factored_sweep(x, lower, inv_den, cp):
    """Both sweeps of a factorised solve on the C-contiguous ``(m, ncols)`` array ``x`` in place:
    coefficients ``(m, ncols)``, or ``(m, 1)`` for one matrix shared by every column (the
    ``thomas_uniform`` and ``factored_solve`` CUDA kernels' sweep, periodic correction apart)."""
    m, n = x.shape
    per_column = 1 if inv_den.shape[1] > 1 else 0
    for c in range(n):
        x[0, c] *= inv_den[0, c * per_column]
    for k in range(1, m):
        for c in range(n):
            jc = c * per_column
            x[k, c] = (x[k, c] - lower[k, jc] * x[k - 1, c]) * inv_den[k, jc]
    for k in range(m - 2, -1, -1):
        for c in range(n):
            x[k, c] -= cp[k, c * per_column] * x[k + 1, c]
