"""The reduced system of a column group: the ``pz`` chunks that share z columns, each adding its
first and last row (one row for a chunk of one, none for a chunk of no unknown)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from daskflow import tridiagonal


def column_group(pz: int) -> Callable[[tuple], list[tuple]]:
    """``sources(d)``: the chunks with the x/y range of chunk ``d = (p, q)`` (they share z columns)."""
    return lambda d: [(d[0], q) for q in range(pz)]


def reduced_offsets(rows: Sequence[slice]) -> np.ndarray:
    """Where each chunk's boundary rows lie in the stacked reduced system: chunk ``q``, holding
    unknown rows ``rows[q]``, owns ``offsets[q]:offsets[q + 1]``; length ``pz + 1``."""
    return np.cumsum([0, *(tridiagonal.boundary_rows(max(r.stop - r.start, 0)) for r in rows)])


def factor_reduced(chunks: Sequence[tridiagonal.ReducedChunk], periodic: bool) -> tridiagonal.FactoredTridiagonal:
    """The factorised reduced system of the chunks' Algorithm-2 coefficients (in z order):
    ``(R, ncols)`` with ``R`` the chunks' boundary rows; periodic closes it across the ends."""
    return tridiagonal.FactoredTridiagonal.factor(*tridiagonal.reduced_system(list(chunks)), periodic)
