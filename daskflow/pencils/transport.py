"""Transports: how the pieces of one exchange move between the workers of a fused task.

An exchange inside a fused task (:class:`daskflow.pencils.executor.DirectExecutor`) ends in one call
``transport.exchange(outgoing, incoming, run)``: ``outgoing`` lists ``(worker, tag, piece)`` it
sends, ``incoming`` ``(worker, tag)`` it needs; the result maps every incoming tag (and its own) to
the piece. Every worker makes the same sequence of exchanges: none needs more coordination.

Backends (``cluster.comm``):

* ``mailbox``: distributed's worker-to-worker RPC, one message per piece through each worker's
  event loop (UCX or TCP underneath). Portable: CPU and GPU workers, any cluster.
* ``nccl``: NCCL point-to-point inside the task (:mod:`daskflow.pencils.nccl`), GPU workers: a
  tiny header round (layouts and host values, on a side stream; skipped where an earlier round gave
  the layouts) and one grouped send/recv of all device pieces on the compute stream, with no host
  synchronisation (:meth:`PackedTransport.post`: on a stream of its own, waited for later). With
  ``daskflow.copy-engine`` a transpose among all the workers moves instead on the GPUs' copy
  engines, off the multiprocessors: one NCCL all-to-all (:mod:`daskflow.pencils.copy_engine`) or
  one-sided copies into the peers' memory (:mod:`daskflow.pencils.ipc`).
* ``ucx``: the same two rounds as tag-matched UCXX messages between the workers' UCX endpoints
  (:mod:`daskflow.pencils.ucx`), outside Dask's comms and event loop: CPU or GPU pieces, any network
  UCX drives (across nodes where NCCL is not available).

``auto``, untimed (:func:`choose_comm`): NCCL where it is usable, else the mailbox; timed
(:func:`comm_candidates`, :mod:`daskflow.autotune`, for a simulation's ``cluster.comm: auto``):
every usable backend timed on the run's own decomposition and algorithm, the fastest carries it.

A communicator (participants and bootstrap ids) is a :class:`CommSpec` made on the client
(:func:`make_comm`) and shipped with the fused tasks; each worker builds its end once and keeps it
(:func:`communicator`) until a run that used it fails: then it is aborted everywhere and replaced.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from daskflow.pencils.link import Link, PeerAborted, Transport
from daskflow.pencils.packed import PackedTransport

COMMS = ("auto", "mailbox", "nccl", "ucx")  # cluster.comm; auto: nccl on GPU workers where it loads


@dataclass(frozen=True)
class CommSpec:
    """A communicator: its backend, its participants (rank = position) and bootstrap ids. Runs on
    one communicator must reach every worker in the same order (two runs in flight would mix their
    exchanges): a simulation's runs follow each other, fused solves depend on the previous one."""

    kind: str = "mailbox"
    workers: tuple[str, ...] = ()
    ids: tuple = field(default=(), repr=False)

    @property
    def key(self) -> tuple:
        return (self.kind, self.workers, self.ids)


# ------------------------------------------------------------------------------------ mailbox


class MailboxTransport:
    """Pieces as RPC messages into the receivers' :class:`~daskflow.pencils.direct.Mailbox`."""

    name = "mailbox"

    def __init__(self, worker, timeout: float) -> None:
        from distributed.protocol import to_serialize

        self.worker, self.me, self.timeout = worker, worker.address, timeout
        self._serialize = to_serialize
        self._in_flight: list = []  # sends still running on the worker's event loop

    def exchange(self, outgoing, incoming, run: str, site: str | None = None, collective: bool = False) -> dict:
        mailbox = self.worker.daskflow_mailbox
        remote = []
        for address, tag, piece in outgoing:
            if address == self.me:
                mailbox.put(tag, piece)
            else:
                remote.append((address, tag, piece))
        if remote:
            self._send(remote)
        tags = [tag for _, tag in incoming]
        return dict(zip(tags, mailbox.take(tags, self.timeout), strict=True))

    def _send(self, remote) -> None:
        async def send_all():
            # no reply round trip: the receiver's mailbox is the acknowledgement
            await asyncio.gather(*(self.worker.rpc(address).daskflow_put(tag=tag, piece=self._serialize(piece),
                                                                          reply=False)
                                   for address, tag, piece in remote))

        # Sends run on the event loop while this thread goes on to wait for its own pieces; their
        # failures surface at the next exchange or at the end of the task (:meth:`finish`).
        self._check_sends()
        self._in_flight.append(asyncio.run_coroutine_threadsafe(send_all(), self.worker.loop.asyncio_loop))

    def _check_sends(self) -> None:
        still = []
        for future in self._in_flight:
            if future.done():
                future.result()  # raises a send's exception here, in the task
            else:
                still.append(future)
        self._in_flight = still

    def finish(self) -> None:
        """Wait for this transport's sends to leave (call before the task returns)."""
        for future in self._in_flight:
            future.result(timeout=self.timeout)
        self._in_flight = []

    def abort(self) -> None:
        pass  # nothing to stop: the mailbox ends the waits of an aborted run by its id


