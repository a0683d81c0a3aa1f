"""Array-module selection: one code path for NumPy (CPU) and CuPy (GPU).

CuPy is imported lazily so that importing daskflow never creates a CUDA context (a process that
starts GPU workers must not own one before they start).
"""

from __future__ import annotations

import functools
import os
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from types import ModuleType
from typing import Any

import numpy as np


def cupy_or_none() -> ModuleType | None:
    """The ``cupy`` module if it imports and sees a GPU, else ``None``."""
    try:
        import cupy
    except Exception:  # noqa: BLE001 - any import failure means "no GPU path"
        return None
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            return None
    except Exception:  # noqa: BLE001 - no driver, no device
        return None
    return cupy


def is_cupy_array(x: Any) -> bool:
    """True for a ``cupy.ndarray`` (checked without importing CuPy)."""
    return type(x).__module__.startswith("cupy")


def is_dask_array(x: Any) -> bool:
    """True for a ``dask.array.Array`` (checked without importing Dask)."""
    return type(x).__module__.startswith("dask.array")


def array_module(x: Any) -> ModuleType:
    """``cupy`` for CuPy arrays, ``numpy`` for everything else."""
    if is_cupy_array(x):
        import cupy

        return cupy
    return np


_CONSTANTS: dict = {}  # (device, dtype, shape, bytes) -> device array: see device_constant
_CONSTANTS_KEPT = 256  # the most kept; the oldest goes first
_CONSTANTS_LOCK = threading.Lock()  # a team's participants are threads of one process


def upload_together(xp: ModuleType, arrays: list) -> list:
    """Host ``arrays`` as ``xp`` arrays of their shapes in one transfer: views of one device buffer of
    their common dtype (each upload from pageable host memory waits for the device's queue, so a
    set-up of several small arrays pays that wait once); NumPy: the arrays as they are."""
    host = [np.asarray(a) for a in arrays]
    if xp is np:
        return host
    flat = xp.asarray(np.concatenate([h.ravel() for h in host]))
    ends = np.cumsum([h.size for h in host])
    return [flat[end - h.size:end].reshape(h.shape) for h, end in zip(host, ends, strict=True)]


def device_constant(xp: ModuleType, values: Any, dtype: Any = np.float64):
    """The small host array ``values`` (grid spacings, metric factors; read-only) as an ``xp`` array
    of ``dtype``: NumPy as it is; on the GPU uploaded once per content and device and kept. A GPU
    step otherwise uploads the same few z-vectors about a hundred times, each a host-side call that
    a step bound by its host (a pencil of a multi-GPU run) pays in full."""
    host = np.asarray(values, dtype=dtype)
    if xp is np:
        return host
    key = (xp.cuda.runtime.getDevice(), host.dtype.str, host.shape, host.tobytes())
    with _CONSTANTS_LOCK:
        kept = _CONSTANTS.get(key)
        if kept is None:
            if len(_CONSTANTS) >= _CONSTANTS_KEPT:
                del _CONSTANTS[next(iter(_CONSTANTS))]
            kept = _CONSTANTS[key] = xp.asarray(host)
    return kept


@functools.cache
def _raw_kernel(source: str, name: str, device: int, options: tuple):
    import cupy

    return cupy.RawKernel(source, name, options=options)


def raw_kernel(source: str, name: str, options: tuple = ()):
    """CUDA kernel ``name`` of ``source`` for the current device, compiled once per source, device
    and compiler ``options`` (CuPy's ``RawKernel``)."""
    import cupy

    return _raw_kernel(source, name, cupy.cuda.runtime.getDevice(), tuple(options))


def element_strides(a) -> tuple:
    """The strides of array ``a`` in elements, as the ``int64`` arguments a raw kernel takes."""
    return _element_strides(a.strides, a.itemsize)


