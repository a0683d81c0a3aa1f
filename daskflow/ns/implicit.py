"""Implicit diffusion along z: ``(I - alpha L_z) x = b`` for every (x, y) column of a velocity
component. This module knows the velocity's operators; the solves, in one pencil or across the
``pz`` pencils of a column group, are the shared-matrix z solves of :mod:`daskflow.zsolve.shared`
"""

from __future__ import annotations

from daskflow.bc import Boundaries
from daskflow.grid import Grid
from daskflow.ns.boundaries import FlowBoundaries
from daskflow.stencils import Tridiagonal


def scaled_z_operator(bcs: FlowBoundaries, grid: Grid, component: int, alpha: float) -> Tridiagonal:
    """``I - alpha L_z`` for one velocity component (its z BC and placement)."""
    c = bcs.components[component]
    op = Boundaries.parse(c.pairs, c.stagger(component)).laplacian_1d(2, grid.dzf)
    return Tridiagonal(-alpha * op.lower, 1.0 - alpha * op.diag, -alpha * op.upper, op.periodic)


def no_unknowns(bcs: FlowBoundaries, grid: Grid, component: int, axes) -> bool:
    """Whether velocity ``component`` has no unknowns along one of ``axes``: a bounded axis of one
    cell normal to it, whose only stored face is the wall (the implicit solves leave it alone)."""
    c = bcs.components[component]
    b = Boundaries.parse(c.pairs, c.stagger(component))
    return any(b.n_unknowns(axis, grid.shape[axis]) < 1 for axis in axes)
