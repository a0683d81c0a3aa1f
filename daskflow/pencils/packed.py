"""The packed protocol of the links that move raw buffers (NCCL, UCX): an exchange's pieces
flattened (:mod:`daskflow.pencils.wire`), described to their receivers in a header round, then moved
in one payload round, or, for a collective exchange (a transpose), through the link's own buffers
on the copy engines (NCCL's all-to-all, :mod:`daskflow.pencils.copy_engine`, or one-sided copies,
:mod:`daskflow.pencils.ipc`).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from daskflow.pencils import wire
from daskflow.pencils.link import Link, PeerAborted


class PackedTransport:
    """An exchange over a :class:`Link`: one header round, then one payload round. At a
    fixed-layout ``site`` only the first exchange of a run has a header round: later ones size the
    receive buffers from its description and post the payload alone, so they cost no host wait. A
    collective site may move through the link's own buffers instead (:meth:`_collective_slot`).
    :meth:`abort` (from the worker's event loop) waits for an exchange in progress to notice the
    abort and leave the link, so the link is never torn down under a call into it."""

    KEEP_RUNS = 64  # runs remembered for aborts (the newest)
    KEEP_SITES = 512  # fixed-layout sites whose layouts are remembered (the most recently used)

    def __init__(self, name: str, link: Link, ranks: dict[str, int], me: str, timeout: float,
                 aborted: Callable[[str], bool]) -> None:
        self.name, self.link, self.ranks, self.me = name, link, ranks, me
        self.overlaps = getattr(link, "overlaps", False)  # post returns before the pieces move
        self.timeout, self._aborted = timeout, aborted
        self.book = wire.SpecBook()
        self.runs: list[str] = []  # runs that used it: aborting one of them aborts the link
        # site -> (specs sent per peer, (spec, host values) received per peer, the link's slot or 0) of
        # fixed-layout sites, the most recently used last (every participant makes the same calls:
        # the same entries)
        self._layouts: OrderedDict[str, tuple[dict, dict, int]] = OrderedDict()
        self.dead = False
        self._in_link = threading.Lock()  # held while a call into the link is in progress
        self._state = threading.Lock()

    @property
    def capturable(self) -> bool:
        """Whether a CUDA graph capture can record its exchanges (fixed-layout sites: no host wait):
        the link's say."""
        return getattr(self.link, "capturable", False)

    def join(self, run: str) -> None:
        """Note that ``run`` uses this communicator here: aborting it aborts the communicator."""
        with self._state:
            if self.dead:
                raise self._dead_error()
            self.runs = [*self.runs[-self.KEEP_RUNS + 1:], run]

    def _dead_error(self) -> PeerAborted:
        return PeerAborted(f"daskflow exchange: the {self.name} communicator was aborted by a failed run (a peer "
                           "task failed); its participants build a new one for the next run")

    def exchange(self, outgoing, incoming, run: str, site: str | None = None, collective: bool = False) -> dict:
        return self.complete(self.post(outgoing, incoming, run, site, overlap=False, collective=collective))

    def complete(self, posted: Posted) -> dict:
        """The pieces of a :meth:`post`, once the link has them (a wait on the device for NCCL)."""
        if posted.collective:
            self.link.collective_wait(posted.token)
        elif posted.token is not None:
            self.link.payload_wait(posted.token)
        return posted.pieces

    def post(self, outgoing, incoming, run: str, site: str | None = None, overlap: bool = True,
             collective: bool = False) -> Posted:
        """:meth:`exchange` up to the payload, which a link that :attr:`overlaps` moves while the
        caller goes on (with ``overlap``); :meth:`complete` hands over the pieces. Posts complete
        in the order they were made, before the next exchange. A ``collective`` exchange at a
        fixed-layout site goes through the link's own buffers where the link takes it
        (:meth:`_collective_slot`)."""
        out: dict = {}
        to_peer: dict[int, list] = {}
        for address, tag, piece in outgoing:
            if address == self.me:
                out[tag] = piece
            else:
                to_peer.setdefault(self.ranks[address], []).append((tag, piece))
        from_peer: dict[int, list] = {}
        for address, tag in incoming:
            if address != self.me:
                from_peer.setdefault(self.ranks[address], []).append(tag)
        flat, sends = {}, []
        for peer, items in sorted(to_peer.items()):
            flat[peer] = [wire.flatten(piece, self.link.is_device) for _, piece in sorted(items, key=lambda i: i[0])]
            sends.extend((peer, leaf) for _, device, _ in flat[peer] for leaf in device if leaf.nbytes)
        if site is not None and any(host for pieces in flat.values() for _, _, host in pieces):
            raise ValueError(f"daskflow exchange {site}: pieces of a fixed-layout site carry no host values")
        known = None if site is None else self._layouts.get(site)
        abort = lambda: self._aborted(run) or self.dead  # noqa: E731
        with self._in_link:
            if self.dead:
                raise self._dead_error()
            if known is None:
                layouts = self._describe(flat, from_peer, abort)
                slot = 0
                if site is not None:  # no host values at a site: the layouts alone size the next rounds
                    if collective and hasattr(self.link, "collective_slot"):
                        slot = self._collective_slot(flat, layouts, abort)
                    self._layouts[site] = (_specs(flat), layouts, slot)
                    while len(self._layouts) > self.KEEP_SITES:
                        self._layouts.popitem(last=False)
            else:
                self._layouts.move_to_end(site)
                if _specs(flat) != known[0]:  # its receivers size their buffers by the first description
                    raise RuntimeError(f"daskflow exchange {site}: the pieces' layouts changed since this site first "
                                       "ran (a fixed-layout site must send the same structure, shapes and dtypes "
                                       "every time)")
                layouts, slot = known[1], known[2]
            if slot:
                return self._post_collective(out, flat, from_peer, layouts, slot)
            recvs = []
            for peer, tags in sorted(from_peer.items()):
                for tag, (spec, host) in zip(sorted(tags), layouts[peer], strict=True):
                    leaves = [self.link.empty(*layout) for layout in wire.device_layouts(spec)]
                    recvs.extend((peer, leaf) for leaf in leaves if leaf.nbytes)
                    out[tag] = wire.unflatten(spec, leaves, host)
            if overlap and self.overlaps:
                return Posted(out, self.link.payload_post(sends, recvs), sends)
            self.link.payload_round(sends, recvs, abort, self.timeout)
        return Posted(out)

    def _collective_slot(self, flat: dict, layouts: dict, abort: Callable[[], bool]) -> int:
        """The bytes per peer of the link's buffers that carry a collective site from now on, agreed
        by every rank the first time it describes the site (:meth:`Link.collective_slot`; the ranks
        of a site's groups all describe it at once); 0 (point to point) where the link's transport
        is unusable on any of them. The count of peers goes with the sizes: the link's transports
        suit different ones."""
        sizes = [[leaf.nbytes for _, device, _ in pieces for leaf in device] for pieces in flat.values()]
        sizes += [[wire.layout_nbytes(layout) for spec, _ in entries for layout in wire.device_layouts(spec)]
                  for entries in layouts.values()]
        return self.link.collective_slot(sizes, len(set(flat) | set(layouts)), abort, self.timeout)

    def _post_collective(self, out: dict, flat: dict, from_peer: dict, layouts: dict, slot: int) -> Posted:
        """The payload of a collective site through the link's buffers of ``slot`` bytes per peer:
        the received pieces are views of them, valid until the caller's next exchange."""
        sends = {peer: [leaf for _, device, _ in pieces for leaf in device] for peer, pieces in flat.items()}
        expected = {peer: [layout for spec, _ in entries for layout in wire.device_layouts(spec)]
                    for peer, entries in layouts.items()}
        received, token = self.link.collective_post(sends, expected, slot)
        for peer, tags in sorted(from_peer.items()):
            leaves = iter(received[peer])
            for tag, (spec, host) in zip(sorted(tags), layouts[peer], strict=True):
                out[tag] = wire.unflatten(spec, [next(leaves) for _ in wire.device_layouts(spec)], host)
        return Posted(out, token, collective=True)  # the pieces were copied into the window on the compute stream

    def _describe(self, flat: dict, from_peer: dict, abort: Callable[[], bool]) -> dict:
        """The header round: every peer's pieces described (numbered specs and host values) to it;
        returns ``{peer: [(spec, host values)]}`` of the pieces to receive, in tag order."""
        headers = {peer: wire.encode_header([(*self.book.describe(peer, spec), host) for spec, _, host in pieces])
                   for peer, pieces in flat.items()}
        received = self.link.header_round(headers, sorted(from_peer), abort, self.timeout)
        layouts = {}
        for peer, tags in sorted(from_peer.items()):
            entries = wire.decode_header(received[peer])
            if len(entries) != len(tags):
                raise RuntimeError(f"daskflow exchange: rank {peer} sent {len(entries)} pieces, {len(tags)} "
                                   "expected (the workers' exchange sequences differ)")
            layouts[peer] = [(self.book.resolve(peer, number, described), host) for number, described, host in entries]
        return layouts

    def finish(self) -> None:
        pass  # stream-ordered: the pieces are ready for whatever runs next on the compute stream

    def abort(self) -> None:
        """Stop the link for good (a peer failed or is gone). An exchange in progress polls for the
        abort and leaves within a few milliseconds; past a few seconds the link is stopped anyway,
        which is what unblocks a call that waits for a lost peer."""
        with self._state:
            if self.dead:
                return
            self.dead = True
        locked = self._in_link.acquire(timeout=5.0)
        try:
            self.link.abort()
        finally:
            if locked:
                self._in_link.release()


@dataclass
class Posted:
    """A posted exchange: its pieces by tag, the link's token to wait for (``None``: there) and the
    buffers sent, held until then (a stream-ordered pool would reuse them while the link reads)."""

    pieces: dict
    token: object = None
    sent: list = field(default_factory=list, repr=False)
    collective: bool = False  # moved through the link's buffers (its token also returns them)


def _specs(flat: dict) -> dict:
    """The specs of the flattened pieces to each peer, in order (what a header describes)."""
    return {peer: [spec for spec, _, _ in pieces] for peer, pieces in flat.items()}
