"""Latency of one exchange inside a fused task, per transport (``cluster.comm``), on GPU workers.

Every worker runs one task (the way a time step runs) that makes ``--rounds`` exchanges in a row,
each an all-to-all among the workers, timed with a device synchronisation around it:

* ``reduction``: a host float to every worker (what the CFL maximum and the bulk velocity cost);
* ``pieces``: a device array of ``MiB / workers`` to every worker (a halo round or a transpose);
* ``nccl_link``: for ``nccl``, the same pieces through the NCCL link alone (one grouped send/recv,
  no header round): the floor of the transport's protocol.

Prints one JSON document with the device name; the numbers are the slowest worker's medians.

    python benchmarks/exchange_latency.py [--gpus 4] [--mib 1 64] [--comm nccl ucx mailbox] [--protocol tcp]
"""

from __future__ import annotations

import argparse
import json
import time
import uuid


def _median_ms(times: list[float]) -> float:
    times = sorted(times)
    return 1e3 * times[len(times) // 2]


def exchange_task(comm, workers: list[str], mib: int, rounds: int) -> dict:
    """Body of one worker's task: ``rounds`` exchanges of each kind through ``comm``."""
    import cupy
    from distributed import get_worker

    from daskflow.pencils.direct import collective, gpu_switch_interval
    from daskflow.pencils.link import exchange_timeout
    from daskflow.pencils.transport import communicator

    worker = get_worker()
    rank, n = workers.index(worker.address), len(workers)
    piece = cupy.ones(max(1, mib * 2**20 // 8 // n))
    run = uuid.uuid4().hex
    stream = cupy.cuda.get_current_stream()
    out = {}
    with collective(worker, run, workers, gpu_switch_interval()):
        transport = communicator(worker, comm, exchange_timeout(), run)

        def timed(fn) -> float:
            times = []
            for i in range(rounds + 3):  # three untimed: connections, pools
                stream.synchronize()
                start = time.perf_counter()
                fn(i)
                stream.synchronize()
                times.append(time.perf_counter() - start)
            return _median_ms(times[3:])

        for label, value in (("reduction", 1.0), ("pieces", piece)):
            out[f"{label}_ms"] = timed(lambda i, label=label, value=value: transport.exchange(
                [(w, (label, i, rank, j), value) for j, w in enumerate(workers)],
                [(w, (label, i, j, rank)) for j, w in enumerate(workers)], run))
        if comm.kind == "nccl":
            buffers = [cupy.empty_like(piece) for _ in workers]
            peers = [j for j in range(n) if j != rank]
            out["nccl_link_ms"] = timed(lambda i: transport.link.payload_round(
                [(j, piece) for j in peers], [(j, buffers[j]) for j in peers], lambda: False, 60.0))
        transport.finish()
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gpus", type=int, default=4)
    parser.add_argument("--mib", type=int, nargs="+", default=[1, 64], help="MiB each worker sends in all")
    parser.add_argument("--comm", nargs="+", default=["nccl", "mailbox"], choices=["nccl", "ucx", "mailbox"])
    parser.add_argument("--protocol", default="tcp", choices=["tcp", "ucx"])
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()

    from channel_step import cluster_device, cuda_cluster
    from distributed import Client

    import daskflow
    from daskflow.pencils.direct import ensure_mailboxes
    from daskflow.pencils.transport import make_comm

    rows = []
    with cuda_cluster(args.gpus, args.protocol) as cluster, Client(cluster) as client:
        workers = sorted(client.scheduler_info()["workers"])
        ensure_mailboxes(client)
        device = cluster_device(client)
        for kind in args.comm:
            comm = make_comm(client, workers, kind, "gpu")
            for mib in args.mib:
                results = client.gather([client.submit(exchange_task, comm, workers, mib, args.rounds, workers=[w],
                                                       pure=False) for w in workers])
                rows.append({"comm": kind, "mib_per_worker": mib,
                             **{k: max(r[k] for r in results) for k in results[0]}})
    print(json.dumps({"benchmark": "exchange_latency", "device": device, "gpus": args.gpus,
                      "protocol": args.protocol, "daskflow": daskflow.__version__,
                      "target": "a halo round of the channel step <= 0.3 ms", "results": rows}, indent=2))


if __name__ == "__main__":
    main()
