"""Per-chunk transform stages of the spectral solve: pure functions of a plan, a chunk index and arrays.

Chunks are in memory order ``(z, y, x)``, spectral y-pencils of a transpose ``(z, x, y)``
(:class:`~daskflow.poisson.plan.SpectralPlan`). The same functions run in-process
(:class:`~daskflow.pencils.executor.LocalExecutor`) and as Dask tasks on CPU or GPU workers; the
array module follows the chunk (NumPy or CuPy).
"""

from __future__ import annotations

import numpy as np

from daskflow import transforms
from daskflow.backend import array_module, cpu_threads, is_cupy_array
from daskflow.pencils.kernels import c_contiguous
from daskflow.poisson.plan import SpectralPlan

# The z solves between the transforms are :mod:`daskflow.zsolve.spectral`'s stages.

# ---------------------------------------------------------------- transforms along x and y


def _with_boundary_face(a, axis: int, n: int, bc: str):
    """Append the upper boundary point of a bounded ``f`` axis (D: zero, N: copy of the last)."""
    if a.shape[axis] == n:
        return a
    xp = array_module(a)
    last = xp.take(a, [a.shape[axis] - 1], axis=axis)
    face = last if bc[1] == "N" else xp.zeros_like(last)
    return xp.concatenate([a, face], axis=axis)


def to_memory_order(plan: SpectralPlan, key, a, *_):
    """Logical ``(x, y, z)`` chunk -> the ``(z, y, x)`` view the stages work on."""
    return a.T


def to_logical_order(plan: SpectralPlan, key, a, *_):
    """``(z, y, x)`` chunk -> logical ``(x, y, z)`` view (Fortran-ordered)."""
    return a.T


def spectral_to_memory_order(plan: SpectralPlan, key, a, *_):
    """Logical ``(x modes, y modes, z)`` spectral chunk -> the y-pencil layout the stages work on."""
    return a.transpose(2, 0, 1) if plan.y_last else a.T


def spectral_to_logical_order(plan: SpectralPlan, key, a, *_):
    """Inverse of :func:`spectral_to_memory_order` (a view)."""
    return a.transpose(1, 2, 0) if plan.y_last else a.T


def forward_x(plan: SpectralPlan, key, a, *_):
    """The x transform of an x-pencil, contiguous. On the GPU ``a`` is made C-contiguous first by
    the tiled copy (a memory-order view of a C-ordered field has x slowest; cuFFT would need the
    same copy, made by CuPy with uncoalesced reads)."""
    bc, st = plan.boundaries.bc[0], plan.boundaries.stagger[0]
    if is_cupy_array(a):
        a = c_contiguous(a)
    return array_module(a).ascontiguousarray(transforms.forward(a, -1, bc, st))


def forward_y(plan: SpectralPlan, key, a, *_, overwrite: bool = False, out=None):
    """The y transform of a y-pencil (along :attr:`SpectralPlan.y_axis`); written into ``out``
    (an array of the result's shape) where cuFFT can (a periodic y on the GPU), else a new array."""
    bc, st = plan.boundaries.bc[1], plan.boundaries.stagger[1]
    if out is not None and bc == "PP" and transforms.transforms_into(a, out, plan.y_axis):
        return transforms.fft_into(a, out)
    return array_module(a).ascontiguousarray(transforms.forward(a, plan.y_axis, bc, st, overwrite=overwrite))


def forward_y_owned(plan: SpectralPlan, key, a, *_, out=None):
    """:func:`forward_y` of a chunk the chain made itself (assembled pieces): transformed in place
    where the transform allows."""
    return forward_y(plan, key, a, overwrite=True, out=out)


def backward_y(plan: SpectralPlan, key, a, *_, overwrite: bool = False):
    """The inverse y transform of a y-pencil (a periodic y not divided by ny unless
    :attr:`SpectralPlan.normalised`)."""
    bc, st = plan.boundaries.bc[1], plan.boundaries.stagger[1]
    ny = plan.grid.shape[1]
    if overwrite and bc == "PP" and plan.x_is_complex and transforms.transforms_into(a, a, plan.y_axis):
        # in place, also in a slab of a larger chunk
        return transforms.fft_into(a, a, inverse=True, normalise=plan.normalised)
    out = transforms.backward(a, plan.y_axis, bc, st, ny, real_output=not plan.x_is_complex, overwrite=overwrite,
                              normalise=plan.normalised)
    return _with_boundary_face(out, plan.y_axis, ny, bc)


def backward_y_owned(plan: SpectralPlan, key, a, *_):
    """:func:`backward_y` of a chunk the chain owns (the z solve's output, already changed in
    place): transformed in place where the transform allows."""
    return backward_y(plan, key, a, overwrite=True)


