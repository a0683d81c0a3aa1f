"""CUDA kernels for batched tridiagonal work on CuPy arrays.

Every kernel runs one thread per column. Arrays are ``(m, ncols)`` C-contiguous views, so
consecutive threads touch consecutive addresses at every ``k`` (coalesced), and each thread walks
its column in ``k``; the ``_rows`` kernels work on the rows of an ``(nrows, stride)`` array instead.
Coefficients that depend only on ``k`` are 1-D and broadcast to all threads;
``shift`` adds a per-column constant to the diagonal (the x/y eigenvalues). ``T`` is the data type
(real or complex), ``R`` the real type of the coefficients. Compiled once per type pair.
"""

from __future__ import annotations

import functools

import numpy as np

from daskflow.backend import raw_kernel

#: rows per segment of the kernels that recompute per-column coefficients in registers instead of
#: reading them (``thomas_shifted``, ``cr_reduce_shifted``, ``cr_reconstruct_shifted``): they keep the
#: values entering each segment
SEGMENT = 16

_PREAMBLE = r"""
#include <cupy/complex.cuh>
typedef {T} T;
typedef {R} R;
// The tiles of the _rows kernels: values k0..k0+kn-1 of up to 32 rows of a (rows, stride) block
// through shared memory, every row read and written along itself by the lanes of one warp. A block
// (one warp) takes rows row0..row0+rows-1 of d, which start at base. Global loads go in batches of
// B independent loads before their values are stored anywhere: a load right after a store may read
// what the store wrote (the compiler cannot tell shared from global behind a pointer), so one at a
// time each would wait the memory's full latency. B trades that latency against registers: 16 for
// the Thomas sweeps, 8 for P-TDMA's (measured on an H200).
#define ROW_TILES(nrows) \
    __shared__ T tile[32][33]; \
    const int lane = threadIdx.x; \
    const long long row0 = blockIdx.x * 32LL; \
    const int rows = (int)min(32LL, (nrows) - row0); \
    T* base = d + row0 * stride
// The addend's rows of this block (nullptr where there is none, adding == 0).
#define ADDED_ROWS(addend, adding) ((adding) ? (addend) + row0 * stride : nullptr)
// Coefficient c[k0 + lane + shift] of the tile's rows into shared memory (where it exists), read by
// every lane in the sweep; published by load_tile's __syncwarp.
#define STAGE(dst, src, shift) \
    if (lane < kn && k0 + lane + (shift) >= 0 && k0 + lane + (shift) < m) dst[lane] = src[k0 + lane + (shift)]
template <int B>
__device__ void load_tile(T (*tile)[33], const T* base, long long stride, int k0, int kn, int rows, int lane) {{
    for (int r0 = 0; r0 < rows; r0 += B) {{
        T v[B];
        #pragma unroll
        for (int i = 0; i < B; ++i)
            if (r0 + i < rows && lane < kn) v[i] = base[(r0 + i) * stride + k0 + lane];
        #pragma unroll
        for (int i = 0; i < B; ++i)
            if (r0 + i < rows && lane < kn) tile[r0 + i][lane] = v[i];
    }}
    __syncwarp();
}}
__device__ void store_tile(T (*tile)[33], T* base, long long stride, int k0, int kn, int rows, int lane) {{
    __syncwarp();
    for (int r = 0; r < rows; ++r)
        if (lane < kn) base[r * stride + k0 + lane] = tile[r][lane];
    __syncwarp();
}}
// A solve's last store: the tile plus an addend of d's layout (the solution added to the field it
// increments, u + du, as the values leave; added = nullptr stores the tile alone).
template <int B>
__device__ void store_tile_adding(T (*tile)[33], T* base, const T* added, long long stride, int k0, int kn,
        int rows, int lane) {{
    if (added == nullptr) {{
        store_tile(tile, base, stride, k0, kn, rows, lane);
        return;
    }}
    __syncwarp();
    for (int r0 = 0; r0 < rows; r0 += B) {{
        T v[B];
        #pragma unroll
        for (int i = 0; i < B; ++i)
            if (r0 + i < rows && lane < kn) v[i] = added[(r0 + i) * stride + k0 + lane];
        #pragma unroll
        for (int i = 0; i < B; ++i)
            if (r0 + i < rows && lane < kn) base[(r0 + i) * stride + k0 + lane] = tile[r0 + i][lane] + v[i];
    }}
    __syncwarp();
}}
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
    # thomas_uniform on rows instead of columns: d is (ncols, stride) C-ordered, each row's first m
    # values one system (a C-ordered field solved along z, no transposed copy). One warp per 32 rows
    # stages tiles of 32 values x 32 rows through shared memory, so that global reads and writes run
    # along the rows (coalesced) while each thread sweeps its own row in the tile; the arithmetic is
    # thomas_uniform's, in its order. With adding != 0 the solution leaves as addend + x (addend in
    # d's layout). Real types only (shared memory of a complex type would need a constructor).
    "thomas_uniform_rows": r"""
