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

from dataclasses import dataclass

import numpy as np

from daskflow.backend import HOST_POOL, array_module, compiled_loops, cpu_threads, even_ranges, run_in_threads
from daskflow.grid import Grid
from daskflow.ns import cpu_kernels
from daskflow.ns.boundaries import ComponentBC

C, HI, LO = slice(1, -1), slice(2, None), slice(None, -2)
ADVECTION = ("divergence", "skew_symmetric")  # forms of the advection term (config physics.advection)


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
    """:func:`pad` from the ``(pairs, values)`` of :func:`bc_of`."""
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
    if _compiled(xp):
        for_slabs(xp, a.shape, lambda k0, k1: cpu_kernels.copy_interior(a, out, k0, k1), compiled=True)
    else:
        def copy(k0, k1):
            out[C, C, k0 + 1:k1 + 1] = a[:, :, k0:k1]

        for_slabs(xp, a.shape, copy)
    return out


def fill_ghosts(view, axis: int, pair: str, values, face: bool, sides: tuple[int, ...] = (0, 1)) -> None:
    """Set the ghost planes of ``view`` along ``axis`` (its first and last; ``sides`` says which)
    from its interior: wrapped when periodic; a Dirichlet side mirrors a centred value to the wall
    value (a face on the lower wall is the value itself), a Neumann side copies."""
    n = view.shape[axis] - 2
    for side, ghost, edge in ((0, _index(axis, 0), _index(axis, 1)), (1, _index(axis, n + 1), _index(axis, n))):
        if side not in sides:
            continue
        letter, value = pair[side], values[side]
        if pair == "PP":
            view[ghost] = view[_index(axis, n if side == 0 else 1)]
        elif face:
            view[ghost] = value if (side == 0 and letter == "D") else view[edge]
        elif letter == "D":
            view[ghost] = 2 * value - view[edge]
        else:
            view[ghost] = view[edge]


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


def _index(axis: int, i: int) -> tuple:
    sl = [slice(None)] * 3
    sl[axis] = i
    return tuple(sl)


def _z(arr, xp, dtype):
    return xp.asarray(arr, dtype=dtype)[None, None, :]


def divergence(U, V, W, m: Metrics, scale: float = 1.0, threads: int | None = None):
    """Divergence at cell centres from padded face velocities (divided by ``scale``); shape of the
    interior, in :func:`memory_order`."""
    xp = array_module(U)
    shape = tuple(n - 2 for n in U.shape)
    out = new_field(xp, shape, U.dtype)

    rx, ry = 1.0 / (m.dx * scale), 1.0 / (m.dy * scale)
    rz = 1.0 / (m.dzf[1:-1] * scale)
    if _compiled(xp):
        rz = np.asarray(rz, dtype=U.dtype)
        for_slabs(xp, shape, lambda k0, k1: cpu_kernels.divergence_slab(U, V, W, rx, ry, rz, out, k0, k1), threads,
                  compiled=True)
        return out

    def slab(k0, k1):
        z, zc = slice(k0 + 1, k1 + 1), slice(k0, k1)
        o = out[:, :, zc]
        xp.subtract(U[C, C, z], U[LO, C, z], out=o)
        o *= rx
        t = V[C, C, z] - V[C, LO, z]
        t *= ry
        o += t
        xp.subtract(W[C, C, z], W[C, C, k0:k1], out=t)
        t *= _z(rz[zc], xp, U.dtype)
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
           threads: int | None = None):
    """``f + sum(c * a for c, a in terms) + scale * (body - gradient(P, m, axis))`` in one
    cache-blocked pass (the gradient term added after the first of ``terms``, ``f`` last; ``f``
    None: left out); into ``out`` (may be ``f``) or a new array in :func:`memory_order`."""
    xp = array_module(P)
    shape = tuple(n - 2 for n in P.shape)
    if out is None:
        out = new_field(xp, shape, P.dtype)
    hi = _shift(axis)[:2]
    spacing = m.dx if axis == 0 else m.dy
    if _compiled(xp) and len(terms) <= 2:
        inv_h = 1.0 / (m.dzc[1:] if axis == 2 else np.full(shape[2], spacing))
        (c1, a1), (c2, a2) = (*terms, *[(0.0, out)] * (2 - len(terms)))
        args = (out if f is None else f, f is not None, P, axis, scale, body, inv_h, c1, a1, c2, a2, len(terms), out)
        for_slabs(xp, shape, lambda k0, k1: cpu_kernels.update_slab(*args, k0, k1), threads, compiled=True)
        return out

    def slab(k0, k1):
        zc = slice(k0, k1)
        z = slice(k0 + 1, k1 + 1)
        o = out[:, :, zc]
        upper = P[hi + (z,)] if axis < 2 else P[C, C, k0 + 2:k1 + 2]
        factor = scale / spacing if axis < 2 else _z(scale / m.dzc[z], xp, P.dtype)
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
    return out


