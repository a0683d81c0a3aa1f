"""Local cyclic reduction of the parallel tridiagonal algorithm (P-TDMA), seed paper §2.2.

A chunk holds rows ``0..m-1`` of a longer tridiagonal system; row 0 couples to the previous
chunk's last row and row ``m-1`` to the next chunk's first row. The reduction rewrites every
interior row as ``a_k x_0 + b_k x_k + c_k x_{m-1} = d_k`` so that only the two boundary rows leave
the chunk; after the boundary values are known the interior is reconstructed in place.

* :func:`reduce_reference` is the paper's Algorithm 1 (coefficients and right-hand side reduced
  together, rows normalised to a unit diagonal), kept as the reference.
* :func:`precompute`, :func:`reduce`, :func:`reconstruct` are Algorithm 2: the coefficients
  ``(a, c, 1/b)`` depend on the column only through the diagonal shift and are computed once;
  at run time only ``d`` changes, with no scratch copies of ``a`` or ``c``. On the GPU, where they
  differ per column, the kernels recompute them as they sweep instead of reading three arrays the
  size of the data (:class:`ReducedChunk`). A shift of one value
  gives coefficients of one column, ``(m, 1)``, shared by every column of ``d`` (the z-implicit
  diffusion solves, whose matrix is the same in every column): set-up is then O(m) on the host
  and holds no field-sized arrays.
* :func:`reduce_rows`, :func:`reconstruct_rows`: the same reduction along the z rows of a C-ordered
  GPU field for such a shared matrix, in two sweeps instead of three: the reduction is linear in
  ``d``, so the first row's reduced value is a weighted sum the forward sweep accumulates, and the
  reconstruction is the backward sweep itself.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from daskflow.backend import array_module, compiled_loops, is_cupy_array, upload_together
from daskflow.tridiagonal import cpu_kernels, kernels
from daskflow.tridiagonal.thomas import columns_view, rows_addend


def boundary_rows(m: int) -> int:
    """Rows a chunk of ``m`` rows contributes to the reduced system (0, 1 or 2)."""
    return min(m, 2)


class ReducedChunk(NamedTuple):
    """Precomputed Algorithm-2 coefficients of one chunk, arrays ``(m, ncols)`` (float64, or the
    solver's working precision once :meth:`in_precision` has cast them).

    ``boundary_lower/diag/upper`` are the chunk's rows of the reduced system, shape
    ``(1 or 2, ncols)``: the first row (coupling to the previous chunk and the own last row) and,
    for ``m >= 2``, the last row (coupling to the own first row and the next chunk).

    On the GPU, coefficients that differ per column (a shift per column: the spectral solves) are
    not kept as ``(m, ncols)`` arrays, which a solve would read three times over: ``a``, ``c`` and
    ``inv_b`` are ``None``, and the kernels recompute them with the set-up's arithmetic from the
    rows ``lower``, ``diag``, ``upper``, the ``shift`` and ``entering``, the forward recurrence's
    ``b`` and ``a`` entering every segment of :data:`~daskflow.tridiagonal.kernels.SEGMENT` rows,
    ``(nseg, 2, ncols)`` (all float64).

    One column (a matrix shared by every column) also keeps what the two-sweep kernels along rows
    need (:func:`reduce_rows`): ``forward_a``, the forward recurrence's ``a`` (before the backward
    one changes it), and ``first_weights``, the weights that give the first row's reduced
    right-hand side from the chunk's right-hand side, ``d''_0 = sum_k w_k d_k``; both ``(m, 1)``.
    """

    a: object
    c: object
    inv_b: object
    lower: object  # the original 1-D coefficients of the chunk's rows, length m
    upper: object
    boundary_lower: object
    boundary_diag: object
    boundary_upper: object
    diag: object = None
    shift: object = None
    entering: object = None
    forward_a: object = None
    first_weights: object = None

    @property
    def rows(self) -> int:
        """The chunk's rows ``m``."""
        return len(self.lower)

    def to(self, xp) -> ReducedChunk:
        """These NumPy coefficients on ``xp``'s device in one transfer
        (:func:`~daskflow.backend.upload_together`); NumPy: themselves."""
        if xp is np:
            return self
        present = [name for name in self._fields if getattr(self, name) is not None]
        moved = upload_together(xp, [getattr(self, name) for name in present])
        return self._replace(**dict(zip(present, moved, strict=True)))

    def in_precision(self, real) -> ReducedChunk:
        """The coefficients the data meets, in the working precision ``real``; what the kernels
        recompute coefficients from stays float64."""
        names = ["a", "c", "inv_b", "boundary_lower", "boundary_diag", "boundary_upper", "forward_a", "first_weights"]
        if self.entering is None:
            names += ["lower", "upper"]
        return self._replace(**{n: getattr(self, n).astype(real, copy=False) for n in names
                                if getattr(self, n) is not None})


