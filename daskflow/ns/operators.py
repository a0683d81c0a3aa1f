"""Second-order staggered operators of the Navier-Stokes equations on NumPy/CuPy arrays.

Fields have logical shape ``(nx, ny, nz)``: ``u[i, j, k]`` on the upper x-face of cell
``(i, j, k)``, likewise ``v`` in y and ``w`` in z; ``p`` at centres. Every operator works on a
*padded* field (one ghost layer per side, :func:`pad`) so the same code serves a whole array or a
pencil with halos. Advection is in divergence form with midpoint averages (conservative;
:func:`advection`) or in skew-symmetric form (kinetic-energy conserving; :func:`skew_advection`),
diffusion and gradients follow the stretched z metric of :mod:`daskflow.stencils`, so that the
divergence of the gradient is exactly the Poisson operator of :mod:`daskflow.poisson`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from daskflow.backend import (
    HOST_POOL,
    array_module,
    compiled_loops,
    cpu_threads,
    device_constant,
    even_ranges,
    is_cupy_array,
    run_in_threads,
)
from daskflow.grid import Grid
from daskflow.ns import cpu_kernels
from daskflow.ns.boundaries import ComponentBC

C, HI, LO = slice(1, -1), slice(2, None), slice(None, -2)
#: CuPy fields are padded, updated and differenced by one kernel each (:mod:`daskflow.ns.kernels`,
#: :mod:`daskflow.ns.field_kernels`);
#: False runs the array code instead (the reference the kernels are tested against, bit for bit)
FUSED_GPU = True


@dataclass(frozen=True)
class Metrics:
    """Spacings with one ghost cell per side (z mirrored at walls, wrapped if periodic)."""

    dx: float
    dy: float
    dzf: np.ndarray  # cell widths, length nz + 2 (padded)
    dzc: np.ndarray  # centre-to-centre distances, length nz + 1: dzc[k] between padded centres k, k+1

    @classmethod
    def of(cls, grid: Grid, z_periodic: bool) -> Metrics:
        h = grid.dzf
        lo, hi = (h[-1], h[0]) if z_periodic else (h[0], h[-1])
        dzf = np.concatenate([[lo], h, [hi]])
        return cls(grid.dx, grid.dy, dzf, 0.5 * (dzf[1:] + dzf[:-1]))


def _take(a, axis: int, index):
    sl = [slice(None)] * 3
    sl[axis] = index
    return a[tuple(sl)]


def bc_of(bc) -> tuple:
    """``(pairs, values)`` of a component's :class:`ComponentBC` or a pressure pair tuple."""
    return (bc.pairs, bc.values) if isinstance(bc, ComponentBC) else (tuple(bc), ((0.0, 0.0),) * 3)


def pad(a, bc: ComponentBC | tuple[str, str, str], component: int | None = None):
    """``a`` with one ghost layer per side filled from the boundary conditions.

    ``bc`` is a velocity component's :class:`ComponentBC` (with ``component`` its axis, 0-2) or,
    for the pressure, a tuple of pairs (Neumann: copy; Dirichlet: mirror to zero; homogeneous).
    Axes are padded in order x, y, z, so edges and corners see the ghosts of earlier axes. The
    result is one array (in :func:`memory_order`) filled in place (no intermediate copies).
    """
    return pad_with(a, *bc_of(bc), component)


def pad_with(a, pairs, values, component: int | None = None):
    """:func:`pad` from the ``(pairs, values)`` of :func:`bc_of`. A CuPy field is padded by one
    kernel (:func:`daskflow.ns.kernels.pad`: the same values, one launch instead of about ten, which
    is what a small grid's step on the GPU pays for)."""
    xp = array_module(a)
    if xp is not np and FUSED_GPU:
        from daskflow.ns import kernels

        rules = [ghost_rule(pairs[axis], side, axis == component) for axis in range(3) for side in (0, 1)]
        return kernels.pad(a, rules, [values[axis][side] for axis in range(3) for side in (0, 1)])
    out = padded_copy(a)
    for axis in range(3):
        # the part of ``out`` padded so far: all of the earlier axes, the interior of the later ones
        view = out[tuple(slice(None) if ax <= axis else C for ax in range(3))]
        fill_ghosts(view, axis, pairs[axis], values[axis], axis == component)
    return out


