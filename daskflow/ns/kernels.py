"""Fused CUDA kernels of the time step: the explicit momentum terms, the padding of a field and a
pencil's halo ring, the CFL rate and the flow-rate sum (the RK update, second differences, divergence
and pressure update are in :mod:`daskflow.ns.field_kernels`).

:func:`explicit_terms` (advection + explicit diffusion): one thread per interior (y, z) point and
each of a few x rows computes all three components from the padded velocity, reading each
neighbour once from global memory; the array-expression version in :mod:`daskflow.ns.operators`
makes ~60 temporaries per substep. Same formulas (and test-checked against them, to round-off: it
multiplies by inverse spacings where the array code divides): divergence-form advection with
midpoint averages, second differences on the stretched z grid. The skew-symmetric form
(``physics.advection: skew_symmetric``) has no fused kernel: on CuPy it runs the array code of
:func:`daskflow.ns.advection.explicit_terms`.

:func:`pad`: one thread per (y, z) point of the padded field and each of a few x rows writes it,
interior and ghosts (faces, edges, corners) at once, by :func:`daskflow.ns.operators.ghost_rule`
applied axis after axis (x, y, z) as the array code fills them: the same values, bit for bit, in
one launch where the array code makes a copy and six to twelve plane operations.
:func:`fill_ring` does the same for the y and z ghosts of a pencil's padded stack from its
neighbours' pieces; the rate repeats its array code's operations in its order, compiled without
fused multiply-adds, and gives its bits.
"""

from __future__ import annotations

import functools

import numpy as np

from daskflow.backend import device_constant, raw_kernel
from daskflow.backend import element_strides as _strides

# The kernels that repeat the array code's operations one by one, in its order and precision, are
# compiled without fused multiply-adds: they give its bits (the array code runs every operation as a
# kernel of its own, which cannot fuse them either). At most 48 registers a thread: the update
# kernel took 64, which left room for half the threads a multiprocessor can hold, and waited on its
# memory; capped (with the pressure update, which took 56, and the rest, which need fewer), the
# one-GPU channel step is 4 % faster on an H200 (56 gives back two thirds of that, 40 spills).
_FIELD_OPTIONS = ("--fmad=false", "--maxrregcount=48")
_CTYPES = {"float64": "double", "float32": "float"}


@functools.cache
def _compiled(source: str, name: str, dtype: np.dtype, options: tuple, device: int):
    return raw_kernel(source.format(T=_CTYPES[np.dtype(dtype).name]), name, options)


def _kernel(source: str, name: str, dtype, options: tuple = ()):
    """Kernel ``name`` of ``source`` (``{T}`` the C type of ``dtype``) for the current device,
    compiled once per source, type, device and ``options`` (a lookup per launch: on a small grid
    the step is bound by its host's calls)."""
    import cupy

    return _compiled(source, name, dtype, options, cupy.cuda.runtime.getDevice())


