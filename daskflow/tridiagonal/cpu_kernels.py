"""Compiled CPU loop (Numba) for the batched Thomas solve of the Poisson/Helmholtz z systems.

The NumPy sweep of :func:`daskflow.tridiagonal.thomas.solve_shifted` makes about six array
operations per row with a temporary each; this loop makes one pass per row with no temporaries,
the CPU twin of the ``thomas_shifted`` CUDA kernel. Used when
:func:`daskflow.backend.compiled_loops` says so.
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