def padded_copy(a):
    """A new array one cell larger on every side (:func:`new_field`) with ``a`` copied into its
    interior; the ghost layers are left unset for the caller to fill."""
    xp = array_module(a)
    out = new_field(xp, tuple(n + 2 for n in a.shape), a.dtype)
    _copy_interior(a, out)
    return out


def padded_copies(arrays):
    """:func:`padded_copy` of every array of ``arrays`` (one shape and dtype) into one
    :func:`stacked_fields` allocation: ``out[i]`` is the padded ``arrays[i]``, ghosts unset."""
    first = arrays[0]
    out = stacked_fields(array_module(first), len(arrays), tuple(n + 2 for n in first.shape), first.dtype)
    for a, o in zip(arrays, out, strict=True):
        _copy_interior(a, o)
    return out


def _copy_interior(a, out) -> None:
    """``out[1:-1, 1:-1, 1:-1] = a``, by z-slabs (compiled loops on NumPy where available)."""
    xp = array_module(a)
    if _compiled(xp):
        for_slabs(xp, a.shape, lambda k0, k1: cpu_kernels.copy_interior(a, out, k0, k1), compiled=True)
    else:
        def copy(k0, k1):
            out[C, C, k0 + 1:k1 + 1] = a[:, :, k0:k1]

        for_slabs(xp, a.shape, copy)


WRAP, COPY, MIRROR, WALL = range(4)  # how a ghost plane is filled (ghost_rule)


def ghost_rule(pair: str, side: int, face: bool) -> int:
    """How the ghost plane on ``side`` (0: lower, 1: upper) of an axis with boundary conditions
    ``pair`` is filled: ``WRAP`` (periodic: from the far interior plane), ``MIRROR`` (Dirichlet on a
    centred value: ``2 * wall value - edge``), ``WALL`` (a face on the lower Dirichlet wall: the
    wall value itself) or ``COPY`` (Neumann, or the upper side of a face: the edge plane)."""
    if pair == "PP":
        return WRAP
    if face:
        return WALL if (side == 0 and pair[side] == "D") else COPY
    return MIRROR if pair[side] == "D" else COPY


def fill_ghosts(view, axis: int, pair: str, values, face: bool, sides: tuple[int, ...] = (0, 1)) -> None:
    """Set the ghost planes of ``view`` along spatial ``axis`` (its first and last; ``sides`` says
    which) from its interior by :func:`ghost_rule`. ``view`` is one field, or a stack of fields
    (spatial axes last) that share these boundary conditions."""
    n = view.shape[view.ndim - 3 + axis] - 2
    for side, ghost, edge in ((0, _index(axis, 0), _index(axis, 1)), (1, _index(axis, n + 1), _index(axis, n))):
        if side not in sides:
            continue
        rule, value = ghost_rule(pair, side, face), values[side]
        if rule == WRAP:
            view[ghost] = view[_index(axis, n if side == 0 else 1)]
        elif rule == WALL:
            view[ghost] = value
        elif rule == MIRROR:
            view[ghost] = 2 * value - view[edge]
        else:
            view[ghost] = view[edge]


