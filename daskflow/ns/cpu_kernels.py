"""Compiled CPU loops (Numba) for the operators that dominate a NumPy time step.

The NumPy array expressions of :mod:`daskflow.ns.operators` make a dozen or more passes over
memory per operator; each loop here makes one, like the CUDA kernel of :mod:`daskflow.ns.kernels`
does on the GPU. Same formulas (test-checked against the array code to round-off):

* :func:`explicit_slab`: divergence-form advection plus explicit diffusion, all three components;
* :func:`divergence_slab`: the divergence at cell centres;
* :func:`update_slab`: ``f + sum(c a) + scale (body - grad p)`` for one component;
* :func:`laplacian_slab`: scaled second differences along some axes, added to a field or not;
* :func:`copy_interior`: a field into the interior of its padded array.

Each works on the interior planes ``k0 <= k < k1`` of padded inputs, so the operators spread
z-slabs over their thread pool (:func:`daskflow.ns.operators.for_slabs`); the loops release the GIL.
They are used when :func:`daskflow.backend.compiled_loops` says so (Numba importable,
``DASKFLOW_NUMBA`` not ``0``); otherwise the array code runs.
"""

from __future__ import annotations

from daskflow.backend import compiled


@compiled
def explicit_slab(U, V, W, dzf, dzc, au, av, aw, dx, dy, nu, diff_x, diff_y, diff_z, k0, k1):
    """Advection (divergence form, midpoint averages) plus ``nu`` times the second differences
    along the flagged axes, of padded ``U, V, W`` ``(nx+2, ny+2, nz+2)`` into ``au, av, aw``
    ``(nx, ny, nz)``, planes ``k0 .. k1-1``. ``dzf`` (nz+2) and ``dzc`` (nz+1) are padded metrics."""
    nx, ny = au.shape[0], au.shape[1]
    rdx, rdy = 1.0 / dx, 1.0 / dy
    nx2, ny2 = nu * rdx * rdx, nu * rdy * rdy
    q = 0.25
    for k in range(k0, k1):
        c = k + 1
        rf, rc = 1.0 / dzf[c], 1.0 / dzc[c]
        rf_up, rc_dn = 1.0 / dzf[c + 1], 1.0 / dzc[c - 1]
        for jj in range(ny):
            b = jj + 1
            for ii in range(nx):
                a = ii + 1
                u, v, w = U[a, b, c], V[a, b, c], W[a, b, c]
                # u at (i+1/2, j, k)
                ue, uw = u + U[a + 1, b, c], U[a - 1, b, c] + u
                un = (u + U[a, b + 1, c]) * (v + V[a + 1, b, c])
                us = (U[a, b - 1, c] + u) * (V[a, b - 1, c] + V[a + 1, b - 1, c])
                ut = (u + U[a, b, c + 1]) * (w + W[a + 1, b, c])
                ub = (U[a, b, c - 1] + u) * (W[a, b, c - 1] + W[a + 1, b, c - 1])
                ru = -q * ((ue * ue - uw * uw) * rdx + (un - us) * rdy + (ut - ub) * rf)
                # v at (i, j+1/2, k)
                ve = (v + V[a + 1, b, c]) * (u + U[a, b + 1, c])
                vw = (V[a - 1, b, c] + v) * (U[a - 1, b, c] + U[a - 1, b + 1, c])
                vn, vs = v + V[a, b + 1, c], V[a, b - 1, c] + v
                vt = (v + V[a, b, c + 1]) * (w + W[a, b + 1, c])
                vb = (V[a, b, c - 1] + v) * (W[a, b, c - 1] + W[a, b + 1, c - 1])
                rv = -q * ((ve - vw) * rdx + (vn * vn - vs * vs) * rdy + (vt - vb) * rf)
                # w at (i, j, k+1/2)
                we = (w + W[a + 1, b, c]) * (u + U[a, b, c + 1])
                ww = (W[a - 1, b, c] + w) * (U[a - 1, b, c] + U[a - 1, b, c + 1])
                wn = (w + W[a, b + 1, c]) * (v + V[a, b, c + 1])
                ws = (W[a, b - 1, c] + w) * (V[a, b - 1, c] + V[a, b - 1, c + 1])
                wt, wb = w + W[a, b, c + 1], W[a, b, c - 1] + w
                rw = -q * ((we - ww) * rdx + (wn - ws) * rdy + (wt * wt - wb * wb) * rc)
                if diff_x:
                    ru += nx2 * (U[a + 1, b, c] - 2.0 * u + U[a - 1, b, c])
                    rv += nx2 * (V[a + 1, b, c] - 2.0 * v + V[a - 1, b, c])
                    rw += nx2 * (W[a + 1, b, c] - 2.0 * w + W[a - 1, b, c])
                if diff_y:
                    ru += ny2 * (U[a, b + 1, c] - 2.0 * u + U[a, b - 1, c])
                    rv += ny2 * (V[a, b + 1, c] - 2.0 * v + V[a, b - 1, c])
                    rw += ny2 * (W[a, b + 1, c] - 2.0 * w + W[a, b - 1, c])
                if diff_z:
                    ru += nu * ((U[a, b, c + 1] - u) * rc - (u - U[a, b, c - 1]) * rc_dn) * rf
                    rv += nu * ((V[a, b, c + 1] - v) * rc - (v - V[a, b, c - 1]) * rc_dn) * rf
                    rw += nu * ((W[a, b, c + 1] - w) * rf_up - (w - W[a, b, c - 1]) * rf) * rc
                au[ii, jj, k] = ru
                av[ii, jj, k] = rv
                aw[ii, jj, k] = rw


