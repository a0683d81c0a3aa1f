"""NCCL link for the packed transport: CuPy's NCCL point-to-point between GPU workers.

Two communicators over the same ranks (a third, for the copy engines, where a collective site asks
for it): one carries the headers of every exchange on a side
stream that does not wait for the computation (the host needs them to size the receive buffers),
the other carries the device pieces on the compute stream, so an exchange costs no host
synchronisation with the GPU. A posted payload (:meth:`NcclLink.payload_post`, the slabs of a
pipelined transpose) runs on a transfer stream of its own instead, ordered after what the compute
stream had queued, while the compute stream goes on with the next slab; the compute stream waits
for it (:meth:`NcclLink.payload_wait`) only where it uses the received pieces.

Headers travel in fixed slots of :data:`HEADER_SLOT` bytes (length
first); a longer one sends its tail in a second round.

A collective exchange (a transpose within each group of ranks) may instead move on the copy engines
(dask config ``daskflow.copy-engine``): among all the ranks as one NCCL all-to-all
(:mod:`daskflow.pencils.copy_engine`), its pieces packed into a window's slots, or within pairs as
one-sided copies into the peer's receive windows (:mod:`daskflow.pencils.ipc`); either way the
received pieces are views of a receive window.

NVLink multicast (NVLS) is left as the host sets it (``NCCL_NVLS_ENABLE``); nothing here uses it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np

from daskflow.pencils import copy_engine, ipc, wire
from daskflow.pencils.link import PeerAborted

HEADER_SLOT = 4096  # bytes per peer per header round; 8 of them hold the header's length
_LENGTH = 8
ENGINES = {"nccl": copy_engine, "ipc": ipc}  # daskflow.copy-engine: the module that moves a collective site


def available() -> bool:
    """Whether CuPy's NCCL loads and a GPU is visible (on the calling worker)."""
    try:
        from cupy.cuda import nccl

        nccl.get_version()
    except Exception:  # noqa: BLE001 - any failure: no NCCL here
        return False
    from daskflow.backend import cupy_or_none

    return cupy_or_none() is not None


def device_id() -> str | None:
    """The PCI bus id of the calling worker's current GPU (``None`` without NCCL or a GPU): NCCL
    needs one GPU per rank of a communicator."""
    if not available():
        return None
    import cupy

    return cupy.cuda.runtime.deviceGetPCIBusId(cupy.cuda.Device().id)


def version() -> str | None:
    """NCCL's runtime version as ``major.minor.patch``, or ``None`` without NCCL."""
    try:
        from cupy.cuda import nccl

        code = nccl.get_version()
    except Exception:  # noqa: BLE001
        return None
    major, rest = divmod(code, 10000) if code >= 10000 else divmod(code, 1000)
    minor, patch = divmod(rest, 100)
    return f"{major}.{minor}.{patch}"


def unique_ids(count: int) -> list:
    """``count`` fresh NCCL unique ids (made on one participant, shipped to all; bytes in CuPy 14)."""
    from cupy.cuda import nccl

    return [nccl.get_unique_id() for _ in range(count)]


