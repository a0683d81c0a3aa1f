"""Boundary conditions and staggering of a Poisson/Helmholtz problem.

A boundary condition per axis is a two-letter string (lower end, upper end) of P (periodic),
N (homogeneous Neumann) and D (homogeneous Dirichlet). Periodicity must be on both ends; the
eigenfunction expansion along x and y additionally needs the pairs PP, NN, DD, ND or DN, which is
every legal pair, so one list serves all three axes.

A placement per axis is ``c`` (unknowns at cell centres, boundaries half a cell away on the
faces) or ``f`` (unknowns on faces, the boundary on a point). For ``f`` on a bounded axis the last
stored point is the upper boundary face: a boundary value, except for a Neumann end along z, where
the second-order closure makes it an unknown (see :mod:`daskflow.stencils`).
"""

from __future__ import annotations

from dataclasses import dataclass

from daskflow import stencils

AXES = ("x", "y", "z")
BC_PAIRS = ("PP", "NN", "DD", "ND", "DN")
PLACEMENTS = ("c", "f")


def _parse_bc(bc: object) -> tuple[str, str, str]:
    if isinstance(bc, str) or not hasattr(bc, "__len__") or len(bc) != 3:
        raise ValueError(
            f"bc must be three two-letter strings, one per axis (x, y, z), from {BC_PAIRS}; got {bc!r}"
        )
    out = []
    for axis, pair in zip(AXES, bc, strict=True):
        pair = str(pair).upper()
        if pair not in BC_PAIRS:
            raise ValueError(
                f"bc for axis {axis} must be one of {BC_PAIRS} (lower, upper end; P, N, D), got {pair!r}"
            )
        out.append(pair)
    return tuple(out)


def _parse_stagger(stagger: object) -> tuple[str, str, str]:
    if not isinstance(stagger, str) or len(stagger) != 3 or any(s not in PLACEMENTS for s in stagger):
        raise ValueError(
            f"stagger must be three letters, one per axis (x, y, z), each in {PLACEMENTS}; got {stagger!r}"
        )
    return tuple(stagger)


@dataclass(frozen=True)
class Boundaries:
    """Validated ``bc`` and ``stagger`` of a problem, one entry per axis."""

    bc: tuple[str, str, str]
    stagger: tuple[str, str, str]

    @classmethod
    def parse(cls, bc: object, stagger: object = "ccc") -> Boundaries:
        return cls(_parse_bc(bc), _parse_stagger(stagger))

    def periodic(self, axis: int) -> bool:
        return self.bc[axis] == "PP"

    @staticmethod
    def face_neumann(axis: int) -> str:
        """Neumann closure for face unknowns: the seed's copy along x and y (what the fast
        transforms diagonalise), second order along z."""
        return "second_order" if axis == 2 else "copy"

    def n_unknowns(self, axis: int, n: int) -> int:
        """Unknowns along ``axis`` with ``n`` stored points."""
        return stencils.n_unknowns(n, self.bc[axis], self.stagger[axis], self.face_neumann(axis))

    def laplacian_1d(self, axis: int, widths):
        """The 1-D Laplacian along ``axis`` with this axis's BC, placement and closure."""
        return stencils.laplacian_1d(widths, self.bc[axis], self.stagger[axis], self.face_neumann(axis))

    def control_widths(self, axis: int, widths):
        """Volume weights of the unknowns along ``axis``."""
        return stencils.control_widths(widths, self.bc[axis], self.stagger[axis], self.face_neumann(axis))

    @property
    def singular(self) -> bool:
        """True when the Laplacian has a null space (no Dirichlet end on any axis)."""
        return all("D" not in pair for pair in self.bc)
