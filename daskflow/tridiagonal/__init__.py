"""Tridiagonal kernels: Thomas (plain and cyclic), factorised per-column systems, and the local
cyclic reduction of the parallel tridiagonal algorithm (seed paper Algorithms 1 and 2). The solves
along z built on them, in one chunk or across chunks, are :mod:`daskflow.zsolve`'s."""

from daskflow.tridiagonal.cyclic_reduction import (
    ReducedChunk,
    boundary_rows,
    precompute,
    reconstruct,
    reduce,
    reduce_reference,
    reduced_system,
)
from daskflow.tridiagonal.thomas import FactoredTridiagonal, solve_rows_in_place, solve_shifted

__all__ = [
    "FactoredTridiagonal",
    "ReducedChunk",
    "boundary_rows",
    "precompute",
    "reconstruct",
    "reduce",
    "reduce_reference",
    "reduced_system",
    "solve_rows_in_place",
    "solve_shifted",
]
