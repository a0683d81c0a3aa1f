"""Executors run a pencil algorithm: fused per-chunk stages and exchanges of pieces.

An algorithm (for example :mod:`daskflow.poisson.algorithms`) is written once against two
operations on dicts of blocks keyed by chunk index. A *chain* is a list of stage functions
``fn(plan, key, x, *extras)`` applied in order inside one task.

* ``map(chain, keys, blocks, extras=())``: ``out[k] = chain(blocks[k], *(e[k] for e in extras))``;
* ``exchange(blocks, dests, sources, cut, join, extras=())``: destination ``d`` receives
  ``cut(plan, s, blocks[s], d)`` from every ``s`` in ``sources(d)`` and runs the chain ``join`` on
  the list of pieces (a transpose, a gather of boundary rows); with ``join=None`` the list itself is
  the result, for a later ``map`` to consume (a scatter).

:class:`LocalExecutor` runs them eagerly on in-memory arrays (emulating the decomposition in one
process); :class:`daskflow.pencils.graph.DaskExecutor` turns every call into tasks.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence

Key = Hashable


def run_chain(plan, key, chain: Sequence[Callable], x, *extras):
    """Apply the stage functions of ``chain`` in order to ``x`` (the body of one task)."""
    for fn in chain:
        x = fn(plan, key, x, *extras)
    return x


class LocalExecutor:
    """Run stages immediately in this process (NumPy or CuPy blocks)."""

    def __init__(self, plan) -> None:
        self.plan = plan

    def map(self, chain, keys: Iterable[Key], blocks: Mapping, extras: Sequence[Mapping] = ()) -> dict:
        return {k: run_chain(self.plan, k, chain, blocks[k], *(e[k] for e in extras)) for k in keys}

    def exchange(self, blocks: Mapping, dests: Iterable[Key], sources: Callable[[Key], list],
                 cut: Callable, join, extras: Sequence[Mapping] = ()) -> dict:
        out = {}
        for d in dests:
            pieces = [cut(self.plan, s, blocks[s], d) for s in sources(d)]
            extra = (e[d] for e in extras)
            out[d] = pieces if join is None else run_chain(self.plan, d, join, pieces, *extra)
        return out
