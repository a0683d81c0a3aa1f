"""One-sided copies between GPU workers of one host: each piece is written by the sender's copy
engine straight into the receiver's memory.

A collective exchange (a transpose within a pair of ranks; the link decides which, in
:meth:`~daskflow.pencils.nccl.NcclLink.collective_slot`) moves through receive windows: device
buffers that every rank allocates once, exports with CUDA IPC, and opens from every peer. Rank
``s`` writes its pieces for rank ``r`` with ``cudaMemcpyAsync`` into slot ``s`` of ``r``'s window,
on a stream of its own per peer: the copy engines move them, so the multiprocessors stay with the
transforms a pipelined transpose overlaps (NCCL's point-to-point kernels share them). There is no
send buffer and no packing copy.

Nothing waits on a host. Each window carries 32-bit flags beside its data, set and waited for on the
streams with CUDA's stream memory operations (``cuStreamWriteValue32`` / ``cuStreamWaitValue32``):

- ``ready[r]`` in the sender's memory: the receiver ``r`` sets it when its window is free for the
  sender (after everything its compute stream queued before the exchange, which consumed the
  window's previous pieces); the sender waits for it and clears it before writing.
- ``arrived[s]`` in the receiver's memory: the sender ``s`` sets it after its copies (stream order
  puts it behind them); the receiver's compute stream waits for it and clears it before using the
  pieces.

Every value is a constant (1 or 0), so a CUDA graph capture records an exchange that replays
correctly. Windows come from a pool whose takes and gives every rank makes in the same order (the
exchanges are the same sequence on every rank), so each rank knows which of a peer's windows a piece
goes to without asking.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable
from dataclasses import dataclass, field

from daskflow.pencils.copy_engine import SLOT_ALIGN, WindowPool, align

FLAG_BYTES = 4
WAIT_EQ = 0x1  # CU_STREAM_WAIT_VALUE_EQ
WRITE_DEFAULT = 0x0  # CU_STREAM_WRITE_VALUE_DEFAULT: ordered after the stream's earlier writes


@functools.cache
def driver() -> ctypes.CDLL:
    """The CUDA driver with the stream memory operations (CuPy's bindings lack them)."""
    lib = ctypes.CDLL("libcuda.so.1")
    for name in ("cuStreamWaitValue32_v2", "cuStreamWriteValue32_v2"):
        getattr(lib, name).argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint]
        getattr(lib, name).restype = ctypes.c_int
    return lib


def _check(result: int, what: str) -> None:
    if result != 0:
        raise RuntimeError(f"{what}: CUDA driver error {result}")


def wait_value(stream, address: int, value: int) -> None:
    """``stream`` waits (on the device) until the 32-bit word at ``address`` equals ``value``."""
    _check(driver().cuStreamWaitValue32_v2(stream.ptr, address, value, WAIT_EQ), "cuStreamWaitValue32")


def write_value(stream, address: int, value: int) -> None:
    """``stream`` writes ``value`` to the 32-bit word at ``address`` (this GPU's or a peer's)."""
    _check(driver().cuStreamWriteValue32_v2(stream.ptr, address, value, WRITE_DEFAULT), "cuStreamWriteValue32")


def available() -> bool:
    """Whether this process can export device memory to its peers and order copies by stream
    memory operations: CuPy, CUDA IPC (Linux), the driver's ``cuStreamWaitValue32_v2``, and a
    current GPU that reaches every other visible one directly (peer access: a GPU worker sees the
    host's GPUs, its own first)."""
    try:
        import cupy

        runtime = cupy.cuda.runtime
        driver()
        here = cupy.cuda.Device().id
        return hasattr(runtime, "ipcGetMemHandle") and all(
            runtime.deviceCanAccessPeer(here, other) for other in range(runtime.getDeviceCount()) if other != here)
    except Exception:  # noqa: BLE001 - no CuPy, no GPU, no driver: not here
        return False


@dataclass(eq=False)
class IpcWindow:
    """This rank's receive window (``recv``: a uint8 CuPy array of ``nbytes``, then ``2 * size``
    flags) and every peer's, opened here: ``peer_base[r]`` is the address of rank ``r``'s window."""

    recv: object
    nbytes: int
    base: int
    peer_base: dict[int, int]
    size: int

    def flag(self, base: int, kind: str, rank: int) -> int:
        """Address of flag ``kind`` (``"arrived"`` or ``"ready"``) for ``rank`` in the window at ``base``."""
        return base + self.nbytes + FLAG_BYTES * ((0 if kind == "arrived" else self.size) + rank)


@dataclass
class IpcToken:
    """A posted exchange: its window, the peers whose pieces it receives, the events after each
    peer's copies, and the pieces being read (kept alive until the compute stream has waited for
    the copies)."""

    window: IpcWindow
    senders: list
    sent: list
    pieces: list = field(repr=False)


