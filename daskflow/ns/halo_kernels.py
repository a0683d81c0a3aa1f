"""CUDA kernels of a pencil's halo round: the pieces its neighbours get, cut from its unpadded
fields (:func:`pack_halo`), and the y and z ghosts of its padded stack filled from the pieces it
received or from the wall rules (:func:`fill_ring`), each in one launch per field or stack, with the
bits of the array code (:func:`daskflow.pencils.halo.cut` of the padded stack,
:func:`daskflow.ns.halos.fill_halos`).
"""

from __future__ import annotations

import numpy as np

from daskflow.backend import device_constant
from daskflow.backend import element_strides as _strides
from daskflow.ns.kernels import _FIELD_OPTIONS, _GHOSTS, _kernel, _launch

_PACK_SOURCE = _GHOSTS + r"""
// The halo pieces of field number f of a stack, straight from the unpadded field a: piece p (bit p of
// want; offsets (oy, oz) in HALO_PIECES order) holds the rows y and planes z that the neighbour at
// (-oy, -oz) gets, x-padded as pad_field pads them (the same values), at [f] of its stack
// (count, nx + 2, ny or 1, nz or 1). blockIdx.y walks x, the flat thread index a piece's (y, z) points.
extern "C" __global__ void pack_halo(const T* a, T* q0, T* q1, T* q2, T* q3, T* q4, T* q5, T* q6, T* q7,
        const int want, const int f, const long long s0, const long long s1, const long long s2, const int nx,
        const int ny, const int nz, const int r0, const int r1, const T w0, const T w1) {{
    const int OY[8] = {{-1, 1, 0, 0, -1, -1, 1, 1}}, OZ[8] = {{0, 0, -1, 1, -1, 1, -1, 1}};
    T* const q[8] = {{q0, q1, q2, q3, q4, q5, q6, q7}};
    const unsigned int t = blockIdx.x * blockDim.x + threadIdx.x;
    for (int i = blockIdx.y; i < nx + 2; i += gridDim.y) {{
        int sx;
        const int x = source(i, nx, r0, r1, sx);
        for (int p = 0; p < 8; ++p) {{
            if (!(want >> p & 1)) continue;
            const int my = OY[p] == 0 ? ny : 1, mz = OZ[p] == 0 ? nz : 1;
            if (t >= (unsigned int)(my * mz)) continue;
            const int jj = t / mz, kk = t - jj * mz;
            const int j = OY[p] < 0 ? ny - 1 : (OY[p] > 0 ? 0 : jj), k = OZ[p] < 0 ? nz - 1 : (OZ[p] > 0 ? 0 : kk);
            const T v = a[x * s0 + j * s1 + k * s2];
            q[p][((long long)f * (nx + 2) + i) * my * mz + t] = ghost(v, sx, r0, r1, w0, w1);
        }}
    }}
}}
"""


HALO_PIECES = ((-1, 0), (1, 0), (0, -1), (0, 1), (-1, -1), (-1, 1), (1, -1), (1, 1))  # the halo kernels' bit order


def pack_halo(arrays: list, x_rules: list[tuple[int, int]], x_walls: list[tuple[float, float]],
              offsets) -> dict:
    """The halo pieces a pencil sends, cut from its unpadded fields: for every ``(oy, oz)`` of
    ``offsets``, the stack ``(count, nx + 2, ny or 1, nz or 1)`` of the fields' planes (faces) or lines
    (edges) that :func:`daskflow.pencils.halo.cut` cuts from the x-padded stack, x-padded by each
    field's ``x_rules`` and ``x_walls`` (lower, upper; as :func:`daskflow.ns.kernels.pad`), with its values. Its
    neighbours can receive them while the padding runs. ``arrays``: CuPy ``(nx, ny, nz)``, any strides."""
    import cupy

    nx, ny, nz = arrays[0].shape
    dtype = arrays[0].dtype
    out = {o: cupy.empty((len(arrays), nx + 2, ny if o[0] == 0 else 1, nz if o[1] == 0 else 1), dtype)
           for o in offsets}
    pieces = [out.get(o, arrays[0]) for o in HALO_PIECES]  # an unwanted piece is never written
    want = sum(1 << bit for bit, o in enumerate(HALO_PIECES) if o in out)
    scalar = np.dtype(dtype).type
    kernel = _kernel(_PACK_SOURCE, "pack_halo", dtype)
    for f, (a, rules, walls) in enumerate(zip(arrays, x_rules, x_walls, strict=True)):
        _launch(kernel, max(ny, nz), nx + 2, (a, *pieces, np.int32(want), np.int32(f), *_strides(a), np.int32(nx),
                                              np.int32(ny), np.int32(nz), *(np.int32(r) for r in rules),
                                              *(scalar(w) for w in walls)))
    return out


