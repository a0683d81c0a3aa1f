"""CUDA kernel of the pencil layer: the swapped copy that packs a transpose's pieces.

A piece cut along the last axis of a chunk and sent with its last two axes swapped arrives in the
receiver's memory order, so the receiver only concatenates; a participant's piece for itself is
written by the same kernel straight into its place of the assembled chunk (a destination of any
strides). CuPy's own strided copy of a swapped view reads one element per row per thread (half of
each 32-byte sector for complex128); the kernel stages 32 x 32 tiles through shared memory so that
both the reads and the writes are coalesced. It moves bits: any 4-, 8- or 16-byte element type.
"""

from __future__ import annotations

import functools

import numpy as np

from daskflow.backend import element_strides, raw_kernel

_SOURCE = r"""
typedef {T} T;
extern "C" __global__ void swap_last_axes(const T* src, T* dst, const long long s0, const long long s1,
                                          const long long s2, const long long d0, const long long d1,
                                          const long long d2, const int rows, const int cols) {{
    // src[b, r, c] (element strides s0, s1, s2) -> dst[b, c, r] (element strides d0, d1, d2)
    __shared__ T tile[32][33];
    const long long b = blockIdx.z;
    const int c0 = blockIdx.x * 32, r0 = blockIdx.y * 32;
    for (int j = threadIdx.y; j < 32; j += blockDim.y) {{
        const int r = r0 + j, c = c0 + threadIdx.x;
        if (r < rows && c < cols) tile[j][threadIdx.x] = src[b * s0 + r * s1 + c * s2];
    }}
    __syncthreads();
    for (int j = threadIdx.y; j < 32; j += blockDim.y) {{
        const int c = c0 + j, r = r0 + threadIdx.x;
        if (r < rows && c < cols) dst[b * d0 + c * d1 + r * d2] = tile[threadIdx.x][j];
    }}
}}
"""
_BIT_TYPES = {4: "float", 8: "double", 16: "double2"}  # element types by size: the kernel moves bits


@functools.cache
def _source(itemsize: int) -> str:
    return _SOURCE.format(T=_BIT_TYPES[itemsize])


def swap_last_axes(a, out=None):
    """CuPy ``a`` ``(nb, rows, cols)`` (any strides) with its last two axes swapped, written into
    ``out`` ``(nb, cols, rows)`` of the same dtype (any strides, e.g. a slice of a larger chunk;
    by default a new C-contiguous array), which is returned."""
    import cupy

    nb, rows, cols = a.shape
    if out is None:
        out = cupy.empty((nb, cols, rows), dtype=a.dtype)
    elif out.shape != (nb, cols, rows) or out.dtype != a.dtype:
        raise ValueError(f"swap_last_axes: out {out.shape} {out.dtype} does not take the swap of a, "
                         f"{(nb, cols, rows)} {a.dtype}")
    if out.size == 0:
        return out
    kernel = raw_kernel(_source(a.itemsize), "swap_last_axes")
    kernel(((cols + 31) // 32, (rows + 31) // 32, nb), (32, 8, 1),
           (a, out, *element_strides(a), *element_strides(out), np.int32(rows), np.int32(cols)))
    return out
