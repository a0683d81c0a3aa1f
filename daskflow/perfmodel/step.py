"""The channel time step in the cost model: its exchange rounds besides the Poisson solves and its
predicted time (see :mod:`daskflow.perfmodel`).

Rounds of one step, as :mod:`daskflow.ns.stepper` makes them (``benchmarks/exchange_rounds.py``
records them; ``exchange_rounds_2x2_team.json``: 23 at pencils (2, 2)):

* ``current`` code: ten halo rounds (4, 3, 1 fields in each substep, 3 more after the last; the CFL
  maximum and the bulk-velocity sum ride on them), per substep one z-implicit round for the three
  velocity components together (``pz <= 2``: all-gather of the boundary rows in the column group;
  ``pz > 2``: rows to the slice owners and the solutions back, two rounds) and the Poisson solve's,
  and one reduction of the step's record. 17 rounds at (4, 1), 23 at (2, 2) and (1, 4).
* ``rows``: the code since the pressure's neighbouring y rows ride on the solve's y->x transpose
  (:attr:`FlowDomain.pressure_rows_in_transpose`: pencils ``(py, 1)``, ``py > 1``, periodic y): as
  ``current`` without the three halo rounds of the pressure, 14 rounds at (4, 1). The two rows per
  destination that the transpose carries besides its spectrum (about ``2 / ny_p`` of its bytes) are
  left out; elsewhere ``rows`` makes the rounds of ``current``.
* ``legacy`` (the code the H200 files ran, up to 65d480e): per substep three halo rounds, a
  z-implicit all-gather per component and a bulk-velocity all-reduce; one CFL all-reduce per step.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from daskflow.perfmodel.model import (
    H200_DASK,
    Exchange,
    Layout,
    Machine,
    _exchange,
    _gathers,
    _sizes,
    passes_time,
    predict_solve,
)

CURRENT_HALOS = (4, 3, 1, 4, 3, 1, 4, 3, 1, 3)  # fields of each halo round of one step


def halo_rounds(pencils, periodic, code: str) -> tuple[int, ...]:
    """Fields of each halo round of one step in ``code`` (``current`` or ``rows``, see the module)."""
    if code not in ("current", "rows"):
        raise ValueError(f"Machine.code must be 'current', 'rows' or 'legacy'; got {code!r}")
    rows = code == "rows" and pencils[0] > 1 and pencils[1] == 1 and periodic[1]
    return tuple(f for f in CURRENT_HALOS if not (rows and f == 1))


def halo_exchange(lay: Layout, fields: int, periodic, machine: Machine) -> Exchange | None:
    """One halo round as :meth:`FlowDomain.pad_many` makes it: y faces ``(nx+2) nz_q``, z faces
    ``(nx+2) ny_p`` and edge lines ``nx+2`` from the diagonal neighbours, per field."""
    from daskflow.pencils.halo import OFFSETS, neighbour

    nx = lay.shape[0]
    py, pz = lay.pencils
    ny_p, nz_q = _sizes(lay.shape[1], py), _sizes(lay.shape[2], pz)
    pieces = {}
    for p in range(py):
        for q in range(pz):
            for oy, oz in OFFSETS:
                s = neighbour((p, q), (oy, oz), (py, pz), (periodic[1], periodic[2]))
                if s is None:
                    continue
                size = (nx + 2) * (nz_q[q] if oz == 0 else ny_p[p] if oy == 0 else 1)
                pieces[(s, (p, q))] = pieces.get((s, (p, q)), 0) + size * fields * lay.itemsize
    if not pieces:
        return None
    src = np.array([s for s, _ in pieces])
    dst = np.array([d for _, d in pieces])
    return _exchange(f"halo-x{fields}", lay, src[:, 0], src[:, 1], dst[:, 0], dst[:, 1],
                     np.array(list(pieces.values())), machine, assemble=False)


def zsolve_exchanges(lay: Layout, components, machine: Machine, zsolve: str) -> list[Exchange]:
    """The rounds of one z-implicit solve of ``components`` (index: 0, 1 cell centred, 2 on faces)
    solved together; ``zsolve``: ``"allgather"`` or ``"sliced"``."""
    nx, ny, nz = lay.shape
    py, pz = lay.pencils
    ny_p, nz_q = _sizes(ny, py), _sizes(nz, pz)
    starts = np.concatenate([[0], np.cumsum(nz_q)[:-1]])
    rows = sum(np.minimum(np.clip(np.minimum(starts + nz_q, nz - (c == 2)) - starts, 0, None), 2) for c in components)
    p, q, q2 = np.arange(py)[:, None, None], np.arange(pz)[None, :, None], np.arange(pz)[None, None, :]
    name = "zsolve-" + "".join("uvw"[c] for c in components)
    if zsolve == "allgather":  # every chunk gets every chunk's rows
        return [_exchange(name, lay, p, q, p, q2, rows[q] * nx * ny_p[p] * lay.itemsize + 0 * q2, machine)]
    cols = np.stack([_sizes(nx * int(n), pz) for n in ny_p])  # (py, pz): the columns each chunk solves
    nb = rows[q] * cols[p, q2] * lay.itemsize
    return [_exchange(name + "-gather", lay, p, q, p, q2, nb, machine),
            _exchange(name + "-scatter", lay, p, q2, p, q, nb, machine)]


def _reduction(lay: Layout, name: str, machine: Machine) -> Exchange:
    c = np.arange(lay.chunks)
    s, d = np.meshgrid(c, c, indexing="ij")
    pz = lay.pz
    return _exchange(name, lay, s // pz, s % pz, d // pz, d % pz, 8, machine, assemble=False)


def step_exchanges(shape, pencils, gpus: int, dtype="float64", machine: Machine = H200_DASK,
                   periodic=(True, True, False), implicit: str = "z", zsolve: str = "auto") -> list[Exchange]:
    """The exchange rounds of one whole step besides its three Poisson solves, for ``machine.code``
    (see the module). ``zsolve``: ``"auto"`` (what the code does: all-gather at ``pz <= 2``,
    sliced beyond; the legacy code all-gathers), ``"allgather"`` or ``"sliced"``."""
    lay = Layout(tuple(shape), tuple(pencils), gpus, np.dtype(dtype).itemsize)
    pz = pencils[1]
    legacy = machine.code == "legacy"
    if zsolve == "auto":
        zsolve = "allgather" if legacy or _gathers(pz) else "sliced"
    z = implicit == "z" and pz > 1
    out = []
    if legacy:
        for _ in range(3):
            out += [halo_exchange(lay, f, periodic, machine) for f in (4, 3, 1)]
            if z:
                for c in range(3):
                    out += zsolve_exchanges(lay, [c], machine, zsolve)
            out.append(_reduction(lay, "bulk-allreduce", machine))
        out.append(_reduction(lay, "cfl-allreduce", machine))
    else:
        out += [halo_exchange(lay, f, periodic, machine) for f in halo_rounds(pencils, periodic, machine.code)]
        if z:
            out += 3 * zsolve_exchanges(lay, [0, 1, 2], machine, zsolve)
        out.append(_reduction(lay, "record-allreduce", machine))
    return [e for e in out if e is not None]


def predict_step(method: str, shape, pencils, gpus: int | None = None, dtype="float64",
                 machine: Machine = H200_DASK, steps_per_run: int | None = 10, zsolve: str = "auto",
                 captured: bool = False) -> dict:
    """Predicted time of one channel time step (z-implicit diffusion, flow-rate forcing, CFL dt).
    ``steps_per_run``: steps per submitted run (its overhead is shared); ``None``: in process.
    ``captured``: the step replayed from a CUDA graph (:mod:`daskflow.ns.graphs`), which leaves the
    host nothing but the replay's launch: the GPU's timeline alone.

    Two timelines overlap. The GPU's (``gpu_s``): kernels (HBM passes), copies, link transfers and
    the exchanges' GPU-side latency, and :attr:`Machine.gpu_distributed_solve` per distributed
    tridiagonal solve. The host's (``host_s``): :attr:`Machine.host_step_floor`
    (launching the step's kernels from Python, whatever the grid), :attr:`Machine.host_round` per
    exchange round and :attr:`Machine.host_distributed_solve` per distributed tridiagonal solve. The
    host launches work ahead of the GPU (NCCL exchanges need no host synchronisation), so a step
    takes ``max(gpu_s, host_s)``, not their sum: on one H100 a 64x64x32 step costs 22.4 ms and a
    512x64x144 one 23.6 ms although the latter's kernels take ~11 ms (a sum would give ~34 ms), and
    the 512x256x144 step (46.1 ms of kernels) still costs ~55 ms on four GPUs at pencils (4, 1)
    where the host's 17 rounds alone take 45.7 ms (a sum would give ~75 ms)."""
    gpus = gpus or pencils[0] * pencils[1]
    itemsize = np.dtype(dtype).itemsize
    lay = Layout(tuple(shape), tuple(pencils), gpus, itemsize)
    points = lay.chunk_points() * math.ceil(lay.chunks / gpus)
    ns_machine = replace(machine, exchange_latency=machine.ns_exchange_latency or machine.exchange_latency)
    solve = predict_solve(method, shape, pencils, gpus, dtype, ns_machine, "fused")
    other = step_exchanges(shape, pencils, gpus, dtype, ns_machine, zsolve=zsolve)
    compute = 3 * (solve["compute_s"] + passes_time(points, itemsize, 3 * machine.zsolve_passes
                                                     + machine.substep_other_passes, machine))
    transfer = 3 * solve["transfer_s"] + sum(e.transfer_s for e in other)
    copies = 3 * solve["copy_s"] + sum(e.copy_s for e in other)
    latency = 3 * solve["latency_s"] + sum(e.latency_s for e in other)
    overhead = machine.run_overhead / steps_per_run if steps_per_run else 0.0
    exchanges = 3 * solve["exchanges"] + sum(1 for e in other if e.remote_bytes)
    distributed = 3 * int(pencils[1] > 1) + 3 * int(method == "ptdma" and pencils[1] > 1)
    solves = distributed * machine.gpu_distributed_solve
    gpu = compute + transfer + copies + latency + solves
    host = 0.0 if captured else (machine.host_step_floor + exchanges * machine.host_round
                                 + distributed * machine.host_distributed_solve)
    zsolves = sum(e.time_s for e in other if e.name.startswith("zsolve")) + \
        3 * passes_time(points, itemsize, 3 * machine.zsolve_passes, machine)
    return {"method": method, "shape": list(shape), "pencils": list(pencils), "gpus": gpus, "dtype": str(dtype),
            "machine": machine.name, "compute_s": compute, "transfer_s": transfer, "copy_s": copies,
            "latency_s": latency, "distributed_solves": distributed, "distributed_solves_s": solves,
            "overhead_s": overhead, "gpu_s": gpu, "host_s": host,
            "bound": "host" if host > gpu else "gpu", "total_s": max(gpu, host) + overhead, "exchanges": exchanges,
            "poisson_s": 3 * (solve["total_s"] - solve["overhead_s"]), "zsolve_s": zsolves,
            "bytes_out_per_gpu": 3 * solve["bytes_out_per_gpu"] + sum(e.bytes_out for e in other)}
