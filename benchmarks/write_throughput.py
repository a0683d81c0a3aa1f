"""Checkpoint write throughput from GPU (or CPU) pencils into a Zarr store (local disk), GB/s.

Every worker copies its CuPy pencils to the host inside its own task and writes its chunks; one
checkpoint writes u, v, w, p (with a CRC32C per chunk), then syncs the slot to disk before its
pointer moves. ``--gpus 1`` runs in process; ``--gpus N`` uses a LocalCUDACluster with one pencil
per GPU. ``seconds_without_sync`` repeats the measurement with the sync left out: the difference is
what the ``fsync`` of a checkpoint costs. Prints one JSON document with the device name.

    python benchmarks/write_throughput.py [--shape 512 256 144] [--gpus 1 4] [--compression none]
    python benchmarks/write_throughput.py --device cpu --shape 128 64 64
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path


def _config(shape, pencils, store, compression, device="gpu"):
    return {"grid": {"shape": list(shape), "lengths": [12.0, 6.0, 2.0], "z_stretch": 2.0},
            "physics": {"nu": 3.5e-4, "forcing": {"kind": "flow_rate", "value": [1.0, 0.0]}},
            "boundaries": {"preset": "channel"}, "initial": {"kind": "turbulent_channel", "amplitude": 0.2},
            "time": {"implicit_diffusion": "z"},
            "solver": {"pencils": list(pencils), "device": device},
            "output": {"store": store, "scalars_every": 0, "profiles_every": 0, "fields_every": 0,
                       "checkpoint_every": 0, "compression": compression}}


def measure(shape, gpus: int, compression: str, repeat: int, directory: Path, device: str = "gpu") -> dict:
    from daskflow import Simulation

    store = str(directory / f"write-{gpus}.zarr")
    shutil.rmtree(store, ignore_errors=True)
    nbytes = 4 * 8 * shape[0] * shape[1] * shape[2]
    if gpus == 1:
        sim = Simulation(_config(shape, (1, 1), store, compression, device))
        return _timed(sim, nbytes, repeat, gpus, shape)
    from dask_cuda import LocalCUDACluster
    from distributed import Client

    with LocalCUDACluster(CUDA_VISIBLE_DEVICES=",".join(map(str, range(gpus))), protocol="ucx",
                          dashboard_address=None) as cluster, Client(cluster) as client:
        sim = Simulation(_config(shape, (gpus, 1), store, compression), client=client)
        sim.run(steps=1)
        return _timed(sim, nbytes, repeat, gpus, shape)


def _timed(sim, nbytes: int, repeat: int, gpus: int, shape) -> dict:
    from daskflow.io import store

    def seconds_per_checkpoint() -> float:
        sim.checkpoint()  # warm-up (store metadata, pools)
        start = time.perf_counter()
        for _ in range(repeat):
            sim.checkpoint()
        return (time.perf_counter() - start) / repeat

    seconds = seconds_per_checkpoint()
    synced = store.sync_to_disk
    store.sync_to_disk = lambda directory: None  # in process only: cluster workers keep syncing
    try:
        unsynced = seconds_per_checkpoint() if gpus == 1 else None
    finally:
        store.sync_to_disk = synced
    return {"gpus": gpus, "shape": list(shape), "bytes_per_checkpoint": nbytes, "seconds": seconds,
            "gb_per_s": nbytes / seconds / 1e9, "seconds_without_sync": unsynced}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shape", type=int, nargs=3, default=[512, 256, 144])
    parser.add_argument("--gpus", type=int, nargs="+", default=[1])
    parser.add_argument("--compression", default="none", choices=["none", "zstd"])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--device", default="gpu", choices=["gpu", "cpu"])
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for gpus in args.gpus:
            shape = [args.shape[0], args.shape[1] * gpus, args.shape[2]]
            results.append(measure(shape, gpus, args.compression, args.repeat, Path(tmp), args.device))
    import numpy as np

    from daskflow.backend import cupy_or_none, device_name

    xp = (cupy_or_none() or np) if args.device == "gpu" else np
    print(json.dumps({"benchmark": "write_throughput", "device": device_name(xp),
                      "compression": args.compression, "disk": "local (temporary directory)",
                      "results": results}, indent=2))


if __name__ == "__main__":
    main()
