"""The autotuner's cache: which candidate won on a problem and a cluster shape, kept across runs.

A JSON file, ``$DASKFLOW_CACHE_DIR/autotune.json`` (else ``$XDG_CACHE_HOME/daskflow`` or
``~/.cache/daskflow``), one entry per key (:func:`cache_key`, described in :mod:`daskflow.autotune`):
the choice and the timing table it came from. An unreadable cache is ignored (with a warning) and
rewritten; an unwritable one only warns.
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from pathlib import Path

import numpy as np

from daskflow.grid import Grid

logger = logging.getLogger("daskflow.autotune")

CACHE_VERSION = 2  # 2: the exchange backend is part of a candidate
STAGGER = "ccc"  # the pressure lives at cell centres


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    from daskflow.backend import device_name

    return device_name(np)


def _device_name(device: str) -> str:
    if device == "gpu":
        import cupy

        from daskflow.backend import device_name

        return device_name(cupy)
    return _cpu_name()


def describe_cluster(client=None, device: str = "cpu") -> dict:
    """The cluster shape in the cache key: workers, threads per worker, hosts, protocol, device kind
    and names (in process: ``workers`` 0 and this process's device)."""
    if client is None:
        return {"workers": 0, "in_process": True, "device": device, "device_names": [_device_name(device)]}
    client.wait_for_workers(1, timeout=120)
    info = client.scheduler_info(n_workers=-1)["workers"]
    names = client.run(_device_name, device)
    return {"workers": len(info), "threads_per_worker": sorted({int(w.get("nthreads", 1)) for w in info.values()}),
            "hosts": len({w.get("host") for w in info.values()}),
            "protocol": str(client.scheduler.address).split("://", 1)[0],
            "device": device, "device_names": sorted(set(names.values()))}


def cache_path() -> Path:
    """``$DASKFLOW_CACHE_DIR/autotune.json``, else under ``$XDG_CACHE_HOME`` or ``~/.cache``."""
    root = os.environ.get("DASKFLOW_CACHE_DIR")
    if root:
        return Path(root) / "autotune.json"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "daskflow" / "autotune.json"


def cache_key(grid: Grid, bc, dtype, cands, cluster: dict, stagger: str = STAGGER, comms=(None,)) -> dict:
    """See the module docstring (lengths and stretching are deliberately not part of it)."""
    from daskflow.version import __version__

    return {"cache_version": CACHE_VERSION, "daskflow": __version__, "grid": list(grid.shape),
            "bc": list(bc), "stagger": stagger, "dtype": str(np.dtype(dtype)),
            "candidates": [[p[0], p[1], m] for p, m in cands], "comms": list(comms), "cluster": cluster}


def key_text(key: dict) -> str:
    return json.dumps(key, sort_keys=True, separators=(",", ":"))


def read_cache(path: Path | None = None) -> dict:
    path = path or cache_path()
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
        if not isinstance(data, dict) or not isinstance(data.get("entries"), dict):
            raise ValueError("not an autotune cache")
        return data["entries"]
    except (OSError, ValueError) as exc:
        logger.warning("autotune: ignoring the unreadable cache %s (%s)", path, exc)
        return {}


def write_cache(key: dict, entry: dict, path: Path | None = None) -> bool:
    """Add ``entry`` under ``key`` (atomic replace); False (and a warning) when it cannot be written."""
    path = path or cache_path()
    try:
        entries = read_cache(path)
        entries[key_text(key)] = {**entry, "key": key}
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}")
        tmp.write_text(json.dumps({"version": CACHE_VERSION, "entries": entries}, indent=1))
        os.replace(tmp, path)
        return True
    except OSError as exc:
        logger.warning("autotune: could not write the cache %s (%s)", path, exc)
        return False
