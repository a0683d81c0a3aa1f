"""Implicit diffusion along z: ``(I - alpha L_z) x = b`` for every (x, y) column of a velocity
component. This module knows the velocity's operators; the solves, in one pencil or across the
``pz`` pencils of a column group, are the shared-matrix z solves of :mod:`daskflow.zsolve.shared`
"""

from __future__ import annotations

import functools

import numpy as np

from daskflow import stencils
from daskflow.bc import Boundaries
from daskflow.grid import Grid
from daskflow.ns.boundaries import FlowBoundaries
from daskflow.stencils import Tridiagonal


def scaled_z_operator(bcs: FlowBoundaries, grid: Grid, component: int, alpha: float) -> Tridiagonal:
    """``I - alpha L_z`` for one velocity component (its z BC and placement)."""
    c = bcs.components[component]
    op = _z_laplacian(c.pairs[2], c.stagger(component)[2], np.asarray(grid.dzf, dtype=np.float64).tobytes())
    return Tridiagonal(-alpha * op.lower, 1.0 - alpha * op.diag, -alpha * op.upper, op.periodic)


@functools.lru_cache(maxsize=64)
def _z_laplacian(pair: str, placement: str, widths: bytes) -> Tridiagonal:
    """The 1-D z Laplacian of a component's z BC ``pair`` and ``placement`` on the cell widths
    ``widths`` (float64 bytes): the same at every substep, while ``alpha`` changes with the step
    size (callers scale it into new arrays; it is never changed in place)."""
    return stencils.laplacian_1d(np.frombuffer(widths), pair, placement, Boundaries.face_neumann(2))


def no_unknowns(bcs: FlowBoundaries, grid: Grid, component: int, axes) -> bool:
    """Whether velocity ``component`` has no unknowns along one of ``axes``: a bounded axis of one
    cell normal to it, whose only stored face is the wall (the implicit solves leave it alone)."""
    c = bcs.components[component]
    b = Boundaries.parse(c.pairs, c.stagger(component))
    return any(b.n_unknowns(axis, grid.shape[axis]) < 1 for axis in axes)
