"""Pencil decompositions of a 3-D field and the pieces a transpose moves.

Chunks are stored in memory order ``(z, y, x)`` (x contiguous, z slowest), the layout that makes
the x and y transforms run on contiguous lines and the z sweeps coalesced. A decomposition
``pencils = (py, pz)`` has three layouts, each a grid of ``py x pz`` chunks indexed ``(p, q)``:

* ``x``-pencils (home): all x; y split in ``py``, z split in ``pz``.
* ``y``-pencils: all y; spectral x split in ``py``, z split in ``pz`` (the x->y transpose exchanges
  pieces inside each group of chunks with the same ``q``).
* ``z``-pencils (FTM only): all z; spectral x split in ``py``, spectral y split in ``pz`` (the
  y->z transpose exchanges inside each group with the same ``p``).

Uneven splits follow ``numpy.array_split``: the first ``n % parts`` parts get one more point.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


def split_sizes(n: int, parts: int) -> tuple[int, ...]:
    """Sizes of ``parts`` nearly equal pieces of ``n`` points (larger pieces first)."""
    base, extra = divmod(n, parts)
    return tuple(base + (i < extra) for i in range(parts))


def pencil_chunks(shape, pencils) -> tuple[tuple[int, ...], ...]:
    """Logical Dask chunks of x-pencils: one chunk along x, ``pencils = (py, pz)`` over y and z."""
    nx, ny, nz = shape
    return ((nx,), split_sizes(ny, pencils[0]), split_sizes(nz, pencils[1]))


def chunk_owner(key, workers: Sequence[str], pz: int) -> str:
    """The participant owning chunk ``key = (p, q)``: chunks are dealt round-robin in ``(p, q)``
    order (the one placement rule of every pencil layout, backend and store)."""
    p, q = key
    return workers[(p * pz + q) % len(workers)]


def split_slices(n: int, parts: int) -> tuple[slice, ...]:
    """The index ranges of :func:`split_sizes` as slices."""
    out, start = [], 0
    for size in split_sizes(n, parts):
        out.append(slice(start, start + size))
        start += size
    return tuple(out)


@dataclass(frozen=True)
class Decomposition:
    """Chunk ranges of the three pencil layouts for stored shape ``(nx, ny, nz)``.

    ``spectral = (nxs, nys)`` are the lengths of x and y after the forward transforms.
    """

    shape: tuple[int, int, int]
    spectral: tuple[int, int]
    pencils: tuple[int, int]

    @property
    def py(self) -> int:
        return self.pencils[0]

    @property
    def pz(self) -> int:
        return self.pencils[1]

    @property
    def indices(self) -> list[tuple[int, int]]:
        return [(p, q) for p in range(self.py) for q in range(self.pz)]

    @property
    def y(self) -> tuple[slice, ...]:
        """Physical y ranges of the x-pencils (index p)."""
        return split_slices(self.shape[1], self.py)

    @property
    def z(self) -> tuple[slice, ...]:
        """z ranges of x- and y-pencils (index q)."""
        return split_slices(self.shape[2], self.pz)

    @property
    def xs(self) -> tuple[slice, ...]:
        """Spectral x ranges of y- and z-pencils (index p)."""
        return split_slices(self.spectral[0], self.py)

    @property
    def ys(self) -> tuple[slice, ...]:
        """Spectral y ranges of z-pencils (index q)."""
        return split_slices(self.spectral[1], self.pz)

    @property
    def reduced(self) -> tuple[slice, ...]:
        """Spectral y ranges of the P-TDMA reduced-system tasks of each x group (index s): ``pz``
        slices, or one per y mode when there are fewer modes than ``pz``."""
        return split_slices(self.spectral[1], min(self.pz, self.spectral[1]))

    def reduced_indices(self) -> list[tuple[int, int]]:
        return [(p, s) for p in range(self.py) for s in range(len(self.reduced))]

    def check(self, method: str) -> None:
        """Raise ``ValueError`` when a chunk of some layout would be empty (or too thin)."""
        nx, ny, nz = self.shape
        nxs, nys = self.spectral
        py, pz = self.pencils
        limits = {"py": (py, min(ny, nxs), "ny and the number of x modes"),
                  "pz": (pz, min(nz, nys) if method == "ftm" else nz,
                         "nz and the number of y modes" if method == "ftm" else "nz")}
        for name, (value, limit, what) in limits.items():
            if value > limit:
                raise ValueError(f"pencils: {name} = {value} exceeds {limit} (min of {what}); "
                                 f"every chunk needs at least one point")
        if method == "ptdma" and min(s.stop - s.start for s in self.z) < 2:
            raise ValueError(
                f"pencils: P-TDMA needs at least two z points per chunk; pz = {pz} splits nz = {nz} "
                f"into {split_sizes(nz, pz)} (use method='ftm' or a smaller pz)"
            )


def cut(block, axis: int, piece: slice):
    """The piece ``piece`` of ``block`` along memory ``axis`` (contiguous copy: it travels)."""
    index = [slice(None)] * block.ndim
    index[axis] = piece
    return block[tuple(index)].copy()


def cut_swapped(block, piece: slice):
    """The columns ``piece`` of ``block`` ``(n0, n1, n2)`` (along axis 2) with axes 1 and 2 swapped:
    a contiguous ``(n0, len(piece), n1)`` copy (it travels, and arrives in the other memory order).
    ``piece`` may run past either end of axis 2, which is then periodic (rows that wrap around a
    periodic y): a negative start wraps, it does not count from the end as in indexing."""
    return swap_into(block, piece)


def swap_into(block, piece: slice, out=None):
    """The columns ``piece`` of ``block`` ``(n0, n1, n2)`` (as :func:`cut_swapped` takes them) with
    its last two axes swapped, written into ``out`` ``(n0, len(piece), n1)`` (any strides; by
    default a new contiguous array), which is returned. On the GPU one launch of the tiled kernel,
    wrapped columns included."""
    from daskflow.backend import is_cupy_array

    if is_cupy_array(block):
        from daskflow.pencils.kernels import swap_last_axes

        return swap_last_axes(block, out, columns=piece)
    from daskflow.pencils.kernels import wrapped_range

    first, period, count = wrapped_range(piece, block.shape[2])
    view = block[:, :, first:first + count] if not period else block.take(
        np.arange(first, first + count) % period, axis=2)
    if out is None:
        return np.ascontiguousarray(view.swapaxes(1, 2))
    out[...] = view.swapaxes(1, 2)
    return out


@dataclass(frozen=True, eq=False)
class SwappedPiece:
    """A piece of :func:`cut_swapped` not copied yet: a participant's piece for itself, which
    :func:`assemble` writes straight into its place of the chunk it assembles (one copy instead of
    a cut and a concatenation). ``block`` is the source chunk, which must not change before the
    assembly, ``piece`` its columns."""

    block: object
    piece: slice

    @property
    def shape(self) -> tuple[int, int, int]:
        n0, n1, _ = self.block.shape
        return (n0, self.piece.stop - self.piece.start, n1)


def cut_swapped_local(block, piece: slice) -> SwappedPiece:
    """:func:`cut_swapped` for the participant itself: the piece as a :class:`SwappedPiece` (its
    columns checked now, as a cut checks them, not when it is assembled)."""
    from daskflow.pencils.kernels import wrapped_range

    wrapped_range(piece, block.shape[2])
    return SwappedPiece(block, piece)


def _write_into(piece, target) -> None:
    """``target[...] = piece``, a deferred piece swapped straight into it."""
    if isinstance(piece, SwappedPiece):
        swap_into(piece.block, piece.piece, target)
    else:
        target[...] = piece


def assemble(pieces, axis: int, out=None):
    """Concatenate pieces along memory ``axis`` into one contiguous chunk (into ``out`` where
    given); a :class:`SwappedPiece` is swapped straight into its place."""
    from daskflow.backend import array_module

    if not any(isinstance(p, SwappedPiece) for p in pieces):
        return array_module(pieces[0]).concatenate(pieces, axis=axis, out=out)
    if out is None:
        shape = list(pieces[0].shape)
        shape[axis] = sum(p.shape[axis] for p in pieces)
        first = pieces[0].block if isinstance(pieces[0], SwappedPiece) else pieces[0]
        out = array_module(first).empty(tuple(shape), dtype=first.dtype)
    start = 0
    for piece in pieces:
        index = [slice(None)] * out.ndim
        index[axis] = slice(start, start + piece.shape[axis])
        start += piece.shape[axis]
        _write_into(piece, out[tuple(index)])
    return out
