"""NCCL link for the packed transport: CuPy's NCCL point-to-point between GPU workers.

Two communicators over the same ranks: one carries the headers of every exchange on a side
stream that does not wait for the computation (the host needs them to size the receive buffers),
the other carries the device pieces on the compute stream, so an exchange costs no host
synchronisation with the GPU. A posted payload (:meth:`NcclLink.payload_post`, the slabs of a
pipelined transpose) runs on a transfer stream of its own instead, ordered after what the compute
stream had queued, while the compute stream goes on with the next slab; the compute stream waits
for it (:meth:`NcclLink.payload_wait`) only where it uses the received pieces.

Headers travel in fixed slots of :data:`HEADER_SLOT` bytes (length
first); a longer one sends its tail in a second round.

NVLink multicast (NVLS) is left as the host sets it (``NCCL_NVLS_ENABLE``); nothing here uses it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np

from daskflow.pencils.link import PeerAborted

HEADER_SLOT = 4096  # bytes per peer per header round; 8 of them hold the header's length
_LENGTH = 8


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

    def empty(self, shape: tuple, dtype: str, order: str):
        return self._cupy.empty(shape, dtype=np.dtype(dtype), order=order)

    def is_device(self, x) -> bool:
        return isinstance(x, self._cupy.ndarray)

    def abort(self) -> None:
        """Stop both communicators (unblocks operations waiting for a lost peer)."""
        for comm in (self.header, self.payload):
            comm.abort()