def _shift(axis: int) -> tuple:
    return tuple(HI if ax == axis else C for ax in range(3))


def laplacian(A, m: Metrics, component: int, axes=(0, 1, 2), scale: float = 1.0, out=None):
    """``scale`` times the second differences along ``axes`` of padded component ``component`` (3: a
    centred field): a new array, or added into ``out`` (interior-shaped) in place. It runs inside the
    substep's memory peak, next to the padded fields and the explicit terms, so it works on one
    temporary (two without ``out``); 0 when ``axes`` is empty and there is no ``out``."""
    xp = array_module(A)
    for axis in axes:
        up_sl, lo_sl = _shift(axis), tuple(LO if ax == axis else C for ax in range(3))
        if axis < 2:
            up_factor = down_factor = scale / (m.dx if axis == 0 else m.dy) ** 2
        else:
            if component == 2:  # faces: differences over cells, divided by the face's control width
                up, down, width = m.dzf[2:], m.dzf[1:-1], m.dzc[1:]
            else:  # centres: differences over centre distances, divided by the cell width
                up, down, width = m.dzc[1:], m.dzc[:-1], m.dzf[1:-1]
            up_factor, down_factor = (_z(scale / (d * width), xp, A.dtype) for d in (up, down))
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


def advection(U, V, W, m: Metrics):
    """``-(div(u u))`` for each component at its own faces (conservative divergence form)."""
    xp = array_module(U)
    dzf, dzc = _z(m.dzf[1:-1], xp, U.dtype), _z(m.dzc[1:], xp, U.dtype)
    avg = lambda a, b: 0.5 * (a + b)  # noqa: E731
    # u at x-faces
    uu = avg(U[C, C, C], U[HI, C, C]) ** 2 - avg(U[LO, C, C], U[C, C, C]) ** 2
    uv = (avg(U[C, C, C], U[C, HI, C]) * avg(V[C, C, C], V[HI, C, C])
          - avg(U[C, LO, C], U[C, C, C]) * avg(V[C, LO, C], V[HI, LO, C]))
    uw = (avg(U[C, C, C], U[C, C, HI]) * avg(W[C, C, C], W[HI, C, C])
          - avg(U[C, C, LO], U[C, C, C]) * avg(W[C, C, LO], W[HI, C, LO]))
    au = -(uu / m.dx + uv / m.dy + uw / dzf)
    # v at y-faces
    vu = (avg(V[C, C, C], V[HI, C, C]) * avg(U[C, C, C], U[C, HI, C])
          - avg(V[LO, C, C], V[C, C, C]) * avg(U[LO, C, C], U[LO, HI, C]))
    vv = avg(V[C, C, C], V[C, HI, C]) ** 2 - avg(V[C, LO, C], V[C, C, C]) ** 2
    vw = (avg(V[C, C, C], V[C, C, HI]) * avg(W[C, C, C], W[C, HI, C])
          - avg(V[C, C, LO], V[C, C, C]) * avg(W[C, C, LO], W[C, HI, LO]))
    av = -(vu / m.dx + vv / m.dy + vw / dzf)
    # w at z-faces
    wu = (avg(W[C, C, C], W[HI, C, C]) * avg(U[C, C, C], U[C, C, HI])
          - avg(W[LO, C, C], W[C, C, C]) * avg(U[LO, C, C], U[LO, C, HI]))
    wv = (avg(W[C, C, C], W[C, HI, C]) * avg(V[C, C, C], V[C, C, HI])
          - avg(W[C, LO, C], W[C, C, C]) * avg(V[C, LO, C], V[C, LO, HI]))
    ww = avg(W[C, C, C], W[C, C, HI]) ** 2 - avg(W[C, C, LO], W[C, C, C]) ** 2
    aw = -(wu / m.dx + wv / m.dy + ww / dzc)
    return au, av, aw