def precompute(lower, diag, upper, shift) -> ReducedChunk:
    """Algorithm 2, step 1, for 1-D row coefficients (length m) and a per-column diagonal ``shift``.
    One NumPy column (a matrix shared by every column: the z-implicit diffusion, set up again at
    every solve whose time step changed) runs the recurrence in Python floats, with the same bits
    and without a NumPy call per row. Several CuPy columns keep only what the kernels recompute the
    coefficients from (:class:`ReducedChunk`)."""
    xp = array_module(shift)
    one = xp is np and np.size(shift) == 1
    if one:
        A, B, C = (np.asarray(v, dtype=np.float64).tolist() for v in (lower, diag, upper))
        s, m = float(np.ravel(shift)[0]), len(A)
        a, b, c = [0.0] * m, [0.0] * m, [0.0] * m
    else:
        A, B, C = (xp.asarray(v, dtype=np.float64) for v in (lower, diag, upper))
        s = xp.asarray(shift, dtype=np.float64).reshape(-1)
        m, ncols = A.size, s.size
        a, b, c = xp.zeros((m, ncols)), xp.empty((m, ncols)), xp.zeros((m, ncols))
    recomputed = xp is not np and s.size > 1
    _forward(A, B, C, s, a, b)
    entering = _entering(xp, a, b) if recomputed else None
    forward_a, weights = (list(a) if one else None), None  # the rows kernels' coefficients: one column only
    _backward(A, B, C, s, a, b, c)
    if one:
        weights = _first_row_weights(A, C, b)
        A, C = np.array(A), np.array(C)
        a, b, c, forward_a, weights = (np.array(v)[:, None] for v in (a, b, c, forward_a, weights))
    bl = xp.stack([a[0] * 0 + A[0]] + ([a[m - 1]] if m >= 2 else []))
    bd = b[boundary_slice(m)].copy()
    bu = xp.stack([c[0]] + ([c[m - 1] * 0 + C[m - 1]] if m >= 2 else []))
    if recomputed:
        return ReducedChunk(None, None, None, A, C, bl, bd, bu, B, s, entering)
    return ReducedChunk(a, c, 1.0 / b, A, C, bl, bd, bu, forward_a=forward_a, first_weights=weights)


def _first_row_weights(A: list, C: list, b: list) -> list:
    """The weights ``w`` (length m, Python floats) of the first row's reduced right-hand side as a
    sum over the chunk's right-hand side, ``d''_0 = sum_k w_k d_k``: Algorithm 2's reduction is
    linear in ``d``, so its backward sweep's last value is one weighted sum, which a single forward
    pass accumulates as it goes (:func:`reduce_rows`). ``b`` is the set-up's (rows ``k >= 1`` of
    the forward recurrence). The backward sweep gives ``d''_0`` the weight ``v_k`` on the forward
    values ``d'_k`` (``v_0 = 1``, ``v_k = -C_{k-1} v_{k-1} / b_k`` up to row ``m - 2``); the forward
    sweep's adjoint carries them back to ``d`` (``w_k = v_k - A_{k+1} w_{k+1} / b_k``, rows
    ``k >= 1``; row 0 does not enter the forward sweep)."""
    m = len(A)
    v = [0.0] * m
    v[0] = 1.0
    for k in range(1, m - 1):
        v[k] = -C[k - 1] / b[k] * v[k - 1]
    w = list(v)
    for k in range(m - 3, 0, -1):
        w[k] = v[k] - A[k + 1] / b[k] * w[k + 1]
    return w