_SOURCE = r"""
typedef {T} T;
extern "C" __global__ void explicit_terms(const T* __restrict__ U, const T* __restrict__ V, const T* __restrict__ W,
        const T* __restrict__ rzf, const T* __restrict__ rzc, T* __restrict__ au, T* __restrict__ av,
        T* __restrict__ aw, const int nx, const int ny, const int nz, const T rdx, const T rdy, const T nu,
        const T cx, const T cy, const int diff_x, const int diff_y, const int diff_z) {{
    // x rows on blockIdx.y, the (y, z) plane on the threads: 32-bit index arithmetic per thread.
    // Every spacing comes as its inverse (rdx, rdy, rzf = 1/dzf, rzc = 1/dzc; cx = nu/dx^2,
    // cy = nu/dy^2): a float64 division is a dozen instructions, and with some twenty of them per
    // point the kernel was bound by arithmetic (as fast on an H100 as on an H200).
    const unsigned int plane = ny * nz, q = blockIdx.x * blockDim.x + threadIdx.x;
    if (q >= plane) return;
    const int j = q / nz, k = q - j * nz;
    const long long sj = nz + 2, si = (long long)(ny + 2) * (nz + 2);
    const T h = T(0.5), f = T(0.25);
    const T rzf_k = rzf[k + 1], rzf_up = rzf[k + 2], rzc_k = rzc[k + 1], rzc_dn = rzc[k];
    for (int i = blockIdx.y; i < nx; i += gridDim.y) {{
        const long long t = (long long)i * plane + q;
        const long long c = (i + 1) * si + (j + 1) * sj + (k + 1);
        const T u = U[c], v = V[c], w = W[c];
        // ---- u at (i+1/2, j, k)
        const T uE = h * (u + U[c + si]), uW = h * (U[c - si] + u);
        const T uN = f * (u + U[c + sj]) * (v + V[c + si]);
        const T uS = f * (U[c - sj] + u) * (V[c - sj] + V[c + si - sj]);
        const T uT = f * (u + U[c + 1]) * (w + W[c + si]);
        const T uB = f * (U[c - 1] + u) * (W[c - 1] + W[c + si - 1]);
        T ru = -((uE * uE - uW * uW) * rdx + (uN - uS) * rdy + (uT - uB) * rzf_k);
        // ---- v at (i, j+1/2, k)
        const T vE = f * (v + V[c + si]) * (u + U[c + sj]);
        const T vW = f * (V[c - si] + v) * (U[c - si] + U[c - si + sj]);
        const T vN = h * (v + V[c + sj]), vS = h * (V[c - sj] + v);
        const T vT = f * (v + V[c + 1]) * (w + W[c + sj]);
        const T vB = f * (V[c - 1] + v) * (W[c - 1] + W[c + sj - 1]);
        T rv = -((vE - vW) * rdx + (vN * vN - vS * vS) * rdy + (vT - vB) * rzf_k);
        // ---- w at (i, j, k+1/2)
        const T wE = f * (w + W[c + si]) * (u + U[c + 1]);
        const T wW = f * (W[c - si] + w) * (U[c - si] + U[c - si + 1]);
        const T wN = f * (w + W[c + sj]) * (v + V[c + 1]);
        const T wS = f * (W[c - sj] + w) * (V[c - sj] + V[c - sj + 1]);
        const T wT = h * (w + W[c + 1]), wB = h * (W[c - 1] + w);
        T rw = -((wE - wW) * rdx + (wN - wS) * rdy + (wT * wT - wB * wB) * rzc_k);
        if (diff_x) {{
            ru += cx * (U[c + si] - T(2) * u + U[c - si]);
            rv += cx * (V[c + si] - T(2) * v + V[c - si]);
            rw += cx * (W[c + si] - T(2) * w + W[c - si]);
        }}
        if (diff_y) {{
            ru += cy * (U[c + sj] - T(2) * u + U[c - sj]);
            rv += cy * (V[c + sj] - T(2) * v + V[c - sj]);
            rw += cy * (W[c + sj] - T(2) * w + W[c - sj]);
        }}
        if (diff_z) {{
            ru += nu * ((U[c + 1] - u) * rzc_k - (u - U[c - 1]) * rzc_dn) * rzf_k;
            rv += nu * ((V[c + 1] - v) * rzc_k - (v - V[c - 1]) * rzc_dn) * rzf_k;
            rw += nu * ((W[c + 1] - w) * rzf_up - (w - W[c - 1]) * rzf_k) * rzc_k;
        }}
        au[t] = ru; av[t] = rv; aw[t] = rw;
    }}
}}
"""


#: x rows per thread of the explicit terms (their per-thread set-up shared; 1.1 % of the one-GPU
#: channel step on an H200 against one row, two rows half of that)
EXPLICIT_ROWS_PER_THREAD = 4


def explicit_terms(U, V, W, metrics, nu: float, axes) -> list:
    """Advection plus ``nu`` times the second differences along ``axes`` for all three components,
    from padded CuPy velocity ``(nx+2, ny+2, nz+2)``; returns three ``(nx, ny, nz)`` arrays."""
    import cupy

    U, V, W = (cupy.ascontiguousarray(a) for a in (U, V, W))
    dtype = U.dtype
    nx, ny, nz = (s - 2 for s in U.shape)
    rzf = device_constant(cupy, 1.0 / np.asarray(metrics.dzf, dtype=np.float64), dtype)
    rzc = device_constant(cupy, 1.0 / np.asarray(metrics.dzc, dtype=np.float64), dtype)
    out = [cupy.empty((nx, ny, nz), dtype=dtype) for _ in range(3)]
    kernel = _kernel(_SOURCE, "explicit_terms", dtype)
    scalar = np.dtype(dtype).type
    dx, dy = float(metrics.dx), float(metrics.dy)
    _launch(kernel, ny * nz, nx,
            (U, V, W, rzf, rzc, *out, np.int32(nx), np.int32(ny), np.int32(nz), scalar(1.0 / dx), scalar(1.0 / dy),
             scalar(nu), scalar(nu / dx ** 2), scalar(nu / dy ** 2), np.int32(0 in axes), np.int32(1 in axes),
             np.int32(2 in axes)), EXPLICIT_ROWS_PER_THREAD)
    return out