def _nccl_link(spec: CommSpec, rank: int):
    from daskflow.pencils.nccl import NcclLink

    return NcclLink(len(spec.workers), rank, spec.ids)


def _ucx_link(spec: CommSpec, rank: int):
    from daskflow.pencils.ucx import UcxLink

    return UcxLink(len(spec.workers), rank, spec.ids)


def _nccl_ids(client, workers: tuple[str, ...], device: str) -> tuple:
    """Two NCCL unique ids (header and payload communicators), made on the first worker."""
    from daskflow.pencils import nccl

    ids = client.submit(nccl.unique_ids, 2, workers=[workers[0]], allow_other_workers=False, pure=False)
    return tuple(ids.result())


def _ucx_ids(client, workers: tuple[str, ...], device: str) -> tuple:
    """A fresh token, the pieces' device and every worker's UCX address."""
    import uuid

    from daskflow.pencils import ucx

    addresses = client.run(ucx.worker_address, workers=list(workers))
    return uuid.uuid4().hex, device, tuple(addresses[w] for w in workers)


#: per packed backend: its link (made on each worker) and its bootstrap (made from the client)
LINKS: dict[str, Callable[[CommSpec, int], Link]] = {"nccl": _nccl_link, "ucx": _ucx_link}
BOOTSTRAPS: dict[str, Callable] = {"nccl": _nccl_ids, "ucx": _ucx_ids}


def _registry(worker) -> dict:
    """This worker's packed transports by communicator key; the first call also asks the mailbox
    to abort, when a run is aborted, every communicator that run used (in a thread of its own: an
    abort may wait for an exchange to leave its link, and must not hold up the event loop)."""
    registry = worker.__dict__.get("daskflow_transports")
    if registry is None:
        registry = worker.daskflow_transports = {}
        worker.daskflow_retired = set()  # keys of communicators replaced by newer ones: never rebuilt

        def abort_run(run: str) -> None:
            for transport in [t for t in list(registry.values()) if run in t.runs]:
                _abort_soon(transport)

        worker.daskflow_mailbox.abort_hooks.append(abort_run)
    return registry


def _abort_soon(transport: PackedTransport) -> None:
    """Abort ``transport`` in a thread of its own (called from the worker's event loop)."""
    threading.Thread(target=transport.abort, name="daskflow-abort", daemon=True).start()


def communicator(worker, comm: CommSpec | None, timeout: float, run: str) -> Transport:
    """This worker's end of ``comm`` for the fused task of run ``run`` (called inside
    :func:`~daskflow.pencils.direct.collective`, by every participant): a new mailbox transport, or the
    packed transport built at the first call with this spec, noting the run (its abort aborts it)."""
    if comm is None or comm.kind == "mailbox":
        return MailboxTransport(worker, timeout)
    registry = _registry(worker)
    if comm.key in worker.daskflow_retired:
        raise PeerAborted(f"daskflow exchange: this {comm.kind} communicator was replaced after a failed run")
    transport = registry.get(comm.key)
    if transport is None:
        if worker.address not in comm.workers:
            raise RuntimeError(f"daskflow exchange: worker {worker.address} is not a participant of this "
                               f"{comm.kind} communicator")
        ranks = {address: i for i, address in enumerate(comm.workers)}
        link = LINKS[comm.kind](comm, ranks[worker.address])
        transport = PackedTransport(comm.kind, link, ranks, worker.address, timeout, worker.daskflow_mailbox.aborted)
        registry[comm.key] = transport
    transport.timeout = timeout
    transport.join(run)
    return transport


def comm_alive(key: tuple, dask_worker=None) -> bool:
    """Whether this worker's end of the communicator ``key`` can still serve runs (run by the client)."""
    if key in getattr(dask_worker, "daskflow_retired", ()):
        return False
    transport = getattr(dask_worker, "daskflow_transports", {}).get(key)
    return transport is None or not transport.dead


def retire(key: tuple, dask_worker=None) -> None:
    """Stop and forget this worker's end of the communicator ``key`` for good (run by the client when
    it replaces the communicator: ends that never saw the failed run are released too)."""
    _registry(dask_worker)
    dask_worker.daskflow_retired.add(key)
    transport = dask_worker.daskflow_transports.pop(key, None)
    if transport is not None:
        _abort_soon(transport)


# ------------------------------------------------------------------------------------ client side