def fill_ghosts_stacked(stack, axis: int, bcs: list, sides: tuple[int, ...] = (0, 1)) -> None:
    """:func:`fill_ghosts` of every field of ``stack`` (``(count, ...)``, spatial axes last), each
    with its own ``bcs[i] = (pairs, values, component)``: one operation for the whole stack when the
    fields' conditions on ``axis`` agree (periodic, say), else one per field."""
    def rule(bc):
        pairs, values, component = bc
        return ("PP",) if pairs[axis] == "PP" else (pairs[axis], tuple(values[axis]), component == axis)

    rules = [rule(bc) for bc in bcs]
    if len(set(rules)) == 1:
        pairs, values, component = bcs[0]
        fill_ghosts(stack, axis, pairs[axis], values[axis], component == axis, sides)
        return
    if ("PP",) in rules:  # periodic beside walls on one axis (no flow has it): field by field
        for field, (pairs, values, component) in zip(stack, bcs, strict=True):
            fill_ghosts(field, axis, pairs[axis], values[axis], component == axis, sides)
        return
    # Walls with different conditions per field: every ghost plane is ``a * edge + b`` with the
    # field's own (a, b), so one elementwise operation fills a side for the whole stack (a GPU
    # pencil's host pays per operation).
    n = stack.shape[stack.ndim - 3 + axis] - 2
    xp = array_module(stack)
    for side in sides:
        ghost, edge = (_index(axis, 0), _index(axis, 1)) if side == 0 else (_index(axis, n + 1), _index(axis, n))
        affine = [_ghost_affine(pairs[axis][side], values[axis][side], component == axis, side)
                  for pairs, values, component in bcs]
        a, b = (device_constant(xp, np.reshape(c, (-1, 1, 1)), stack.dtype) for c in zip(*affine, strict=True))
        _affine(xp, stack[edge], a, b, stack[ghost])


def _ghost_affine(letter: str, value: float, face: bool, side: int) -> tuple[float, float]:
    """``(a, b)`` with ghost ``= a * edge + b`` for one side of a wall (:func:`fill_ghosts`'s rules:
    the lower face of a Dirichlet normal component is the wall value, a Dirichlet centre mirrors
    to it, anything else copies the edge)."""
    if face:
        return (0.0, value) if (side == 0 and letter == "D") else (1.0, 0.0)
    return (-1.0, 2 * value) if letter == "D" else (1.0, 0.0)


@functools.cache
def _affine_kernel():
    import cupy

    return cupy.ElementwiseKernel("T x, T a, T b", "T y", "y = a * x + b", "daskflow_ghost_affine")


def _affine(xp, x, a, b, out) -> None:
    """``out[...] = a * x + b`` (broadcast), exactly rounded for ``a`` in -1, 0, 1: one kernel on
    the GPU."""
    if xp is np:
        np.multiply(x, a, out=out)
        out += b
    else:
        _affine_kernel()(x, a, b, out)


def _compiled(xp) -> bool:
    """Whether NumPy operators run the compiled loops of :mod:`daskflow.ns.cpu_kernels`."""
    return xp is np and compiled_loops()


def memory_order(xp) -> str:
    """Memory order of the arrays the operators create: Fortran for NumPy (the blocked path works
    on contiguous z-slabs), C for CuPy (its elementwise kernels walk the output in C order and the
    fused explicit-terms kernel reads C-contiguous blocks: Fortran arrays cost transposing copies and
    uncoalesced access there, measured 1.5x slower per step on an H200)."""
    return "F" if xp is np else "C"


def new_field(xp, shape: tuple, dtype):
    """An uninitialised array in :func:`memory_order`: from the host pool for NumPy
    (:class:`daskflow.backend.HostPool`; no page faults on every temporary), else ``xp.empty``."""
    if xp is np:
        return HOST_POOL.empty(shape, dtype, memory_order(xp))
    return xp.empty(shape, dtype=dtype, order=memory_order(xp))


def stacked_fields(xp, count: int, shape: tuple, dtype):
    """``count`` uninitialised fields of ``shape`` in one allocation, as a ``(count, *shape)`` array
    whose ``[i]`` are contiguous in :func:`memory_order` (the field axis is the slowest): a halo
    cuts and fills one plane of all of them in one operation."""
    if memory_order(xp) == "F":  # the field axis last in memory: the host pool's Fortran buffers
        return xp.moveaxis(new_field(xp, (*shape, count), dtype), -1, 0)
    return new_field(xp, (count, *shape), dtype)


def _index(axis: int, i: int) -> tuple:
    """Index ``i`` on spatial ``axis`` (of the last three) of a field or a stack of fields."""
    sl = [slice(None)] * 3
    sl[axis] = i
    return (Ellipsis, *sl)


def _z(arr, xp, dtype):
    """The host z-vector ``arr`` as a ``(1, 1, n)`` array of ``xp`` (kept on the GPU: metric
    vectors repeat every substep)."""
    return device_constant(xp, arr, dtype)[None, None, :]


