"""Python's cyclic garbage collector on the workers that run fused (collective) tasks.

A full collection (generation 2) walks every object the interpreter tracks. A worker that has run
its first fused task holds a few hundred thousand of them: the modules of distributed, NumPy,
CuPy and daskflow, and the worker's own state. Walking them takes 40-110 ms (a 2-core CPU host;
90-120 ms on the 4 x H100 host, ``docs/performance.md``). A pause inside a collective run stalls
every peer at its next exchange, and in chained fused solves one came every 10-20 solves, adding
4-9 ms to each.

Nearly all of those objects live as long as the process. :func:`settle`, called when a fused task
ends, collects once and moves what survives to the permanent generation (:func:`gc.freeze`), so
that later full collections walk only objects created since. It does so after the worker's first
fused task and again after any task during which a full collection took longer than
:data:`SLOW_COLLECTION` (new code imported, a new simulation's state). Frozen objects are never
collected as cycles, so only objects that have just survived a full collection are frozen.

Only workers that a nanny started settle their collector: they run in a process of their own. A
worker inside the client's process (``LocalCluster(processes=False)``, a notebook) leaves the
user's interpreter as it is.
"""

from __future__ import annotations

import gc
import threading
import time

SLOW_COLLECTION = 0.005  # seconds: a full collection this long means there is a lot to freeze


class _FullCollections:
    """A :data:`gc.callbacks` entry that notes whether a full collection has been slow since the
    last :func:`settle` (``due``; true before the first one)."""

    def __init__(self) -> None:
        self.due = True
        self._started: float | None = None

    def __call__(self, phase: str, info: dict) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            self._started = time.perf_counter()
        elif self._started is not None:
            if time.perf_counter() - self._started > SLOW_COLLECTION:
                self.due = True
            self._started = None


_watch: _FullCollections | None = None
_lock = threading.Lock()


def watch() -> _FullCollections:
    """This process's watch of full collections (registered in :data:`gc.callbacks` at first use)."""
    global _watch
    with _lock:
        if _watch is None:
            _watch = _FullCollections()
            gc.callbacks.append(_watch)
        return _watch


def settle(worker) -> bool:
    """At the end of a fused task on ``worker``: collect and freeze the survivors when it is due
    (see the module docstring); returns whether it did. A no-op for a worker without a nanny."""
    if getattr(worker, "nanny", None) is None:
        return False
    due = watch()
    with _lock:
        if not due.due:
            return False
        gc.collect()
        gc.freeze()
        due.due = False  # the collection just made was slow by design: it does not count
    return True
