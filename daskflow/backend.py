"""Array-module selection: one code path for NumPy (CPU) and CuPy (GPU).

CuPy is imported lazily so that importing daskflow never creates a CUDA context (a process that
starts GPU workers must not own one before they start).
"""

from __future__ import annotations

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