def _z_over(numerator: float, widths, xp, dtype):
    """``numerator / widths`` as a ``(1, 1, n)`` array of ``xp``: divided where it is used, in float64
    like the host would, over the kept upload of the (time-invariant) widths; ``numerator`` changes
    with ``dt`` every substep, so the quotient itself is never worth keeping."""
    q = numerator / _z(widths, xp, np.float64)
    return q if q.dtype == dtype else q.astype(dtype)


def divergence(U, V, W, m: Metrics, scale: float = 1.0, threads: int | None = None):
    """Divergence at cell centres from padded face velocities (divided by ``scale``); shape of the
    interior, in :func:`memory_order`."""
    xp = array_module(U)
    shape = tuple(n - 2 for n in U.shape)
    rx, ry = 1.0 / (m.dx * scale), 1.0 / (m.dy * scale)
    if xp is not np and FUSED_GPU:  # one kernel (daskflow.ns.field_kernels), the same bits
        from daskflow.ns import field_kernels

        rz = (1.0 / (m.dzf[1:-1] * scale)).astype(U.dtype)
        return field_kernels.divergence(U, V, W, rx, ry, device_constant(xp, rz, U.dtype))
    out = new_field(xp, shape, U.dtype)
    if _compiled(xp):
        rz = np.asarray(1.0 / (m.dzf[1:-1] * scale), dtype=U.dtype)
        for_slabs(xp, shape, lambda k0, k1: cpu_kernels.divergence_slab(U, V, W, rx, ry, rz, out, k0, k1), threads,
                  compiled=True)
        return out
    rz = 1.0 / (_z(m.dzf[1:-1], xp, np.float64) * scale)
    rz = rz if rz.dtype == U.dtype else rz.astype(U.dtype)

    def slab(k0, k1):
        z, zc = slice(k0 + 1, k1 + 1), slice(k0, k1)
        o = out[:, :, zc]
        xp.subtract(U[C, C, z], U[LO, C, z], out=o)
        o *= rx
        t = V[C, C, z] - V[C, LO, z]
        t *= ry
        o += t
        xp.subtract(W[C, C, z], W[C, C, k0:k1], out=t)
        t *= rz[..., zc]
        o += t

    for_slabs(xp, shape, slab, threads)
    return out


def gradient(P, m: Metrics, axis: int):
    """Component ``axis`` of the pressure gradient on that axis's faces (padded ``P``)."""
    xp = array_module(P)
    out = new_field(xp, tuple(n - 2 for n in P.shape), P.dtype)
    xp.subtract(P[_shift(axis)], P[C, C, C], out=out)
    out /= m.dx if axis == 0 else m.dy if axis == 1 else _z(m.dzc[1:], xp, P.dtype)
    return out


def update(f, P, m: Metrics, axis: int, scale: float, body: float = 0.0, terms=(), out=None,
           threads: int | None = None, diffusion: tuple | None = None, offset=None):
    """``f + sum(c * a for c, a in terms) + scale * (body - gradient(P, m, axis))`` in one
    cache-blocked pass (the gradient term added after the first of ``terms``, ``f`` last; ``f``
    None: left out); into ``out`` (may be ``f``) or a new array in :func:`memory_order`.
    ``diffusion = (A, axes, nu_scale)`` then adds :func:`laplacian` ``(A, m, axis, axes, nu_scale)``,
    and ``offset`` (a number, or a 0-d array where the fields live) is added last: ``out +=
    offset``'s values (in the same pass on the GPU for a float64 device value)."""
    xp = array_module(P)
    shape = tuple(n - 2 for n in P.shape)
    if out is None:
        out = new_field(xp, shape, P.dtype)
    spacing = m.dx if axis == 0 else m.dy
    fused = None  # the offset the kernel adds
    if xp is not np and FUSED_GPU and len(terms) <= 2:  # one kernel (daskflow.ns.field_kernels), the same bits
        from daskflow.ns import field_kernels

        dz = device_constant(xp, m.dzc[1:shape[2] + 1])
        second = None if diffusion is None else _second_differences(diffusion[0], m, axis, *diffusion[1:])
        # a float64 device offset is added in the kernel, with the array code's bits; a number (which
        # the array code adds in the field's type) after it
        fused = offset if is_cupy_array(offset) and offset.dtype == np.float64 and offset.ndim == 0 else None
        field_kernels.update(f, P, axis, scale, body, terms, out, spacing if body else scale / spacing, dz, second,
                             fused)
    else:
        _update_array(f, P, m, axis, scale, body, terms, out, threads)
        if diffusion is not None:
            laplacian(diffusion[0], m, axis, diffusion[1], diffusion[2], out=out, threads=threads)
    if offset is not None and fused is None:
        out += offset
    return out