def _entering(xp, a, b):
    """The forward recurrence's ``b`` and ``a`` (rows ``(m, ncols)``, before the backward one changes
    ``a``) of the row before every segment of ``SEGMENT`` rows, ``(nseg, 2, ncols)``; the first
    segment needs none, nor a segment beyond row ``m - 2`` (zeros)."""
    m, ncols = b.shape
    segments = -(-m // kernels.SEGMENT)
    out = xp.zeros((segments, 2, ncols))
    before = [j * kernels.SEGMENT - 1 for j in range(1, segments) if j * kernels.SEGMENT - 1 <= m - 2]
    if before:
        out[1:1 + len(before), 0] = b[before]
        out[1:1 + len(before), 1] = a[before]
    return out


def _forward(A, B, C, s, a, b) -> None:
    """The set-up recurrence of Algorithm 2, its forward part, into ``a, b`` (length m): rows of
    arrays (an entry per column; O(m) vector operations) or Python floats (one column). The GPU
    kernels that recompute it (``forward_row``) follow this arithmetic."""
    m = len(A)
    a[0], b[0] = A[0], B[0] + s
    if m >= 2:
        a[1], b[1] = A[1], B[1] + s
        for k in range(2, m):
            inv = 1.0 / b[k - 1]  # one division per row (a kernel recomputing this runs it per value)
            b[k] = B[k] + s - A[k] * C[k - 1] * inv
            a[k] = -A[k] * a[k - 1] * inv


def _backward(A, B, C, s, a, b, c) -> None:
    """The rest of the set-up recurrence, after :func:`_forward`: ``c``, and ``a`` and ``b[0]``
    changed backwards."""
    m = len(A)
    c[0] = C[0]
    if m >= 2:
        c[m - 1], c[m - 2] = C[m - 1], C[m - 2]
        for k in range(m - 3, 0, -1):
            inv = 1.0 / b[k + 1]
            a[k] = a[k] - C[k] * a[k + 1] * inv
            c[k] = -C[k] * c[k + 1] * inv
        a[0] = A[0]
        if m >= 3:
            inv = 1.0 / b[1]
            b[0] = B[0] + s - C[0] * a[1] * inv
            c[0] = -C[0] * c[1] * inv


def reduce(d, chunk: ReducedChunk):
    """Algorithm 2, step 2: reduce ``d`` of shape ``(m, *cols)`` in place; returns its boundary rows.

    The result has shape ``(1 or 2, *cols)``: the reduced right-hand side of the first and last row.
    What the interior holds is for :func:`reconstruct` alone: with coefficients recomputed on the GPU
    (:class:`ReducedChunk`) the reduction makes one sweep (the first row's value a sum accumulated
    along it) and leaves the forward values, which the reconstruction sweeps back.
    """
    xp = array_module(d)
    m = d.shape[0]
    x = columns_view(d)
    if chunk.entering is not None:
        _recomputed("cr_reduce_shifted", x, chunk, x)
        return d[boundary_slice(m)].copy()
    real = x.real.dtype
    lower, upper, inv_b = (xp.asarray(v, dtype=real) for v in (chunk.lower, chunk.upper, chunk.inv_b))
    ccols = _coefficient_columns(inv_b, x)
    if is_cupy_array(d):
        kernels.launch("cr_reduce", x.dtype, x.shape[1], x, lower, upper, inv_b,
                       np.int32(m), np.int64(x.shape[1]), np.int64(ccols))
    elif compiled_loops():
        cpu_kernels.by_columns(cpu_kernels.cr_reduce, x, lower, upper, inv_b, per_column=(2,) if ccols > 1 else ())
    else:
        for k in range(2, m):
            x[k] -= lower[k] * x[k - 1] * inv_b[k - 1]
        for k in range(m - 3, -1, -1):
            x[k] -= upper[k] * x[k + 1] * inv_b[k + 1]
    return d[boundary_slice(m)].copy()


def boundary_slice(m: int) -> slice:
    """The boundary rows of a chunk of ``m`` rows, as a slice: the first, and the last where ``m > 1``.
    A slice, not a list of indices: CuPy copies an index list to the GPU at every use, which a CUDA
    graph capture refuses (:mod:`daskflow.ns.graphs`)."""
    return slice(0, 1) if m == 1 else slice(0, m, m - 1)


def _recomputed(name: str, x, chunk: ReducedChunk, *data) -> None:
    """Run kernel ``name`` on columns ``x`` ``(m, ncols)`` of a chunk whose coefficients the kernel
    recomputes (:class:`ReducedChunk`), ``data`` its first arguments."""
    m, ncols = x.shape
    if chunk.shift.size != ncols or chunk.rows != m:
        raise ValueError(f"coefficients of {chunk.rows} rows and {chunk.shift.size} columns cannot serve "
                         f"{m} rows and {ncols} columns")
    inputs = (chunk.lower, chunk.diag, chunk.upper, chunk.shift, chunk.entering)
    if any(v.dtype != np.float64 or not v.flags.c_contiguous for v in inputs):
        raise ValueError("recomputed coefficients need their rows, shift and entering values as C-contiguous "
                         "float64 arrays (ReducedChunk.in_precision keeps them so)")
    kernels.launch(name, x.dtype, ncols, *data, chunk.lower, chunk.diag, chunk.upper, chunk.shift, chunk.entering,
                   np.int32(m), np.int64(ncols))


def _coefficient_columns(coefficients, x) -> int:
    """Columns of a chunk's ``(m, ccols)`` coefficients for the ``(m, ncols)`` data ``x``: 1 (one
    matrix for every column) or ``ncols``; anything else is a caller's error, refused before a
    kernel reads out of bounds."""
    ccols = coefficients.shape[1]
    if ccols not in (1, x.shape[1]):
        raise ValueError(f"coefficients for {ccols} columns cannot serve {x.shape[1]} columns")
    return ccols


def reconstruct(d, first, last, chunk: ReducedChunk):
    """Algorithm 2, step 4: fill the interior of reduced ``d`` in place from the boundary values.

    ``first`` and ``last`` have shape ``cols`` (the solved unknowns of rows 0 and m-1).
    """
    xp = array_module(d)
    m = d.shape[0]
    x = columns_view(d)
    real = x.real.dtype
    x0 = xp.ascontiguousarray(first, dtype=x.dtype).reshape(-1)
    xl = xp.ascontiguousarray(last, dtype=x.dtype).reshape(-1)
    if chunk.entering is not None:
        _recomputed("cr_reconstruct_shifted", x, chunk, x, x0, xl)
        return d
    a, c, inv_b = (xp.asarray(v, dtype=real) for v in (chunk.a, chunk.c, chunk.inv_b))
    ccols = _coefficient_columns(inv_b, x)
    if is_cupy_array(d):
        kernels.launch("cr_reconstruct", x.dtype, x.shape[1], x, x0, xl, a, c, inv_b,
                       np.int32(m), np.int64(x.shape[1]), np.int64(ccols))
    elif compiled_loops():
        cpu_kernels.by_columns(cpu_kernels.cr_reconstruct, x, x0, xl, a, c, inv_b,
                               per_column=(0, 1, 2, 3, 4) if ccols > 1 else (0, 1))
    else:
        x[1 : m - 1] = (x[1 : m - 1] - a[1 : m - 1] * x0 - c[1 : m - 1] * xl) * inv_b[1 : m - 1]
        x[0] = x0
        x[m - 1] = xl
    return d


def along_rows(field, m: int, chunk: ReducedChunk) -> bool:
    """Whether :func:`reduce_rows` and :func:`reconstruct_rows` serve the first ``m`` values of
    every row of ``field``: a C-contiguous real CuPy array ``(..., n >= m)`` and one matrix shared by
    every row (``chunk`` of one coefficient column, with its ``first_weights``). A C-ordered GPU
    field is then reduced along its z rows with no transposed copy of it into columns and back."""
    return (is_cupy_array(field) and field.dtype.kind == "f" and field.flags.c_contiguous and m > 0
            and field.shape[-1] >= m and chunk.first_weights is not None)


def _row_coefficients(field, chunk: ReducedChunk, names: tuple[str, ...]) -> list:
    xp = array_module(field)
    return [xp.ascontiguousarray(xp.asarray(getattr(chunk, n), dtype=field.dtype).ravel()) for n in names]


def reduce_rows(field, m: int, chunk: ReducedChunk, geometry: dict | None = None):
    """:func:`reduce` of the first ``m`` values of every row of ``field`` (:func:`along_rows`), in
    place, in one sweep: the forward values are stored (the same bits as :func:`reduce`'s forward
    half, and the last row's reduced value with them) and the first row's reduced value is its
    weighted sum (:class:`ReducedChunk` ``first_weights``: the same value up to rounding). The
    interior is left for :func:`reconstruct_rows`, which alone can read it. Returns the boundary
    rows ``(1 or 2, rows)`` (rows in C order of ``field``'s leading axes). ``geometry`` overrides
    the kernel's tiles (:data:`~daskflow.tridiagonal.row_kernels.GEOMETRY`)."""
    stride = field.shape[-1]
    nrows = field.size // stride
    lower, inv_b, weights = _row_coefficients(field, chunk, ("lower", "inv_b", "first_weights"))
    kernels.launch("cr_reduce_rows", field.dtype, nrows, field, lower, inv_b, weights, np.int32(m),
                   np.int64(nrows), np.int64(stride), geometry=geometry)
    rows = field.reshape(nrows, stride)
    return rows[:, boundary_slice(m)].T.copy()


def reconstruct_rows(field, first, last, m: int, chunk: ReducedChunk, addend=None, geometry: dict | None = None):
    """The solution of the first ``m`` values of every row of ``field`` reduced by
    :func:`reduce_rows`, from the solved boundary values ``first`` and ``last`` (one per row): the
    backward sweep of the stored forward values, in place; returns ``field``. With
    :func:`reduce_rows`, two sweeps in all, as a local Thomas solve makes. With ``addend``
    (:func:`~daskflow.tridiagonal.thomas.rows_addend`) the values leave as ``addend + x``;
    ``geometry`` as :func:`reduce_rows`'s."""
    xp = array_module(field)
    stride = field.shape[-1]
    nrows = field.size // stride
    x0, xl = (xp.ascontiguousarray(v, dtype=field.dtype).reshape(-1) for v in (first, last))
    forward_a, upper, inv_b = _row_coefficients(field, chunk, ("forward_a", "upper", "inv_b"))
    kernels.launch("cr_reconstruct_rows", field.dtype, nrows, field, x0, xl, forward_a, upper, inv_b, np.int32(m),
                   np.int64(nrows), np.int64(stride), *rows_addend(field, addend), geometry=geometry)
    return field


def reduced_system(chunks: list[ReducedChunk]):
    """Stack the chunks' boundary rows (in z order) into one tridiagonal system per column.

    Returns ``(lower, diag, upper)`` of shape ``(R, ncols)`` with ``R`` the total boundary rows.
    """
    xp = array_module(chunks[0].boundary_diag)
    return tuple(xp.concatenate([getattr(ch, f"boundary_{n}") for ch in chunks])
                 for n in ("lower", "diag", "upper"))


def reduce_reference(a, b, c, d):
    """The paper's Algorithm 1 on full per-column arrays ``(m, ncols)`` (copies; reference only).

    Returns ``(a', c', d')`` of the rows normalised to unit diagonal:
    ``a'_k x_0 + x_k + c'_k x_{m-1} = d'_k`` for interior rows; row 0 keeps its coupling ``a'_0`` to
    the previous chunk and row ``m-1`` its coupling ``c'_{m-1}`` to the next.
    """
    a, b, c, d = (np.array(v, dtype=np.result_type(v, np.float64)) for v in (a, b, c, d))
    m = d.shape[0]
    for k in (0, 1)[: min(m, 2)]:
        a[k], c[k], d[k] = a[k] / b[k], c[k] / b[k], d[k] / b[k]
    for k in range(2, m):
        r = 1.0 / (b[k] - a[k] * c[k - 1])
        d[k] = r * (d[k] - a[k] * d[k - 1])
        c[k] = r * c[k]
        a[k] = -r * a[k] * a[k - 1]
    for k in range(m - 3, 0, -1):
        d[k] = d[k] - c[k] * d[k + 1]
        a[k] = a[k] - c[k] * a[k + 1]
        c[k] = -c[k] * c[k + 1]
    if m >= 3:
        r = 1.0 / (1.0 - a[1] * c[0])
        d[0] = r * (d[0] - c[0] * d[1])
        a[0] = r * a[0]
        c[0] = -r * c[0] * c[1]
    return a, c, d
