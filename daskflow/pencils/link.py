"""The interfaces under every exchange: a :class:`Transport` moves the pieces of one exchange, a
:class:`Link` moves raw buffers between the ranks of a communicator (NCCL, UCXX), and
:class:`PeerAborted` is what a participant raises when a peer's failure ended its wait."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any, Protocol


def exchange_timeout() -> float:
    """Seconds an exchange waits for a peer's piece (dask config ``daskflow.exchange-timeout``)."""
    from daskflow import settings

    return settings.get("exchange-timeout")


class PeerAborted(RuntimeError):
    """A run was aborted because a peer task failed (or its communicator was): not the root cause."""


class Transport(Protocol):
    name: str

    def exchange(self, outgoing: list[tuple[str, Hashable, Any]], incoming: list[tuple[str, Hashable]],
                 run: str, site: str | None = None, collective: bool = False) -> dict:
        """Move the pieces of one exchange of ``run``. ``site`` names a fixed-layout call site: every
        exchange with that name, in this run or a later one, sends pieces of the same layouts, so a
        transport may describe them to the receivers once. ``collective``: every participant of
        the exchange's groups sends to every other and the caller copies what it receives before
        its next exchange (a transpose), so a transport may move it as one all-to-all."""

    def finish(self) -> None:
        ...

    def abort(self) -> None:
        ...


class Link(Protocol):
    """Raw transfers between the ranks of a communicator (an NCCL pair of communicators, say)."""

    def header_round(self, send: dict[int, bytes], recv_from: Sequence[int], abort: Callable[[], bool],
                     timeout: float) -> dict[int, bytes]:
        """Bytes to and from peers; returns once every expected header is on the host."""

    def payload_round(self, sends: list[tuple[int, Any]], recvs: list[tuple[int, Any]], abort: Callable[[], bool],
                      timeout: float) -> None:
        """Send and receive raw buffers, matched per peer in list order (stream-ordered or waited for)."""

    # A link that can move a payload while the computation goes on also has ``overlaps = True`` and
    # ``payload_post(sends, recvs) -> token`` / ``payload_wait(token)`` (:class:`~daskflow.pencils.nccl.NcclLink`).
    # A link that can move a collective exchange through buffers of its own also has
    # ``collective_slot(sizes, peers, abort, timeout) -> slot``, ``collective_post(sends, layouts,
    # slot) -> (received, token)`` and ``collective_wait(token)`` (the copy engines: NCCL's
    # all-to-all, or one-sided IPC copies).

    def empty(self, shape: tuple, dtype: str, order: str) -> Any:
        """A receive buffer."""

    def is_device(self, x: Any) -> bool:
        """Whether ``x`` travels in the payload round (else pickled into the header)."""

    def abort(self) -> None:
        ...
