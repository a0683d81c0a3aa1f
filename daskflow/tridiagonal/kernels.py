"""CUDA kernels for batched tridiagonal work on CuPy arrays.

Every kernel runs one thread per column. Arrays are ``(m, ncols)`` C-contiguous views, so
consecutive threads touch consecutive addresses at every ``k`` (coalesced), and each thread walks
its column in ``k``; the ``_rows`` kernels (:mod:`daskflow.tridiagonal.row_kernels`) work on the rows
of an ``(nrows, stride)`` array instead.
Coefficients that depend only on ``k`` are 1-D and broadcast to all threads;
``shift`` adds a per-column constant to the diagonal (the x/y eigenvalues). ``T`` is the data type
(real or complex), ``R`` the real type of the coefficients. Compiled once per type pair.
"""

from __future__ import annotations

import functools

import numpy as np

from daskflow.backend import raw_kernel
from daskflow.tridiagonal import row_kernels

#: rows per segment of the kernels that recompute per-column coefficients in registers instead of
#: reading them (``thomas_shifted``, ``cr_reduce_shifted``, ``cr_reconstruct_shifted``): they keep the
#: values entering each segment
SEGMENT = 16

_PREAMBLE = r"""
#include <cupy/complex.cuh>
typedef {T} T;
typedef {R} R;
"""

# The forward recurrence of the P-TDMA set-up (cyclic_reduction._forward) for one column, in its
# arithmetic (the products rounded apart, as NumPy does: no fused multiply-add): row k's b and
# forward a from row k - 1's and its 1/b; and the 1/b and forward a of the rows of one segment from
# the values entering it (row 1 from the matrix itself in the first segment).
_FORWARD_ROWS = r"""
#define SEGMENT SEGMENT_ROWS
__device__ __forceinline__ void forward_row(int k, const double* lower, const double* diag, const double* upper,
        double s, double inv_before, double& b, double& a) {
    b = __dsub_rn(diag[k] + s, __dmul_rn(__dmul_rn(lower[k], upper[k - 1]), inv_before));
    a = __dmul_rn(__dmul_rn(-lower[k], a), inv_before);
}
__device__ __forceinline__ void segment_rows(int r0, int m, const double* lower, const double* diag,
        const double* upper, double s, const double* entering, long long ncols, long long col, double* invs,
        double* as) {
    double b, a, inv;
    int first = r0;
    if (r0 == 0) {
        b = diag[1] + s; a = lower[1]; inv = 1.0 / b; invs[1] = inv; as[1] = a; first = 2;
    } else {
        const long long e = 2LL * (r0 / SEGMENT) * ncols + col;
        b = entering[e]; a = entering[e + ncols]; inv = 1.0 / b;
    }
    #pragma unroll
    for (int j = 0; j < SEGMENT; ++j) {
        const int r = r0 + j;
        if (r >= first && r <= m - 2) {
            forward_row(r, lower, diag, upper, s, inv, b, a);
            inv = 1.0 / b; invs[j] = inv; as[j] = a;
        }
    }
}
""".replace("SEGMENT_ROWS", str(SEGMENT))