_GHOSTS = r"""
typedef {T} T;
// Where a padded index p (0..m+1) of an axis of m points reads, and which ghost side it is on
// (-1: interior): rules as daskflow.ns.operators.ghost_rule, 0 wrap, 1 copy, 2 mirror, 3 wall value.
__device__ __forceinline__ int source(const int p, const int m, const int lower, const int upper, int& side) {{
    if (p == 0) {{ side = 0; return lower == 0 ? m - 1 : 0; }}  // wrap: the far plane; else the edge
    if (p == m + 1) {{ side = 1; return upper == 0 ? 0 : m - 1; }}
    side = -1;
    return p - 1;
}}

__device__ __forceinline__ T ghost(const T v, const int side, const int lower, const int upper, const T wlo,
                                    const T whi) {{
    if (side < 0) return v;
    const int r = side == 0 ? lower : upper;
    const T w = side == 0 ? wlo : whi;
    return r == 3 ? w : (r == 2 ? T(2) * w - v : v);
}}
"""

_PAD_SOURCE = _GHOSTS + r"""
// blockIdx.y (and its strides) walks x, the flat thread index the (y, z) plane, so that consecutive
// threads write consecutive z. Each thread takes a few x rows (PAD_ROWS_PER_THREAD): its (y, z)
// division and offsets are computed once for them, which left the kernel bound by its memory
// rather than by its instructions.
extern "C" __global__ void pad_field(const T* __restrict__ a, T* __restrict__ out, const long long s0,
        const long long s1, const long long s2, const int nx, const int ny, const int nz, const int r0, const int r1,
        const int r2, const int r3, const int r4, const int r5, const T w0, const T w1, const T w2,
        const T w3, const T w4, const T w5) {{
    const unsigned int pz = nz + 2, plane = (ny + 2) * pz;
    const unsigned int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= plane) return;
    const int j = t / pz, k = t - j * pz;
    const bool interior_jk = j >= 1 && j <= ny && k >= 1 && k <= nz;
    const long long ajk = (j - 1) * s1 + (k - 1) * s2;
    for (int i = blockIdx.y; i < nx + 2; i += gridDim.y) {{
        const long long o = (long long)i * plane + t;
        if (interior_jk && i >= 1 && i <= nx) {{
            out[o] = a[(i - 1) * s0 + ajk];
            continue;
        }}
        int sx, sy, sz;
        const int x = source(i, nx, r0, r1, sx), y = source(j, ny, r2, r3, sy), z = source(k, nz, r4, r5, sz);
        T v = a[x * s0 + y * s1 + z * s2];
        v = ghost(v, sx, r0, r1, w0, w1);  // x, then y, then z: edges and corners as the array code
        v = ghost(v, sy, r2, r3, w2, w3);
        out[o] = ghost(v, sz, r4, r5, w4, w5);
    }}
}}
"""


#: x rows per thread of the padding kernel
PAD_ROWS_PER_THREAD = 4


def pad(a, rules: list[int], walls: list[float], out=None):
    """``a`` (CuPy, ``(nx, ny, nz)``, any strides) padded by one cell on every side into ``out``
    (C-contiguous ``(nx + 2, ny + 2, nz + 2)``; a new array by default): ``rules`` and ``walls`` per
    (axis, side), ``[x lower, x upper, y lower, ...]`` (:func:`daskflow.ns.operators.ghost_rule` and
    the wall values)."""
    import cupy

    nx, ny, nz = a.shape
    if out is None:
        out = cupy.empty((nx + 2, ny + 2, nz + 2), dtype=a.dtype)
    scalar = np.dtype(a.dtype).type
    kernel = _kernel(_PAD_SOURCE, "pad_field", a.dtype)
    _launch(kernel, (ny + 2) * (nz + 2), nx + 2,
            (a, out, *_strides(a), np.int32(nx), np.int32(ny), np.int32(nz), *(np.int32(r) for r in rules),
             *(scalar(w) for w in walls)), PAD_ROWS_PER_THREAD)
    return out


