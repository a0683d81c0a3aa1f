"""NCCL's all-to-all on the GPUs' copy engines, through ``ctypes`` (CuPy's bindings lack it).

NCCL 2.28 moves an ``ncclAlltoAll`` with the copy engines instead of the multiprocessors when its
communicator is made with the zero-CTA policy (``NCCL_CTA_POLICY_ZERO``) and both buffers lie in
symmetric windows: memory from ``ncclMemAlloc`` registered with ``ncclCommWindowRegister``. The
transfer then takes no multiprocessor from the transforms it overlaps (a pipelined transpose's
slabs). Every piece to a peer occupies one slot of the same size (the all-to-all's count).

:class:`CopyEngine` is one rank's communicator and its pool of windows. Making the communicator,
allocating a window and registering it are collective: every rank makes the same calls in the same
order (the transport's exchanges are the same sequence on every rank, so they do).
"""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass

UNDEF = -(2 ** 31)  # NCCL_CONFIG_UNDEF_INT
POLICIES = {"default": 0, "zero_cta": 2}  # NCCL_CTA_POLICY_DEFAULT, NCCL_CTA_POLICY_ZERO
NCCL_FLOAT64, WIN_COLL_SYMMETRIC = 8, 1
MIN_VERSION = 22800  # 2.28.0: the first NCCL with copy-engine collectives
SLOT_ALIGN = 4096  # bytes: a slot (one peer's piece of an all-to-all) starts and ends on it
LEAF_ALIGN = 256  # bytes: each array of a piece starts on it inside its slot


class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * 128)]


class Config(ctypes.Structure):
    """``ncclConfig_t`` as NCCL 2.27 laid it out: the library reads a config by its version and size."""

    _fields_ = [("size", ctypes.c_size_t), ("magic", ctypes.c_uint), ("version", ctypes.c_uint),
                ("blocking", ctypes.c_int), ("cgaClusterSize", ctypes.c_int), ("minCTAs", ctypes.c_int),
                ("maxCTAs", ctypes.c_int), ("netName", ctypes.c_char_p), ("splitShare", ctypes.c_int),
                ("trafficClass", ctypes.c_int), ("commName", ctypes.c_char_p), ("collnetEnable", ctypes.c_int),
                ("CTAPolicy", ctypes.c_int), ("shrinkShare", ctypes.c_int), ("nvlsCTAs", ctypes.c_int)]

    @classmethod
    def with_policy(cls, policy: int) -> Config:
        config = cls(size=ctypes.sizeof(cls), magic=0xCAFEBEEF, version=22703)
        for name, kind in cls._fields_[3:]:
            if kind is ctypes.c_int:
                setattr(config, name, UNDEF)
        config.CTAPolicy = policy
        return config


@functools.cache
def library() -> ctypes.CDLL:
    """The libnccl that CuPy loaded, with the signatures used here."""
    import cupy.cuda.nccl  # noqa: F401 - loads libnccl.so.2 into this process

    lib = ctypes.CDLL("libnccl.so.2")
    lib.ncclGetErrorString.restype = ctypes.c_char_p
    lib.ncclCommInitRankConfig.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, UniqueId, ctypes.c_int,
                                           ctypes.POINTER(Config)]
    lib.ncclAlltoAll.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p,
                                 ctypes.c_void_p]
    lib.ncclMemAlloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
    lib.ncclCommWindowRegister.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                                           ctypes.POINTER(ctypes.c_void_p), ctypes.c_int]
    lib.ncclCommAbort.argtypes = [ctypes.c_void_p]
    return lib


def check(result: int, what: str) -> None:
    """Raise where an NCCL call returned an error code."""
    if result != 0:
        raise RuntimeError(f"{what}: NCCL error {result} ({library().ncclGetErrorString(result).decode()})")


def version() -> int:
    """NCCL's version code (``22809`` for 2.28.9)."""
    code = ctypes.c_int()
    check(library().ncclGetVersion(ctypes.byref(code)), "ncclGetVersion")
    return code.value


def available() -> bool:
    """Whether this process's NCCL has copy-engine all-to-alls (2.28 or later)."""
    try:
        return version() >= MIN_VERSION
    except Exception:  # noqa: BLE001 - no CuPy, no NCCL, an older library: not here
        return False


def unique_id() -> bytes:
    """A fresh bootstrap id (128 bytes) for :class:`CopyEngine` (made on one rank, shipped to all)."""
    unique = UniqueId()
    check(library().ncclGetUniqueId(ctypes.byref(unique)), "ncclGetUniqueId")
    return ctypes.string_at(ctypes.addressof(unique), ctypes.sizeof(UniqueId))


