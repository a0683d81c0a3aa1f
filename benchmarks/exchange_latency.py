"""Latency of one exchange inside a fused task, per transport (``cluster.comm``), on GPU workers
or, with ``--device cpu``, on CPU workers (NumPy pieces; the ``ucx`` and ``mailbox`` transports).

Every worker runs one task (the way a time step runs) that makes ``--rounds`` exchanges in a row,
each an all-to-all among the workers, timed with a device synchronisation around it:

* ``reduction``: a host float to every worker (what the CFL maximum and the bulk velocity cost);
* ``pieces``: an array of ``MiB / workers`` to every worker (a halo round or a transpose);
* ``nccl_link``: for ``nccl``, the same pieces through the NCCL link alone (one grouped send/recv,
  no header round): the floor of the transport's protocol.

Prints one JSON document with the device name; the numbers are the slowest worker's medians.

    python benchmarks/exchange_latency.py [--gpus 4] [--mib 1 64] [--comm nccl ucx mailbox] [--protocol tcp]
    python benchmarks/exchange_latency.py --device cpu --workers 2 --mib 1 4 --comm ucx mailbox
"""

from __future__ import annotations

import argparse
import json
import time
import uuid


def _median_ms(times: list[float]) -> float:
    times = sorted(times)
    return 1e3 * times[len(times) // 2]


def exchange_task(comm, workers: list[str], mib: float, rounds: int, device: str = "gpu") -> dict:
    """Body of one worker's task: ``rounds`` exchanges of each kind through ``comm`` (CuPy pieces,
    or NumPy ones with ``device="cpu"``)."""
    from distributed import get_worker

    from daskflow.pencils.direct import collective, gpu_switch_interval
    from daskflow.pencils.link import exchange_timeout
    from daskflow.pencils.transport import communicator

    if device == "gpu":
        import cupy as xp

        stream = xp.cuda.get_current_stream()
    else:
        import numpy as xp

        stream = None
    worker = get_worker()
    rank, n = workers.index(worker.address), len(workers)
    piece = xp.ones(max(1, int(mib * 2**20) // 8 // n))
    run = uuid.uuid4().hex
    out = {}
    with collective(worker, run, workers, gpu_switch_interval()):
        transport = communicator(worker, comm, exchange_timeout(), run)

        def sync() -> None:
            if stream is not None:
                stream.synchronize()

        def timed(fn) -> float:
            times = []
            for i in range(rounds + 3):  # three untimed: connections, pools
                sync()
                start = time.perf_counter()
                fn(i)
                sync()
                times.append(time.perf_counter() - start)
            return _median_ms(times[3:])

        for label, value in (("reduction", 1.0), ("pieces", piece)):
            out[f"{label}_ms"] = timed(lambda i, label=label, value=value: transport.exchange(
                [(w, (label, i, rank, j), value) for j, w in enumerate(workers)],
                [(w, (label, i, j, rank)) for j, w in enumerate(workers)], run))
        # one more exchange, checked: every worker's piece holds its rank + 1 to every element
        got = transport.exchange([(w, ("check", rank, j), piece * (rank + 1)) for j, w in enumerate(workers)],
                                 [(w, ("check", j, rank)) for j, w in enumerate(workers)], run)
        out["delivered"] = all(bool((got[("check", j, rank)] == j + 1).all()) for j in range(n))
        if comm.kind == "nccl":
            buffers = [xp.empty_like(piece) for _ in workers]
            peers = [j for j in range(n) if j != rank]
            out["nccl_link_ms"] = timed(lambda i: transport.link.payload_round(
                [(j, piece) for j in peers], [(j, buffers[j]) for j in peers], lambda: False, 60.0))
        transport.finish()
    return out


def cpu_cluster(workers: int, protocol: str = "tcp"):
    """A local cluster of ``workers`` one-thread CPU worker processes, started as daskflow starts
    its own (:func:`daskflow.cluster.worker_environment`: the allocator keeps field-sized blocks)."""
    from distributed import LocalCluster

    from daskflow.cluster import worker_environment

    with worker_environment():
        return LocalCluster(n_workers=workers, threads_per_worker=1, protocol=protocol, dashboard_address=None)


def measure(client, kinds: list[str], mibs: list[float], rounds: int, device: str) -> list[dict]:
    """Every transport of ``kinds`` at every size of ``mibs`` on ``client``'s workers: one row each,
    the slowest worker's medians."""
    from daskflow.pencils.direct import ensure_mailboxes
    from daskflow.pencils.transport import make_comm

    workers = sorted(client.scheduler_info()["workers"])
    ensure_mailboxes(client)
    rows = []
    for kind in kinds:
        comm = make_comm(client, workers, kind, device)
        for mib in mibs:
            results = client.gather([client.submit(exchange_task, comm, workers, mib, rounds, device, workers=[w],
                                                   pure=False) for w in workers])
            rows.append({"comm": kind, "mib_per_worker": mib, "delivered": all(r.pop("delivered") for r in results),
                         **{k: max(r[k] for r in results) for k in results[0]}})
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", "--gpus", dest="workers", type=int, default=4, help="GPU or CPU workers")
    parser.add_argument("--device", default="gpu", choices=["gpu", "cpu"])
    parser.add_argument("--mib", type=float, nargs="+", default=[1, 64], help="MiB each worker sends in all")
    parser.add_argument("--comm", nargs="+", default=None, choices=["nccl", "ucx", "mailbox"],
                        help="default: nccl and mailbox on GPUs, ucx and mailbox on CPUs")
    parser.add_argument("--protocol", default="tcp", choices=["tcp", "ucx"])
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args(argv)
    kinds = args.comm or (["nccl", "mailbox"] if args.device == "gpu" else ["ucx", "mailbox"])
    if args.device == "cpu" and "nccl" in kinds:
        parser.error("--comm nccl needs --device gpu")

    from channel_step import cluster_device, cuda_cluster
    from cpu_channel import cpu_model
    from distributed import Client

    import daskflow

    start = cuda_cluster if args.device == "gpu" else cpu_cluster
    with start(args.workers, args.protocol) as cluster, Client(cluster) as client:
        client.wait_for_workers(args.workers)
        device = cluster_device(client) if args.device == "gpu" else cpu_model()
        rows = measure(client, kinds, args.mib, args.rounds, args.device)
    document = {"benchmark": "exchange_latency", "device": device, "workers": args.workers,
                **({"gpus": args.workers} if args.device == "gpu" else {}), "device_kind": args.device,
                "protocol": args.protocol, "daskflow": daskflow.__version__,
                "target": "a halo round of the channel step <= 0.3 ms", "results": rows}
    print(json.dumps(document, indent=2))


if __name__ == "__main__":
    main()
