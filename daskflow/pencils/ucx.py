"""UCX link for the packed transport: UCXX endpoints between the workers, outside Dask's comms.

Each worker process has one UCXX worker (UCXX's application context); its address travels to the
client once (:func:`worker_address`) and the link connects an endpoint to every peer from those
addresses, so no listener or port is involved. Pieces travel as tag-matched messages (host or
device buffers: UCX picks NVLink, shared memory, InfiniBand or TCP), received on the worker
directly. The tag of every message holds the communicator's token, a per-pair message number and
the two ranks, so messages of one exchange never match another's.

UCX knows nothing of CUDA streams: the compute stream is synchronised before device pieces are
sent, and the received pieces are complete when the payload round returns. The link runs UCXX's
asynchronous API on an event loop of its own (a daemon thread per process), not on Dask's.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import threading
import time
from collections.abc import Callable, Sequence

import numpy as np

from daskflow import settings
from daskflow.pencils.link import PeerAborted

_LOOP: asyncio.AbstractEventLoop | None = None
_LOOP_LOCK = threading.Lock()
MAX_RANKS = 256  # ranks take 8 bits of a tag each


def _ucxx():
    """UCXX, imported. UCXX sets ``UCX_MEMTYPE_CACHE=n`` as it loads, and a UCX without its CUDA
    components (a CPU host) then warns in every worker that the variable is unused, on the run's
    output; the warning is switched off here unless the environment asks for it."""
    os.environ.setdefault("UCX_WARN_UNUSED_ENV_VARS", "n")
    import ucxx

    return ucxx


def available() -> bool:
    """Whether UCXX imports here."""
    try:
        _ucxx()
    except Exception:  # noqa: BLE001 - any failure: no UCXX here
        return False
    return True


def version() -> str | None:
    try:
        return ".".join(map(str, _ucxx().get_ucx_version()))
    except Exception:  # noqa: BLE001
        return None


def _loop() -> asyncio.AbstractEventLoop:
    """This process's event loop for UCXX (started once, in a daemon thread)."""
    global _LOOP
    with _LOOP_LOCK:
        if _LOOP is None:
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="daskflow-ucx", daemon=True).start()
            _LOOP = loop
    return _LOOP


def _run(coro, abort: Callable[[], bool] = lambda: False, timeout: float = 600.0):
    """Run ``coro`` on the UCXX loop and wait for it here, raising when ``abort()`` turns true (the
    pending messages are cancelled) or after ``timeout`` seconds."""
    future = asyncio.run_coroutine_threadsafe(coro, _loop())
    start = time.perf_counter()
    while True:
        try:
            return future.result(timeout=0.01)
        except TimeoutError:
            if abort():
                future.cancel()
                raise PeerAborted("daskflow exchange: the run was aborted (a peer task failed)") from None
            if time.perf_counter() - start > timeout:
                future.cancel()
                raise TimeoutError(f"daskflow exchange: a UCX message did not arrive in {timeout} s "
                                   "(dask config daskflow.exchange-timeout)") from None
        except Exception as exc:
            if abort():  # the endpoints were closed under the messages by an abort
                raise PeerAborted("daskflow exchange: the run was aborted (a peer task failed)") from exc
            raise


def worker_address() -> bytes:
    """This process's UCXX worker address (the client gathers them to make a communicator)."""
    ucxx = _ucxx()

    async def address():
        ucxx.continuous_ucx_progress()  # progress on this loop
        return bytes(ucxx.get_worker_address())

    return _run(address())


def _bytes(a):
    """A contiguous array (C or Fortran order) as a flat byte view of the same memory."""
    return a.ravel(order="K").view(np.uint8)


