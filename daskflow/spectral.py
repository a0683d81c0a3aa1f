"""x/y spectral transforms of whole 3-D fields, including chunked Dask arrays.

``dask.array.fft`` needs one chunk along every transformed axis. :func:`forward_xy` takes a field
of logical shape ``(nx, ny, nz)`` chunked any way, brings it to x-pencils (one chunk along x),
transforms along x in every chunk, transposes x -> y by exchanging pieces (no P2P rechunk), and
transforms along y: the result is the spectral field in y-pencils, with the x modes split where the
y points were. :func:`backward_xy` is the exact inverse. The transforms per BC pair and placement
are those of :mod:`daskflow.transforms` (real FFT, DCT/DST types I-IV, DCT-VIII type).
"""

from __future__ import annotations

import numpy as np

from daskflow.backend import is_dask_array


def _plan(shape, bc, stagger, pencils, dtype):
    from daskflow.bc import Boundaries
    from daskflow.grid import Grid
    from daskflow.poisson.plan import SpectralPlan

    boundaries = Boundaries.parse((bc[0], bc[1], "PP"), f"{stagger[0]}{stagger[1]}c")
    return SpectralPlan(Grid(tuple(shape)), boundaries, 1.0, -1.0, "ftm", pencils, np.dtype(dtype))


def _dask_array(graph, name, chunks, dtype, like):
    import dask.array as da
    from dask.highlevelgraph import HighLevelGraph

    from daskflow.backend import array_module

    hlg = HighLevelGraph.from_collections(name, graph, dependencies=[like])
    meta = array_module(like._meta).empty((0, 0, 0), dtype=dtype)
    return da.Array(hlg, name, chunks, dtype=dtype, meta=meta)


def forward_xy(field, bc=("PP", "PP"), stagger: str = "cc"):
    """Transform ``field`` ``(nx, ny, nz)`` along x and y; NumPy/CuPy/Dask in, same kind out.

    Output shape ``(nxs, nys, nz)``: complex when x or y is periodic (real FFT along x first),
    real otherwise. A Dask result is chunked as y-pencils: ``(x modes split in py, all y, z chunks)``.
    """
    from daskflow.pencils.layout import pencil_chunks, split_sizes
    from daskflow.poisson import algorithms, stages

    if not is_dask_array(field):
        plan = _plan(field.shape, bc, stagger, (1, 1), field.real.dtype)
        return stages.forward_xy(plan, None, field.T).T
    from dask.base import tokenize

    from daskflow.pencils.graph import DaskExecutor

    nx, ny, nz = field.shape
    py, pz = len(field.chunks[1]), len(field.chunks[2])
    plan = _plan(field.shape, bc, stagger, (py, pz), field.dtype)
    dec = plan.decomposition
    home = pencil_chunks(field.shape, (py, pz))
    if field.chunks != home:
        field = field.rechunk(home, method="tasks")
    token = tokenize(field.name, bc, stagger)
    ex = DaskExecutor(("daskflow-transform-plan-" + token,), token, block_index=lambda k: (k[0], 0, k[1]))
    blocks = {k: (field.name, 0, *k) for k in dec.indices}
    out = algorithms._forward_chain(plan, ex, blocks, [stages.spectral_to_logical_order],
                                   head=[stages.to_memory_order])
    graph = {ex.plan: plan, **ex.graph}
    nxs, nys = dec.spectral
    chunks = (split_sizes(nxs, py), (nys,), home[2])
    return _dask_array(graph, out[(0, 0)][0], chunks, plan.spectral_dtype, field)


def backward_xy(spectrum, shape, bc=("PP", "PP"), stagger: str = "cc"):
    """Inverse of :func:`forward_xy` back to the physical ``shape = (nx, ny, nz)``.

    A Dask spectrum must be chunked as :func:`forward_xy` returns it (any z chunks); the result is
    chunked as x-pencils. For face placement on a bounded axis the boundary face is filled from
    the boundary condition (Dirichlet: zero; Neumann: copy of its neighbour).
    """
    from daskflow.poisson import algorithms, stages

    if not is_dask_array(spectrum):
        dtype = np.result_type(spectrum.real.dtype, np.float32)
        plan = _plan(shape, bc, stagger, (1, 1), dtype)
        xp_array = stages.backward_xy(plan, None, spectrum.T)
        return xp_array.T
    from dask.base import tokenize

    from daskflow.pencils.graph import DaskExecutor
    from daskflow.pencils.layout import pencil_chunks, split_sizes

    nx, ny, nz = shape
    py, pz = len(spectrum.chunks[0]), len(spectrum.chunks[2])
    plan = _plan(shape, bc, stagger, (py, pz), spectrum.real.dtype)
    dec = plan.decomposition
    nxs, nys = dec.spectral
    expected = (split_sizes(nxs, py), (nys,), split_sizes(nz, pz))
    if spectrum.chunks != expected:
        spectrum = spectrum.rechunk(expected, method="tasks")
    token = tokenize(spectrum.name, bc, stagger, shape)
    ex = DaskExecutor(("daskflow-transform-plan-" + token,), token)
    blocks = {k: (spectrum.name, k[0], 0, k[1]) for k in dec.indices}
    tail = [stages.to_logical_order]
    if py == 1:
        out = ex.map([stages.to_memory_order, stages.backward_xy, *tail], dec.indices, blocks)
    else:
        phys_y = ex.map([stages.spectral_to_memory_order, stages.backward_y], dec.indices, blocks)
        out = algorithms._finish(plan, ex, phys_y, tail)
    graph = {ex.plan: plan, **ex.graph}
    chunks = pencil_chunks(shape, (py, pz))
    return _dask_array(graph, out[(0, 0)][0], chunks, plan.real_dtype, spectrum)


__all__ = ["backward_xy", "forward_xy"]