class IpcEngine(WindowPool):
    """One rank's receive windows over ``size`` ranks of one host. ``allgather(data: bytes) ->
    list[bytes]`` gives every rank's ``data`` by rank (collective: the header communicator);
    allocating a window calls it, so every rank allocates at the same point of its exchanges."""

    def __init__(self, size: int, rank: int, allgather: Callable[[bytes], list]) -> None:
        import cupy

        super().__init__()
        self.size, self.rank, self._allgather = size, rank, allgather
        self._streams = {peer: cupy.cuda.Stream(non_blocking=True) for peer in range(size) if peer != rank}
        self._windows: list[IpcWindow] = []

    def _allocate(self, nbytes: int) -> IpcWindow:
        """A window made on every rank at once: its allocation exported and every peer's opened.
        (A failed allocation or opening fails the run: :func:`available` has already checked that
        every GPU reaches every other.) An extra agreement round here measured 0.3 ms slower per
        captured (2, 1) channel step on two H200s, for reasons not established, so there is none."""
        import cupy

        runtime = cupy.cuda.runtime
        total = align(nbytes + 2 * self.size * FLAG_BYTES, SLOT_ALIGN)
        base = runtime.malloc(total)  # its own allocation: an IPC handle exports whole allocations
        runtime.memset(base, 0, total)
        runtime.deviceSynchronize()  # the cleared flags are in place before any peer can see them
        handles = self._allgather(runtime.ipcGetMemHandle(base))
        peer_base = {peer: runtime.ipcOpenMemHandle(handle, runtime.cudaIpcMemLazyEnablePeerAccess)
                     for peer, handle in enumerate(handles) if peer != self.rank}
        memory = cupy.cuda.UnownedMemory(base, total, owner=self)
        recv = cupy.ndarray((nbytes,), dtype=cupy.uint8, memptr=cupy.cuda.MemoryPointer(memory, 0))
        window = IpcWindow(recv, nbytes, base, peer_base, self.size)
        self._windows.append(window)
        return window

    def post(self, window: IpcWindow, sends: dict[int, list], offsets: dict[int, list], senders: list[int],
             slot: int, compute) -> IpcToken:
        """Every piece of ``sends[peer]`` copied to ``offsets[peer]`` in this rank's slot (``slot``
        bytes) of ``peer``'s window, on this rank's stream for ``peer``, after what ``compute``
        queued; each of ``senders`` (the peers whose pieces this rank receives) is told first that
        this rank's window is free for it."""
        import cupy

        queued = cupy.cuda.Event(block=False, disable_timing=True)
        queued.record(compute)
        sent = []
        for peer in sorted(set(sends) | set(senders)):
            stream = self._streams[peer]
            stream.wait_event(queued)
            if peer in senders:
                write_value(stream, window.flag(window.peer_base[peer], "ready", self.rank), 1)
            if peer in sends:
                mine = window.flag(window.base, "ready", peer)
                wait_value(stream, mine, 1)
                write_value(stream, mine, 0)
                target = window.peer_base[peer] + self.rank * slot
                for leaf, offset in zip(sends[peer], offsets[peer], strict=True):
                    cupy.cuda.runtime.memcpyAsync(target + offset, leaf.data.ptr, leaf.nbytes,
                                                  cupy.cuda.runtime.memcpyDeviceToDevice, stream.ptr)
                write_value(stream, window.flag(window.peer_base[peer], "arrived", self.rank), 1)
            # every stream that waited for ``queued`` joins back (a capture refuses one left forked)
            done = cupy.cuda.Event(block=False, disable_timing=True)
            done.record(stream)
            sent.append(done)
        return IpcToken(window, senders, sent, [leaf for leaves in sends.values() for leaf in leaves])

    def wait(self, token: IpcToken, compute) -> None:
        """``compute`` waits (on the device) for the senders' pieces and for this rank's copies; the
        window goes back to the pool (its pieces must be consumed before this rank's next exchange)."""
        window = token.window
        try:
            for peer in token.senders:
                arrived = window.flag(window.base, "arrived", peer)
                wait_value(compute, arrived, 1)
                write_value(compute, arrived, 0)
            for done in token.sent:
                compute.wait_event(done)
        finally:  # also where a wait raised (a capture given up): every rank's pool stays in step
            self.give(window)

    def abort(self) -> None:
        """Release whatever waits on this rank's flags (a lost peer never sets them): every flag of
        every window set to 1 by stream memory operations on a stream of their own (no kernel,
        which might need its module loaded while other streams are blocked), so the streams blocked
        on them run on, over pieces that no longer matter: the run has failed. Not synchronised: a
        wedged device must not block the caller (the transport's abort thread). The windows are not
        freed or closed: pieces of the failed run may still view them, and a peer's copy may still
        be landing."""
        import cupy

        release = cupy.cuda.Stream(non_blocking=True)
        for window in list(self._windows):
            for kind in ("arrived", "ready"):
                for rank in range(self.size):
                    write_value(release, window.flag(window.base, kind, rank), 1)