class UcxLink:
    """This rank's endpoints to its peers. ``ids = (token, device, addresses)``: the communicator's
    token, ``"gpu"`` (CuPy pieces) or ``"cpu"`` (NumPy pieces), and every rank's worker address."""

    def __init__(self, size: int, rank: int, ids: Sequence) -> None:
        ucxx = _ucxx()

        if size > MAX_RANKS:
            raise ValueError(f"cluster.comm: 'ucx' supports up to {MAX_RANKS} workers, got {size}")
        token, device, addresses = ids
        self.rank, self.size = rank, size
        self._ucxx = ucxx
        if device == "gpu":
            import cupy

            self._xp = cupy
        else:
            self._xp = np
        self._prefix = int.from_bytes(hashlib.blake2b(str(token).encode(), digest_size=3).digest(), "little") << 40
        self._sent = [0] * size  # messages sent to each peer so far, and received from each
        self._received = [0] * size

        handle_errors = settings.get("ucx-error-handling")

        async def connect():
            ucxx.continuous_ucx_progress()
            return {peer: await ucxx.create_endpoint_from_worker_address(ucxx.get_ucx_address_from_buffer(a),
                                                                         endpoint_error_handling=handle_errors)
                    for peer, a in enumerate(addresses) if peer != rank}

        self._endpoints = _run(connect())

    def _tag(self, src: int, dst: int, number: int) -> int:
        """24 bits of the communicator's token, 24 of the pair's message number (it wraps after 16 M
        messages: far more than are ever in flight), 8 each of the two ranks."""
        return self._prefix | (number & 0xFFFFFF) << 16 | src << 8 | dst

    @staticmethod
    def _number(counts: list[int], peer: int) -> int:
        """The next message number of ``peer`` in ``counts`` (sent or received), taken."""
        counts[peer] += 1
        return counts[peer] - 1

    def _send(self, peer: int, buf):
        tag = self._tag(self.rank, peer, self._number(self._sent, peer))
        return self._endpoints[peer].send(buf, tag=tag, force_tag=True)

    def _recv(self, peer: int, buf, number: int | None = None):
        number = self._number(self._received, peer) if number is None else number
        return self._ucxx.recv(buf, tag=self._tag(peer, self.rank, number))

    # --------------------------------------------------------------------------- headers

    def header_round(self, send: dict[int, bytes], recv_from: Sequence[int], abort: Callable[[], bool],
                     timeout: float) -> dict[int, bytes]:
        sends = []
        for peer, data in send.items():  # the length, then the bytes
            sends += [self._send(peer, np.array([len(data)], dtype=np.uint64)),
                      self._send(peer, np.frombuffer(data, np.uint8).copy())]
        lengths = {peer: np.empty(1, dtype=np.uint64) for peer in recv_from}
        firsts = [self._recv(peer, lengths[peer]) for peer in recv_from]
        # each body is the message after its length, numbered now as the sender numbered it
        bodies = {peer: self._number(self._received, peer) for peer in recv_from}

        async def exchange():
            await asyncio.gather(*sends, *firsts)
            buffers = {peer: np.empty(int(lengths[peer][0]), dtype=np.uint8) for peer in recv_from}
            await asyncio.gather(*(self._recv(peer, buffers[peer], bodies[peer]) for peer in recv_from))
            return {peer: body.tobytes() for peer, body in buffers.items()}

        return _run(exchange(), abort, timeout)

    # --------------------------------------------------------------------------- payload

    def payload_round(self, sends: list, recvs: list, abort: Callable[[], bool], timeout: float) -> None:
        """Done when it returns (UCX does not order with CUDA streams)."""
        if not (sends or recvs):
            return
        if self._xp is not np:
            self._xp.cuda.get_current_stream().synchronize()  # UCX reads the pieces now
        ops = ([self._send(peer, _bytes(buf)) for peer, buf in sends]
               + [self._recv(peer, _bytes(buf)) for peer, buf in recvs])

        async def exchange():
            await asyncio.gather(*ops)

        _run(exchange(), abort, timeout)

    def empty(self, shape: tuple, dtype: str, order: str):
        return self._xp.empty(shape, dtype=np.dtype(dtype), order=order)

    def is_device(self, x) -> bool:
        return isinstance(x, self._xp.ndarray) and x.ndim > 0

    def abort(self) -> None:
        """Close the endpoints (messages still waiting for a lost peer end with an error)."""
        for ep in self._endpoints.values():
            ep.abort()
