"""Compiled CPU loops (Numba) for the batched tridiagonal work of the Poisson/Helmholtz z solves.

The NumPy sweeps of :func:`daskflow.tridiagonal.thomas.solve_shifted` and of P-TDMA's local
cyclic reduction (:func:`daskflow.tridiagonal.cyclic_reduction.reduce` and ``reconstruct``) make
a few array operations per row, each with a temporary; these loops make one pass per row with none,
the CPU twins of the ``thomas_shifted``, ``cr_reduce`` and ``cr_reconstruct`` CUDA kernels. Used
when :func:`daskflow.backend.compiled_loops` says so.
"""

from __future__ import annotations

from daskflow.backend import compiled


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
