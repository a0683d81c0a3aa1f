"""Direct exchanges between workers: one fused task per worker per solve, no piece tasks.

In the *fused* granularity every worker runs the whole algorithm for the chunks it owns inside
one task (:func:`run_on_worker`): local stages run in order and every exchange sends the worker's
pieces straight to the workers that need them through a transport (:mod:`daskflow.pencils.transport`):
NCCL between GPU workers, UCXX endpoints, or the cluster's own comms (the mailbox), the way
distributed's P2P shuffle moves shards outside the scheduler. A solve is then ``n_workers`` tasks
and one hop.

The mailbox transport delivers pieces into a per-worker :class:`Mailbox` (installed by
:class:`MailboxPlugin`) keyed by run, exchange number, source and destination chunk; the
algorithm code is the same on every worker, so exchange numbers agree without coordination. The
mailbox also carries aborts: a failed run stops its peers' waits and the communicators it used.
A fused task secedes from the worker's thread pool for its whole run (once, not per exchange:
each secession is a message to the scheduler), so two solves in flight on a one-thread worker
cannot deadlock.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Sequence

from distributed.diagnostics.plugin import WorkerPlugin

from daskflow.pencils import collector
from daskflow.pencils.executor import DirectExecutor, run_of
from daskflow.pencils.layout import chunk_owner
from daskflow.pencils.link import PeerAborted, exchange_timeout
from daskflow.pencils.transport import CommSpec, MailboxTransport, communicator

HANDLER = "daskflow_put"
PLUGIN_NAME = "daskflow-mailbox"
ABORT = "daskflow-abort"


class Mailbox:
    """Pieces received by one worker, waited for by the tasks that consume them. A run can be
    aborted (a peer failed): its waiting tasks raise at once and its pieces are dropped."""

    def __init__(self) -> None:
        self._items: dict = {}
        self._aborted: set[str] = set()
        self._ready = threading.Condition()
        self.abort_hooks: list[Callable[[str], None]] = []  # called with the run id of an abort

    def aborted(self, run: str) -> bool:
        return run in self._aborted

    def put(self, tag, piece) -> None:
        with self._ready:
            if tag[0] == ABORT:
                self._aborted.add(tag[1])
                self._items = {t: v for t, v in self._items.items() if run_of(t) != tag[1]}
            elif run_of(tag) not in self._aborted:
                self._items[tag] = piece
            self._ready.notify_all()
        if tag[0] == ABORT:
            for hook in self.abort_hooks:  # a communicator that the run used stops (its peer may be gone)
                hook(tag[1])

    def take(self, tags: Sequence, timeout: float) -> list:
        """Remove and return the pieces of ``tags`` (in order), waiting for missing ones."""
        run = run_of(tags[0]) if tags else None
        with self._ready:
            ready = self._ready.wait_for(lambda: run in self._aborted or all(t in self._items for t in tags),
                                         timeout=timeout)
            if run in self._aborted:
                raise PeerAborted(f"daskflow exchange: run {run} was aborted (a peer task failed)")
            if not ready:
                missing = [t for t in tags if t not in self._items]
                raise TimeoutError(f"daskflow exchange: pieces {missing[:4]} did not arrive in {timeout} s "
                                   "(dask config daskflow.exchange-timeout)")
            return [self._items.pop(t) for t in tags]


class MailboxPlugin(WorkerPlugin):
    """Gives every worker a :class:`Mailbox` and the comm handler that fills it."""

    name = PLUGIN_NAME

    def setup(self, worker) -> None:
        mailbox = Mailbox()
        worker.daskflow_mailbox = mailbox

        async def put(tag=None, piece=None):
            mailbox.put(tuple(tag) if isinstance(tag, list) else tag, piece)

        worker.handlers[HANDLER] = put


def ensure_mailboxes(client) -> None:
    """Install :class:`MailboxPlugin` on the client's cluster (idempotent)."""
    if not getattr(client, "_daskflow_mailboxes", False):
        client.register_plugin(MailboxPlugin(), name=PLUGIN_NAME)
        client._daskflow_mailboxes = True


