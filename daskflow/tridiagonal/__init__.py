"""Tridiagonal kernels: Thomas (plain and cyclic), factorised per-column systems, and the local
cyclic reduction of the parallel tridiagonal algorithm (seed paper Algorithms 1 and 2). The solves
along z built on them, in one chunk or across chunks, are :mod:`daskflow.zsolve`'s."""

from daskflow.tridiagonal.cyclic_reduction import (
    ReducedChunk,
    along_rows,
    boundary_rows,
    precompute,
    reconstruct,
    reconstruct_rows,
    reduce,
    reduce_reference,
    reduce_rows,
    reduced_system,
)
from daskflow.tridiagonal.thomas import FactoredTridiagonal, addable_along_rows, solve_rows_in_place, solve_shifted

__all__ = [
    "FactoredTridiagonal",
    "ReducedChunk",
    "addable_along_rows",
    "along_rows",
    "boundary_rows",
    "precompute",
    "reconstruct",
    "reconstruct_rows",
    "reduce",
    "reduce_reference",
    "reduce_rows",
    "reduced_system",
    "solve_rows_in_place",
    "solve_shifted",
]
