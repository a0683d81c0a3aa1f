"""Fused CUDA kernel for the explicit momentum terms (advection + explicit diffusion).

One thread per interior point computes all three components from the padded velocity, reading
each neighbour once from global memory; the array-expression version in
:mod:`daskflow.ns.operators` makes ~60 temporaries per substep. Same formulas (and test-checked
against them): divergence-form advection with midpoint averages, second differences on the
stretched z grid. The skew-symmetric form (``physics.advection: skew_symmetric``) has no fused
kernel: on CuPy it runs the array code of :func:`daskflow.ns.advection.explicit_terms`.
"""

from __future__ import annotations

import functools

import numpy as np

from daskflow.backend import device_constant

_SOURCE = r"""
typedef {T} T;
extern "C" __global__ void explicit_terms(const T* U, const T* V, const T* W, const T* dzf, const T* dzc,
        T* au, T* av, T* aw, const int nx, const int ny, const int nz, const T dx, const T dy, const T nu,
        const int diff_x, const int diff_y, const int diff_z) {{
    const long long n = (long long)nx * ny * nz;
    const long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (t >= n) return;
    const int k = t % nz, j = (t / nz) % ny, i = t / ((long long)nz * ny);
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
"""


@functools.cache
def _kernel(dtype: str, device: int):
    import cupy

    return cupy.RawKernel(_SOURCE.format(T={"float64": "double", "float32": "float"}[dtype]), "explicit_terms")


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
    n = nx * ny * nz
    threads = 256
    kernel = _kernel(str(dtype), cupy.cuda.Device().id)
    scalar = np.dtype(dtype).type
    kernel(((n + threads - 1) // threads,), (threads,),
           (U, V, W, dzf, dzc, *out, np.int32(nx), np.int32(ny), np.int32(nz), scalar(metrics.dx),
            scalar(metrics.dy), scalar(nu), np.int32(0 in axes), np.int32(1 in axes), np.int32(2 in axes)))
    return out