def _gpu_devices(client, workers: Sequence[str], device: str) -> list:
    """Each worker's GPU as NCCL sees it (PCI bus id; ``None`` without NCCL or a GPU); ``[None]`` for
    CPU pieces."""
    if device != "gpu":
        return [None]
    from daskflow.pencils import nccl

    return list(client.run(nccl.device_id, workers=list(workers)).values())


def _one_gpu_each(devices: list) -> bool:
    return None not in devices and len(set(devices)) == len(devices)


def _nccl_usable(client, workers: Sequence[str], device: str) -> bool:
    """Whether NCCL can carry ``device`` pieces between ``workers``: GPU pieces, each worker on a GPU
    of its own, and CuPy's NCCL loading on all of them."""
    return _one_gpu_each(_gpu_devices(client, workers, device))


def _ucx_usable(client, workers: Sequence[str], device: str) -> bool:
    """Whether the UCX backend can serve ``workers`` (see :func:`_check_ucx`)."""
    try:
        _check_ucx(client, workers, "cluster.comm")
    except ValueError:
        return False
    return True


#: per packed backend: whether it can serve a run (the loopback of the tests, registered without
#: one, always can)
USABLE: dict[str, Callable] = {"nccl": _nccl_usable, "ucx": _ucx_usable}


def comm_candidates(client, workers: Sequence[str], device: str) -> list[str]:
    """The backends that ``cluster.comm: auto`` times for a run on ``workers`` with ``device``
    pieces: every registered packed link usable there, then the mailbox (always usable). One
    participant exchanges nothing: the mailbox alone."""
    if len(workers) < 2:
        return ["mailbox"]
    usable = [kind for kind in LINKS if USABLE.get(kind, lambda *_: True)(client, workers, device)]
    return [*usable, "mailbox"]


def choose_comm(client, workers: Sequence[str], requested: str, device: str,
                setting: str = "config cluster.comm") -> str:
    """The backend a run on ``workers`` uses: ``requested`` checked, or ``auto`` resolved (NCCL when
    there are several GPU workers, each on a GPU of its own, and NCCL loads on all of them, else the
    mailbox). Errors name ``setting`` (where the request came from)."""
    if requested not in COMMS:
        raise ValueError(f"{setting}: must be one of {', '.join(COMMS)}; got {requested!r}")
    if requested == "mailbox" or len(workers) < 2:
        return "mailbox"
    if requested == "ucx":
        _check_ucx(client, workers, setting)
        return "ucx"
    if requested not in ("auto", "nccl"):
        return requested  # another registered link (LINKS, BOOTSTRAPS)
    devices = _gpu_devices(client, workers, device)
    if requested == "nccl" and None in devices:
        raise ValueError(f"{setting}: 'nccl' needs GPU workers and CuPy arrays (solver.device gpu) where CuPy's "
                         "NCCL loads; use auto, ucx or mailbox")
    if requested == "nccl" and len(set(devices)) < len(devices):
        raise ValueError(f"{setting}: 'nccl' needs one GPU per worker, and {len(workers)} workers share "
                         f"{len(set(devices))} GPU(s); use auto or mailbox")
    return "nccl" if _one_gpu_each(devices) else "mailbox"


def _check_ucx(client, workers: Sequence[str], setting: str) -> None:
    from daskflow.pencils import ucx

    if not all(client.run(ucx.available, workers=list(workers)).values()):
        raise ValueError(f"{setting}: 'ucx' needs UCXX on every worker (pip install ucxx-cu13 or ucxx-cu12); "
                         "use auto, nccl or mailbox")
    if len(workers) > ucx.MAX_RANKS:
        raise ValueError(f"{setting}: 'ucx' supports up to {ucx.MAX_RANKS} workers, got {len(workers)}; "
                         "use nccl or mailbox")
    if client.scheduler_info()["address"].startswith("ucx"):
        raise ValueError(f"{setting}: 'ucx' drives the workers' UCX itself, which Dask's own comms already do "
                         "over the UCX protocol: use cluster.protocol tcp with it")


_SHARED: dict[tuple, CommSpec] = {}  # the communicator of each (client, kind, workers, device)
_CHECKED: set[tuple] = set()  # keys of _SHARED found alive (or made) with no failed run since
_LAST_FUSED: dict[str, dict] = {}  # client id -> worker -> (an output of the fused work submitted there last,
#                                    every output of that submission by worker)
_TURNS = threading.Lock()  # guards _LAST_FUSED: submitters and the client's callback thread change it


