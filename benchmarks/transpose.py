"""Transpose (all-to-all exchange) benchmark for CuPy pencils on 2 and 4 GPUs.

For each GPU count and each size per GPU, x->y transposes of slab pencils ``(P, 1)`` (an
all-to-all among the P workers) are timed three ways in the same run:

* ``raw``: the links — async peer-to-peer copies of the same pieces between the GPUs from one
  process (CuPy), no Dask;
* ``nccl_floor``: NCCL's grouped send/recv all-to-all of the same pieces from one process over
  all the GPUs (CuPy's NCCL), no Dask: what a transport inside the fused tasks can approach;
* ``stage``: Dask graph with one task per piece and one assembly task per destination (UCX);
* ``fused-mailbox`` / ``fused-nccl`` / ``fused-ucx``: one task per worker, the exchange's pieces
  sent directly between workers through daskflow's transports (``cluster.comm``): distributed's
  RPC over UCX, NCCL inside the task, or UCXX's tag-matched messages between the workers' own UCX
  endpoints (skipped, and said so in the output, where UCXX does not import on the workers);
* ``fused-nccl-ipc`` / ``fused-nccl-ce``: the NCCL transport with its transposes on the copy
  engines (``daskflow.copy-engine``): one-sided copies into the peer's receive windows, which move
  transposes between pairs of workers only (on more GPUs: NCCL point to point), or NCCL's
  copy-engine all-to-all.

For the Dask designs: the time per transpose in a chain of ``--chain`` dependent transposes
submitted as one graph, and the wall time of one transpose submitted and awaited from the client.
For the fused designs also the steady time per transpose and the fixed cost of a run (the fused
tasks submitted, started and awaited), from chains of ``--chain`` and ``4 * --chain`` transposes
(``channel_step.steady``): the chained figure carries ``1 / --chain`` of that cost in every
transpose, the steady one is what a transpose costs inside a longer fused task (a time step).
Prints one JSON document.

    python benchmarks/transpose.py [--gpus 2 4] [--mib 64 1024] [--chain 20] [--repeat 5]
    python benchmarks/transpose.py --cpu ...     # smoke test with NumPy on a LocalCluster
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from functools import partial

import numpy as np


def _shape(mib_per_gpu: int, gpus: int) -> tuple[int, int, int]:
    """(nx, ny, nz) float64 with ``mib_per_gpu`` MiB per GPU for a (gpus, 1) slab split."""
    nx = ny = 1024 if mib_per_gpu >= 64 else 64
    nz = max(1, mib_per_gpu * 2**20 * gpus // (8 * nx * ny))
    return nx, ny, nz


def _timed_ms(once, repeat: int) -> float:
    """Median wall time of ``once()`` in ms over ``repeat`` calls after one untimed call."""
    once()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        once()
        times.append(time.perf_counter() - start)
    return 1e3 * float(np.median(times))


def enable_peer_access(gpus: int) -> None:
    """Direct access from each of GPUs ``0 .. gpus - 1`` to every other that allows it (this process)."""
    import cupy as cp

    for i in range(gpus):
        with cp.cuda.Device(i):
            for j in range(gpus):
                if i != j and cp.cuda.runtime.deviceCanAccessPeer(i, j):
                    try:
                        cp.cuda.runtime.deviceEnablePeerAccess(j)
                    except cp.cuda.runtime.CUDARuntimeError:
                        pass  # already enabled


def raw_all_to_all(gpus: int, mib_per_gpu: int, repeat: int) -> dict:
    """Peer-to-peer all-to-all of the same pieces, timed with device synchronisation."""
    import cupy as cp

    nbytes = mib_per_gpu * 2**20
    piece = nbytes // gpus
    enable_peer_access(gpus)
    src, dst = [], []
    for i in range(gpus):
        with cp.cuda.Device(i):
            src.append(cp.ones(nbytes // 8))
            dst.append(cp.empty(nbytes // 8))
    streams = [cp.cuda.Stream(non_blocking=True, device=i) if hasattr(cp.cuda.Stream, "device") else None
               for i in range(gpus)]

    def once():
        for i in range(gpus):  # every GPU sends its piece j to GPU j, on its own stream
            with cp.cuda.Device(i):
                stream = streams[i] or cp.cuda.Stream(non_blocking=True)
                for j in range(gpus):
                    cp.cuda.runtime.memcpyPeerAsync(dst[j].data.ptr + i * piece, j, src[i].data.ptr + j * piece, i,
                                                    piece, stream.ptr)
        for i in range(gpus):
            with cp.cuda.Device(i):
                cp.cuda.Device(i).synchronize()

    return {"raw_ms": _timed_ms(once, repeat)}


def nccl_all_to_all(gpus: int, mib_per_gpu: int, repeat: int) -> dict:
    """NCCL grouped send/recv all-to-all from one process over ``gpus`` devices, timed with device
    synchronisation (the floor the in-task transport is judged against)."""
    import cupy as cp
    from cupy.cuda import nccl

    count = mib_per_gpu * 2**20 // 8
    piece = count // gpus
    comms = nccl.NcclCommunicator.initAll(list(range(gpus)))
    src, dst, streams = [], [], []
    for i in range(gpus):
        with cp.cuda.Device(i):
            src.append(cp.ones(count))
            dst.append(cp.empty(count))
            streams.append(cp.cuda.Stream(non_blocking=True))

    def once():
        nccl.groupStart()
        for i, comm in enumerate(comms):
            for j in range(gpus):
                if i != j:
                    comm.send(src[i][j * piece:].data.ptr, piece, nccl.NCCL_FLOAT64, j, streams[i].ptr)
                    comm.recv(dst[i][j * piece:].data.ptr, piece, nccl.NCCL_FLOAT64, j, streams[i].ptr)
        nccl.groupEnd()
        for i in range(gpus):
            streams[i].synchronize()

    return {"nccl_floor_ms": _timed_ms(once, repeat), "nccl_version": nccl.get_version()}


def _plan(shape, gpus):
    from daskflow import Grid
    from daskflow.bc import Boundaries
    from daskflow.poisson.plan import SpectralPlan

    # x and y NN (cell centres): the x "spectral" length is nx, so the transposes move raw data.
    return SpectralPlan(Grid(shape), Boundaries.parse(("NN", "NN", "NN")), 1.0, 1.0, "ftm", (gpus, 1),
                        np.dtype("float64"))


DESIGNS = ("stage", "fused-mailbox", "fused-nccl", "fused-nccl-ipc", "fused-nccl-ce", "fused-ucx")
COPY_ENGINE = {"fused-nccl-ipc": "ipc", "fused-nccl-ce": "nccl"}  # daskflow.copy-engine of a design


def usable_designs(client, designs, cpu: bool) -> tuple[list[str], dict]:
    """The designs of ``designs`` this cluster can time, and why each other one is left out."""
    from daskflow.pencils import ucx

    skipped = {}
    for design in designs:
        if cpu and design.startswith("fused-nccl"):
            skipped[design] = "NumPy workers: NCCL moves device buffers only"
    if "fused-ucx" in designs and not all(client.run(ucx.available).values()):
        skipped["fused-ucx"] = "UCXX does not import on the workers (pip install ucxx-cu13 or ucxx-cu12)"
    return [d for d in designs if d not in skipped], skipped


def dask_designs(client, shape, gpus: int, chain: int, repeat: int, cpu: bool, designs=DESIGNS) -> dict:
    import dask
    from channel_step import _set_config, steady
    from distributed import wait

    from daskflow.pencils.direct import ensure_mailboxes, run_on_worker
    from daskflow.pencils.graph import DaskExecutor, placement_annotations
    from daskflow.pencils.layout import chunk_owner
    from daskflow.pencils.transport import make_comm
    from daskflow.poisson import algorithms

    plan = _plan(shape, gpus)
    dec = plan.decomposition
    workers = sorted(client.scheduler_info(n_workers=-1)["workers"])[:gpus]
    plan_ref = client.scatter(plan, broadcast=True, hash=False)
    ensure_mailboxes(client)
    owner = lambda k: chunk_owner(k, workers, 1)  # noqa: E731
    # home blocks in memory order (z, y, x), created on the workers
    make = (lambda s: np.ones(s)) if cpu else _cupy_ones
    blocks_f = {k: client.submit(make, (shape[2], dec.y[k[0]].stop - dec.y[k[0]].start, shape[0]),
                                 workers=[owner(k)], allow_other_workers=False, pure=False)
                for k in dec.indices}
    wait(list(blocks_f.values()))
    designs, skipped = usable_designs(client, designs, cpu)
    comms = {d: make_comm(client, workers, d.split("-")[1], "cpu" if cpu else "gpu") for d in designs
             if d.startswith("fused")}

    def run(design: str, count: int) -> float:
        token = f"{design}-{count}-{time.perf_counter_ns()}"
        if design == "stage":
            ex = DaskExecutor(plan_ref, token, owner)
            out = algorithms.transpose_chain(ex, plan, dict(blocks_f), count)
            tasks, placement = ex.graph, ex.placement
            keys = list(out.values())
        else:
            tasks, placement, keys = {}, {}, []
            algorithm = partial(transpose_chain_done, count=count)
            for i, w in enumerate(workers):
                mine = [k for k in dec.indices if owner(k) == w]
                key = (f"fused-{token}", i)
                tasks[key] = (run_on_worker, algorithm, plan_ref, token, workers, 1,
                              [([list(k) for k in mine], [blocks_f[k] for k in mine])], None, comms[design])
                placement[key] = w
                keys.append(key)
        start = time.perf_counter()
        with dask.annotate(**placement_annotations(placement, workers)):
            futures = client.get(tasks, keys, sync=False)
        wait(futures)
        seconds = time.perf_counter() - start
        for future in futures:
            if future.status == "error":
                raise future.exception()
        return seconds

    out = {"skipped": skipped} if skipped else {}
    for design in designs:
        # read where a site first runs: in the warm-up, by this design's own communicator
        client.run(_set_config, {"daskflow.copy-engine": COPY_ENGINE.get(design, "none")})
        run(design, 2)  # warm-up: connections, IPC handles, pools
        single = [run(design, 1) for _ in range(repeat)]
        chained = [run(design, chain) / chain for _ in range(max(1, repeat // 2))]
        out[design] = {"one_awaited_ms": 1e3 * float(np.median(single)),
                       "chained_per_transpose_ms": 1e3 * float(np.median(chained))}
        if design.startswith("fused"):
            per_transpose, per_run = steady(partial(run, design), chain)
            out[design].update(steady_per_transpose_ms=1e3 * per_transpose, per_run_ms=1e3 * per_run)
    return out


def transpose_chain_done(ex, plan, blocks: dict, count: int) -> dict:
    """:func:`daskflow.poisson.algorithms.transpose_chain`, returning only once the device has
    finished it: stream-ordered transports (NCCL) return from the task while the GPU still works,
    so without this the task's wall time would leave the transfers out."""
    from daskflow.backend import cupy_or_none
    from daskflow.poisson import algorithms

    out = algorithms.transpose_chain(ex, plan, blocks, count)
    cupy = cupy_or_none()
    if cupy is not None:
        cupy.cuda.get_current_stream().synchronize()
    return out


