"""CUDA kernels that repeat the array code of :mod:`daskflow.ns.operators` operation by operation:
the RK update of a component, second differences, the divergence and the pressure update.

Each is one launch where the array code makes several passes, and each gives the array code's bits:
the same operations in the same order and precision, compiled without fused multiply-adds (the
array code runs every operation as a kernel of its own, which cannot fuse them either). The update
and the pressure update also take the second differences of a padded field into the same pass
(:class:`SecondDifferences`), instead of writing a field that the next launch reads back.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from daskflow.backend import element_strides as _strides
from daskflow.ns.kernels import _FIELD_OPTIONS, _kernel, _launch

#: x rows per thread of the kernels with second differences (their per-thread set-up is shared)
ROWS_PER_THREAD = 4

# The parameters of the second differences every kernel here takes, and the arguments passing them on.
_SD_PARAMS = ("const T* A, const double* zup, const double* zdown, const long long sa0, const long long sa1, "
              "const long long sa2, const int count, const int ax0, const int ax1, const int ax2, const T xup, "
              "const T yup, const double scale")

_SECOND_DIFFERENCES = r"""
typedef {T} T;
// What a thread at (j, k) computes once for all its x rows: the z factors of the second differences
// (scale over the plane's upper and lower spans, divided in double and rounded to T as the array
// code does) and the (j, k) part of A's offsets. 64-bit index products and float64 divisions per
// point made these kernels bound by their instructions, not by memory.
#define SD_THREAD const T zu = (T)(scale / zup[k]), zd = (T)(scale / zdown[k]); \
    const long long ajk = (j + 1) * sa1 + (k + 1) * sa2
