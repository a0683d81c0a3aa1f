"""A team: the participants of a pencil decomposition emulated by the threads of one process.

Each participant runs exactly the code a cluster worker runs inside its fused task (a flow domain,
an algorithm through a :class:`~daskflow.pencils.executor.DirectExecutor`); its exchanges go
through a :class:`TeamTransport` into a :class:`Board` shared by the team. Any ``(py, pz)``
(halos with edges and corners, transposes, reduced systems, reductions) therefore runs, and is
tested, in one process; an in-process simulation with several pencils runs this way.

A piece is copied when it is posted, as a wire would: the receiver owns what it gets and the sender
may overwrite its buffers as soon as the exchange returns. A participant's deferred piece for
itself (:class:`~daskflow.pencils.layout.SwappedPiece`) passes as it is: the same thread joins it
within the same exchange, before its source can change. NumPy kernels release the GIL, so the
threads overlap where the work is large; the team is for correctness and emulation, a cluster is
for speed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Sequence
from typing import Any, TypeVar

from daskflow.backend import array_module
from daskflow.pencils.link import PeerAborted, exchange_timeout

T = TypeVar("T")


def _copied(piece: Any) -> Any:
    """``piece`` with every NumPy/CuPy array in it copied (tuples, lists and dicts walked)."""
    if isinstance(piece, dict):
        return {k: _copied(v) for k, v in piece.items()}
    if isinstance(piece, (list, tuple)):
        return type(piece)(_copied(v) for v in piece)
    if hasattr(piece, "__array_interface__") or hasattr(piece, "__cuda_array_interface__"):
        return array_module(piece).array(piece, copy=True)
    return piece


class Board:
    """The pieces posted by a team's participants and not yet taken; an abort (a participant failed)
    ends every wait at once."""

    def __init__(self) -> None:
        self._items: dict = {}
        self._aborted = False
        self._ready = threading.Condition()

    def post(self, tag: Hashable, piece: Any) -> None:
        with self._ready:
            self._items[tag] = piece
            self._ready.notify_all()

    def take(self, tags: Sequence[Hashable], timeout: float) -> list:
        """Remove and return the pieces of ``tags`` in order, waiting for the missing ones."""
        with self._ready:
            ready = self._ready.wait_for(lambda: self._aborted or all(t in self._items for t in tags), timeout)
            if self._aborted:
                raise PeerAborted("daskflow exchange: the team's run was aborted (a participant failed)")
            if not ready:
                missing = [t for t in tags if t not in self._items]
                raise TimeoutError(f"daskflow exchange: pieces {missing[:4]} were not posted in {timeout} s "
                                   "(dask config daskflow.exchange-timeout)")
            return [self._items.pop(t) for t in tags]

    def abort(self) -> None:
        with self._ready:
            self._aborted = True
            self._items.clear()
            self._ready.notify_all()

    def reset(self) -> None:
        """Ready for the next run (after every participant of an aborted one has returned)."""
        with self._ready:
            self._aborted = False
            self._items.clear()


class TeamTransport:
    """The transport of one participant of a :class:`Team` (see :mod:`daskflow.pencils.transport`
    for the interface)."""

    name = "team"

    def __init__(self, board: Board, timeout: float) -> None:
        self.board, self.timeout = board, timeout
        self.rounds = 0  # exchanges made: every one is a round of the run, however small

    def exchange(self, outgoing, incoming, run: str, site: str | None = None, collective: bool = False) -> dict:
        self.rounds += 1
        for _, tag, piece in outgoing:
            self.board.post(tag, _copied(piece))
        tags = [tag for _, tag in incoming]
        return dict(zip(tags, self.board.take(tags, self.timeout), strict=True))

    def finish(self) -> None:
        pass

    def abort(self) -> None:
        self.board.abort()


class Team:
    """``size`` participants named ``members[i]``, each with its own :class:`TeamTransport` over one
    board. :meth:`run` runs one body per participant, each in a thread of its own (with one
    participant: in the calling thread)."""

    def __init__(self, size: int, timeout: float | None = None) -> None:
        if size < 1:
            raise ValueError(f"a team needs at least one participant, got {size}")
        self.members = [f"team-{i}" for i in range(size)]
        self.board = Board()
        timeout = exchange_timeout() if timeout is None else timeout
        self.transports = {me: TeamTransport(self.board, timeout) for me in self.members}

    def run(self, body: Callable[[int], T]) -> list[T]:
        """``[body(0), ..., body(size - 1)]``, run concurrently. If a participant raises, the others'
        exchanges are aborted and the first error that is not the abort itself is raised here."""
        if len(self.members) == 1:
            return [body(0)]
        results: list = [None] * len(self.members)
        errors: list = [None] * len(self.members)

        def participant(i: int) -> None:
            try:
                results[i] = body(i)
            except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread below
                errors[i] = exc
                self.board.abort()

        threads = [threading.Thread(target=participant, args=(i,), name=f"daskflow-{me}", daemon=True)
                   for i, me in enumerate(self.members)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        failed = [e for e in errors if e is not None]
        if failed:
            self.board.reset()
            raise next((e for e in failed if not isinstance(e, PeerAborted)), failed[0])
        return results
