"""Executors run a pencil algorithm: per-chunk stages and exchanges of pieces between chunks.

An algorithm (for example :mod:`daskflow.poisson.algorithms`) is written once against two
operations on dicts of blocks keyed by chunk index:

* ``map(fn, key_space, *block_dicts)``: ``out[k] = fn(k, a[k], b[k], ...)``, one call per chunk;
* ``exchange(blocks, dests, sources, cut, join)``: every destination ``d`` receives
  ``cut(s, blocks[s], d)`` from each source ``s`` in ``sources(d)`` and combines them with
  ``join(d, pieces)`` (a transpose, a gather of boundary rows, or a scatter back).

:class:`LocalExecutor` runs them eagerly on in-memory arrays (emulating the decomposition in one
process); the Dask executor turns every call into tasks.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Any

Key = Hashable


class LocalExecutor:
    """Run stages immediately in this process (NumPy or CuPy blocks)."""

    def map(self, fn: Callable[..., Any], keys: Iterable[Key], *blocks: Mapping[Key, Any]) -> dict:
        return {k: fn(k, *(b[k] for b in blocks)) for k in keys}

    def exchange(
        self,
        blocks: Mapping[Key, Any],
        dests: Iterable[Key],
        sources: Callable[[Key], list[Key]],
        cut: Callable[[Key, Any, Key], Any],
        join: Callable[[Key, list[Any]], Any],
    ) -> dict:
        return {d: join(d, [cut(s, blocks[s], d) for s in sources(d)]) for d in dests}