#define SD_ARGS A, sa0, sa1, sa2, count, ax0, ax1, ax2, xup, yup, zu, zd
// acc (when has_acc; else nothing) plus the second differences of padded A around its element c
// along count axes ax0, ax1, ax2, scaled by xup, yup and the z factors, in the array code's order.
__device__ __forceinline__ T second_differences(const long long c, const int has_acc, T acc, const T* A,
        const long long sa0, const long long sa1, const long long sa2, const int count, const int ax0,
        const int ax1, const int ax2, const T xup, const T yup, const T zu, const T zd) {{
    if (count == 0) return acc;
    const T centre = A[c];
    for (int n = 0; n < count; ++n) {{
        const int ax = n == 0 ? ax0 : (n == 1 ? ax1 : ax2);
        const long long s = ax == 0 ? sa0 : ax == 1 ? sa1 : sa2;
        const T up = ax == 0 ? xup : ax == 1 ? yup : zu;
        const T down = ax == 0 ? xup : ax == 1 ? yup : zd;
        T term = A[c + s] - centre;
        term = term * up;
        acc = (n == 0 && !has_acc) ? term : acc + term;
        term = centre - A[c - s];
        term = term * down;
        acc = acc - term;
    }}
    return acc;
}}
"""

_UPDATE_SOURCE = _SECOND_DIFFERENCES + r"""
extern "C" __global__ void update_field(const T* P, const T* f, const T* a1, const T* a2, T* out, const double* dz,
        const long long p0, const long long p1, const long long p2, const long long f0, const long long f1,
        const long long f2, const long long b0, const long long b1, const long long b2, const long long c0,
        const long long c1, const long long c2, const long long o0, const long long o1, const long long o2,
        const int nx, const int ny, const int nz, const int axis, const int has_f, const int has_body,
        const int terms, const T xy, const T body, const T factor, const double factor64, const T w1, const T w2,
        const double* offset, const int has_offset, """ + _SD_PARAMS + r""") {{
    const unsigned int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (unsigned int)(ny * nz)) return;
    const int j = t / nz, k = t - j * nz;
    // the spacing (with a body force) or factor / spacing, the z ones divided in double and rounded
    // to T as the array code does with the float64 widths
    const T step = axis < 2 ? xy : (has_body ? (T)dz[k] : (T)(factor64 / dz[k]));
    const long long pjk = (j + 1) * p1 + (k + 1) * p2, shift = axis == 0 ? p0 : axis == 1 ? p1 : p2;
    const long long fjk = j * f1 + k * f2, bjk = j * b1 + k * b2, cjk = j * c1 + k * c2, ojk = j * o1 + k * o2;
    SD_THREAD;
    for (int i = blockIdx.y; i < nx; i += gridDim.y) {{
        const long long pc = (i + 1) * p0 + pjk;
        const T center = P[pc], upper = P[pc + shift];
        T g;
        if (has_body) {{
            g = upper - center;
            g = g / step;
            g = body - g;
            g = g * factor;
        }} else {{
            g = center - upper;
            g = g * step;
        }}
        T acc = g;
        if (terms > 0) {{
            acc = a1[i * b0 + bjk] * w1;
            acc = acc + g;
            if (terms > 1) {{
                const T second = a2[i * c0 + cjk] * w2;
                acc = acc + second;
            }}
        }}
        const T value = has_f ? f[i * f0 + fjk] + acc : acc;
        const T result = second_differences((i + 1) * sa0 + ajk, 1, value, SD_ARGS);
        // the offset last, in float64 as the array code's addition of a float64 0-d array rounds it
        out[i * o0 + ojk] = has_offset ? (T)((double)result + offset[0]) : result;
    }}
}}
"""

_LAPLACIAN_SOURCE = _SECOND_DIFFERENCES + r"""
extern "C" __global__ void laplacian_field(T* out, const long long o0, const long long o1, const long long o2,
        const int nx, const int ny, const int nz, const int has_out, """ + _SD_PARAMS + r""") {{
    const unsigned int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (unsigned int)(ny * nz)) return;
    const int j = t / nz, k = t - j * nz;
    const long long ojk = j * o1 + k * o2;
    SD_THREAD;
    for (int i = blockIdx.y; i < nx; i += gridDim.y) {{
        const long long o = i * o0 + ojk;
        out[o] = second_differences((i + 1) * sa0 + ajk, has_out, has_out ? out[o] : T(0), SD_ARGS);
    }}
}}
"""

_PRESSURE_SOURCE = _SECOND_DIFFERENCES + r"""
// p + (phi - second differences of the padded phi): the array code's two subtractions and its sum
extern "C" __global__ void pressure_field(const T* p, const T* phi, T* out, const long long p0, const long long p1,
        const long long p2, const long long q0, const long long q1, const long long q2, const int nx, const int ny,
        const int nz, """ + _SD_PARAMS + r""") {{
    const unsigned int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (unsigned int)(ny * nz)) return;
    const int j = t / nz, k = t - j * nz;
    const long long pjk = j * p1 + k * p2, qjk = j * q1 + k * q2, ojk = (long long)j * nz + k;
    const long long plane = (long long)ny * nz;
    SD_THREAD;
    for (int i = blockIdx.y; i < nx; i += gridDim.y) {{
        const T correction = phi[i * q0 + qjk] - second_differences((i + 1) * sa0 + ajk, 0, T(0), SD_ARGS);
        out[i * plane + ojk] = p[i * p0 + pjk] + correction;
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


@dataclass(frozen=True)
class SecondDifferences:
    """``scale`` times the second differences of padded CuPy field ``A`` along ``axes`` (the array
    code's :func:`daskflow.ns.operators.laplacian`): ``xy`` the x and y factors ``scale / h**2``,
    ``z_spans`` the upper and lower products of widths the z factors divide ``scale`` by, per
    interior plane (float64 CuPy vectors; any two where z is not among ``axes``)."""

    A: object
    axes: tuple
    scale: float
    xy: tuple[float, float]
    z_spans: tuple

    def arguments(self) -> tuple:
        scalar = np.dtype(self.A.dtype).type
        order = (*self.axes, 0, 0, 0)[:3]
        return (self.A, *self.z_spans, *_strides(self.A), np.int32(len(self.axes)), *(np.int32(a) for a in order),
                scalar(self.xy[0]), scalar(self.xy[1]), np.float64(self.scale))


def update(f, P, axis: int, factor: float, body: float, terms, out, xy: float, dz,
           diffusion: SecondDifferences | None = None, offset=None):
    """:func:`daskflow.ns.operators.update` on CuPy arrays in one launch: ``xy`` is the x/y spacing
    (with a ``body`` force) or ``factor`` over it, ``dz`` the z spacing of every interior plane (a
    float64 CuPy vector); ``f`` and the ``terms`` (at most two) any strides; ``diffusion`` added, then
    ``offset`` (a 0-d float64 CuPy array, read where it lives: no wait for the device; the caller,
    :func:`daskflow.ns.operators.update`, passes no other)."""
    dtype = P.dtype
    scalar = np.dtype(dtype).type
    nx, ny, nz = out.shape
    (w1, a1), (w2, a2) = (*terms, *[(0.0, out)] * (2 - len(terms)))
    if diffusion is None:  # no axes: the kernel reads nothing of it
        diffusion = SecondDifferences(P, (), 0.0, (0.0, 0.0), (dz, dz))
    kernel = _kernel(_UPDATE_SOURCE, "update_field", dtype, _FIELD_OPTIONS)
    added = dz if offset is None else offset
    _launch(kernel, ny * nz, nx, (P, out if f is None else f, a1, a2, out, dz, *_strides(P),
                               *_strides(out if f is None else f), *_strides(a1), *_strides(a2), *_strides(out),
                               np.int32(nx), np.int32(ny), np.int32(nz), np.int32(axis), np.int32(f is not None),
                               np.int32(bool(body)), np.int32(len(terms)), scalar(xy), scalar(body), scalar(factor),
                               np.float64(factor), scalar(w1), scalar(w2), added, np.int32(offset is not None),
                               *diffusion.arguments()), ROWS_PER_THREAD)
    return out


def laplacian(out, has_out: bool, diffusion: SecondDifferences) -> None:
    """:func:`daskflow.ns.operators.laplacian` on CuPy arrays in one launch, into ``out`` (added to
    it when ``has_out``)."""
    nx, ny, nz = out.shape
    kernel = _kernel(_LAPLACIAN_SOURCE, "laplacian_field", out.dtype, _FIELD_OPTIONS)
    _launch(kernel, ny * nz, nx, (out, *_strides(out), np.int32(nx), np.int32(ny), np.int32(nz), np.int32(has_out),
                               *diffusion.arguments()), ROWS_PER_THREAD)


def pressure_update(p, phi, diffusion: SecondDifferences):
    """``p + (phi - diffusion)`` of CuPy arrays (any strides) in one launch, into a new C-ordered array."""
    import cupy

    nx, ny, nz = phi.shape
    out = cupy.empty((nx, ny, nz), dtype=phi.dtype)
    kernel = _kernel(_PRESSURE_SOURCE, "pressure_field", phi.dtype, _FIELD_OPTIONS)
    _launch(kernel, ny * nz, nx, (p, phi, out, *_strides(p), *_strides(phi), np.int32(nx), np.int32(ny),
                               np.int32(nz), *diffusion.arguments()), ROWS_PER_THREAD)
    return out


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