extern "C" __global__ void thomas_uniform_rows(T* d, const R* lower, const R* inv, const R* cp, const int m,
        const long long ncols, const long long stride, const T* addend, const int adding) {
    ROW_TILES(ncols);
    __shared__ R c0[32], c1[32];
    const T* added = ADDED_ROWS(addend, adding);
    T x = T(0);
    for (int k0 = 0; k0 < m; k0 += 32) {
        const int kn = min(32, m - k0);
        STAGE(c0, lower, 0);
        STAGE(c1, inv, 0);
        load_tile<16>(tile, base, stride, k0, kn, rows, lane);
        if (lane < rows) {
            for (int j = 0; j < kn; ++j) {
                const int k = k0 + j;
                x = k == 0 ? tile[lane][j] * c1[0] : (tile[lane][j] - c0[j] * x) * c1[j];
                tile[lane][j] = x;
            }
        }
        store_tile(tile, base, stride, k0, kn, rows, lane);
    }
    for (int k0 = ((m - 1) / 32) * 32; k0 >= 0; k0 -= 32) {
        const int kn = min(32, m - k0);
        STAGE(c0, cp, 0);
        load_tile<16>(tile, base, stride, k0, kn, rows, lane);
        if (lane < rows) {
            for (int j = kn - 1; j >= 0; --j) {
                const int k = k0 + j;
                if (k < m - 1) {
                    x = tile[lane][j] - c0[j] * x;
                    tile[lane][j] = x;
                }
            }
        }
        store_tile_adding<16>(tile, base, added, stride, k0, kn, rows, lane);
    }
}
""",
    # P-TDMA's local reduction on rows, for one matrix shared by every row: d is (nrows, stride)
    # C-ordered, each row's first m values one chunk of a system. One forward sweep (cr_reduce's, in
    # its arithmetic) stores the forward values; the backward sweep's only result a solve needs, row
    # 0's reduced value, is a fixed weighted sum of the row's right-hand side (first_weights), which
    # the same sweep accumulates and writes into row 0. Tiles through shared memory as in
    # thomas_uniform_rows: two passes over the chunk, as many as a local Thomas sweep's forward half.
    "cr_reduce_rows": r"""
extern "C" __global__ void cr_reduce_rows(T* __restrict__ d, const R* __restrict__ lower,
        const R* __restrict__ inv_b, const R* __restrict__ first_weights, const int m,
        const long long nrows, const long long stride) {
    ROW_TILES(nrows);
    __shared__ R c0[32], c1[32], c2[32];
    if (m < 3) return;
    T x = T(0), first = T(0);
    for (int k0 = 0; k0 < m; k0 += 32) {
        const int kn = min(32, m - k0);
        STAGE(c0, lower, 0);
        STAGE(c1, inv_b, -1);
        STAGE(c2, first_weights, 0);
        load_tile<8>(tile, base, stride, k0, kn, rows, lane);
        if (lane < rows) {
            for (int j = 0; j < kn; ++j) {
                const int k = k0 + j;
                const T t = tile[lane][j];
                first += c2[j] * t;
                if (k == 1) x = t;
                if (k >= 2) {
                    x = t - c0[j] * x * c1[j];
                    tile[lane][j] = x;
                }
            }
        }
        store_tile(tile, base, stride, k0, kn, rows, lane);
    }
    if (lane < rows) base[lane * stride] = first;
}
""",
    # The reconstruction after cr_reduce_rows: the solved boundary values first and last (one per
    # row) known, the interior is the backward sweep of the forward values, each row k of which reads
    # forward_a[k] x_0 + b_k x_k + upper[k] x_{k+1} = d'_k. Tiles, and the addend, as in
    # thomas_uniform_rows.
    "cr_reconstruct_rows": r"""
extern "C" __global__ void cr_reconstruct_rows(T* __restrict__ d, const T* __restrict__ first,
        const T* __restrict__ last, const R* __restrict__ forward_a, const R* __restrict__ upper,
        const R* __restrict__ inv_b, const int m, const long long nrows, const long long stride,
        const T* __restrict__ addend, const int adding) {
    ROW_TILES(nrows);
    __shared__ R c0[32], c1[32], c2[32];
    const T* added = ADDED_ROWS(addend, adding);
    const T x0 = lane < rows ? first[row0 + lane] : T(0);
    T x = lane < rows ? last[row0 + lane] : T(0);
    for (int k0 = ((m - 1) / 32) * 32; k0 >= 0; k0 -= 32) {
        const int kn = min(32, m - k0);
        STAGE(c0, forward_a, 0);
        STAGE(c1, upper, 0);
        STAGE(c2, inv_b, 0);
        load_tile<8>(tile, base, stride, k0, kn, rows, lane);
        if (lane < rows) {
            for (int j = kn - 1; j >= 0; --j) {
                const int k = k0 + j;
                if (k == 0) {
                    tile[lane][j] = x0;
                } else if (k < m - 1) {
                    x = (tile[lane][j] - c0[j] * x0 - c1[j] * x) * c2[j];
                    tile[lane][j] = x;
                } else {
                    tile[lane][j] = x;
                }
            }
        }
        store_tile_adding<8>(tile, base, added, stride, k0, kn, rows, lane);
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
# kernels that stage their tiles by warp: 32 threads a block
BLOCKS_OF_ONE_WARP = ("thomas_uniform_rows", "cr_reduce_rows", "cr_reconstruct_rows")


@functools.cache
def _source(name: str, dtype: np.dtype) -> str:
    real = np.dtype(dtype).type(0).real.dtype
    return _PREAMBLE.format(T=_CTYPES[np.dtype(dtype)], R=_CTYPES[real]) + _SOURCES[name]


def launch(name: str, dtype: np.dtype, ncols: int, *args) -> None:
    """Run kernel ``name`` for data type ``dtype`` over ``ncols`` columns (or rows: one warp per 32)."""
    kernel = raw_kernel(_source(name, np.dtype(dtype)), name)
    threads = 32 if name in BLOCKS_OF_ONE_WARP else THREADS
    kernel(((ncols + threads - 1) // threads,), (threads,), args)
