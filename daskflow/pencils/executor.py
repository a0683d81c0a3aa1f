"""Executors run a pencil algorithm: fused per-chunk stages and exchanges of pieces.

An algorithm (for example :mod:`daskflow.poisson.algorithms`) is written once against two
operations on dicts of blocks keyed by chunk index. A *chain* is a list of stage functions
``fn(plan, key, x, *extras)`` applied in order inside one task.

* ``map(chain, keys, blocks, extras=())``: ``out[k] = chain(blocks[k], *(e[k] for e in extras))``;
* ``exchange(blocks, dests, sources, cut, join, extras=())``: destination ``d`` receives
  ``cut(plan, s, blocks[s], d)`` from every ``s`` in ``sources(d)`` and runs the chain ``join`` on
  the list of pieces (a transpose, a gather of boundary rows); with ``join=None`` the list itself is
  the result, for a later ``map`` to consume (a scatter). With a ``join``, a participant's pieces
  for itself come from ``cut.local`` where the cut has one (:func:`piece_for_itself`). ``site``
  (optional) names a call site whose pieces have the same layouts (structure, shapes, dtypes; no
  host values) every time it runs: a transport may then describe them only the first time
  (:class:`~daskflow.pencils.packed.PackedTransport`).
  ``collective`` says that within each group of ``sources`` every chunk sends to every other and
  ``join`` copies the pieces it gets (a transpose): a transport may then move the exchange as one
  all-to-all through buffers of its own.
* ``transpose(blocks, keys, sources, head, before, cut, join, after=(), extras=(), site=None)``:
  ``exchange(map([*head, *before], keys, blocks), keys, sources, cut, [*join, *after], extras, site)``
  between the chunks of one z range (memory axis 0 is z on both sides). :class:`DirectExecutor`
  pipelines it in z slabs where its transport moves pieces while the computation goes on
  (:meth:`DirectExecutor.slabs`): ``before``, the cut and ``join`` run per slab, ``head`` and
  ``after`` on whole blocks; ``join``'s last stage takes ``out=``, the slab of the whole result it
  may write into.

:class:`LocalExecutor` runs them eagerly on in-memory arrays (the whole decomposition in one
caller); :class:`DirectExecutor` runs one participant's chunks and moves pieces through a
transport (:mod:`daskflow.pencils.transport`, :mod:`daskflow.pencils.team`);
:class:`daskflow.pencils.graph.DaskExecutor` turns every call into tasks.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from daskflow.backend import array_module
from daskflow.pencils.layout import chunk_owner, split_slices

Key = Hashable


def run_chain(plan, key, chain: Sequence[Callable], x, *extras):
    """Apply the stage functions of ``chain`` in order to ``x`` (the body of one task)."""
    for fn in chain:
        x = fn(plan, key, x, *extras)
    return x


def transpose_whole(ex, blocks: Mapping, keys, sources: Callable, head, before, cut: Callable, join,
                    after=(), extras: Sequence[Mapping] = (), site: str | None = None) -> dict:
    """The transpose of ``ex`` in one exchange (see the module docstring)."""
    keys = list(keys)
    if head or before:
        blocks = ex.map([*head, *before], keys, blocks)
    return ex.exchange(blocks, keys, sources, cut, [*join, *after], extras, site, collective=True)


class LocalExecutor:
    """Run stages immediately in this process (NumPy or CuPy blocks)."""

    def __init__(self, plan) -> None:
        self.plan = plan

    def map(self, chain, keys: Iterable[Key], blocks: Mapping, extras: Sequence[Mapping] = ()) -> dict:
        return {k: run_chain(self.plan, k, chain, blocks[k], *(e[k] for e in extras)) for k in keys}

    def exchange(self, blocks: Mapping, dests: Iterable[Key], sources: Callable[[Key], list],
                 cut: Callable, join, extras: Sequence[Mapping] = (), site: str | None = None,
                 collective: bool = False) -> dict:
        out = {}
        cut = piece_for_itself(cut, joined=join is not None)  # every piece stays in this process
        for d in dests:
            pieces = [cut(self.plan, s, blocks[s], d) for s in sources(d)]
            extra = (e[d] for e in extras)
            out[d] = pieces if join is None else run_chain(self.plan, d, join, pieces, *extra)
        return out

    transpose = transpose_whole

    def slabs(self) -> int:
        return 1


def piece_for_itself(cut: Callable, joined: bool) -> Callable:
    """The cut of a participant's piece for itself: where the pieces are joined while their source
    stays as it is (``joined``: an exchange whose join consumes them at once, or a pipelined
    transpose's posted slabs, joined before their sources change), ``cut.local`` where the cut has
    one (a piece that may be deferred for the join to write into place, e.g.
    :class:`~daskflow.pencils.layout.SwappedPiece`: it never travels, and it holds its source until
    the join), else ``cut``. Pieces not joined that way (a scatter) are cut whole, so that no source
    outlives its exchange."""
    return getattr(cut, "local", cut) if joined else cut


def freeze(key):
    """``key`` with every list turned into a tuple (hashable; pieces' tags are built from keys)."""
    if type(key) is tuple and all(type(k) is int for k in key):
        return key  # a chunk index, the common case: every exchange tags its pieces with them
    return tuple(freeze(k) for k in key) if isinstance(key, (list, tuple)) else key


def run_of(tag) -> str:
    """The run a piece belongs to: the part of its exchange id before any ``/`` suffix."""
    return str(tag[0]).split("/", 1)[0]


def _untimed(phase: str) -> contextlib.AbstractContextManager:
    """The phase clock of an unprofiled run: times nothing."""
    return contextlib.nullcontext()


class DirectExecutor:
    """One participant's part of an algorithm: the chunks ``owner`` assigns to ``me``, its exchanges
    one call each into ``transport`` (every participant makes the same sequence of calls, so pieces
    are matched by ``(run_id, exchange number, source, destination)`` without coordination)."""

    def __init__(self, plan, me: str, run_id: str, owner: Callable[[Key], str], transport,
                 scope: str | None = None, clock: Callable | None = None) -> None:
        self.plan, self.me, self.run_id, self.owner = plan, me, run_id, owner
        self.transport = transport
        # names the layouts of the exchanges' call sites: runs of one scope (the same plan and
        # decomposition) send the same layouts at each site, so they are described once, not per run
        self.scope = scope or run_id
        self.exchanges = 0
        self.waited = 0.0  # seconds inside the transport: waiting for peers and moving pieces
        self.clock: Callable = clock or _untimed  # a profiled run's phase clock (daskflow.profiling)
        self.slab_count: int | None = None  # the caller's z slabs per transpose, else daskflow.transpose-slabs

    def _mine(self, keys) -> list:
        return [k for k in keys if self.owner(k) == self.me]

    def map(self, chain, keys, blocks: Mapping, extras: Sequence[Mapping] = ()) -> dict:
        return {k: run_chain(self.plan, k, chain, blocks[k], *(e[k] for e in extras)) for k in self._mine(keys)}

    def exchange(self, blocks: Mapping, dests, sources: Callable, cut: Callable, join,
                 extras: Sequence[Mapping] = (), site: str | None = None, collective: bool = False) -> dict:
        dests = list(dests)
        xid, received = self._send(blocks, dests, sources, cut, site, post=False, collective=collective,
                                   joined=join is not None)
        return self._joined(xid, received, dests, sources, join, extras)

    def post(self, blocks: Mapping, dests, sources: Callable, cut: Callable, site: str | None = None,
             collective: bool = False, joined: bool = False) -> tuple:
        """:meth:`exchange` with ``join=None``, in two halves: the pieces are cut and handed to the
        transport now, and move while the caller goes on where the transport allows
        (:attr:`~daskflow.pencils.packed.PackedTransport.overlaps`, NCCL's transfer stream);
        :meth:`complete` returns them. The caller keeps what it cut from alive until then, and makes
        no other exchange in between but further posts (the slabs of a transpose). ``joined``: the
        caller also keeps ``blocks`` unchanged until it has joined what :meth:`complete` returns, so
        a participant's pieces for itself may be deferred to the join (:func:`piece_for_itself`)."""
        dests = list(dests)
        overlaps = getattr(self.transport, "overlaps", False)
        xid, moved = self._send(blocks, dests, sources, cut, site, post=overlaps, collective=collective,
                                joined=joined)
        return xid, moved, dests, sources, overlaps

    def complete(self, handle: tuple) -> dict:
        """The received pieces of a :meth:`post`, per destination in ``sources`` order."""
        xid, moved, dests, sources, overlaps = handle
        if overlaps:
            with self.clock("exchange: transport"):
                moved = self.transport.complete(moved)
        return self._joined(xid, moved, dests, sources, None, ())

    def _send(self, blocks: Mapping, dests: list, sources: Callable, cut: Callable, site: str | None,
              post: bool, collective: bool = False, joined: bool = False) -> tuple:
        """Cut and tag this participant's pieces of one exchange and hand them to the transport:
        ``(exchange id, the received pieces by tag)``, or with ``post`` the transport's
        :class:`~daskflow.pencils.packed.Posted` instead of the pieces."""
        self.exchanges += 1
        xid = (self.run_id, self.exchanges)
        outgoing, incoming = [], []
        cut_itself = piece_for_itself(cut, joined)
        with self.clock("exchange: cut pieces"):
            for d in dests:
                receiver = self.owner(d)
                frozen_d = None
                for s in sources(d):
                    sender = self.owner(s)
                    if sender != self.me and receiver != self.me:
                        continue  # a pair between two other participants: nothing to tag here
                    frozen_d = freeze(d) if frozen_d is None else frozen_d
                    tag = (*xid, freeze(s), frozen_d)
                    if sender == self.me:
                        cut_here = cut_itself if receiver == self.me else cut
                        outgoing.append((receiver, tag, cut_here(self.plan, s, blocks[s], d)))
                    if receiver == self.me:
                        incoming.append((sender, tag))
        move = self.transport.post if post else self.transport.exchange
        with self.clock("exchange: transport"):  # a synchronising clock's waits stay out of ``waited``
            start = time.perf_counter()
            try:
                received = move(outgoing, incoming, run_of(xid), site=None if site is None else f"{self.scope}:{site}",
                                collective=collective)
            finally:
                self.waited += time.perf_counter() - start
        return xid, received

    def _joined(self, xid: tuple, received: dict, dests: list, sources: Callable, join, extras) -> dict:
        """Per destination of this participant: its pieces in ``sources`` order, through ``join``."""
        out = {}
        for d in self._mine(dests):
            frozen_d = freeze(d)
            pieces = [received[(*xid, freeze(s), frozen_d)] for s in sources(d)]
            out[d] = pieces if join is None else run_chain(self.plan, d, join, pieces, *(e[d] for e in extras))
        return out

    def slabs(self) -> int:
        """The z slabs a transpose is pipelined in: :attr:`slab_count` where the caller set it, else
        ``daskflow.transpose-slabs``, where the transport moves pieces while the computation goes on
        (NCCL), at most the z planes of the thinnest chunk (every participant makes as many
        exchanges); else 1."""
        if not getattr(self.transport, "overlaps", False):
            return 1
        from daskflow import settings

        wanted = self.slab_count if self.slab_count is not None else settings.get("transpose-slabs")
        planes = min(z.stop - z.start for z in self.plan.decomposition.z)
        return max(1, min(int(wanted), planes))

    def transpose(self, blocks: Mapping, keys, sources: Callable, head, before, cut: Callable, join,
                  after=(), extras: Sequence[Mapping] = (), site: str | None = None) -> dict:
        slabs = self.slabs()
        if slabs < 2:
            return transpose_whole(self, blocks, keys, sources, head, before, cut, join, after, extras, site)
        keys = list(keys)
        whole = {k: run_chain(self.plan, k, head, blocks[k]) for k in self._mine(keys)}
        planes = {k: split_slices(x.shape[0], slabs) for k, x in whole.items()}
        posted: list = []
        try:
            return self._slabs(slabs, posted, whole, planes, keys, sources, before, cut, join, after, extras, site)
        except BaseException:
            for item in posted:  # the device waits for the transfers before their buffers go back to the pool
                if item is not None:
                    with contextlib.suppress(Exception):
                        self.transport.complete(item[1])
            raise

    def _slabs(self, slabs: int, posted: list, whole: dict, planes: dict, keys: list, sources, before, cut, join,
               after, extras, site) -> dict:
        """The body of a transpose in ``slabs`` slabs; ``posted`` holds the posts not yet waited for."""
        for i in range(slabs):  # every slab's pieces leave before the first slab is assembled
            # a slab's blocks are new arrays or slabs of ``whole``, unchanged until the joins below:
            # a participant's own pieces are swapped into place there, not cut and copied again (each
            # slab's block stays alive until then: at most a chunk's worth more, for a pass fewer)
            part = {k: run_chain(self.plan, k, before, x[planes[k][i]]) for k, x in whole.items()}
            posted.append(self.post(part, keys, sources, cut, None if site is None else f"{site}/{i}", collective=True,
                                    joined=True))
            del part  # the pieces sent (and deferred) stay alive in ``posted`` until joined
        out: dict = {}
        for i, handle in enumerate(posted):
            received = self.complete(handle)
            posted[i] = None  # waited for: the sent buffers may be reused now
            for d, pieces in received.items():
                extra = [e[d] for e in extras]
                slab = planes[d][i]
                target = None if d not in out else out[d][slab]
                y = run_chain(self.plan, d, join[:-1], pieces, *extra)
                y = join[-1](self.plan, d, y, *extra, out=target)
                if target is None:
                    out[d] = array_module(y).empty((whole[d].shape[0], *y.shape[1:]), y.dtype)
                    target = out[d][slab]
                if y is not target:
                    target[...] = y
        return {d: run_chain(self.plan, d, after, x, *(e[d] for e in extras)) for d, x in out.items()}

    def finish(self) -> None:
        """Let this executor's sends leave (call before the task returns)."""
        self.transport.finish()


@dataclass
class Member:
    """One participant of a pencil run: its name ``me`` among ``workers`` (chunk ``(p, q)`` belongs
    to :func:`~daskflow.pencils.layout.chunk_owner`), the transport its exchanges go through and the
    run they belong to. A cluster worker, or a thread of a :class:`~daskflow.pencils.team.Team`."""

    me: str
    workers: Sequence[str]
    pz: int
    transport: Any
    run_id: str
    scope: str | None = None  # names the exchanges' layouts across runs (DirectExecutor)
    clock: Callable | None = None  # a profiled run's phase clock: its executors time their exchanges

    def owner(self, key: Key) -> str:
        return chunk_owner(key, self.workers, self.pz)

    def executor(self, plan, label: str) -> DirectExecutor:
        """A :class:`DirectExecutor` of ``plan`` whose exchanges are tagged ``run_id/label``."""
        return DirectExecutor(plan, self.me, f"{self.run_id}/{label}", self.owner, self.transport,
                              None if self.scope is None else f"{self.scope}/{label}", self.clock)