def skew_advection(U, V, W, m: Metrics):
    """``-(div(u u) + u . grad u) / 2`` for each component at its own faces (skew-symmetric form).

    Derivation (finite-volume form). Every component ``phi`` has a control volume ``V_P``: ``dx dy
    dzf_k`` for ``u`` and ``v``, ``dx dy dzc_k+1/2`` for ``w`` (``dzc`` the centre-to-centre distance,
    ``(dzf_k + dzf_k+1) / 2``); the discrete kinetic energy is ``sum(V_P phi_P**2) / 2`` over the
    three components. Through each face ``f`` of that volume flows ``F_f`` (outward; advecting
    velocity times face area), and the divergence form of :func:`advection` is
    ``D(phi)_P = sum_f F_f (phi_P + phi_N) / 2 / V_P`` (``N`` the neighbour across ``f``). Its
    energy production is ``sum_P V_P phi_P D(phi)_P = sum_P phi_P**2 / 2 * sum_f F_f``: zero only
    if the fluxes of every momentum volume sum to zero. The advective form is ``A(phi)_P = sum_f
    F_f (phi_N - phi_P) / 2 / V_P`` and the skew-symmetric form their mean::

        S(phi)_P = (D + A) / 2 = sum_f F_f phi_N / (2 V_P)

    ``V_P S_PN = F_f / 2`` and ``V_N S_NP = -F_f / 2`` (the same face seen from the other side), so
    ``V S`` is antisymmetric and ``sum_P V_P phi_P S(phi)_P = 0`` exactly, for any velocity field
    (divergence-free or not) and any stretching. In Morinishi et al. (1998) notation on the uniform
    x, y axes this is ``(d(ub_j u_i)/dx_j + ub_j du_i/dx_j) / 2`` with midpoint averages; along the
    stretched z the outer average of the advective part is length-weighted:
    ``(dzc_k+1/2 wb (du/dz)_k+1/2 + dzc_k-1/2 wb (du/dz)_k-1/2) / (2 dzf_k)``.

    Fluxes (per unit volume, i.e. divided by ``V_P``): those of :func:`advection` (midpoint
    averages), except on the x- and y-faces of a ``w`` volume, which straddle two cells of different
    heights: there the advecting ``u`` (``v``) is the volume-weighted
    ``(dzf_k u_k + dzf_k+1 u_k+1) / (2 dzc_k+1/2)``. Then the fluxes of every momentum volume sum to
    ``V_P`` times the volume-weighted mean of the discrete divergence over the cells it overlaps, so
    for a discretely divergence-free field ``S`` equals the divergence form written with these
    fluxes (momentum conserving) and, on x, y and uniform z, :func:`advection` itself. (The plain
    mean that :func:`advection` uses there does not sum to zero on a stretched grid: its energy
    production is not zero even for a divergence-free field; that of ``S`` is zero by construction.)
    Written out, with ``b`` a midpoint average and ``~`` the volume-weighted one::

        -S(u) = [ub^x_i+1 u_i+3/2 - ub^x_i u_i-1/2] / (2 dx) + [vb^x_j+1/2 u_j+1 - vb^x_j-1/2 u_j-1] / (2 dy)
                + [wb^x_k+1/2 u_k+1 - wb^x_k-1/2 u_k-1] / (2 dzf_k)
        -S(w) = [u~^z_i+1/2 w_i+1 - u~^z_i-1/2 w_i-1] / (2 dx) + [v~^z_j+1/2 w_j+1 - ...] / (2 dy)
                + [wb^z_k+1 w_k+3/2 - wb^z_k w_k-1/2] / (2 dzc_k+1/2)

    and ``S(v)`` like ``S(u)``. At a wall the normal velocity is zero, so the wall fluxes vanish and
    the ghost values never enter; the energy identity holds on the unknowns alone.
    """
    xp = array_module(U)
    dzf, dzc = _z(m.dzf[1:-1], xp, U.dtype), _z(m.dzc[1:], xp, U.dtype)
    above = _z(m.dzf[2:], xp, U.dtype)  # the cell above each w face (dzf the one below)
    avg = lambda a, b: 0.5 * (a + b)  # noqa: E731
    vol = lambda a, b: (dzf * a + above * b) / (2 * dzc)  # noqa: E731
    # u at x-faces
    su = (avg(U[C, C, C], U[HI, C, C]) * U[HI, C, C] - avg(U[LO, C, C], U[C, C, C]) * U[LO, C, C]) / m.dx
    su = su + (avg(V[C, C, C], V[HI, C, C]) * U[C, HI, C] - avg(V[C, LO, C], V[HI, LO, C]) * U[C, LO, C]) / m.dy
    su = su + (avg(W[C, C, C], W[HI, C, C]) * U[C, C, HI] - avg(W[C, C, LO], W[HI, C, LO]) * U[C, C, LO]) / dzf
    # v at y-faces
    sv = (avg(U[C, C, C], U[C, HI, C]) * V[HI, C, C] - avg(U[LO, C, C], U[LO, HI, C]) * V[LO, C, C]) / m.dx
    sv = sv + (avg(V[C, C, C], V[C, HI, C]) * V[C, HI, C] - avg(V[C, LO, C], V[C, C, C]) * V[C, LO, C]) / m.dy
    sv = sv + (avg(W[C, C, C], W[C, HI, C]) * V[C, C, HI] - avg(W[C, C, LO], W[C, HI, LO]) * V[C, C, LO]) / dzf
    # w at z-faces
    sw = (vol(U[C, C, C], U[C, C, HI]) * W[HI, C, C] - vol(U[LO, C, C], U[LO, C, HI]) * W[LO, C, C]) / m.dx
    sw = sw + (vol(V[C, C, C], V[C, C, HI]) * W[C, HI, C] - vol(V[C, LO, C], V[C, LO, HI]) * W[C, LO, C]) / m.dy
    sw = sw + (avg(W[C, C, C], W[C, C, HI]) * W[C, C, HI] - avg(W[C, C, LO], W[C, C, C]) * W[C, C, LO]) / dzc
    return -0.5 * su, -0.5 * sv, -0.5 * sw