@functools.lru_cache(maxsize=256)
def _element_strides(strides: tuple, itemsize: int) -> tuple:
    return tuple(np.int64(s // itemsize) for s in strides)


def device_name(xp: ModuleType) -> str:
    """Human-readable name of the device an array module computes on."""
    if xp is np:
        import platform

        return platform.processor() or platform.machine() or "cpu"
    props = xp.cuda.runtime.getDeviceProperties(xp.cuda.Device().id)
    name = props["name"]
    return name.decode() if isinstance(name, bytes) else str(name)


def to_numpy(x: Any) -> np.ndarray:
    """Host copy of a NumPy or CuPy array."""
    return x.get() if is_cupy_array(x) else np.asarray(x)


@functools.cache
def numba_or_none() -> ModuleType | None:
    """The ``numba`` module if it imports, else ``None``."""
    try:
        import numba
    except ImportError:
        return None
    return numba


def compiled_loops() -> bool:
    """Whether NumPy work runs the compiled (Numba) loops: Numba importable and the environment
    variable ``DASKFLOW_NUMBA`` not ``0`` (``0``: the array code, e.g. to compare the two)."""
    return os.environ.get("DASKFLOW_NUMBA", "1") != "0" and numba_or_none() is not None


def compiled(fn: Callable) -> Callable:
    """``fn`` compiled by Numba on its first call (GIL released, machine code cached on disk next to
    the module, so a new process such as a Dask worker loads it instead of compiling again)."""
    jitted = None

    @functools.wraps(fn)
    def call(*args):
        nonlocal jitted
        if jitted is None:
            jitted = numba_or_none().njit(nogil=True, cache=True, error_model="numpy")(fn)
        return jitted(*args)

    return call


class HostPool:
    """Host buffers handed out again once nothing uses them: NumPy's counterpart of CuPy's pool.

    A time step allocates the same few dozen field-sized temporaries every substep. glibc serves
    blocks above 32 MiB (its largest mmap threshold; above 128 KiB in a process started with only
    ``MALLOC_TRIM_THRESHOLD_`` set, such as a default Dask worker) from fresh ``mmap``: zero-filled
    pages that fault on first touch, every time. :meth:`empty` returns a view of a pooled byte buffer instead;
    the buffer is free again when no array derived from it is alive, which CPython's reference count
    of the buffer tells exactly (every view or slice holds it). Smaller arrays (below
    ``min_bytes``, default :func:`_unreused_size`) are plain allocations: glibc reuses those blocks
    already, and pooling them kept memory from the FFTs' own temporaries (measured 128 x 64 x 64
    channel step, one core: 71 ms pooled against 64 ms; 256 x 128 x 128, fields of 34 MB: 771 ms
    pooled against 939 ms). At most ``limit`` bytes are kept (default :data:`HOST_POOL_LIMIT`):
    idle buffers are dropped, least recently used first, to make room, and past the limit arrays are
    plain allocations too.
    """

    def __init__(self, limit: int | None = None, min_bytes: int | None = None) -> None:
        self.limit = HOST_POOL_LIMIT if limit is None else limit
        self.min_bytes = _unreused_size() if min_bytes is None else min_bytes
        self._buffers: list[np.ndarray] = []
        self._stamps: list[int] = []  # when each buffer was last handed out
        self._handed = 0
        self._lock = threading.Lock()
        self._idle_refs = _idle_refs()

    @property
    def held_bytes(self) -> int:
        """Bytes of all pooled buffers, in use or free."""
        return sum(b.nbytes for b in self._buffers)

    def empty(self, shape: tuple, dtype, order: str = "C") -> np.ndarray:
        """An uninitialised array like ``np.empty(shape, dtype, order=order)``."""
        dtype = np.dtype(dtype)
        nbytes = int(np.prod(shape)) * dtype.itemsize
        if nbytes < self.min_bytes:
            return np.empty(shape, dtype, order=order)
        with self._lock:
            self._handed += 1
            best = None
            for i in range(len(self._buffers)):  # the idle one handed out last: warmest in cache
                if self._buffers[i].nbytes == nbytes and _refcount(self._buffers, i) == self._idle_refs and (
                        best is None or self._stamps[i] > self._stamps[best]):
                    best = i
            if best is None:
                if nbytes == 0 or not self._make_room(nbytes):
                    return np.empty(shape, dtype, order=order)
                self._buffers.append(np.empty(nbytes, dtype=np.uint8))
                self._stamps.append(0)
                best = len(self._buffers) - 1
            self._stamps[best] = self._handed
            return np.ndarray(shape, dtype, buffer=self._buffers[best], order=order)

    def _make_room(self, nbytes: int) -> bool:
        """Drop idle buffers, least recently handed out first, until ``nbytes`` more fit under the
        limit (sizes a process no longer uses do not stay); whether they fit (lock held)."""
        idle = sorted((self._stamps[i], i) for i in range(len(self._buffers))
                      if _refcount(self._buffers, i) == self._idle_refs)
        drop, held = set(), self.held_bytes
        for _, i in idle:
            if held + nbytes <= self.limit:
                break
            drop.add(i)
            held -= self._buffers[i].nbytes
        if drop:
            keep = [i for i in range(len(self._buffers)) if i not in drop]
            self._buffers = [self._buffers[i] for i in keep]
            self._stamps = [self._stamps[i] for i in keep]
        return held + nbytes <= self.limit

    def clear(self) -> None:
        """Forget every buffer (those in use stay valid for their arrays)."""
        with self._lock:
            self._buffers, self._stamps = [], []


def _unreused_size() -> int:
    """Bytes from which glibc serves this process fresh ``mmap`` pages for every allocation: 32 MiB
    (its largest adaptive threshold), or 128 KiB when ``MALLOC_TRIM_THRESHOLD_`` is set without
    ``MALLOC_MMAP_THRESHOLD_`` (setting it switches the adaptation off; distributed starts its
    workers that way unless told otherwise, see :data:`daskflow.cluster.WORKER_MALLOC`)."""
    if "MALLOC_TRIM_THRESHOLD_" in os.environ and "MALLOC_MMAP_THRESHOLD_" not in os.environ:
        return 128 << 10
    return 32 << 20


def _refcount(buffers: list, i: int) -> int:
    return sys.getrefcount(buffers[i])


def _idle_refs() -> int:
    """What :func:`_refcount` gives for a buffer that only its list holds, as this interpreter
    counts (newer CPythons borrow some references): measured, not assumed."""
    return _refcount([np.empty(1, dtype=np.uint8)], 0)


def _default_pool_limit() -> int:
    """A quarter of the machine's memory, at most 16 GiB (``DASKFLOW_HOST_POOL_BYTES`` overrides)."""
    if "DASKFLOW_HOST_POOL_BYTES" in os.environ:
        return int(os.environ["DASKFLOW_HOST_POOL_BYTES"])
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        total = 16 << 30
    return min(16 << 30, total // 4)


#: bytes a process's :data:`HOST_POOL` keeps at most, idle or in use (:func:`_default_pool_limit`)
HOST_POOL_LIMIT = _default_pool_limit()
HOST_POOL = HostPool()


def cpu_threads() -> int:
    """Threads the NumPy path may use inside one process: ``DASKFLOW_THREADS``, else
    ``OMP_NUM_THREADS``, else 1 (Dask workers and tests stay single-threaded unless told)."""
    for name in ("DASKFLOW_THREADS", "OMP_NUM_THREADS"):
        value = os.environ.get(name, "").strip()
        if value.isdigit() and int(value) > 0:
            return int(value)
    return 1


_POOLS: dict[int, ThreadPoolExecutor] = {}


def run_in_threads(fn: Callable, ranges: Sequence[tuple[int, int]], threads: int) -> None:
    """``fn(start, stop)`` for every range, on a pool of ``threads`` threads (in this thread when
    ``threads`` is 1 or there is one range); the work must release the GIL to gain anything."""
    if threads <= 1 or len(ranges) <= 1:
        for r in ranges:
            fn(*r)
        return
    if threads not in _POOLS:
        _POOLS[threads] = ThreadPoolExecutor(threads, thread_name_prefix="daskflow-cpu")
    for future in [_POOLS[threads].submit(fn, *r) for r in ranges]:
        future.result()


def even_ranges(n: int, parts: int) -> list[tuple[int, int]]:
    """``[start, stop)`` ranges cutting ``range(n)`` into at most ``parts`` nearly equal pieces."""
    size = -(-n // max(1, parts))
    return [(k, min(k + size, n)) for k in range(0, n, size)] if n else []
