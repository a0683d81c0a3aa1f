"""Where the time of one halo round goes, on GPU workers, against the one-GPU padding.

Every worker runs one task holding one pencil of a channel (``--shape`` per GPU, ``--pencils``) on
the flow domain of the time step, and times ``--rounds`` repetitions of each part of
:meth:`daskflow.ns.domain.FlowDomain.pad_velocity` with a device synchronisation around it:

* ``whole_ms``: the halo round as the step makes it (u, v, w and p);
* ``local_pad_ms``: padding the four fields of the pencil by the boundary conditions alone (what one
  GPU does for the whole field): the floor of the local work;
* ``prepare_ms``: the padded copies (one stack) and their x ghosts;
* ``cut_ms``: cutting the faces and edges the neighbours need;
* ``exchange_ms``: the transport call that moves them (header round, payload round);
* ``fill_ms``: writing the received faces and edges, and the walls, into the padded copies.

Prints one JSON document with the device name; the numbers are the slowest worker's medians.

    python benchmarks/halo_breakdown.py --gpus 2 --pencils 2 1 [--shape 512 256 144] [--comm nccl]
"""

from __future__ import annotations

import argparse
import json
import time
import uuid


def halo_task(comm, run: str, workers: list[str], shape_per_gpu: list[int], pencils: list[int], rounds: int) -> dict:
    """Body of one worker's task: the parts of ``rounds`` halo rounds of its pencil, timed (``run``: the
    run id every worker's exchanges are tagged with)."""
    import numpy as np
    from distributed import get_worker

    from daskflow.backend import cupy_or_none
    from daskflow.bc import Boundaries
    from daskflow.grid import Grid
    from daskflow.ns import boundaries as nsb
    from daskflow.ns import halos
    from daskflow.ns import operators as ops
    from daskflow.ns.domain import FlowDomain, FlowPlan
    from daskflow.pencils import halo
    from daskflow.pencils.direct import collective, gpu_switch_interval
    from daskflow.pencils.executor import Member
    from daskflow.pencils.link import exchange_timeout
    from daskflow.pencils.transport import communicator
    from daskflow.poisson.plan import SpectralPlan

    worker = get_worker()
    py, pz = pencils
    shape = (shape_per_gpu[0], shape_per_gpu[1] * py, shape_per_gpu[2] * pz)
    grid = Grid(shape, (4.0, 2.0, 2.0), 1.8)
    bcs = nsb.build({"preset": "channel"})
    pressure = SpectralPlan(grid, Boundaries.parse(bcs.p, "ccc"), 0.0, 1.0, "ptdma", (py, pz), np.dtype("float64"))
    plan = FlowPlan(grid, bcs, 1e-3, {"kind": "none"}, "z", {}, pressure, "gpu" if cupy_or_none() else "cpu")
    cupy = cupy_or_none()
    xp = cupy or np  # CuPy on GPU workers; NumPy (a dry run on CPU workers) otherwise
    sync = cupy.cuda.get_current_stream().synchronize if cupy is not None else (lambda: None)
    out = {}
    with collective(worker, run, workers, gpu_switch_interval()):
        member = Member(worker.address, workers, pz, communicator(worker, comm, exchange_timeout(), run), run)
        domain = FlowDomain(plan, member)
        region = domain.region
        local = tuple(len(range(*r.indices(n))) for r, n in zip(region, shape, strict=True))
        rng = np.random.default_rng(domain.key[0] * pz + domain.key[1])
        fields = [xp.asarray(rng.standard_normal(local), order=ops.memory_order(xp)) for _ in range(4)]
        names, blocks, bcs_of = domain._velocity_blocks(fields[:3], fields[3])

        def timed(fn) -> float:
            times = []
            for _ in range(rounds + 3):  # three untimed: communicators, pools, kernels
                sync()
                start = time.perf_counter()
                fn()
                sync()
                times.append(time.perf_counter() - start)
            return 1e3 * sorted(times[3:])[len(times[3:]) // 2]

        arrays, rules = [blocks[n] for n in names], [bcs_of[n] for n in names]

        def prepare():
            return halos.prepare(arrays, rules)

        stack, block, fill_rules = prepare()
        counts, periodic = domain.dec.pencils, domain.periodic_yz
        dests = [d for d in domain.dec.indices if domain.key in halo.sources(d, counts, periodic)]

        def cut():
            return [halo.cut(domain.key, block, d, counts, periodic) for d in dests]

        received, _ = halo.exchange(domain.ex, domain.dec, domain.key, periodic, block)

        def fill():
            halos.fill_halos(stack, fill_rules, received)

        out["whole_ms"] = timed(lambda: domain.pad_velocity(fields[:3], fields[3]))
        out["local_pad_ms"] = timed(lambda: [ops.pad_with(a, *bcs_of[n][0], bcs_of[n][1]) for n, a in blocks.items()])
        out["prepare_ms"] = timed(prepare)
        out["cut_ms"] = timed(cut)
        out["exchange_ms"] = timed(lambda: halo.exchange(domain.ex, domain.dec, domain.key, periodic, block))
        out["exchange_ms"] -= out["cut_ms"]  # the exchange cuts its pieces itself
        out["fill_ms"] = timed(fill)
        domain.finish()
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gpus", type=int, default=2)
    parser.add_argument("--pencils", type=int, nargs=2, default=[2, 1])
    parser.add_argument("--shape", type=int, nargs=3, default=[512, 256, 144], help="points per GPU")
    parser.add_argument("--comm", default="nccl", choices=["nccl", "ucx", "mailbox"])
    parser.add_argument("--protocol", default="tcp", choices=["tcp", "ucx"])
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()

    from channel_step import cluster_device, cuda_cluster
    from distributed import Client

    import daskflow
    from daskflow.pencils.direct import ensure_mailboxes
    from daskflow.pencils.layout import chunk_owner
    from daskflow.pencils.transport import make_comm

    with cuda_cluster(args.gpus, args.protocol) as cluster, Client(cluster) as client:
        workers = sorted(client.scheduler_info()["workers"])
        ensure_mailboxes(client)
        device = cluster_device(client)
        comm = make_comm(client, workers, args.comm, "gpu")
        owners = sorted({chunk_owner((p, q), workers, args.pencils[1]) for p in range(args.pencils[0])
                         for q in range(args.pencils[1])})
        run = uuid.uuid4().hex
        results = client.gather([client.submit(halo_task, comm, run, workers, args.shape, args.pencils, args.rounds,
                                               workers=[w], pure=False) for w in owners])
    print(json.dumps({"benchmark": "halo_breakdown", "device": device, "gpus": args.gpus,
                      "pencils": args.pencils, "shape_per_gpu": args.shape, "comm": args.comm,
                      "protocol": args.protocol, "daskflow": daskflow.__version__,
                      **{k: max(r[k] for r in results) for k in results[0]}}, indent=2))


if __name__ == "__main__":
    main()
