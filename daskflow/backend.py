"""Array-module selection: one code path for NumPy (CPU) and CuPy (GPU).

CuPy is imported lazily so that importing daskflow never creates a CUDA context (a process that
starts GPU workers must not own one before they start).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
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