def align(nbytes: int, to: int) -> int:
    return -(-nbytes // to) * to


def packed(sizes: list[int]) -> tuple[list[int], int]:
    """Where arrays of ``sizes`` bytes start in one slot, each on :data:`LEAF_ALIGN`, and the bytes
    the slot needs (a multiple of :data:`SLOT_ALIGN`)."""
    offsets, end = [], 0
    for nbytes in sizes:
        offsets.append(end)
        end = align(end + nbytes, LEAF_ALIGN)
    return offsets, align(end, SLOT_ALIGN)


@dataclass(eq=False)
class Window:
    """A send and a receive buffer of ``nbytes`` each, both registered symmetric windows (uint8
    CuPy arrays over NCCL's memory)."""

    send: object
    recv: object
    nbytes: int


class WindowPool:
    """Windows of a link's collective exchanges: :meth:`take` hands out a free window of at least the
    size asked for (making a new one, collectively, where none is free), :meth:`give` returns it.
    Every rank makes the same takes and gives in the same order, so the ranks' pools pair up."""

    def __init__(self) -> None:
        self._free: list = []

    def _allocate(self, nbytes: int):
        raise NotImplementedError

    def take(self, nbytes: int):
        """The smallest free window of at least ``nbytes``; a new one where none is free."""
        window = self._fitting(nbytes)
        if window is None:
            return self._allocate(nbytes)
        self._free.remove(window)
        return window

    def reserve(self, nbytes: int) -> None:
        """A free window of at least ``nbytes`` made now where none is (collective, as every
        allocation): :meth:`take` then finds it without a registration, which blocks until every
        rank joins, inside a transfer."""
        if self._fitting(nbytes) is None:
            self._free.append(self._allocate(nbytes))

    def _fitting(self, nbytes: int):
        fits = [w for w in self._free if w.nbytes >= nbytes]
        return min(fits, key=lambda w: w.nbytes) if fits else None

    def give(self, window) -> None:
        if window not in self._free:  # given back twice (a wait repeated on an error path): still once
            self._free.append(window)


class CopyEngine(WindowPool):
    """One rank's zero-CTA communicator over ``size`` ranks (``uid`` from :func:`unique_id`) and its
    pool of send and receive windows."""

    def __init__(self, size: int, rank: int, uid: bytes) -> None:
        super().__init__()
        lib = library()
        unique = UniqueId()
        ctypes.memmove(ctypes.addressof(unique), uid, ctypes.sizeof(UniqueId))
        self.comm = ctypes.c_void_p()
        check(lib.ncclCommInitRankConfig(ctypes.byref(self.comm), size, unique, rank,
                                         ctypes.byref(Config.with_policy(POLICIES["zero_cta"]))),
              "ncclCommInitRankConfig (zero-CTA policy)")
        self.size, self.rank = size, rank

    def _allocate(self, nbytes: int) -> Window:
        import cupy

        lib, arrays = library(), []
        for _ in range(2):
            pointer, handle = ctypes.c_void_p(), ctypes.c_void_p()
            check(lib.ncclMemAlloc(ctypes.byref(pointer), nbytes), "ncclMemAlloc")
            check(lib.ncclCommWindowRegister(self.comm, pointer, nbytes, ctypes.byref(handle), WIN_COLL_SYMMETRIC),
                  "ncclCommWindowRegister")
            memory = cupy.cuda.UnownedMemory(pointer.value, nbytes, owner=self)
            arrays.append(cupy.ndarray((nbytes,), dtype=cupy.uint8, memptr=cupy.cuda.MemoryPointer(memory, 0)))
        return Window(arrays[0], arrays[1], nbytes)

    def alltoall(self, window: Window, slot: int, stream) -> None:
        """Slot ``r`` of ``window.send`` (``slot`` bytes, a multiple of 8) to rank ``r``'s receive slot
        of this rank, on ``stream``."""
        check(library().ncclAlltoAll(window.send.data.ptr, window.recv.data.ptr, slot // 8, NCCL_FLOAT64, self.comm,
                                     stream.ptr), "ncclAlltoAll")

    def abort(self) -> None:
        """Stop the communicator (unblocks transfers waiting for a lost peer). Its windows are not
        freed: pieces of the failed run may still view them, and a freed buffer under a live view
        would be worse than the memory a failed run leaves behind."""
        library().ncclCommAbort(self.comm)
        self._free = []
