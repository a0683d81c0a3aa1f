"""CUDA kernel of the pencil layer: the swapped copy that packs a transpose's pieces.

A piece cut along the last axis of a chunk and sent with its last two axes swapped arrives in the
receiver's memory order, so the receiver only concatenates. CuPy's own strided copy of a swapped
view reads one element per row per thread (half of each 32-byte sector for complex128); the
kernel stages 32 x 32 tiles through shared memory so that both the reads and the writes are
coalesced. It moves bits: any 4-, 8- or 16-byte element type.
"""

from __future__ import annotations

import functools

import numpy as np

from daskflow.backend import element_strides, raw_kernel

_SOURCE = r"""
typedef {T} T;
extern "C" __global__ void swap_last_axes(const T* src, T* dst, const long long s0, const long long s1,
                                          const long long s2, const int rows, const int cols) {{
    // src[b, r, c] (element strides s0, s1, s2) -> dst[b, c, r] (contiguous (nb, cols, rows))
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
        if (r < rows && c < cols) dst[(b * cols + c) * rows + r] = tile[threadIdx.x][j];
    }}
}}
"""
_BIT_TYPES = {4: "float", 8: "double", 16: "double2"}  # element types by size: the kernel moves bits


@functools.cache
def _source(itemsize: int) -> str:
    return _SOURCE.format(T=_BIT_TYPES[itemsize])


def swap_last_axes(a):
    """A C-contiguous copy of CuPy ``a`` ``(nb, rows, cols)`` (any strides) with its last two axes
    swapped: ``(nb, cols, rows)``."""
    import cupy

    nb, rows, cols = a.shape
    out = cupy.empty((nb, cols, rows), dtype=a.dtype)
    if out.size == 0:
        return out
    kernel = raw_kernel(_source(a.itemsize), "swap_last_axes")
    kernel(((cols + 31) // 32, (rows + 31) // 32, nb), (32, 8, 1),
           (a, out, *element_strides(a), np.int32(rows), np.int32(cols)))
    return out