_HALO_SOURCE = r"""
typedef {T} T;
__device__ __forceinline__ T wall(const T v, const int rule, const T w) {{  // ghost_rule: 1 copy, 2 mirror, 3 wall
    return rule == 3 ? w : (rule == 2 ? T(2) * w - v : v);
}}

// The y ghost of row r (= field * (nx + 2) + x index) on side s at the interior z index k (1..nz):
// the received face, else the field's wall rule on its edge row.
__device__ __forceinline__ T y_ghost(const T* S, const T* face, const int got, const long long base,
        const int r, const int s, const int k, const int ny, const int nz, const int rule, const T w) {{
    if (got) return face[(long long)r * nz + k - 1];
    return wall(S[base + (long long)(s ? ny : 1) * (nz + 2) + k], rule, w);
}}

// One thread per ghost point of the (y, z) ring of a padded x row (2 nz y ghosts on the interior z,
// then each z ghost plane's ny + 2 points, or on a side z_done marks (bit 0 lower, bit 1 upper) only
// its 2 points on the y ghost rows: the padding set the rest by the same rules), the rows of every
// field on blockIdx.y. Each
// value comes from a received piece or the field's wall rules, y before z, as fill_halos makes it;
// a z-wall ghost beside a y ghost computes that y ghost itself (another thread writes it).
extern "C" __global__ void fill_ring(T* S, const T* y0, const T* y1, const T* z0, const T* z1,
        const T* e00, const T* e01, const T* e10, const T* e11, const int got, const int* rules,
        const T* walls, const int rows, const int nx2, const int ny, const int nz, const int z_done) {{
    const int n0 = (z_done & 1) ? 2 : ny + 2, n1 = (z_done & 2) ? 2 : ny + 2;  // z ghosts per plane written
    const unsigned int ring = 2 * nz + n0 + n1, t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= ring) return;
    const unsigned int pz = nz + 2, plane = (ny + 2) * pz;
    const T* yface[2] = {{y0, y1}};
    const T* zface[2] = {{z0, z1}};
    const T* edge[2][2] = {{{{e00, e01}}, {{e10, e11}}}};  // [y side][z side]
    for (int r = blockIdx.y; r < rows; r += gridDim.y) {{
        const int f = r / nx2;
        const int* rule = rules + 4 * f;  // y lower, y upper, z lower, z upper
        const T* w = walls + 4 * f;
        const long long base = (long long)r * plane;
        if (t < 2 * nz) {{
            const int s = t / nz, k = t - s * nz + 1;
            S[base + (long long)(s ? ny + 1 : 0) * pz + k] =
                y_ghost(S, yface[s], got >> s & 1, base, r, s, k, ny, nz, rule[s], w[s]);
            continue;
        }}
        const int u = t - 2 * nz, s = u >= n0 ? 1 : 0, i = u - s * n0;
        const int j = (z_done >> s & 1) ? i * (ny + 1) : i, k = s ? nz + 1 : 0;
        const int ys = j == 0 ? 0 : 1, y_interior = j >= 1 && j <= ny;
        T v;
        if (got >> (2 + s) & 1) {{
            const T* face = zface[s] + (long long)r * ny;
            if (y_interior) v = face[j - 1];
            else if (got >> (4 + 2 * ys + s) & 1) v = edge[ys][s][r];
            else v = wall(face[ys ? ny - 1 : 0], rule[ys], w[ys]);
        }} else {{
            const int ke = s ? nz : 1;
            const T e = y_interior ? S[base + (long long)j * pz + ke]
                                   : y_ghost(S, yface[ys], got >> ys & 1, base, r, ys, ke, ny, nz, rule[ys], w[ys]);
            v = wall(e, rule[2 + s], w[2 + s]);
        }}
        S[base + (long long)j * pz + k] = v;
    }}
}}
"""


def fill_ring(stack, rules: list[int], walls: list[float], received: dict,
              z_done: tuple[bool, bool] = (False, False)) -> None:
    """The y and z ghosts of the C-contiguous padded stack ``(count, nx + 2, ny + 2, nz + 2)`` (its
    x ghosts and interior set; on the z sides ``z_done`` marks, lower and upper, also the z ghosts of
    its interior y rows, by the padding kernel) in one launch, as
    :func:`daskflow.ns.halos.fill_halos` sets them:
    ``received[(oy, oz)]`` the neighbours' faces ``(count, nx + 2, 1, nz)`` / ``(count, nx + 2, ny,
    1)`` and edges ``(count, nx + 2, 1, 1)``; a side without its piece follows ``rules`` (per field
    y lower, y upper, z lower, z upper: :func:`daskflow.ns.operators.ghost_rule`, never a wrap) and
    ``walls`` (the wall values, same order)."""
    import cupy

    count, nx2, ny2, nz2 = stack.shape
    pieces = [received.get(key) for key in HALO_PIECES]
    got = sum(1 << bit for bit, piece in enumerate(pieces) if piece is not None)
    pieces = [stack if p is None else cupy.ascontiguousarray(p) for p in pieces]
    dtype = stack.dtype
    kernel = _kernel(_HALO_SOURCE, "fill_ring", dtype, _FIELD_OPTIONS)
    ring = 2 * (nz2 - 2) + sum(2 if done else ny2 for done in z_done)
    done = sum(1 << side for side, d in enumerate(z_done) if d)
    _launch(kernel, ring, count * nx2,
            (stack, *pieces, np.int32(got), device_constant(cupy, rules, np.int32), device_constant(cupy, walls, dtype),
             np.int32(count * nx2), np.int32(nx2), np.int32(ny2 - 2), np.int32(nz2 - 2), np.int32(done)))
