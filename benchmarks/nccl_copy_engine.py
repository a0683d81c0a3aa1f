"""NCCL's all-to-all on the multiprocessors against its copy-engine path, and how much of each a
concurrent bandwidth-bound kernel hides. One process per GPU, NCCL through ``ctypes``.

NCCL 2.28 runs ``ncclAlltoAll`` on the GPU's copy engines instead of its multiprocessors when the
communicator is made with the zero-CTA policy (``NCCL_CTA_POLICY_ZERO``) and both buffers come from
``ncclMemAlloc`` and are registered as symmetric windows (``ncclCommWindowRegister``). CuPy's NCCL
bindings expose neither, so this benchmark calls the library directly. Per policy and size it
reports the all-to-all alone (CUDA events, mean of 5), whether every piece arrived, a
bandwidth-bound kernel alone (six in-place scalings of 2 GiB), both on two streams together, and the
fraction of the shorter of the two that the overlap hid. Prints one JSON document with the device
name (rank 0's numbers; ``ranks`` has every rank's).

    python benchmarks/nccl_copy_engine.py [--gpus 2] [--mib 64 1024]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import multiprocessing
import queue
import time

from daskflow.pencils.copy_engine import (
    NCCL_FLOAT64,
    POLICIES,
    WIN_COLL_SYMMETRIC,
    Config,
    UniqueId,
    check,
    library,
    unique_id,
    version,
)


def _buffers(comm, policy: int, nbytes: int):
    """Send and receive buffers: CuPy's for the default policy, NCCL's registered windows for zero-CTA."""
    import cupy

    if policy != POLICIES["zero_cta"]:
        return cupy.empty(nbytes // 8), cupy.empty(nbytes // 8)
    lib, out = library(), []
    for _ in range(2):
        pointer, window = ctypes.c_void_p(), ctypes.c_void_p()
        check(lib.ncclMemAlloc(ctypes.byref(pointer), nbytes), "ncclMemAlloc")
        check(lib.ncclCommWindowRegister(comm, pointer, nbytes, ctypes.byref(window), WIN_COLL_SYMMETRIC),
               "ncclCommWindowRegister")
        memory = cupy.cuda.UnownedMemory(pointer.value, nbytes, owner=None)
        out.append(cupy.ndarray((nbytes // 8,), dtype=cupy.float64, memptr=cupy.cuda.MemoryPointer(memory, 0)))
    return out


def rank_main(rank: int, ranks: int, uid: bytes, policy: int, sizes: list[int], results) -> None:
    """One rank: a communicator with ``policy``, then every size of ``sizes`` (MiB per GPU)."""
    import cupy

    cupy.cuda.Device(rank).use()
    lib = library()
    unique = UniqueId()
    ctypes.memmove(ctypes.addressof(unique), uid, 128)
    comm = ctypes.c_void_p()
    check(lib.ncclCommInitRankConfig(ctypes.byref(comm), ranks, unique, rank,
                                           ctypes.byref(Config.with_policy(policy))), "ncclCommInitRankConfig")
    transfer, compute = cupy.cuda.Stream(non_blocking=True), cupy.cuda.Stream(non_blocking=True)
    load = cupy.ones(2 ** 28)

    def scale() -> None:
        with compute:
            for _ in range(6):
                cupy.multiply(load, 1.0000001, out=load)

    def events_ms(run, stream, repeat: int = 5) -> float:
        run()
        stream.synchronize()
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        start.record(stream)
        for _ in range(repeat):
            run()
        stop.record(stream)
        stop.synchronize()
        return cupy.cuda.get_elapsed_time(start, stop) / repeat

    for mib in sizes:
        nbytes = mib * 2 ** 20
        count = nbytes // 8 // ranks
        send, recv = _buffers(comm, policy, nbytes)
        send[...] = cupy.repeat(cupy.arange(ranks, dtype=cupy.float64) + 100 * rank, count)

        def alltoall(send=send, recv=recv, count=count) -> None:
            check(lib.ncclAlltoAll(send.data.ptr, recv.data.ptr, count, NCCL_FLOAT64, comm, transfer.ptr),
                   "ncclAlltoAll")

        alone = events_ms(alltoall, transfer)
        arrived = bool((recv == cupy.repeat(100 * cupy.arange(ranks, dtype=cupy.float64) + rank, count)).all())
        kernel = events_ms(scale, compute, repeat=2)
        for _ in range(3):  # the first untimed
            start = time.perf_counter()
            scale()
            alltoall()
            compute.synchronize()
            transfer.synchronize()
            both = 1e3 * (time.perf_counter() - start)
        results.put({"rank": rank, "mib_per_gpu": mib, "alltoall_ms": alone,
                     "gb_per_s_sent": nbytes * (ranks - 1) / ranks / alone / 1e6, "arrived": arrived,
                     "kernel_ms": kernel, "both_ms": both,
                     "hidden_fraction": (kernel + alone - both) / min(kernel, alone)})


def run_policy(policy: int, ranks: int, sizes: list[int], timeout: float) -> list[dict]:
    """Every rank's results for ``policy`` (one process per GPU); raises if a rank fails or hangs."""
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    uid = unique_id()
    processes = [context.Process(target=rank_main, args=(r, ranks, uid, policy, sizes, results))
                 for r in range(ranks)]
    for process in processes:
        process.start()
    rows, deadline = [], time.monotonic() + timeout
    while len(rows) < ranks * len(sizes) and time.monotonic() < deadline:
        try:
            rows.append(results.get(timeout=2))
        except queue.Empty:
            if not any(p.is_alive() for p in processes):
                break
    for process in processes:
        process.join(5)
        if process.is_alive():
            process.terminate()
    if len(rows) < ranks * len(sizes):
        raise RuntimeError(f"CTA policy {policy}: {len(rows)} of {ranks * len(sizes)} results "
                           f"(exit codes {[p.exitcode for p in processes]})")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=2)
    parser.add_argument("--mib", type=int, nargs="+", default=[64, 1024], help="MiB per GPU")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds a policy's ranks may take")
    args = parser.parse_args()
    import cupy

    from daskflow.backend import device_name

    out = {"benchmark": "nccl_copy_engine", "device": device_name(cupy), "gpus": args.gpus,
           "nccl": version(), "results": {}}
    for name, policy in POLICIES.items():
        rows = run_policy(policy, args.gpus, args.mib, args.timeout)
        out["results"][name] = {"rank0": [r for r in rows if r["rank"] == 0], "ranks": rows}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