_SOURCES = {
    **row_kernels.SOURCES,
    # Thomas with 1-D coefficients and a per-column diagonal shift; d is overwritten by x. The
    # eliminated upper coefficients c_k differ per column (the shift): instead of writing all of
    # them and reading them back (half a pass over the data each way), the forward sweep keeps the
    # c entering every segment of SEGMENT rows in ``cp`` ((m + SEGMENT - 1) / SEGMENT, ncols), and
    # the backward sweep recomputes a segment's c from it, in registers, by the same function (the
    # same arithmetic as the forward sweep's).
    "thomas_shifted": r"""
#define SEGMENT SEGMENT_ROWS
__device__ __forceinline__ R eliminated(int k, R c, R s, const R* lower, const R* diag, const R* upper, R& inv) {
    inv = k ? R(1) / (diag[k] + s - lower[k] * c) : R(1) / (diag[0] + s);
    return upper[k] * inv;
}
extern "C" __global__ void thomas_shifted(T* d, R* cp, const R* lower, const R* diag,
        const R* upper, const R* shift, const int m, const long long ncols) {
    const long long col = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (col >= ncols) return;
    const R s = shift[col];
    R c = R(0), inv;
    T x = T(0);
    for (int k = 0; k < m; ++k) {
        if (k % SEGMENT == 0) cp[(k / SEGMENT) * ncols + col] = c;
        const long long i = k * ncols + col;
        c = eliminated(k, c, s, lower, diag, upper, inv);
        x = (k ? d[i] - lower[k] * x : d[i]) * inv;
        d[i] = x;
    }
    for (int k0 = ((m - 1) / SEGMENT) * SEGMENT; k0 >= 0; k0 -= SEGMENT) {
        R cs[SEGMENT];
        c = cp[(k0 / SEGMENT) * ncols + col];
        #pragma unroll
        for (int j = 0; j < SEGMENT; ++j)
            if (k0 + j < m) cs[j] = c = eliminated(k0 + j, c, s, lower, diag, upper, inv);
        #pragma unroll
        for (int j = SEGMENT - 1; j >= 0; --j) {
            const int k = k0 + j;
            if (k < m - 1) {
                const long long i = k * ncols + col;
                x = d[i] - cs[j] * x;
                d[i] = x;
            }
        }
    }
}
""".replace("SEGMENT_ROWS", str(SEGMENT)),
    # factored_solve (below) for one matrix shared by every column: the factorisation ``inv``,
    # ``cp`` is 1-D, so no per-column workspace or coefficients are read; one read and one write of
    # d per sweep (the periodic correction, if any, follows as array operations).
    "thomas_uniform": r"""
extern "C" __global__ void thomas_uniform(T* d, const R* lower, const R* inv, const R* cp, const int m,
        const long long ncols) {
    const long long col = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (col >= ncols) return;
    T x = d[col] * inv[0];
    d[col] = x;
    for (int k = 1; k < m; ++k) {
        const long long i = k * ncols + col;
        x = (d[i] - lower[k] * x) * inv[k];
        d[i] = x;
    }
    for (int k = m - 2; k >= 0; --k) {
        const long long i = k * ncols + col;
        x = d[i] - cp[k] * x;
        d[i] = x;
    }
}
""",
    # Periodic (cyclic) variant by Sherman-Morrison: solves T y = d and T z = u in one sweep.
    "thomas_cyclic_shifted": r"""
extern "C" __global__ void thomas_cyclic_shifted(T* d, R* cp, R* zz, const R* lower,
        const R* diag, const R* upper, const R* shift, const int m, const long long ncols) {
    const long long col = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (col >= ncols) return;
    const R s = shift[col];
    const R alpha = lower[0], beta = upper[m - 1];
    const R gamma = -(diag[0] + s);
    R b0 = diag[0] + s - gamma;
    R inv = R(1) / b0;
    R c = upper[0] * inv;
    T x = d[col] * inv;
    R z = gamma * inv;
    d[col] = x; cp[col] = c; zz[col] = z;
    for (int k = 1; k < m; ++k) {
        const long long i = k * ncols + col;
        R bk = diag[k] + s;
        R uk = R(0);
        if (k == m - 1) { bk -= alpha * beta / gamma; uk = beta; }
        inv = R(1) / (bk - lower[k] * c);
        c = upper[k] * inv;
        x = (d[i] - lower[k] * x) * inv;
        z = (uk - lower[k] * z) * inv;
        d[i] = x; cp[i] = c; zz[i] = z;
    }
    for (int k = m - 2; k >= 0; --k) {
        const long long i = k * ncols + col;
        x = d[i] - cp[i] * x;
        z = zz[i] - cp[i] * z;
        d[i] = x; zz[i] = z;
    }
    const long long last = (long long)(m - 1) * ncols + col;
    const T f = (d[col] + (alpha / gamma) * d[last]) / (R(1) + zz[col] + (alpha / gamma) * zz[last]);
    for (int k = 0; k < m; ++k) {
        const long long i = k * ncols + col;
        d[i] = d[i] - f * zz[i];
    }
}
""",
    # Solve with a factorisation precomputed per column (reduced systems): only d moves.
    "factored_solve": r"""
extern "C" __global__ void factored_solve(T* d, const R* lower, const R* inv_den,
        const R* cp, const R* zz, const R* vlast, const int m, const long long ncols,
        const int periodic) {
    const long long col = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (col >= ncols) return;
    T x = d[col] * inv_den[col];
    d[col] = x;
    for (int k = 1; k < m; ++k) {
        const long long i = k * ncols + col;
        x = (d[i] - lower[i] * x) * inv_den[i];
        d[i] = x;
    }
    for (int k = m - 2; k >= 0; --k) {
        const long long i = k * ncols + col;
        x = d[i] - cp[i] * x;
        d[i] = x;
    }
    if (periodic) {
        const long long last = (long long)(m - 1) * ncols + col;
        const T f = (d[col] + vlast[col] * d[last]) / (R(1) + zz[col] + vlast[col] * zz[last]);
        for (int k = 0; k < m; ++k) {
            const long long i = k * ncols + col;
            d[i] = d[i] - f * zz[i];
        }
    }
}
""",
    # Algorithm 2, step 2 (run time): reduce d in place with precomputed 1/b.
    "cr_reduce": r"""
extern "C" __global__ void cr_reduce(T* d, const R* lower, const R* upper, const R* inv_b,
        const int m, const long long ncols, const long long ccols) {
    const long long col = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (col >= ncols) return;
    if (m < 3) return;
    const long long j = ccols == 1 ? 0 : col;  // coefficient column: one shared by all, or per column
    T prev = d[ncols + col];
    for (int k = 2; k < m; ++k) {
        const long long i = k * ncols + col;
        prev = d[i] - lower[k] * prev * inv_b[(k - 1) * ccols + j];
        d[i] = prev;
    }
    T next = d[(long long)(m - 2) * ncols + col];
    for (int k = m - 3; k >= 0; --k) {
        const long long i = k * ncols + col;
        next = d[i] - upper[k] * next * inv_b[(k + 1) * ccols + j];
        d[i] = next;
    }
}
""",
    # Algorithm 2, step 4: reconstruct the interior from the two boundary values.
    "cr_reconstruct": r"""
extern "C" __global__ void cr_reconstruct(T* d, const T* first, const T* last, const R* a,
        const R* c, const R* inv_b, const int m, const long long ncols, const long long ccols) {
    const long long col = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (col >= ncols) return;
    const long long j = ccols == 1 ? 0 : col;
    const T x0 = first[col], xl = last[col];
    d[col] = x0;
    for (int k = 1; k < m - 1; ++k) {
        const long long i = k * ncols + col, ic = k * ccols + j;
        d[i] = (d[i] - a[ic] * x0 - c[ic] * xl) * inv_b[ic];
    }
    if (m > 1) d[(long long)(m - 1) * ncols + col] = xl;
}
""",
    # cr_reduce and cr_reconstruct for coefficients that differ per column (the diagonal's shift),
    # without reading (m, ncols) coefficient arrays: the set-up's forward recurrence (b_k, and the
    # forward a_k) is recomputed with the set-up's arithmetic from the 1-D rows (float64), along the
    # forward sweep, and per segment of SEGMENT rows from the values entering it (``entering``,
    # (nseg, 2, ncols): b and a of row SEGMENT * j - 1) for the reconstruction, which runs backwards.
    # Two sweeps, as Thomas makes: the reduction stores only the forward sweep, whose last value is
    # the last row's reduced right-hand side; the first row's, which cr_reduce's backward sweep ends
    # on, is that sweep unrolled, sum_k v_k d'_k with v_0 = 1, v_k = -v_{k-1} upper[k-1] / b_k (a
    # forward product), accumulated by the forward sweep. The reconstruction is the backward sweep of
    # the forward rows, a_k x_0 + b_k x_k + upper[k] x_{k+1} = d'_k. The values meet the data in the
    # working precision R, as the set-up's cast arrays did; the solution is cr_reduce's and
    # cr_reconstruct's up to rounding (the last boundary row's value has their bits).
    "cr_reduce_shifted": _FORWARD_ROWS + r"""
extern "C" __global__ void cr_reduce_shifted(T* d, const double* lower, const double* diag, const double* upper,
        const double* shift, const double* entering, const int m, const long long ncols) {
    const long long col = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (col >= ncols || m < 3) return;
    const double s = shift[col];
    double b = diag[1] + s, a = lower[1], inv = 1.0 / b;
    double v = -upper[0] * inv;  // v_1
    T prev = d[ncols + col];
    T first = d[col] + R(v) * prev;
    for (int k = 2; k < m; ++k) {
        const long long i = k * ncols + col;
        prev = d[i] - R(lower[k]) * prev * R(inv);
        d[i] = prev;
        if (k < m - 1) {
            forward_row(k, lower, diag, upper, s, inv, b, a);
            inv = 1.0 / b;
            v = -v * upper[k - 1] * inv;
            first += R(v) * prev;
        }
    }
    d[col] = first;
}
""",
    "cr_reconstruct_shifted": _FORWARD_ROWS + r"""
extern "C" __global__ void cr_reconstruct_shifted(T* d, const T* first, const T* last, const double* lower,
        const double* diag, const double* upper, const double* shift, const double* entering, const int m,
        const long long ncols) {
    const long long col = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (col >= ncols) return;
    const T x0 = first[col], xl = last[col];
    d[col] = x0;
    if (m > 1) d[(long long)(m - 1) * ncols + col] = xl;
    const double s = shift[col];
    T x = xl;
    for (int r0 = ((m - 2) / SEGMENT) * SEGMENT; m >= 3 && r0 >= 0; r0 -= SEGMENT) {
        double invs[SEGMENT], as[SEGMENT];
        segment_rows(r0, m, lower, diag, upper, s, entering, ncols, col, invs, as);
        #pragma unroll
        for (int j = SEGMENT - 1; j >= 0; --j) {
            const int k = r0 + j;
            if (k >= 1 && k <= m - 2) {
                const long long i = k * ncols + col;
                x = (d[i] - R(as[j]) * x0 - R(upper[k]) * x) * R(invs[j]);
                d[i] = x;
            }
        }
    }
}
""",
}

