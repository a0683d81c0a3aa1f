"""Fused CUDA kernels of the time step: the explicit momentum terms, the padding of a field and a
pencil's halo ring, the RK update, second differences, the divergence and the CFL rate.

:func:`explicit_terms` (advection + explicit diffusion): one thread per interior point computes all
three components from the padded velocity, reading each neighbour once from global memory; the
array-expression version in :mod:`daskflow.ns.operators` makes ~60 temporaries per substep. Same
formulas (and test-checked against them): divergence-form advection with midpoint averages, second
differences on the stretched z grid. The skew-symmetric form (``physics.advection:
skew_symmetric``) has no fused kernel: on CuPy it runs the array code of
:func:`daskflow.ns.advection.explicit_terms`.

:func:`pad`: one thread per point of the padded field writes it, interior and ghosts (faces,
edges, corners) at once, by :func:`daskflow.ns.operators.ghost_rule` applied axis after axis (x, y,
z) as the array code fills them: the same values, bit for bit, in one launch where the array code
makes a copy and six to twelve plane operations. :func:`fill_ring` does the same for the y and z
ghosts of a pencil's padded stack from its neighbours' pieces; the others repeat their array code's
operations in its order, compiled without fused multiply-adds, and give its bits.
"""

from __future__ import annotations

import functools

import numpy as np

from daskflow.backend import device_constant, raw_kernel
from daskflow.backend import element_strides as _strides