def _update_array(f, P, m: Metrics, axis: int, scale: float, body: float, terms, out, threads: int | None):
    """:func:`update` (without diffusion) by the compiled CPU loops or the array code."""
    xp = array_module(P)
    shape = out.shape
    hi = _shift(axis)[:2]
    spacing = m.dx if axis == 0 else m.dy
    if _compiled(xp) and len(terms) <= 2:
        inv_h = 1.0 / (m.dzc[1:] if axis == 2 else np.full(shape[2], spacing))
        (c1, a1), (c2, a2) = (*terms, *[(0.0, out)] * (2 - len(terms)))
        args = (out if f is None else f, f is not None, P, axis, scale, body, inv_h, c1, a1, c2, a2, len(terms), out)
        for_slabs(xp, shape, lambda k0, k1: cpu_kernels.update_slab(*args, k0, k1), threads, compiled=True)
        return

    def slab(k0, k1):
        zc = slice(k0, k1)
        z = slice(k0 + 1, k1 + 1)
        o = out[:, :, zc]
        upper = P[hi + (z,)] if axis < 2 else P[C, C, k0 + 2:k1 + 2]
        factor = scale / spacing if axis < 2 else _z_over(scale, m.dzc[z], xp, P.dtype)
        if body:
            t = xp.subtract(upper, P[C, C, z])
            t /= spacing if axis < 2 else _z(m.dzc[z], xp, P.dtype)
            xp.subtract(body, t, out=t)
            t *= scale
        else:  # scale * (0 - gradient), with one multiplication
            t = xp.subtract(P[C, C, z], upper)
            t *= factor
        if terms:
            (c, a), rest = terms[0], terms[1:]
            acc = xp.multiply(a[:, :, zc], c)
            acc += t
            for c, a in rest:
                xp.multiply(a[:, :, zc], c, out=t)
                acc += t
        else:
            acc = t
        if f is not None:
            xp.add(f[:, :, zc], acc, out=o)
        else:
            o[...] = acc

    for_slabs(xp, shape, slab, threads)


def _shift(axis: int) -> tuple:
    return tuple(HI if ax == axis else C for ax in range(3))


def laplacian(A, m: Metrics, component: int, axes=(0, 1, 2), scale: float = 1.0, out=None,
              threads: int | None = None):
    """``scale`` times the second differences along ``axes`` of padded component ``component`` (3: a
    centred field): a new array, or added into ``out`` (interior-shaped) in place. It runs inside the
    substep's memory peak, next to the padded fields and the explicit terms, so it works on one
    temporary (two without ``out``); 0 when ``axes`` is empty and there is no ``out``."""
    xp = array_module(A)
    if xp is not np and FUSED_GPU and axes:  # one kernel (daskflow.ns.field_kernels), the same bits
        from daskflow.ns import field_kernels

        given = out is not None
        if not given:
            out = new_field(xp, tuple(n - 2 for n in A.shape), A.dtype)
        field_kernels.laplacian(out, given, _second_differences(A, m, component, tuple(axes), scale))
        return out
    if _compiled(xp) and axes:
        return _laplacian_compiled(A, m, component, tuple(axes), scale, out, threads)
    for axis in axes:
        up_sl, lo_sl = _shift(axis), tuple(LO if ax == axis else C for ax in range(3))
        if axis < 2:
            up_factor = down_factor = scale / (m.dx if axis == 0 else m.dy) ** 2
        else:
            up_factor, down_factor = (_z_over(scale, span, xp, A.dtype) for span in _z_spans(m, component))
        term = A[up_sl] - A[C, C, C]
        term *= up_factor
        if out is None:
            out, term = term, A[C, C, C] - A[lo_sl]
        else:
            out += term
            xp.subtract(A[C, C, C], A[lo_sl], out=term)
        term *= down_factor
        out -= term
        del term
    return 0 if out is None else out


