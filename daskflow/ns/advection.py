"""The explicit right-hand side of the momentum equations: advection in divergence form (midpoint
averages, conservative) or skew-symmetric form (kinetic-energy conserving, Morinishi et al. 1998),
and the explicitly treated diffusion, on padded NumPy/CuPy fields; on the CPU in z-slabs that fit
the cache, by compiled loops where they are available (:mod:`daskflow.ns.cpu_kernels`)."""

from __future__ import annotations

import numpy as np

from daskflow.backend import array_module
from daskflow.ns import cpu_kernels
from daskflow.ns.operators import HI, LO, C, Metrics, _compiled, _z, for_slabs, new_field, slab_metrics

ADVECTION = ("divergence", "skew_symmetric")  # forms of the advection term (config physics.advection)


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
        sub, parts = slab_metrics(m, k0, k1), [o[:, :, k0:k1] for o in out]
        block(U[sl], V[sl], W[sl], sub, parts)
        _diffusion_block(U[sl], V[sl], W[sl], sub, nu, axes, parts)

    for_slabs(xp, shape, slab, threads)
    return out


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