@compiled
def divergence_slab(U, V, W, rx, ry, rz, out, k0, k1):
    """``(U_i - U_i-1) rx + (V_j - V_j-1) ry + (W_k - W_k-1) rz[k]`` at the centres of planes
    ``k0 .. k1-1`` (padded faces in, interior ``out``)."""
    nx, ny = out.shape[0], out.shape[1]
    for k in range(k0, k1):
        c = k + 1
        r = rz[k]
        for jj in range(ny):
            b = jj + 1
            for ii in range(nx):
                a = ii + 1
                out[ii, jj, k] = ((U[a, b, c] - U[a - 1, b, c]) * rx + (V[a, b, c] - V[a, b - 1, c]) * ry
                                  + (W[a, b, c] - W[a, b, c - 1]) * r)


@compiled
def update_slab(f, has_f, P, axis, scale, body, inv_h, c1, a1, c2, a2, nterms, out, k0, k1):
    """``out = [f] + c1 a1 + c2 a2 + scale (body - grad_axis P)`` over planes ``k0 .. k1-1``, the
    first ``nterms`` terms only (``has_f`` false: no ``f``). ``P`` is padded; the gradient on the
    upper faces of ``axis`` is ``(P_up - P) inv_h[k]`` (``inv_h`` the reciprocal spacing per plane)."""
    nx, ny = out.shape[0], out.shape[1]
    di, dj, dk = int(axis == 0), int(axis == 1), int(axis == 2)
    for k in range(k0, k1):
        c = k + 1
        r = inv_h[k]
        for jj in range(ny):
            b = jj + 1
            for ii in range(nx):
                a = ii + 1
                value = scale * (body - (P[a + di, b + dj, c + dk] - P[a, b, c]) * r)
                if nterms > 0:
                    value += c1 * a1[ii, jj, k]
                if nterms > 1:
                    value += c2 * a2[ii, jj, k]
                if has_f:
                    value += f[ii, jj, k]
                out[ii, jj, k] = value


@compiled
def laplacian_slab(A, out, has_out, count, ax0, ax1, ax2, xup, yup, zup, zdown, zero, k0, k1):
    """``out`` (when ``has_out``) plus the second differences of padded ``A`` along the first
    ``count`` of the axes ``ax0, ax1, ax2``, over planes ``k0 .. k1-1``: x and y differences scaled
    by ``xup`` and ``yup``, z ones by ``zup[k]`` above and ``zdown[k]`` below; the operations of the
    array code (:func:`daskflow.ns.operators.laplacian`) in its order and in ``A``'s type (``zero``
    is a zero of that type: a float literal would make the sums float64)."""
    nx, ny = out.shape[0], out.shape[1]
    for k in range(k0, k1):
        c = k + 1
        zu, zd = zup[k], zdown[k]
        for jj in range(ny):
            b = jj + 1
            for ii in range(nx):
                a = ii + 1
                centre = A[a, b, c]
                acc = out[ii, jj, k] if has_out else zero
                for n in range(count):
                    ax = ax0 if n == 0 else (ax1 if n == 1 else ax2)
                    if ax == 0:
                        upper, lower, fu, fd = A[a + 1, b, c], A[a - 1, b, c], xup, xup
                    elif ax == 1:
                        upper, lower, fu, fd = A[a, b + 1, c], A[a, b - 1, c], yup, yup
                    else:
                        upper, lower, fu, fd = A[a, b, c + 1], A[a, b, c - 1], zu, zd
                    term = (upper - centre) * fu
                    acc = term if (n == 0 and not has_out) else acc + term
                    acc = acc - (centre - lower) * fd
                out[ii, jj, k] = acc


@compiled
def copy_interior(a, out, k0, k1):
    """``out[1:-1, 1:-1, k + 1] = a[:, :, k]`` for ``k0 <= k < k1``."""
    nx, ny = a.shape[0], a.shape[1]
    for k in range(k0, k1):
        for jj in range(ny):
            for ii in range(nx):
                out[ii + 1, jj + 1, k + 1] = a[ii, jj, k]