def wait_turn(client, workers: Sequence[str]) -> dict:
    """Per worker of ``workers``, an output of the fused work (a solve, a run) submitted there last,
    while it is still pending: a new fused task on that worker must depend on it. Fused work shares
    communicators (and a GPU's NCCL queue), so it has to reach every worker in one order, whichever
    solver or simulation submitted it; their exchanges would mix otherwise. Work of a submission
    that has already failed somewhere is not waited for: its other tasks are aborted and fail too,
    and a task depending on them would fail with their error (a solve retried at once after a
    failure inherited it); the next work runs on a new communicator anyway."""
    with _TURNS:
        entries = list(_LAST_FUSED.setdefault(client.id, {}).items())  # a copy: callbacks remove entries
    pending = {w: future for w, (future, submission) in entries
               if future.status == "pending"
               and not any(f.status in ("error", "cancelled") for f in submission.values())}
    return {w: pending[w] for w in workers if w in pending}


def took_turn(client, outputs: dict) -> None:
    """Record ``outputs`` (worker -> a future of fused work just submitted there) for
    :func:`wait_turn`; each is forgotten as soon as it is done, so no data is held here."""
    submission = dict(outputs)
    with _TURNS:
        last = _LAST_FUSED.setdefault(client.id, {})
        last.update({worker: (future, submission) for worker, future in outputs.items()})
    for worker, future in outputs.items():
        future.add_done_callback(lambda done, worker=worker: _forget_turn(last, worker, done))


def _forget_turn(last: dict, worker: str, done) -> None:
    """Forget ``done`` (in the client's callback thread) if it is still the last fused work on
    ``worker``: the check and the removal are one step, so a submission made meanwhile in another
    thread is never dropped (the next fused work there would not wait for it)."""
    with _TURNS:
        if last.get(worker, (None,))[0] is done:
            del last[worker]


def submit_together(client, calls: Sequence[tuple[str, Callable, tuple, dict]], spent: list | None = None) -> list:
    """Futures of ``fn(*args, **kwargs)`` run on ``worker`` alone, for every ``(worker, fn, args,
    kwargs)`` of ``calls`` (the fused tasks of one collective call; futures in ``args`` and
    ``kwargs`` are their dependencies, as with ``client.submit``; every call runs anew): one graph
    in one message to the scheduler, in the client's batch that also lets go of the futures in
    ``spent`` (emptied here; futures done with, whose data may go now).

    Submitted one by one, every task was an update of the scheduler's graph of its own: on four GPU
    workers the tasks of a run entered their workers about 1 ms apart, and a collective run starts
    with the last. The client batches what it sends within 10 ms of one another (distributed
    2026.7); from the client's event loop everything is queued before the batch leaves."""
    import dask
    from dask._task_spec import Task, parse_input  # what client.submit builds
    from dask.utils import funcname

    from daskflow.pencils.graph import placement_annotations

    spent = spent if spent is not None else []
    graph, placement = {}, {}
    for worker, fn, args, kwargs in calls:
        key = f"{funcname(fn)}-{uuid.uuid4()}"
        graph[key] = Task(key, fn, *(parse_input(a) for a in args), **{k: parse_input(v) for k, v in kwargs.items()})
        placement[key] = worker

    def submit_all() -> list:
        spent.clear()  # the releases, queued first
        with dask.annotate(**placement_annotations(placement, list(placement.values()))):
            return client.get(graph, list(graph), sync=False, fifo_timeout="100 ms")

    if client.asynchronous:  # already on the loop's thread: nothing can run in between
        return submit_all()

    async def on_the_loop() -> list:
        return submit_all()

    return client.sync(on_the_loop)


def make_comm(client, workers: Sequence[str], kind: str, device: str = "gpu") -> CommSpec:
    """The communicator of ``kind`` over ``workers`` for a new run: the one made before for these
    workers when none of them has aborted it (every simulation and solver on a worker set shares
    one; NCCL's buffers are large), else a new one, bootstrapped on the workers (NCCL ids on the
    first, UCX worker addresses on each) after the old one is retired everywhere. ``device`` says
    whether pieces are CuPy (``gpu``) or NumPy arrays."""
    workers = tuple(workers)
    if kind == "mailbox":
        return CommSpec("mailbox", workers)
    key = (client.id, kind, workers, device)
    spec = _SHARED.get(key)
    if spec is not None and key not in _CHECKED and not all(client.run(comm_alive, spec.key,
                                                                       workers=list(workers)).values()):
        client.run(retire, spec.key, workers=list(workers))
        spec = None
    if spec is None:
        spec = CommSpec(kind, workers, BOOTSTRAPS[kind](client, workers, device))
        _SHARED[key] = spec
    _CHECKED.add(key)
    return spec


def comm_failed(client) -> None:
    """A run or solve on ``client``'s workers failed, was cancelled or lost a worker: before their
    next run, :func:`make_comm` asks every worker again whether its communicators are alive. Only a
    failed run aborts a communicator, so between failures that question (a round trip to every
    worker) is not asked at every run."""
    for key in [key for key in _CHECKED if key[0] == client.id]:
        _CHECKED.discard(key)