def _z_spans(m: Metrics, component: int) -> tuple:
    """The upper and lower z spans the factors of :func:`laplacian` divide its scale by (host
    float64): a face (``component == 2``) differenced over cells and divided by its control width,
    a centre differenced over centre distances and divided by the cell width."""
    if component == 2:
        up, down, width = m.dzf[2:], m.dzf[1:-1], m.dzc[1:]
    else:
        up, down, width = m.dzc[1:], m.dzc[:-1], m.dzf[1:-1]
    return up * width, down * width


def _laplacian_compiled(A, m: Metrics, component: int, axes: tuple, scale: float, out, threads: int | None):
    """:func:`laplacian` of a NumPy field by the compiled loop, over z-slabs on the thread pool."""
    given = out is not None
    if not given:
        out = new_field(np, tuple(n - 2 for n in A.shape), A.dtype)
    zup, zdown = (np.asarray(scale / span, dtype=A.dtype) for span in _z_spans(m, component))
    xup, yup = (A.dtype.type(scale / h ** 2) for h in (m.dx, m.dy))
    order = (*axes, 0, 0, 0)[:3]
    args = (A, out, given, len(axes), *order, xup, yup, zup, zdown, A.dtype.type(0))
    for_slabs(np, out.shape, lambda k0, k1: cpu_kernels.laplacian_slab(*args, k0, k1), threads, compiled=True)
    return out


def _second_differences(A, m: Metrics, component: int, axes: tuple, scale: float):
    """The GPU kernels' description of :func:`laplacian` ``(A, m, component, axes, scale)``."""
    from daskflow.ns.field_kernels import SecondDifferences

    xp = array_module(A)
    spans = tuple(device_constant(xp, s) for s in _z_spans(m, component))
    return SecondDifferences(A, tuple(axes), scale, (scale / m.dx ** 2, scale / m.dy ** 2), spans)


def pressure_update(p, phi, Phi, m: Metrics, axes, scale: float):
    """The new pressure ``p + (phi - laplacian(Phi, m, 3, axes, scale))`` (``Phi`` the padded
    ``phi``; no laplacian where ``axes`` is empty): a new array, one kernel on the GPU."""
    xp = array_module(phi)
    if xp is not np and FUSED_GPU and axes:
        from daskflow.ns import field_kernels

        return field_kernels.pressure_update(p, phi, _second_differences(Phi, m, 3, tuple(axes), scale))
    if axes:
        phi = phi - laplacian(Phi, m, 3, axes, scale)
    return p + phi


SLAB_POINTS = 1 << 15  # about the points of one z-slab of the blocked NumPy path (fits the L2 cache)


def slab_metrics(m: Metrics, k0: int, k1: int) -> Metrics:
    """The metrics of padded planes ``k0 .. k1 + 1`` (interior planes ``k0 .. k1 - 1``)."""
    return Metrics(m.dx, m.dy, m.dzf[k0:k1 + 2], m.dzc[k0:k1 + 1])


def for_slabs(xp, shape, fn, threads: int | None = None, compiled: bool = False) -> None:
    """Call ``fn(k0, k1)`` over z-slabs ``[k0, k1)`` of an interior of ``shape`` that cover it,
    spread over ``threads`` threads (default :func:`cpu_threads`) for NumPy: cache-sized slabs for
    the array code (it makes many passes over a slab), one slab per thread for ``compiled`` loops
    (one pass: small slabs only add task overhead; measured at 128 x 64 x 64 on 2 threads). Other
    array modules (CuPy): one call over everything."""
    nz = shape[2]
    if xp is not np:
        fn(0, nz)
        return
    threads = cpu_threads() if threads is None else threads
    slabs = threads if compiled else -(-nz // max(1, min(nz, SLAB_POINTS // max(1, shape[0] * shape[1]))))
    run_in_threads(fn, even_ranges(nz, slabs), threads)
