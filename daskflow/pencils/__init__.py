"""Pencil layouts, transposes between them, and the executors that run per-chunk stages."""

from daskflow.pencils.layout import Decomposition, split_sizes, split_slices

__all__ = ["Decomposition", "split_sizes", "split_slices"]