class NcclLink:
    """This rank's end of a header communicator and a payload communicator (``ids`` from
    :func:`unique_ids`; every rank constructs its link at the same time)."""

    def __init__(self, size: int, rank: int, ids: Sequence[bytes]) -> None:
        import cupy
        import cupyx
        from cupy.cuda import nccl

        self._cupy, self._nccl = cupy, nccl
        self.size, self.rank = size, rank
        self.header = nccl.NcclCommunicator(size, ids[0], rank)
        self.payload = nccl.NcclCommunicator(size, ids[1], rank)
        self.side = cupy.cuda.Stream(non_blocking=True)
        self.transfer = cupy.cuda.Stream(non_blocking=True)  # posted payloads
        self._host_out = cupyx.empty_pinned((size, HEADER_SLOT), dtype=np.uint8)
        self._host_in = cupyx.empty_pinned((size, HEADER_SLOT), dtype=np.uint8)
        self._dev_out = cupy.empty((size, HEADER_SLOT), dtype=np.uint8)
        self._dev_in = cupy.empty((size, HEADER_SLOT), dtype=np.uint8)
        self._done = cupy.cuda.Event(block=False, disable_timing=True)
        self._engine: copy_engine.CopyEngine | ipc.IpcEngine | None = None  # made at the first collective site
        # the header waits of the copy-engine transport's own set-up: the abort and timeout (s) of the
        # collective call that makes a window (the first description of a site)
        self._abort: Callable[[], bool] = lambda: False
        self._timeout = 600.0

    # --------------------------------------------------------------------------- headers

    def header_round(self, send: dict[int, bytes], recv_from: Sequence[int], abort: Callable[[], bool],
                     timeout: float) -> dict[int, bytes]:
        room = HEADER_SLOT - _LENGTH
        for peer, data in send.items():
            row = self._host_out[peer]
            row[:_LENGTH] = np.frombuffer(len(data).to_bytes(_LENGTH, "little"), np.uint8)
            head = np.frombuffer(data, np.uint8, min(len(data), room))
            row[_LENGTH:_LENGTH + head.size] = head
        with self.side:
            self._dev_out.set(self._host_out, stream=self.side)
            self._grouped(self.header, [(p, self._dev_out[p]) for p in send],
                          [(p, self._dev_in[p]) for p in recv_from], self.side)
            self._dev_in.get(stream=self.side, out=self._host_in, blocking=False)
        self._wait(abort, timeout)
        lengths = {p: int.from_bytes(self._host_in[p, :_LENGTH].tobytes(), "little") for p in recv_from}
        out = {p: self._host_in[p, _LENGTH:_LENGTH + min(n, room)].tobytes() for p, n in lengths.items()}
        tails_out = {p: data[room:] for p, data in send.items() if len(data) > room}
        tails_in = {p: n - room for p, n in lengths.items() if n > room}
        if tails_out or tails_in:  # a long header (large host values): its tail in a second round
            cupy = self._cupy
            with self.side:
                bufs_out = {p: cupy.asarray(np.frombuffer(t, np.uint8)) for p, t in tails_out.items()}
                bufs_in = {p: cupy.empty(n, np.uint8) for p, n in tails_in.items()}
                self._grouped(self.header, list(bufs_out.items()), list(bufs_in.items()), self.side)
            self._wait(abort, timeout)
            for p, buf in bufs_in.items():
                out[p] += buf.get(stream=self.side).tobytes()
        return out

    def _wait(self, abort: Callable[[], bool], timeout: float) -> None:
        """Until the side stream is done, polling so that an aborted run or a timeout raises."""
        self._done.record(self.side)
        start = time.perf_counter()
        while not self._done.done:
            waited = time.perf_counter() - start
            if abort():
                raise PeerAborted("daskflow exchange: the run was aborted (a peer task failed)")
            if waited > timeout:
                raise TimeoutError(f"daskflow exchange: no header from a peer in {timeout} s "
                                   "(dask config daskflow.exchange-timeout)")
            time.sleep(0 if waited < 1e-3 else 5e-5)  # spin briefly, then let the event loop run

    # --------------------------------------------------------------------------- payload

    def payload_round(self, sends: list, recvs: list, abort: Callable[[], bool], timeout: float) -> None:
        """Posted on the compute stream and left there: what consumes the pieces runs after it."""
        if sends or recvs:
            self._grouped(self.payload, sends, recvs, self._cupy.cuda.get_current_stream())

    overlaps = True  # payload_post returns before the pieces move
    @property
    def capturable(self) -> bool:
        """Whether a stream capture records its exchanges: its payload rounds and one-sided copies
        are NCCL calls and copies on CUDA streams; NCCL's copy-engine all-to-all is not captured."""
        return not isinstance(self._engine, copy_engine.CopyEngine)

    def payload_post(self, sends: list, recvs: list):
        """Posted on the transfer stream after everything the compute stream has queued (the pieces
        to send, the receive buffers' last users) and left there; returns the event that
        :meth:`payload_wait` waits for. The caller keeps every buffer alive until then."""
        cupy = self._cupy
        queued = cupy.cuda.Event(block=False, disable_timing=True)
        queued.record(cupy.cuda.get_current_stream())
        self.transfer.wait_event(queued)
        self._grouped(self.payload, sends, recvs, self.transfer)
        moved = cupy.cuda.Event(block=False, disable_timing=True)
        moved.record(self.transfer)
        return moved

    def payload_wait(self, moved) -> None:
        """The compute stream waits (on the device) for a posted payload: its received pieces are
        there for what runs next, and its buffers may be reused."""
        self._cupy.cuda.get_current_stream().wait_event(moved)

    def _grouped(self, comm, sends: list, recvs: list, stream) -> None:
        nccl = self._nccl
        nccl.groupStart()
        try:
            for peer, buf in sends:
                comm.send(buf.data.ptr, buf.nbytes, nccl.NCCL_UINT8, peer, stream.ptr)
            for peer, buf in recvs:
                comm.recv(buf.data.ptr, buf.nbytes, nccl.NCCL_UINT8, peer, stream.ptr)
        finally:
            nccl.groupEnd()

    # --------------------------------------------------------------------------- all-to-all on the copy engines

    def collective_slot(self, sizes: Sequence[Sequence[int]], peers: int, abort: Callable[[], bool],
                        timeout: float) -> int:
        """The bytes per peer of the windows that move a collective site on the copy engines
        (``daskflow.copy-engine``), or 0 (NCCL point to point) where any rank cannot: the largest
        packing (:func:`copy_engine.packed`) of any rank's arrays to or from one peer (``sizes``:
        per peer, its arrays' bytes). NCCL's all-to-all needs every other rank among the site's
        ``peers``; one-sided copies move transposes within pairs of ranks only (one peer):
        measured, the copy engines move a transpose among four GPUs about half as fast as NCCL's
        kernels, while between pairs they made the captured channel step 3-6 % faster.
        Every rank calls it at once, the first time it describes the site; the first agreement
        also builds the copy-engine transport (NCCL's: a communicator whose id rank 0 makes;
        ``ipc``: the ranks' exported windows, where every GPU reaches every other: :func:`ipc.available`),
        and each makes sure a window of the site's size is free, while every rank is known to be
        there."""
        from daskflow import settings

        engine = settings.get("copy-engine")
        fits = peers == self.size - 1 if engine == "nccl" else (engine == "ipc" and peers == 1)
        usable = bool(sizes) and fits and ENGINES[engine].available()
        local = max(copy_engine.packed(s)[1] for s in sizes) if usable else 0
        agreed = self._on_header(np.array([local, 0 if usable else 1], np.int64), "max", abort, timeout)
        if agreed[1]:
            return 0
        self._abort, self._timeout = abort, timeout  # for the windows' set-up, collective as this call
        if self._engine is None:
            if engine == "ipc":
                self._engine = ipc.IpcEngine(self.size, self.rank, self._allgather)
            else:
                uid = copy_engine.unique_id() if self.rank == 0 else bytes(128)
                uid = self._on_header(np.frombuffer(uid, np.uint8).copy(), "bcast", abort, timeout).tobytes()
                self._engine = copy_engine.CopyEngine(self.size, self.rank, uid)
        self._engine.reserve(self.size * int(agreed[0]))
        return int(agreed[0])

    def _allgather(self, data: bytes) -> list[bytes]:
        """Every rank's ``data`` (the same length on each), by rank, through the header communicator."""
        rows = np.zeros((self.size, len(data)), np.uint8)
        rows[self.rank] = np.frombuffer(data, np.uint8)
        summed = self._on_header(rows.reshape(-1), "sum", self._abort, self._timeout)
        return [row.tobytes() for row in summed.reshape(self.size, len(data))]

    def _on_header(self, values: np.ndarray, op: str, abort: Callable[[], bool], timeout: float) -> np.ndarray:
        """``values`` reduced over every rank by maximum (``op = "max"``) or sum (``"sum"``), or rank 0's (``"bcast"``),
        through the header communicator on the side stream."""
        nccl, cupy = self._nccl, self._cupy
        kind = {np.dtype(np.int64): nccl.NCCL_INT64, np.dtype(np.uint8): nccl.NCCL_UINT8}[values.dtype]
        with self.side:
            buf = cupy.asarray(values)
            if op in ("max", "sum"):
                reduction = nccl.NCCL_MAX if op == "max" else nccl.NCCL_SUM
                self.header.allReduce(buf.data.ptr, buf.data.ptr, buf.size, kind, reduction, self.side.ptr)
            else:
                self.header.bcast(buf.data.ptr, buf.size, kind, 0, self.side.ptr)
        self._wait(abort, timeout)
        return buf.get(stream=self.side)

    def collective_post(self, sends: dict[int, list], layouts: dict[int, list], slot: int):
        """One all-to-all of ``slot`` bytes per peer (every rank at once, the same ``slot``), moved
        after what the compute stream has queued, on the copy engines: NCCL's all-to-all of a send
        window into which the arrays of ``sends[peer]`` are packed first (it refuses CUDA's legacy
        default stream, which a compute stream may be, so it runs on the transfer stream), or
        (``ipc``) copies of the arrays straight into the peers' receive windows. Returns ``(received,
        token)``: per peer, views of its slot of the receive window shaped by ``layouts[peer]``
        (``(shape, dtype, order)``), and what :meth:`collective_wait` takes."""
        cupy = self._cupy
        window = self._engine.take(self.size * slot)
        stream = cupy.cuda.get_current_stream()
        offsets = {peer: copy_engine.packed([leaf.nbytes for leaf in leaves])[0] for peer, leaves in sends.items()}
        received = {}
        for peer, entries in layouts.items():
            starts, _ = copy_engine.packed([wire.layout_nbytes(layout) for layout in entries])
            base = window.recv.data + peer * slot
            received[peer] = [cupy.ndarray(shape, dtype=np.dtype(dtype), memptr=base + start, order=order)
                              for (shape, dtype, order), start in zip(entries, starts, strict=True)]
        if isinstance(self._engine, ipc.IpcEngine):
            try:
                return received, self._engine.post(window, sends, offsets, sorted(layouts), slot, stream)
            except BaseException:  # its pool stays in step with the peers' (a capture given up)
                self._engine.give(window)
                raise
        try:
            for peer, leaves in sends.items():
                for leaf, offset in zip(leaves, offsets[peer], strict=True):
                    cupy.cuda.runtime.memcpyAsync(window.send.data.ptr + peer * slot + offset, leaf.data.ptr,
                                                  leaf.nbytes, cupy.cuda.runtime.memcpyDeviceToDevice, stream.ptr)
            queued = cupy.cuda.Event(block=False, disable_timing=True)
            queued.record(stream)
            self.transfer.wait_event(queued)
            moved = cupy.cuda.Event(block=False, disable_timing=True)
        except BaseException:  # nothing queued on the window yet
            self._engine.give(window)
            raise
        self._engine.alltoall(window, slot, self.transfer)
        moved.record(self.transfer)
        return received, (moved, window)

    def collective_wait(self, token) -> None:
        """The compute stream waits for a :meth:`collective_post`'s transfer; its window goes back to
        the pool (a later all-to-all reuses it after what the compute stream queues before it, so
        the received views must be consumed first: they are, before the caller's next exchange)."""
        if isinstance(token, ipc.IpcToken):
            self._engine.wait(token, self._cupy.cuda.get_current_stream())
            return
        moved, window = token
        self.payload_wait(moved)
        self._engine.give(window)

    def empty(self, shape: tuple, dtype: str, order: str):
        return self._cupy.empty(shape, dtype=np.dtype(dtype), order=order)

    def is_device(self, x) -> bool:
        return isinstance(x, self._cupy.ndarray)

    def abort(self) -> None:
        """Stop the communicators (unblocks operations waiting for a lost peer) and release the
        copy-engine transport's waits."""
        try:
            for comm in (self.header, self.payload):
                comm.abort()
        finally:
            if self._engine is not None:
                self._engine.abort()

