"""GIL switch interval of GPU workers against the multi-GPU channel step. Prints ONE JSON document.

    python benchmarks/gil_switch.py [--gpus 4] [--shape 512 1024 144] [--pencils 2 2] [--repeats 3]

One ``LocalCUDACluster`` over UCX (``channel_step.cuda_cluster``; when measured for
``docs/performance.md``, CuPy was on an RMM pool); the same ``Simulation`` alternates runs of ``--steps`` steps with
the workers' ``daskflow.gpu-switch-interval`` at Python's default (5 ms) and at daskflow's (0.2 ms),
so both are measured on the same machine, warm, in one call. A GPU fused task keeps the GIL while it
launches kernels, so a worker's event loop (which receives the peers' pieces) waits for the forced
hand-off; see :func:`daskflow.pencils.direct.collective`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from channel_step import _config, cluster_device, cuda_cluster

INTERVALS = {"python default": 5e-3, "daskflow": 2e-4}


def _set_interval(seconds: float) -> None:
    import dask

    dask.config.set({"daskflow.gpu-switch-interval": seconds})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gpus", type=int, default=4)
    parser.add_argument("--shape", type=int, nargs=3, default=[512, 1024, 144])
    parser.add_argument("--pencils", type=int, nargs=2, default=[2, 2])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    from distributed import Client

    from daskflow import Simulation

    with cuda_cluster(args.gpus) as cluster, Client(cluster) as client:
        sim = Simulation(_config(args.shape, "z", args.pencils), client=client)
        sim.run(steps=3)  # warm-up: kernels, FFT plans, memory pools
        ms = {name: [] for name in INTERVALS}
        for _ in range(args.repeats):
            for name, seconds in INTERVALS.items():
                client.run(_set_interval, seconds)
                start = time.perf_counter()
                sim.run(steps=args.steps)
                ms[name].append(1e3 * (time.perf_counter() - start) / args.steps)
        device = cluster_device(client)
        divergence = sim.divergence_max()
    json.dump({"benchmark": "gil_switch", "device": device, "gpus": args.gpus, "shape": args.shape,
               "pencils": args.pencils, "intervals_s": INTERVALS, "ms_per_step": ms,
               "divergence_max": divergence}, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
