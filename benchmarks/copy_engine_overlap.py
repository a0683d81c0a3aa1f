"""How much of a peer copy on the copy engines the pressure solve's transforms hide. One process,
two GPUs of one host, CuPy.

A pipelined transpose overlaps each z slab's transfer with the next slab's transforms. With
``daskflow.copy-engine: ipc`` the transfer is a ``cudaMemcpyAsync`` from this GPU's copy engine
into the peer's memory; this benchmark times, with CUDA events on GPU 0 (median of ``--repeat``):

* ``transforms_ms``: four FFTs along y of a complex field of ``--shape`` (z, y, x), on the default
  stream: bandwidth-bound, as the solve's transforms are;
* ``copy_ms``: a peer copy of ``MiB`` to GPU 1 on a stream of its own;
* ``together_ms``: both at once on their two streams;
* ``hidden_fraction``: ``(transforms + copy - together) / min(transforms, copy)``, the share of the
  shorter of the two that the overlap hid: 1 when the longer alone sets the time.

Prints one JSON document with the device name.

    python benchmarks/copy_engine_overlap.py [--mib 50 150 512] [--shape 144 256 257]
"""

from __future__ import annotations

import argparse
import json

import numpy as np
from transpose import enable_peer_access


def _median_ms(cupy, run, repeat: int) -> float:
    """Median wall time of ``run()`` on GPU 0's default stream (CUDA events), after one warm-up."""
    run()
    cupy.cuda.runtime.deviceSynchronize()
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    times = []
    for _ in range(repeat):
        start.record()
        run()
        stop.record()
        stop.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, stop))
    return float(np.median(times))


def measure(mib: int, shape: tuple[int, int, int], repeat: int) -> dict:
    """The four timings for one copy size (GPU 0 sends to GPU 1)."""
    import cupy

    nbytes = mib * 2**20
    with cupy.cuda.Device(1):
        target = cupy.empty(nbytes, dtype=cupy.uint8)
    cupy.cuda.Device(0).use()
    field = cupy.random.random(shape) + 1j * cupy.random.random(shape)
    source = cupy.ones(nbytes, dtype=cupy.uint8)
    side = cupy.cuda.Stream(non_blocking=True)

    def transforms():
        for _ in range(4):
            cupy.fft.fft(field, axis=1)

    def copy(then=None):
        queued = cupy.cuda.Event(disable_timing=True)
        queued.record()
        side.wait_event(queued)
        cupy.cuda.runtime.memcpyPeerAsync(target.data.ptr, 1, source.data.ptr, 0, nbytes, side.ptr)
        if then is not None:
            then()
        done = cupy.cuda.Event(disable_timing=True)
        done.record(side)
        cupy.cuda.get_current_stream().wait_event(done)

    out = {"mib": mib, "transforms_ms": _median_ms(cupy, transforms, repeat),
           "copy_ms": _median_ms(cupy, copy, repeat),
           "together_ms": _median_ms(cupy, lambda: copy(then=transforms), repeat)}
    hidden = out["transforms_ms"] + out["copy_ms"] - out["together_ms"]
    out["hidden_fraction"] = hidden / min(out["transforms_ms"], out["copy_ms"])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, nargs="+", default=[50, 150, 512], help="MiB per peer copy")
    parser.add_argument("--shape", type=int, nargs=3, default=[144, 256, 257], help="(z, y, x) of the complex field")
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()
    import cupy

    if cupy.cuda.runtime.getDeviceCount() < 2:
        raise SystemExit("copy_engine_overlap: needs two GPUs of one host")
    enable_peer_access(2)
    print(json.dumps({"benchmark": "copy_engine_overlap",
                      "device": cupy.cuda.runtime.getDeviceProperties(0)["name"].decode(),
                      "shape": args.shape, "repeat": args.repeat,
                      "results": [measure(mib, tuple(args.shape), args.repeat) for mib in args.mib]}, indent=2))


if __name__ == "__main__":
    main()