_CTYPES = {
    np.dtype(np.float64): "double",
    np.dtype(np.float32): "float",
    np.dtype(np.complex128): "complex<double>",
    np.dtype(np.complex64): "complex<float>",
}
THREADS = 128


@functools.cache
def _source(name: str, dtype: np.dtype, geometry: tuple) -> str:
    real = np.dtype(dtype).type(0).real.dtype
    head = _PREAMBLE.format(T=_CTYPES[np.dtype(dtype)], R=_CTYPES[real])
    if geometry:
        head += row_kernels.definitions(dict(geometry), np.dtype(dtype).itemsize)
    return head + _SOURCES[name]


def launch(name: str, dtype: np.dtype, ncols: int, *args, geometry: dict | None = None) -> None:
    """Run kernel ``name`` for data type ``dtype`` over ``ncols`` columns (or, for a ``_rows``
    kernel, rows: 32 a warp, in blocks of its geometry's ``WARPS``). ``geometry`` overrides entries
    of the kernel's :data:`~daskflow.tridiagonal.row_kernels.GEOMETRY` (a benchmark's sweep)."""
    own = row_kernels.GEOMETRY.get(name, {})
    if geometry and not own:
        rows = ", ".join(row_kernels.GEOMETRY)
        raise ValueError(f"launch: {name} takes no tile geometry; the row kernels do: {rows}")
    merged = {**own, **geometry} if geometry else own
    kernel = raw_kernel(_source(name, np.dtype(dtype), tuple(merged.items())), name)
    threads = 32 * merged["WARPS"] if merged else THREADS
    kernel(((ncols + threads - 1) // threads,), (threads,), args)