# ---------------------------------------------------------------------------- fused explicit terms

SLAB_POINTS = 1 << 15  # about the points of one z-slab of the blocked NumPy path (fits the L2 cache)


def explicit_terms(U, V, W, m: Metrics, nu: float, axes=(0, 1, 2), threads: int | None = None,
                   advection: str = "divergence") -> list:
    """``advection(U, V, W) + nu * laplacian(., axes)`` of all three components (the explicit
    momentum terms), as three interior arrays in :func:`memory_order`; ``advection="skew_symmetric"``:
    :func:`skew_advection` instead of :func:`advection`.

    Same discretisation as :func:`advection` (:func:`skew_advection`) and :func:`laplacian`, written
    in flux form: each advecting velocity (a midpoint or volume-weighted sum) is computed once on
    the cell edges or centres, and the x-y, x-z and y-z edge sums are shared between the two
    components that use them. NumPy arrays are processed in z-slabs small enough to stay in cache,
    on ``threads`` threads (default :func:`cpu_threads`); other arrays (CuPy) in one piece.
    """
    if advection not in ADVECTION:
        raise ValueError(f"advection must be one of {', '.join(ADVECTION)}; got {advection!r}")
    xp = array_module(U)
    shape = tuple(n - 2 for n in U.shape)
    out = [new_field(xp, shape, U.dtype) for _ in range(3)]
    if advection == "divergence" and _compiled(xp):
        dzf, dzc = (np.asarray(a, dtype=U.dtype) for a in (m.dzf, m.dzc))
        flags = tuple(axis in axes for axis in range(3))
        for_slabs(xp, shape, lambda k0, k1: cpu_kernels.explicit_slab(U, V, W, dzf, dzc, *out, m.dx, m.dy, nu,
                                                                      *flags, k0, k1), threads, compiled=True)
        return out
    block = _divergence_block if advection == "divergence" else _skew_block

    def slab(k0, k1):
        sl = (slice(None), slice(None), slice(k0, k1 + 2))
        sub, parts = _slab_metrics(m, k0, k1), [o[:, :, k0:k1] for o in out]
        block(U[sl], V[sl], W[sl], sub, parts)
        _diffusion_block(U[sl], V[sl], W[sl], sub, nu, axes, parts)

    for_slabs(xp, shape, slab, threads)
    return out