def _cupy_ones(shape):
    import cupy

    return cupy.ones(shape)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gpus", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--mib", type=int, nargs="+", default=[64, 1024], help="MiB per GPU")
    parser.add_argument("--chain", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--cpu", action="store_true", help="NumPy on a LocalCluster (smoke test)")
    parser.add_argument("--designs", nargs="+", default=list(DESIGNS), choices=DESIGNS)
    parser.add_argument("--protocol", default="ucx", choices=["ucx", "tcp"],
                        help="Dask's comms between the GPU workers (the mailbox's pieces travel over them)")
    parser.add_argument("--rmm-pool-size", default=None,
                        help="put CuPy on an RMM pool of this size on the workers (default: CuPy's own pool)")
    parser.add_argument("--raw", nargs=2, type=int, metavar=("GPUS", "MIB"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.raw:  # child process: raw peer copies without any Dask worker in the way
        print(json.dumps({**raw_all_to_all(args.raw[0], args.raw[1], args.repeat),
                          **nccl_all_to_all(args.raw[0], args.raw[1], args.repeat)}))
        return

    from channel_step import cuda_cluster
    from distributed import Client

    import daskflow

    results, device = [], "cpu"
    for gpus in args.gpus:
        raws = {}
        if not args.cpu:
            for mib in args.mib:
                proc = subprocess.run([sys.executable, __file__, "--raw", str(gpus), str(mib), "--repeat",
                                       str(args.repeat)], capture_output=True, text=True, check=True)
                raws[mib] = json.loads(proc.stdout.strip().splitlines()[-1])
        if args.cpu:
            from distributed import LocalCluster

            cluster = LocalCluster(n_workers=gpus, threads_per_worker=1, dashboard_address=None)
        else:
            cluster = cuda_cluster(gpus, args.protocol, args.rmm_pool_size)
        with cluster, Client(cluster) as client:
            if not args.cpu:
                from channel_step import cluster_device

                device = cluster_device(client)
            for mib in args.mib:
                shape = _shape(mib, gpus) if not args.cpu else (64, 64, max(1, mib * 2**20 * gpus // (8 * 64 * 64)))
                row = {"gpus": gpus, "mib_per_gpu": mib, "shape": list(shape),
                       **dask_designs(client, shape, gpus, args.chain, args.repeat, args.cpu, args.designs),
                       **raws.get(mib, {})}
                if "raw_ms" in row:
                    for design in (d for d in DESIGNS if d in row):
                        chained = row[design]["chained_per_transpose_ms"]
                        row[design]["chained_over_raw"] = chained / row["raw_ms"]
                        row[design]["chained_over_nccl_floor"] = chained / row["nccl_floor_ms"]
                        if "steady_per_transpose_ms" in row[design]:
                            row[design]["steady_over_nccl_floor"] = (row[design]["steady_per_transpose_ms"]
                                                                     / row["nccl_floor_ms"])
                results.append(row)
                print(json.dumps(row), file=sys.stderr)
    import dask
    import distributed

    print(json.dumps({"benchmark": "transpose", "device": device, "protocol": "tcp" if args.cpu else args.protocol,
                      "rmm_pool_size": args.rmm_pool_size,
                      "versions": {"daskflow": daskflow.__version__, "dask": dask.__version__,
                                   "distributed": distributed.__version__},
                      "targets": "chained x->y transpose: <= 1.3 x the NCCL floor at 1 GiB per GPU, "
                                 "<= 0.6 ms at 64 MiB per GPU",
                      "results": results}, indent=2))


if __name__ == "__main__":
    main()