def backward_x(plan: SpectralPlan, key, a, *_, overwrite: bool = False, out=None):
    """The inverse x transform of an x-pencil (a periodic x not divided by nx unless
    :attr:`SpectralPlan.normalised`); written into ``out`` (an array of the result's shape; a new
    one by default) where cuFFT can (a periodic x on the GPU, ``a`` destroyed: CuPy's ``irfft``
    would copy it first), else a new array."""
    bc, st = plan.boundaries.bc[0], plan.boundaries.stagger[0]
    nx = plan.grid.shape[0]
    xp = array_module(a)
    if out is None and overwrite and bc == "PP" and xp is not np and a.flags.c_contiguous:
        out = xp.empty((*a.shape[:-1], nx), dtype=a.real.dtype)
    if (out is not None and overwrite and bc == "PP" and out.shape[-1] == nx
            and transforms.transforms_into(a, out, -1, real_output=True)):
        return transforms.irfft_into(a, out, normalise=plan.normalised)
    out = transforms.backward(a, -1, bc, st, nx, real_output=True, overwrite=overwrite, normalise=plan.normalised)
    return _with_boundary_face(xp.ascontiguousarray(out), -1, nx, bc)


def backward_x_owned(plan: SpectralPlan, key, a, *_, out=None):
    """:func:`backward_x` of a chunk the chain made itself (assembled pieces)."""
    return backward_x(plan, key, a, overwrite=True, out=out)


def forward_xy(plan: SpectralPlan, key, a, *_):
    """Both transforms on a chunk that holds all of x and y (a fused 2-D FFT when both are PP).
    ``a`` is left unchanged; the x transform's output is transformed along y in place. On the GPU
    ``a`` is made C-contiguous by the tiled copy first, as in :func:`forward_x` (CuPy's FFT would
    copy a memory-order view of a C-ordered field itself, uncoalesced, and transform it axis by
    axis through further copies)."""
    if plan.boundaries.bc[:2] == ("PP", "PP"):
        xp = array_module(a)
        if xp is np:
            import scipy.fft

            return scipy.fft.rfft2(a, axes=(-2, -1), workers=cpu_threads())
        return xp.ascontiguousarray(xp.fft.rfft2(c_contiguous(a), axes=(-2, -1)))
    return forward_y(plan, key, forward_x(plan, key, a), overwrite=True)


def gpu_irfft2():
    """CuPy's inverse 2-D real FFT that may destroy its input (``cupyx.scipy.fft.irfft2``). Its first
    import pulls in SciPy's FFT and sparse modules, about a second on a GPU host: a GPU run imports
    it while it places its fields (:func:`daskflow.ns.placement.load_modules`), not in its first step."""
    import cupyx.scipy.fft

    return cupyx.scipy.fft.irfft2


def backward_xy(plan: SpectralPlan, key, a, *_, overwrite: bool = False):
    """Inverse of :func:`forward_xy` (periodic axes not divided by their lengths unless
    :attr:`SpectralPlan.normalised`); with ``overwrite`` the spectral chunk ``a`` is destroyed
    (NumPy: the y transform, and for PP pairs the complex y FFT, run in place in it)."""
    if plan.boundaries.bc[:2] == ("PP", "PP"):
        nx, ny = plan.grid.shape[:2]
        xp = array_module(a)
        norm = "backward" if plan.normalised else "forward"
        if xp is not np:
            if overwrite:  # cuFFT's c2r destroys its input: CuPy copies it first unless allowed not to
                return gpu_irfft2()(a, s=(ny, nx), axes=(-2, -1), overwrite_x=True, norm=norm)
            return xp.fft.irfft2(a, s=(ny, nx), axes=(-2, -1), norm=norm)
        import scipy.fft

        workers = cpu_threads()
        if overwrite:  # irfft2 in two passes, the first in place: no complex temporary
            a = scipy.fft.ifft(a, axis=-2, overwrite_x=True, workers=workers, norm=norm)
            return scipy.fft.irfft(a, n=nx, axis=-1, workers=workers, norm=norm)
        return scipy.fft.irfft2(a, s=(ny, nx), axes=(-2, -1), workers=workers, norm=norm)
    # backward_y's output is new or (with overwrite) ``a`` itself: backward_x may destroy it
    return backward_x(plan, key, backward_y(plan, key, a, overwrite=overwrite), overwrite=True)


def backward_xy_owned(plan: SpectralPlan, key, a, *_):
    """:func:`backward_xy` of a chunk the chain owns (the z solve's output, already changed in
    place): no temporaries beyond the result where the transforms allow."""
    return backward_xy(plan, key, a, overwrite=True)