def _slab_metrics(m: Metrics, k0: int, k1: int) -> Metrics:
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


def _divergence_block(U, V, W, m: Metrics, out) -> None:
    """:func:`advection` of one padded block into ``out`` (three interior-shaped arrays)."""
    xp = array_module(U)
    au, av, aw = out
    dt = U.dtype
    q = 0.25  # both midpoint averages of a product: 0.5 * 0.5 (exact)
    inv_dzf = _z(1.0 / m.dzf[1:-1], xp, dt)  # centres (u, v) and the cells of the w equation
    inv_dzc = _z(1.0 / m.dzc[1:], xp, dt)  # w faces
    A, E = slice(None, -1), slice(1, None)  # lower / upper neighbour in a flux array of n + 1 points

    # diagonal fluxes: (sum of the two neighbours)**2 at the centres between faces along the axis
    t = U[:-1, C, C] + U[1:, C, C]
    xp.multiply(t, t, out=t)
    xp.subtract(t[A], t[E], out=au)
    au *= q / m.dx
    t = V[C, :-1, C] + V[C, 1:, C]
    xp.multiply(t, t, out=t)
    xp.subtract(t[:, A], t[:, E], out=av)
    av *= q / m.dy
    t = W[C, C, :-1] + W[C, C, 1:]
    xp.multiply(t, t, out=t)
    xp.subtract(t[:, :, A], t[:, :, E], out=aw)
    aw *= q * inv_dzc

    # x-y edges: (U_j + U_j+1)(V_i + V_i+1), for u (d/dy) and v (d/dx)
    f = U[:-1, :-1, C] + U[:-1, 1:, C]
    f *= V[:-1, :-1, C] + V[1:, :-1, C]
    f *= q / m.dy
    au += f[E, A]
    au -= f[E, E]
    g = f[A, E] - f[E, E]
    g *= m.dy / m.dx
    av += g
    # x-z edges: (U_k + U_k+1)(W_i + W_i+1), for u (d/dz) and w (d/dx)
    f = U[:-1, C, :-1] + U[:-1, C, 1:]
    f *= W[:-1, C, :-1] + W[1:, C, :-1]
    f *= q / m.dx
    aw += f[A, :, E]
    aw -= f[E, :, E]
    g = f[E, :, A] - f[E, :, E]
    g *= m.dx * inv_dzf
    au += g
    # y-z edges: (V_k + V_k+1)(W_j + W_j+1), for v (d/dz) and w (d/dy)
    f = V[C, :-1, :-1] + V[C, :-1, 1:]
    f *= W[C, :-1, :-1] + W[C, 1:, :-1]
    f *= q / m.dy
    aw += f[:, A, E]
    aw -= f[:, E, E]
    g = f[:, E, A] - f[:, E, E]
    g *= m.dy * inv_dzf
    av += g