# The kernels that repeat the array code's operations one by one, in its order and precision, are
# compiled without fused multiply-adds: they give its bits (the array code runs every operation as a
# kernel of its own, which cannot fuse them either).
_FIELD_OPTIONS = ("--fmad=false",)
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
extern "C" __global__ void explicit_terms(const T* U, const T* V, const T* W, const T* dzf, const T* dzc,
        T* au, T* av, T* aw, const int nx, const int ny, const int nz, const T dx, const T dy, const T nu,
        const int diff_x, const int diff_y, const int diff_z) {{
    // x rows on blockIdx.y, the (y, z) plane on the threads: 32-bit index arithmetic per thread
    const unsigned int plane = ny * nz, q = blockIdx.x * blockDim.x + threadIdx.x;
    if (q >= plane) return;
    const int j = q / nz, k = q - j * nz;
    for (int i = blockIdx.y; i < nx; i += gridDim.y) {{
        const long long t = (long long)i * plane + q;
        const long long sj = nz + 2, si = (long long)(ny + 2) * (nz + 2);
        const long long c = (i + 1) * si + (j + 1) * sj + (k + 1);
        const T h = T(0.5);
        const T dzf_k = dzf[k + 1], dzf_up = dzf[k + 2], dzc_k = dzc[k + 1], dzc_dn = dzc[k];
        // ---- u at (i+1/2, j, k)
        T uE = h * (U[c] + U[c + si]), uW = h * (U[c - si] + U[c]);
        T uN = h * (U[c] + U[c + sj]) * h * (V[c] + V[c + si]);
        T uS = h * (U[c - sj] + U[c]) * h * (V[c - sj] + V[c + si - sj]);
        T uT = h * (U[c] + U[c + 1]) * h * (W[c] + W[c + si]);
        T uB = h * (U[c - 1] + U[c]) * h * (W[c - 1] + W[c + si - 1]);
        T ru = -((uE * uE - uW * uW) / dx + (uN - uS) / dy + (uT - uB) / dzf_k);
        // ---- v at (i, j+1/2, k)
        T vE = h * (V[c] + V[c + si]) * h * (U[c] + U[c + sj]);
        T vW = h * (V[c - si] + V[c]) * h * (U[c - si] + U[c - si + sj]);
        T vN = h * (V[c] + V[c + sj]), vS = h * (V[c - sj] + V[c]);
        T vT = h * (V[c] + V[c + 1]) * h * (W[c] + W[c + sj]);
        T vB = h * (V[c - 1] + V[c]) * h * (W[c - 1] + W[c + sj - 1]);
        T rv = -((vE - vW) / dx + (vN * vN - vS * vS) / dy + (vT - vB) / dzf_k);
        // ---- w at (i, j, k+1/2)
        T wE = h * (W[c] + W[c + si]) * h * (U[c] + U[c + 1]);
        T wW = h * (W[c - si] + W[c]) * h * (U[c - si] + U[c - si + 1]);
        T wN = h * (W[c] + W[c + sj]) * h * (V[c] + V[c + 1]);
        T wS = h * (W[c - sj] + W[c]) * h * (V[c - sj] + V[c - sj + 1]);
        T wT = h * (W[c] + W[c + 1]), wB = h * (W[c - 1] + W[c]);
        T rw = -((wE - wW) / dx + (wN - wS) / dy + (wT * wT - wB * wB) / dzc_k);
        if (diff_x) {{
            ru += nu * (U[c + si] - T(2) * U[c] + U[c - si]) / (dx * dx);
            rv += nu * (V[c + si] - T(2) * V[c] + V[c - si]) / (dx * dx);
            rw += nu * (W[c + si] - T(2) * W[c] + W[c - si]) / (dx * dx);
        }}
        if (diff_y) {{
            ru += nu * (U[c + sj] - T(2) * U[c] + U[c - sj]) / (dy * dy);
            rv += nu * (V[c + sj] - T(2) * V[c] + V[c - sj]) / (dy * dy);
            rw += nu * (W[c + sj] - T(2) * W[c] + W[c - sj]) / (dy * dy);
        }}
        if (diff_z) {{
            ru += nu * ((U[c + 1] - U[c]) / dzc_k - (U[c] - U[c - 1]) / dzc_dn) / dzf_k;
            rv += nu * ((V[c + 1] - V[c]) / dzc_k - (V[c] - V[c - 1]) / dzc_dn) / dzf_k;
            rw += nu * ((W[c + 1] - W[c]) / dzf_up - (W[c] - W[c - 1]) / dzf_k) / dzc_k;
        }}
        au[t] = ru; av[t] = rv; aw[t] = rw;
    }}
}}
"""


def explicit_terms(U, V, W, metrics, nu: float, axes) -> list:
    """Advection plus ``nu`` times the second differences along ``axes`` for all three components,
    from padded CuPy velocity ``(nx+2, ny+2, nz+2)``; returns three ``(nx, ny, nz)`` arrays."""
    import cupy

    U, V, W = (cupy.ascontiguousarray(a) for a in (U, V, W))
    dtype = U.dtype
    nx, ny, nz = (s - 2 for s in U.shape)
    dzf = device_constant(cupy, metrics.dzf, dtype)
    dzc = device_constant(cupy, metrics.dzc, dtype)
    out = [cupy.empty((nx, ny, nz), dtype=dtype) for _ in range(3)]
    kernel = _kernel(_SOURCE, "explicit_terms", dtype)
    scalar = np.dtype(dtype).type
    _launch(kernel, ny * nz, nx,
            (U, V, W, dzf, dzc, *out, np.int32(nx), np.int32(ny), np.int32(nz), scalar(metrics.dx),
             scalar(metrics.dy), scalar(nu), np.int32(0 in axes), np.int32(1 in axes), np.int32(2 in axes)))
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
// One thread per padded point: blockIdx.y (and its strides) walks x, the flat thread index the
// (y, z) plane, so that the index arithmetic is 32-bit and consecutive threads write consecutive z.
extern "C" __global__ void pad_field(const T* a, T* out, const long long s0, const long long s1,
        const long long s2, const int nx, const int ny, const int nz, const int r0, const int r1,
        const int r2, const int r3, const int r4, const int r5, const T w0, const T w1, const T w2,
        const T w3, const T w4, const T w5) {{
    const unsigned int pz = nz + 2, plane = (ny + 2) * pz;
    const unsigned int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= plane) return;
    const int j = t / pz, k = t - j * pz;
    for (int i = blockIdx.y; i < nx + 2; i += gridDim.y) {{
        const long long o = (long long)i * plane + t;
        if (i >= 1 && i <= nx && j >= 1 && j <= ny && k >= 1 && k <= nz) {{
            out[o] = a[(i - 1) * s0 + (j - 1) * s1 + (k - 1) * s2];
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
             *(scalar(w) for w in walls)))
    return out


_UPDATE_SOURCE = r"""
typedef {T} T;
extern "C" __global__ void update_field(const T* P, const T* f, const T* a1, const T* a2, T* out, const double* dz,
        const long long p0, const long long p1, const long long p2, const long long f0, const long long f1,
        const long long f2, const long long b0, const long long b1, const long long b2, const long long c0,
        const long long c1, const long long c2, const long long o0, const long long o1, const long long o2,
        const int nx, const int ny, const int nz, const int axis, const int has_f, const int has_body,
        const int terms, const T xy, const T body, const T scale, const double scale64, const T w1, const T w2) {{
    const unsigned int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (unsigned int)(ny * nz)) return;
    const int j = t / nz, k = t - j * nz;
    for (int i = blockIdx.y; i < nx; i += gridDim.y) {{
        const long long pc = (i + 1) * p0 + (j + 1) * p1 + (k + 1) * p2;
        const T center = P[pc], upper = P[pc + (axis == 0 ? p0 : axis == 1 ? p1 : p2)];
        // the spacing (with a body force) or scale / spacing, the z ones divided in double and rounded
        // to T as the array code does with the float64 widths
        const T step = axis < 2 ? xy : (has_body ? (T)dz[k] : (T)(scale64 / dz[k]));
        T g;
        if (has_body) {{
            g = upper - center;
            g = g / step;
            g = body - g;
            g = g * scale;
        }} else {{
            g = center - upper;
            g = g * step;
        }}
        T acc = g;
        if (terms > 0) {{
            acc = a1[i * b0 + j * b1 + k * b2] * w1;
            acc = acc + g;
            if (terms > 1) {{
                const T second = a2[i * c0 + j * c1 + k * c2] * w2;
                acc = acc + second;
            }}
        }}
        out[i * o0 + j * o1 + k * o2] = has_f ? f[i * f0 + j * f1 + k * f2] + acc : acc;
    }}
}}
"""

_DIVERGENCE_SOURCE = r"""
typedef {T} T;
extern "C" __global__ void divergence_field(const T* U, const T* V, const T* W, T* out, const T* rz,
        const long long u0, const long long u1, const long long u2, const long long v0, const long long v1,
        const long long v2, const long long w0, const long long w1, const long long w2, const int nx,
        const int ny, const int nz, const T rx, const T ry) {{
    const unsigned int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (unsigned int)(ny * nz)) return;
    const int j = t / nz, k = t - j * nz;
    for (int i = blockIdx.y; i < nx; i += gridDim.y) {{
        const long long cu = (i + 1) * u0 + (j + 1) * u1 + (k + 1) * u2;
        const long long cv = (i + 1) * v0 + (j + 1) * v1 + (k + 1) * v2;
        const long long cw = (i + 1) * w0 + (j + 1) * w1 + (k + 1) * w2;
        T o = U[cu] - U[cu - u0];
        o = o * rx;
        T d = V[cv] - V[cv - v1];
        d = d * ry;
        o = o + d;
        d = W[cw] - W[cw - w2];
        d = d * rz[k];
        out[((long long)i * ny + j) * nz + k] = o + d;
    }}
}}
"""

_LAPLACIAN_SOURCE = r"""
typedef {T} T;
extern "C" __global__ void laplacian_field(const T* A, T* out, const double* zup, const double* zdown,
        const long long a0, const long long a1, const long long a2, const long long o0, const long long o1,
        const long long o2, const int nx, const int ny, const int nz, const int count, const int ax0,
        const int ax1, const int ax2, const int has_out, const T xup, const T yup, const double scale) {{
    const unsigned int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (unsigned int)(ny * nz)) return;
    const int j = t / nz, k = t - j * nz;
    for (int i = blockIdx.y; i < nx; i += gridDim.y) {{
        const long long c = (i + 1) * a0 + (j + 1) * a1 + (k + 1) * a2;
        const long long o = i * o0 + j * o1 + k * o2;
        const T centre = A[c];
        T acc = has_out ? out[o] : T(0);
        for (int n = 0; n < count; ++n) {{
            const int ax = n == 0 ? ax0 : (n == 1 ? ax1 : ax2);
            const long long s = ax == 0 ? a0 : ax == 1 ? a1 : a2;
            const T up = ax == 0 ? xup : ax == 1 ? yup : (T)(scale / zup[k]);
            const T down = ax == 0 ? xup : ax == 1 ? yup : (T)(scale / zdown[k]);
            T term = A[c + s] - centre;
            term = term * up;
            acc = (n == 0 && !has_out) ? term : acc + term;
            term = centre - A[c - s];
            term = term * down;
            acc = acc - term;
        }}
        out[o] = acc;
    }}
}}
"""


def _launch(kernel, plane: int, rows: int, args: tuple) -> None:
    """``kernel`` over ``rows`` x-rows of ``plane`` (y, z) points each: the threads of a block along
    the plane, the x rows on the grid's second dimension (strided past its limit of 65535)."""
    threads = 256
    kernel(((plane + threads - 1) // threads, min(rows, 65535)), (threads,), args)


def update(f, P, axis: int, scale: float, body: float, terms, out, xy: float, dz):
    """:func:`daskflow.ns.operators.update` on CuPy arrays in one launch: ``xy`` is the x/y spacing
    (with a ``body`` force) or ``scale`` over it, ``dz`` the z spacing of every interior plane (a
    float64 CuPy vector); ``f`` and the ``terms`` (at most two) any strides."""

    dtype = P.dtype
    scalar = np.dtype(dtype).type
    nx, ny, nz = out.shape
    (w1, a1), (w2, a2) = (*terms, *[(0.0, out)] * (2 - len(terms)))
    kernel = _kernel(_UPDATE_SOURCE, "update_field", dtype, _FIELD_OPTIONS)
    _launch(kernel, ny * nz, nx, (P, out if f is None else f, a1, a2, out, dz, *_strides(P),
                               *_strides(out if f is None else f), *_strides(a1), *_strides(a2), *_strides(out),
                               np.int32(nx), np.int32(ny), np.int32(nz), np.int32(axis), np.int32(f is not None),
                               np.int32(bool(body)), np.int32(len(terms)), scalar(xy), scalar(body), scalar(scale),
                               np.float64(scale), scalar(w1), scalar(w2)))
    return out


def laplacian(A, axes, out, has_out: bool, scale: float, xy_factors: tuple[float, float], z_spans) -> None:
    """:func:`daskflow.ns.operators.laplacian` on CuPy arrays in one launch, into ``out`` (added to
    it when ``has_out``): ``xy_factors`` the x and y ``scale / h**2``, ``z_spans`` the upper and
    lower products of widths the z factors divide ``scale`` by, per interior plane (float64 CuPy
    vectors; any two where z is not among ``axes``)."""

    dtype = A.dtype
    scalar = np.dtype(dtype).type
    nx, ny, nz = out.shape
    order = (*axes, 0, 0, 0)[:3]
    kernel = _kernel(_LAPLACIAN_SOURCE, "laplacian_field", dtype, _FIELD_OPTIONS)
    _launch(kernel, ny * nz, nx, (A, out, *z_spans, *_strides(A), *_strides(out), np.int32(nx), np.int32(ny),
                               np.int32(nz), np.int32(len(axes)), *(np.int32(a) for a in order),
                               np.int32(has_out), scalar(xy_factors[0]), scalar(xy_factors[1]), np.float64(scale)))


def divergence(U, V, W, rx: float, ry: float, rz):
    """:func:`daskflow.ns.operators.divergence` of padded CuPy face velocities (any strides) in one
    launch, into a new C-ordered ``(nx, ny, nz)`` array: ``rx``, ``ry`` the inverse x and y spacings
    (times the scale), ``rz`` the inverse z widths per interior plane (a CuPy vector of the dtype)."""
    import cupy

    dtype = U.dtype
    scalar = np.dtype(dtype).type
    nx, ny, nz = (n - 2 for n in U.shape)
    out = cupy.empty((nx, ny, nz), dtype=dtype)
    kernel = _kernel(_DIVERGENCE_SOURCE, "divergence_field", dtype, _FIELD_OPTIONS)
    _launch(kernel, ny * nz, nx, (U, V, W, out, rz, *_strides(U), *_strides(V), *_strides(W), np.int32(nx),
                               np.int32(ny), np.int32(nz), scalar(rx), scalar(ry)))
    return out


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


def advective_rate(u, v, w, dx: float, dy: float, dz) -> float:
    """``max(|u|/dx + |v|/dy + |w|/dz)`` over C-contiguous CuPy fields ``(nx, ny, nz)`` in one launch
    (``dz`` a float64 CuPy vector of the z widths): the stepper's CFL rate without its five
    field-sized temporaries, the same value."""
    import cupy

    u, v, w = (cupy.ascontiguousarray(a) for a in (u, v, w))
    scalar = np.dtype(u.dtype).type
    out = cupy.zeros(1, dtype=np.uint64)
    kernel = _kernel(_RATE_SOURCE, "advective_rate", u.dtype, _FIELD_OPTIONS)
    blocks = min((u.size + 255) // 256, 8 * _multiprocessors(cupy.cuda.runtime.getDevice()))
    kernel((max(blocks, 1),), (256,), (u, v, w, dz, out, np.int64(u.size), np.int32(u.shape[2]), scalar(dx),
                                     scalar(dy)))
    return float(out.view(np.float64)[0])
