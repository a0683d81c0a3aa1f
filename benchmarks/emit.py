"""Shared by the benchmark scripts: print the result document as JSON, and keep a copy if asked;
time a GPU call by CUDA events; wait for a worker's GPU."""

from __future__ import annotations

import json


def emit(document: dict, path: str | None = None) -> None:
    """Print ``document`` (indented JSON) and also write it to ``path`` when given."""
    text = json.dumps(document, indent=2)
    print(text)
    if path:
        with open(path, "w") as f:
            f.write(text + "\n")


def event_seconds(cp, fn, repeat: int, warmup: int = 1) -> float:
    """Seconds per call of ``fn()`` on the GPU: ``repeat`` calls between two CUDA events, after
    ``warmup`` untimed calls and a synchronisation (``cp`` is CuPy)."""
    for _ in range(warmup):
        fn()
    cp.cuda.Device().synchronize()
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    start.record()
    for _ in range(repeat):
        fn()
    stop.record()
    stop.synchronize()
    return cp.cuda.get_elapsed_time(start, stop) * 1e-3 / repeat


def device_synchronize() -> None:
    """Wait for this process's GPU, if it has one (run on the workers by a client)."""
    from daskflow.backend import cupy_or_none

    cupy = cupy_or_none()
    if cupy is not None:
        cupy.cuda.runtime.deviceSynchronize()
