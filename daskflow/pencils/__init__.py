"""Pencil layouts, transposes between them, and the executors that run per-chunk stages."""

from daskflow.pencils.layout import Decomposition, pencil_chunks, split_sizes, split_slices

__all__ = ["Decomposition", "pencil_chunks", "split_sizes", "split_slices"]
