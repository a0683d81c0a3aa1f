"""CUDA kernel of the pencil layer: the swapped copy that packs a transpose's pieces, and turns a
field between the operators' memory order and the transforms'.

A piece cut along the last axis of a chunk and sent with its last two axes swapped arrives in the
receiver's memory order, so the receiver only concatenates; a participant's piece for itself is
written by the same kernel straight into its place of the assembled chunk (a destination of any
strides). CuPy's own strided copy of a swapped view reads one element per row per thread (half of
each 32-byte sector for complex128); the kernel stages 32 x 32 tiles through shared memory so that
both the reads and the writes are coalesced. It moves bits: any 4-, 8- or 16-byte element type.

The same kernel reverses the axes of a field (:func:`c_contiguous`): the operators keep CuPy fields
C-ordered ``(x, y, z)`` (z fastest), the spectral solves work on ``(z, y, x)`` with x fastest, and
every solve changes between the two on the way in and out. CuPy's copy of such a view reads (or
writes) one element per 32-byte sector.
"""

from __future__ import annotations

import functools

import numpy as np

from daskflow.backend import element_strides, raw_kernel

_SOURCE = r"""
typedef {T} T;
extern "C" __global__ void {name}(const T* src, T* dst, const long long s0, const long long s1,
                                          const long long s2, const long long d0, const long long d1,
                                          const long long d2, const int rows, const int cols, const int first,
                                          const int period{scale_arg}) {{
    // src[b, r, first + c] (element strides s0, s1, s2; the column taken modulo period where that is
    // not 0: a periodic axis) -> dst[b, c, r] (element strides d0, d1, d2)
    __shared__ T tile[32][33];
    const long long b = blockIdx.z;
    const int c0 = blockIdx.x * 32, r0 = blockIdx.y * 32;
    for (int j = threadIdx.y; j < 32; j += blockDim.y) {{
        const int r = r0 + j, c = c0 + threadIdx.x;
        const int cs = period ? (first + c) % period : first + c;
        if (r < rows && c < cols) tile[j][threadIdx.x] = src[b * s0 + r * s1 + cs * s2]{scale_op};
    }}
    __syncthreads();
    for (int j = threadIdx.y; j < 32; j += blockDim.y) {{
        const int c = c0 + j, r = r0 + threadIdx.x;
        if (r < rows && c < cols) dst[b * d0 + c * d1 + r * d2] = tile[threadIdx.x][j];
    }}
}}
"""
_BIT_TYPES = {4: "float", 8: "double", 16: "double2"}  # element types by size: the kernel moves bits
# the scaled copy's real types: it multiplies
_REAL_TYPES = {np.dtype(np.float32): "float", np.dtype(np.float64): "double"}


@functools.cache
def _source(itemsize: int) -> str:
    return _SOURCE.format(T=_BIT_TYPES[itemsize], name="swap_last_axes", scale_arg="", scale_op="")


@functools.cache
def _scaled_source(dtype: np.dtype) -> str:
    return _SOURCE.format(T=_REAL_TYPES[dtype], name="swap_last_axes_scaled", scale_arg=", const T scale",
                          scale_op=" * scale")


def swap_last_axes(a, out=None, scale: float | None = None, columns: slice | None = None):
    """CuPy ``a`` ``(nb, rows, cols)`` (any strides) with its last two axes swapped, written into
    ``out`` ``(nb, cols, rows)`` of the same dtype (any strides, e.g. a slice of a larger chunk;
    by default a new C-contiguous array), which is returned; with ``scale`` (real ``a`` only) every
    value multiplied by it on the way. With ``columns`` only those columns of ``a`` are taken
    (``cols`` is then their count): a range that may run past either end of ``a``'s last axis,
    which is then periodic (rows that wrap around a periodic y), in one launch."""
    import cupy

    nb, rows, cols = a.shape
    first, period = 0, 0
    if columns is not None:
        first, period, cols = wrapped_range(columns, cols)
    if out is None:
        out = cupy.empty((nb, cols, rows), dtype=a.dtype)
    elif out.shape != (nb, cols, rows) or out.dtype != a.dtype:
        raise ValueError(f"swap_last_axes: out {out.shape} {out.dtype} does not take the swap of a, "
                         f"{(nb, cols, rows)} {a.dtype}")
    if out.size == 0:
        return out
    args = (a, out, *element_strides(a), *element_strides(out), np.int32(rows), np.int32(cols), np.int32(first),
            np.int32(period))
    if scale is None:
        kernel = raw_kernel(_source(a.itemsize), "swap_last_axes")
    else:
        if a.dtype not in _REAL_TYPES:
            raise ValueError(f"swap_last_axes: a scaled copy takes float32 or float64, not {a.dtype}")
        kernel = raw_kernel(_scaled_source(a.dtype), "swap_last_axes_scaled")
        args += (a.dtype.type(scale),)
    kernel(((cols + 31) // 32, (rows + 31) // 32, nb), (32, 8, 1), args)
    return out


def wrapped_range(columns: slice, n: int) -> tuple[int, int, int]:
    """``(first, period, count)`` of the index range ``columns`` (step 1) along an axis of ``n``
    points: the first index within the axis, ``n`` where the range runs past either end (periodic;
    else 0) and its length, at most ``n + 2`` (a range and one neighbour on each side)."""
    count = columns.stop - columns.start
    if columns.step not in (None, 1) or count < 0 or count > n + 2 or columns.start < -n or columns.stop > 2 * n:
        raise ValueError(f"columns {columns} of an axis of {n} points: a range of step 1, at most {n + 2} long, "
                         f"within one period on either side")
    wraps = columns.start < 0 or columns.stop > n
    return columns.start % n if n else 0, n if wraps else 0, count


def c_contiguous(a, scale: float | None = None):
    """``a`` as a C-contiguous array, multiplied by ``scale`` where given (a new array then): ``a``
    itself if it is one; a CuPy 3-D array whose first axis is its contiguous one (a C field's axes
    reversed, ``b.T``, or a slab of it) copied by :func:`swap_last_axes` with its first and last axes
    swapped in tiles, one plane of the middle axis at a time, so that reads and writes are coalesced;
    anything else as ``ascontiguousarray`` copies it."""
    from daskflow.backend import array_module, is_cupy_array

    if not (is_cupy_array(a) and a.ndim == 3 and a.strides[0] == a.itemsize and not a.flags.c_contiguous):
        xp = array_module(a)
        out = xp.ascontiguousarray(a)
        return out if scale is None else xp.multiply(out, out.dtype.type(scale))
    import cupy

    out = cupy.empty(a.shape, dtype=a.dtype)
    # per plane i1, tiles of (i2, i0) read along i0 (a's contiguous axis) and written along i2
    swap_last_axes(a.transpose(1, 2, 0), out.transpose(1, 0, 2), scale)
    return out


def f_contiguous(a):
    """``a`` as a Fortran-contiguous array (:func:`c_contiguous` of its reversed axes)."""
    return a if a.flags.f_contiguous else c_contiguous(a.T).T