def _skew_block(U, V, W, m: Metrics, out) -> None:
    """:func:`skew_advection` of one padded block into ``out`` (three interior-shaped arrays)."""
    xp = array_module(U)
    au, av, aw = out
    dt = U.dtype
    q = 0.25  # the skew-symmetric half times a midpoint average (exact)
    inv_dzf = _z(1.0 / m.dzf[1:-1], xp, dt)
    inv_dzc = _z(1.0 / m.dzc[1:], xp, dt)
    A, E = slice(None, -1), slice(1, None)  # lower / upper neighbour in an edge array of n + 1 points

    t, r = xp.empty_like(au), xp.empty_like(au)  # scratch of the block's interior shape

    def add(acc, coef, lower, lower_value, upper, upper_value, first=False):
        """``acc += coef * (lower * lower_value - upper * upper_value)`` (``first``: ``=``)."""
        o = acc if first else t
        xp.multiply(lower, lower_value, out=o)
        xp.multiply(upper, upper_value, out=r)
        o -= r
        o *= coef
        if not first:
            acc += o

    # diagonal terms: the sum of the two neighbours at the centres between faces along the axis
    s = U[:-1, C, C] + U[1:, C, C]
    add(au, q / m.dx, s[A], U[LO, C, C], s[E], U[HI, C, C], first=True)
    s = V[C, :-1, C] + V[C, 1:, C]
    add(av, q / m.dy, s[:, A], V[C, LO, C], s[:, E], V[C, HI, C], first=True)
    s = W[C, C, :-1] + W[C, C, 1:]
    add(aw, q * inv_dzc, s[:, :, A], W[C, C, LO], s[:, :, E], W[C, C, HI], first=True)

    # x-y edges: 2 ub^y = U_j + U_j+1 advects v along x, 2 vb^x = V_i + V_i+1 advects u along y
    a = U[:-1, :-1, C] + U[:-1, 1:, C]
    b = V[:-1, :-1, C] + V[1:, :-1, C]
    add(au, q / m.dy, b[E, A], U[C, LO, C], b[E, E], U[C, HI, C])
    add(av, q / m.dx, a[A, E], V[LO, C, C], a[E, E], V[HI, C, C])
    # x-z edges: 2 wb^x advects u along z; 2 u~^z (volume-weighted over the two cells) advects w along x
    lower, upper = _z(m.dzf[:-1] / m.dzc, xp, dt), _z(m.dzf[1:] / m.dzc, xp, dt)
    c = W[:-1, C, :-1] + W[1:, C, :-1]
    add(au, q * inv_dzf, c[E, :, A], U[C, C, LO], c[E, :, E], U[C, C, HI])
    a = U[:-1, C, E] * upper
    a += U[:-1, C, A] * lower
    add(aw, q / m.dx, a[A, :, E], W[LO, C, C], a[E, :, E], W[HI, C, C])
    # y-z edges: 2 wb^y advects v along z; 2 v~^z advects w along y
    c = W[C, :-1, :-1] + W[C, 1:, :-1]
    add(av, q * inv_dzf, c[:, E, A], V[C, C, LO], c[:, E, E], V[C, C, HI])
    a = V[C, :-1, E] * upper
    a += V[C, :-1, A] * lower
    add(aw, q / m.dy, a[:, A, E], W[C, LO, C], a[:, E, E], W[C, HI, C])


def _diffusion_block(U, V, W, m: Metrics, nu: float, axes, out) -> None:
    """Add ``nu`` times the second differences along ``axes`` of one padded block to ``out``."""
    if not axes:
        return
    xp = array_module(U)
    au, av, aw = out
    dt = U.dtype
    inv_dzf = _z(1.0 / m.dzf[1:-1], xp, dt)
    inv_dzc = _z(1.0 / m.dzc[1:], xp, dt)
    A, E = slice(None, -1), slice(1, None)
    # diffusion: nu times second differences as differences of first differences
    for c, (F, a) in enumerate(((U, au), (V, av), (W, aw))):
        F = F  # noqa: PLW2901
        if 0 in axes:
            d = F[1:, C, C] - F[:-1, C, C]
            d *= nu / m.dx**2
            a += d[E]
            a -= d[A]
        if 1 in axes:
            d = F[C, 1:, C] - F[C, :-1, C]
            d *= nu / m.dy**2
            a += d[:, E]
            a -= d[:, A]
        if 2 in axes:
            d = F[C, C, 1:] - F[C, C, :-1]
            if c == 2:  # faces: differences over cells, divided by the face's control width
                d *= _z(nu / m.dzf[1:], xp, dt)
                d = d[:, :, E] - d[:, :, A]
                d *= inv_dzc
            else:  # centres: differences over centre distances, divided by the cell width
                d *= _z(nu / m.dzc, xp, dt)
                d = d[:, :, E] - d[:, :, A]
                d *= inv_dzf
            a += d
