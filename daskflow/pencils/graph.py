"""Dask task graphs for pencil algorithms: one task per chunk per fused stage, one per piece.

:class:`DaskExecutor` implements the executor interface of :mod:`daskflow.pencils.executor` by
writing tasks into a dict graph instead of running them. Every task gets a home worker:

* a stage task of chunk ``(p, q)`` runs on the worker that owns chunk ``(p, q)``;
* a piece task runs where its source block lives, so a pencil moves only as pieces of a transpose,
  as boundary rows of the P-TDMA gather, or as solved rows of the scatter.

Placement is applied when the graph is submitted (:func:`placement_annotations`): Dask's graph
optimisation drops per-layer annotations, so they are given as global callables at persist time.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence

from daskflow.pencils.executor import run_chain, transpose_whole

_counter = itertools.count()


def live_workers(client, expected: int = 1, settle: float = 10.0) -> list[str]:
    """Sorted addresses of the client's workers, once there is at least one (a cluster still
    starting has none; waits up to 120 s). The scheduler's view can lag behind workers that are
    registering, so a list shorter than ``expected`` is asked again for up to ``settle`` seconds."""
    import time

    client.wait_for_workers(1, timeout=120)
    deadline = time.monotonic() + settle
    while True:
        workers = sorted(client.scheduler_info(n_workers=-1)["workers"])
        if (workers and len(workers) >= expected) or time.monotonic() > deadline:
            return workers
        time.sleep(0.05)


def scatter_per_worker(client, obj, workers: Sequence[str]) -> dict:
    """One copy of ``obj`` on each of ``workers``, each under its own key: ``{worker: Future}``.

    A broadcast scatter (one key, a replica per worker) does not stay put: distributed's Active
    Memory Manager drops the replicas no queued task waits for, and the next solve on that worker
    then fetches the object over the network again. Keys that exist once are never dropped."""
    return {worker: client.scatter(obj, workers=[worker], hash=False) for worker in workers}


class DaskExecutor:
    """Build the graph of an algorithm run.

    ``plan`` is a reference to the plan in the graph (a key, or ``{worker: Future}`` from
    :func:`scatter_per_worker`, each task then reading its own worker's copy), ``token`` makes keys
    unique per run, ``owner(key)`` gives a chunk's worker (``None``: no placement) and
    ``block_index(key)`` the Dask-array block index of a chunk's output key (x-pencils: ``(0, p, q)``).
    """

    def __init__(self, plan, token: str, owner: Callable | None = None,
                 block_index: Callable = lambda k: (0, *k)) -> None:
        self.plan = plan
        self.block_index = block_index  # chunk (p, q) -> index of its output key in a Dask array
        self.token = token
        self.owner = owner
        self.graph: dict = {}
        self.placement: dict = {}
        self.layer_names: list[str] = []

    def _name(self, label: str) -> str:
        name = f"daskflow-{label}-{self.token}-{next(_counter)}"
        self.layer_names.append(name)
        return name

    def _plan(self, chunk_key):
        return self.plan[self.owner(chunk_key)] if isinstance(self.plan, Mapping) else self.plan

    def _place(self, task_key, chunk_key) -> None:
        if self.owner is not None:
            self.placement[task_key] = self.owner(chunk_key)

    def map(self, chain, keys, blocks: Mapping, extras: Sequence[Mapping] = ()) -> dict:
        name = self._name(chain[-1].__name__.replace("_", "-"))
        out = {}
        for k in keys:
            task_key = (name, *self.block_index(k))
            self.graph[task_key] = (run_chain, self._plan(k), k, list(chain), blocks[k], *(e[k] for e in extras))
            self._place(task_key, k)
            out[k] = task_key
        return out

    def slabs(self) -> int:
        return 1  # a transpose is one exchange of tasks (the scheduler overlaps what it can)

    transpose = transpose_whole

    def exchange(self, blocks: Mapping, dests, sources: Callable, cut: Callable, join,
                 extras: Sequence[Mapping] = (), site: str | None = None, collective: bool = False) -> dict:
        piece_name = self._name(cut.__name__.replace("_", "-"))
        join_name = None if join is None else self._name(join[-1].__name__.replace("_", "-"))
        out = {}
        for d in dests:
            pieces = []
            for s in sources(d):
                piece_key = (piece_name, *s, *d)
                self.graph[piece_key] = (cut, self._plan(s), s, blocks[s], d)
                self._place(piece_key, s)
                pieces.append(piece_key)
            if join is None:
                out[d] = pieces
                continue
            task_key = (join_name, *self.block_index(d))
            self.graph[task_key] = (run_chain, self._plan(d), d, list(join), pieces, *(e[d] for e in extras))
            self._place(task_key, d)
            out[d] = task_key
        return out


def placement_annotations(placement: Mapping, workers: Sequence[str]) -> dict:
    """Global ``dask.annotate`` arguments pinning the keys of ``placement`` to their workers."""
    everywhere = list(workers)
    return {
        "workers": lambda key: placement.get(key, everywhere),
        "allow_other_workers": lambda key: key not in placement,
    }
