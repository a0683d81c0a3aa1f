"""The store writes of a run, in the order they were asked for: on a thread of their own while the
time loop goes on, or at once in the caller's thread.

A run of one pencil hands its writes (record appends, snapshots, checkpoints and the commits
between them) to a :class:`WriteQueue` in the background: on a small grid on a GPU, a checkpoint or
a snapshot costs zarr a few hundred file operations, as long as tens of steps. The writes run one
at a time on one thread, in submission order, so the store goes through the same states as when
the loop waits for each. At most :attr:`WriteQueue.depth` writes wait at a time (each holds host
copies of what it writes): a loop that outpaces the store waits for the oldest. A failed write
fails the run at the next submission, or when the queue is drained at the end of a segment; the
writes queued after it do not run (a checkpoint written after a lost record would make a restart
skip that record for good).
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

logger = logging.getLogger(__name__)


class WriteQueue:
    """Writes (callables without arguments) run in submission order: on one thread of the queue's
    own when ``background``, else at once in :meth:`submit`."""

    depth = 3  # writes waiting at most (each may hold a snapshot's host copies)

    def __init__(self, background: bool) -> None:
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="daskflow-store") if background else None
        self._waiting: collections.deque[Future] = collections.deque()
        self._failed = False  # a write failed: the later ones are skipped

    @property
    def background(self) -> bool:
        return self._pool is not None

    def submit(self, write: Callable[[], None]) -> None:
        """Run ``write`` after every write submitted before it; an earlier write's failure is
        raised here first."""
        if self._pool is None:
            write()
            return
        self._collect(block=False)
        while len(self._waiting) >= self.depth:  # the loop runs ahead of the store: wait for the oldest
            self._waiting.popleft().result()
        self._waiting.append(self._pool.submit(self._unless_failed, write))

    def _unless_failed(self, write: Callable[[], None]) -> None:
        if self._failed:
            return
        try:
            write()
        except BaseException:
            self._failed = True
            raise

    def drain(self) -> None:
        """Wait until every submitted write is done; the first failure among them is raised."""
        self._collect(block=True)

    def close(self, raise_errors: bool = True) -> None:
        """Drain, then end the thread. Without ``raise_errors`` (a run already failing) a write's
        failure is logged instead, so that it does not hide the run's own error."""
        try:
            self.drain()
        except Exception:
            if raise_errors:
                raise
            logger.exception("daskflow: a store write failed while the run was stopping")
        finally:
            if self._pool is not None:
                self._pool.shutdown(wait=True)
                self._pool = None
                self._waiting.clear()

    def _collect(self, block: bool) -> None:
        while self._waiting and (block or self._waiting[0].done()):
            self._waiting.popleft().result()