def _launch(kernel, plane: int, rows: int, args: tuple, rows_per_thread: int = 1) -> None:
    """``kernel`` over ``rows`` x-rows of ``plane`` (y, z) points each: the threads of a block along
    the plane, the x rows on the grid's second dimension (strided past its limit of 65535), each
    thread taking ``rows_per_thread`` of them (what it computes per (y, z) point is then shared)."""
    threads = 256
    kernel(((plane + threads - 1) // threads, min(-(-rows // rows_per_thread), 65535)), (threads,), args)


_RATE_SOURCE = r"""
typedef {T} T;
// max(|u|/dx + |v|/dy + |w|/dz) over C-ordered fields: a grid-stride loop, a warp's maximum by
// shuffles, then an atomic maximum on the bits of the (non-negative) doubles, whose order as
// unsigned integers is their order as numbers. The x and y terms in T, the z term in double, as
// the array code's types make them.
extern "C" __global__ void advective_rate(const T* u, const T* v, const T* w, const double* dz,
        unsigned long long* out, const long long n, const int nz, const T dx, const T dy) {{
    double rate = 0.0;
    const long long step = (long long)gridDim.x * blockDim.x;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += step) {{
        const T xy = fabs(u[i]) / dx + fabs(v[i]) / dy;
        const double r = (double)xy + (double)fabs(w[i]) / dz[i % nz];
        rate = r > rate ? r : rate;
    }}
    for (int offset = 16; offset > 0; offset /= 2) {{
        const double other = __shfl_down_sync(0xffffffff, rate, offset);
        rate = other > rate ? other : rate;
    }}
    if ((threadIdx.x & 31) == 0) atomicMax(out, (unsigned long long)__double_as_longlong(rate));
}}
"""


@functools.cache
def _multiprocessors(device: int) -> int:
    import cupy

    return int(cupy.cuda.runtime.getDeviceProperties(device)["multiProcessorCount"])


def advective_rate(u, v, w, dx: float, dy: float, dz):
    """``max(|u|/dx + |v|/dy + |w|/dz)`` over C-contiguous CuPy fields ``(nx, ny, nz)`` in one launch
    (``dz`` a float64 CuPy vector of the z widths), as a float64 0-d CuPy array: the stepper's CFL
    rate without its five field-sized temporaries, the same value."""
    import cupy

    u, v, w = (cupy.ascontiguousarray(a) for a in (u, v, w))
    scalar = np.dtype(u.dtype).type
    out = cupy.zeros(1, dtype=np.uint64)
    kernel = _kernel(_RATE_SOURCE, "advective_rate", u.dtype, _FIELD_OPTIONS)
    blocks = min((u.size + 255) // 256, 8 * _multiprocessors(cupy.cuda.runtime.getDevice()))
    kernel((max(blocks, 1),), (256,), (u, v, w, dz, out, np.int64(u.size), np.int32(u.shape[2]), scalar(dx),
                                     scalar(dy)))
    return out.view(np.float64)[0]


_WEIGHTED_SUM_SOURCE = r"""
typedef {T} T;
// sum(u * dz) over a C-ordered field, dz the float64 z widths (the array code's product is float64
// too): a grid-stride loop (the z index stepped along, not divided out per point), a warp's sum by
// shuffles, a block's into partials[blockIdx.x]. The grid is fixed, so the partials do not depend
// on the device.
extern "C" __global__ void z_weighted_sum(const T* u, const double* dz, double* partials, const long long n,
        const int nz) {{
    __shared__ double warps[32];
    const long long step = (long long)gridDim.x * blockDim.x;
    const int dk = (int)(step % nz);
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    int k = (int)(i % nz);
    double sum = 0.0;
    for (; i < n; i += step) {{
        sum += (double)u[i] * dz[k];
        k += dk;
        if (k >= nz) k -= nz;
    }}
    for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_down_sync(0xffffffff, sum, offset);
    if ((threadIdx.x & 31) == 0) warps[threadIdx.x / 32] = sum;
    __syncthreads();
    if (threadIdx.x < 32) {{
        sum = threadIdx.x < blockDim.x / 32 ? warps[threadIdx.x] : 0.0;
        for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_down_sync(0xffffffff, sum, offset);
        if (threadIdx.x == 0) partials[blockIdx.x] = sum;
    }}
}}
"""
_SUM_BLOCKS = 1024


def z_weighted_sum(u, dz):
    """``sum(u * dz)`` over a C-contiguous CuPy field ``(nx, ny, nz)`` (``dz`` a float64 CuPy vector
    of the z widths) as a float64 0-d CuPy array: one read of the field, where the array code writes
    the product and reads it back (the flow-rate forcing's sum at every substep). Capturable in a
    CUDA graph, as a library call (cuBLAS) is not."""
    import cupy

    if u.size == 0:
        return cupy.zeros((), dtype=np.float64)
    partials = cupy.empty(_SUM_BLOCKS, dtype=np.float64)
    kernel = _kernel(_WEIGHTED_SUM_SOURCE, "z_weighted_sum", u.dtype)
    kernel((_SUM_BLOCKS,), (256,), (u, dz, partials, np.int64(u.size), np.int32(u.shape[2])))
    return partials.sum()