def abort_run(worker, run_id: str, workers: list[str]) -> None:
    """Tell every worker that ``run_id`` failed here: their waiting tasks of that run raise at once."""
    async def send_all():
        await asyncio.gather(*(worker.rpc(address).daskflow_put(tag=(ABORT, run_id), piece=None, reply=False)
                               for address in workers if address != worker.address), return_exceptions=True)

    worker.daskflow_mailbox.put((ABORT, run_id), None)
    with contextlib.suppress(Exception):
        asyncio.run_coroutine_threadsafe(send_all(), worker.loop.asyncio_loop).result(timeout=30)


def abort_here(run_id: str, dask_worker=None) -> None:
    """Abort run ``run_id`` on this worker (sent by the client when a task of the run failed where
    it could not tell its peers, or a worker was lost): its waiting tasks raise at once, and one
    that starts later raises at its first exchange."""
    dask_worker.daskflow_mailbox.put((ABORT, run_id), None)


def gpu_switch_interval() -> float:
    """Seconds between the interpreter's GIL hand-offs in a GPU worker during a fused run (dask config
    ``daskflow.gpu-switch-interval``)."""
    from daskflow import settings

    return settings.get("gpu-switch-interval")


@contextlib.contextmanager
def collective(worker, run_id: str, workers: list[str], switch_interval: float | None = None):
    """Run a fused task's body outside the thread pool; on failure, abort the run on every peer.

    ``switch_interval`` (seconds) replaces the interpreter's GIL switch interval for the body. A
    GPU task thread holds the GIL almost all the time (kernel launches are Python calls that do not
    release it), so the worker's event loop, which receives the peers' pieces, waits for the next
    forced hand-off: 5 ms by default. 0.2 ms made the 4-GPU channel step 9-12 % faster
    (``docs/performance.md``); CPU workers, whose kernels release the GIL, keep the default."""
    import sys

    from distributed import rejoin, secede

    previous = sys.getswitchinterval()
    if switch_interval is not None:
        sys.setswitchinterval(switch_interval)
    secede()  # waits for pieces from other workers: leave the thread pool
    try:
        yield
    except Exception:
        abort_run(worker, run_id, workers)
        raise
    finally:
        rejoin()
        sys.setswitchinterval(previous)
    collector.settle(worker)  # between runs: a full collection inside one would stall every peer


def run_on_worker(algorithm: Callable, plan, run_id: str, workers: list[str], pz: int,
                  inputs: list[tuple[list, list]], ready: list | None = None, comm: CommSpec | None = None,
                  scope: str | None = None) -> dict:
    """Body of a fused task: run ``algorithm`` for this worker's chunks; returns its output blocks.

    ``inputs`` lists ``(chunk indices, values)`` pairs: the input blocks, then any set-up dicts
    (P-TDMA coefficients and reduced factors), each holding only this worker's chunks. The result
    maps chunk index to output block. ``ready`` (ignored) lists tasks this one must follow: the fused
    work before it on this worker and, while they may fail, tiny markers of the other workers' inputs
    (a failed input then fails every fused task instead of leaving them waiting).
    ``comm`` names the transport of the exchanges (default: the mailbox). ``scope`` names the layouts
    of the exchanges (the same in every run of one solver): a transport describes them once, not at
    every run (:class:`~daskflow.pencils.executor.DirectExecutor`).
    """
    from distributed import get_worker

    worker = get_worker()
    owner = lambda k: chunk_owner(k, workers, pz)  # noqa: E731
    blocks, *setup = (dict(zip(map(tuple, keys), values, strict=True)) for keys, values in inputs)
    if len(workers) == 1:
        ex = DirectExecutor(plan, worker.address, run_id, owner, MailboxTransport(worker, exchange_timeout()))
        out = algorithm(ex, plan, blocks, *setup)
        collector.settle(worker)
        return out
    with collective(worker, run_id, workers):
        transport = communicator(worker, comm, exchange_timeout(), run_id)
        ex = DirectExecutor(plan, worker.address, run_id, owner, transport, scope)
        out = algorithm(ex, plan, blocks, *setup)
        ex.finish()
    return out


def ready_marker(block) -> bool:
    """A tiny stand-in for a block, for dependencies that must not move the block itself."""
    return True
