"""NCCL's point-to-point rate between the GPUs of one process, under NCCL settings: what a pressure
transpose's transfer (about 72 MiB each way at pencils (2, 1)) and a halo round (about 1.8 MiB) can
get from the links. Prints one JSON line per setting and size (ms per exchange, GB/s out of a GPU).

    python benchmarks/nccl_p2p_settings.py --gpus 2 --mib 72 1.8 \
        --settings "" NCCL_MIN_P2P_NCHANNELS=8 NCCL_MIN_P2P_NCHANNELS=32 NCCL_PROTO=Simple

NCCL reads its settings once per process, so each setting runs in a process of its own (``--one``
is that process). Every GPU sends ``MIB`` to each other GPU and receives as much, one grouped
``ncclSend``/``ncclRecv`` per exchange, 20 timed after 3.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

REPEATS, WARMUP = 20, 3


def one(gpus: int, mib: float) -> dict:
    """The exchange timed in this process (``gpus`` GPUs, ``mib`` to each peer)."""
    import cupy as cp
    from cupy.cuda import nccl

    from daskflow.backend import device_name

    devices = list(range(gpus))
    comms = nccl.NcclCommunicator.initAll(devices)
    per_peer = int(mib * 2**20)
    buffers = []
    for d in devices:
        with cp.cuda.Device(d):
            size = per_peer * (gpus - 1)
            buffers.append((cp.ones(size, dtype=cp.uint8), cp.zeros(size, dtype=cp.uint8),
                            cp.cuda.Stream(non_blocking=True)))

    def exchange() -> None:
        nccl.groupStart()
        for rank, d in enumerate(devices):
            with cp.cuda.Device(d):
                send, recv, stream = buffers[rank]
                for slot, peer in enumerate(p for p in devices if p != rank):
                    comms[rank].send(send.data.ptr + slot * per_peer, per_peer, nccl.NCCL_UINT8, peer, stream.ptr)
                    comms[rank].recv(recv.data.ptr + slot * per_peer, per_peer, nccl.NCCL_UINT8, peer, stream.ptr)
        nccl.groupEnd()

    def synchronize() -> None:
        for d in devices:
            with cp.cuda.Device(d):
                cp.cuda.Device().synchronize()

    for _ in range(WARMUP):
        exchange()
    synchronize()
    start = time.perf_counter()
    for _ in range(REPEATS):
        exchange()
    synchronize()
    ms = (time.perf_counter() - start) / REPEATS * 1e3
    settings = {k: v for k, v in os.environ.items() if k.startswith("NCCL_") and k != "NCCL_NVLS_ENABLE"}
    return {"benchmark": "nccl_p2p_settings", "device": device_name(cp),
            "gpus": gpus, "mib_to_each_peer": mib, "ms": ms, "gb_s_out": per_peer * (gpus - 1) / ms / 1e6,
            "nccl": nccl.get_version(), "settings": settings}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=2)
    parser.add_argument("--mib", type=float, nargs="+", default=[72.0, 1.8])
    parser.add_argument("--settings", nargs="+", default=[""], help="NAME=VALUE per process ('' as the host has it)")
    parser.add_argument("--one", action="store_true", help="time one size in this process")
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.gpus, args.mib[0])))
        return
    for setting in args.settings:
        env = dict(os.environ)
        if setting:
            name, value = setting.split("=", 1)
            env[name] = value
        for mib in args.mib:
            subprocess.run([sys.executable, __file__, "--one", "--gpus", str(args.gpus), "--mib", str(mib)], env=env,
                           check=True)


if __name__ == "__main__":
    main()
