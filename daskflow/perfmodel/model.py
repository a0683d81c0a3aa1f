"""The cost model: machines, pencil layouts, the exchanges of a solve and of a step, and their
predicted times (see :mod:`daskflow.perfmodel`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from daskflow.pencils.layout import split_sizes
from daskflow.zsolve.choice import PTDMA, ZSolve

CHANNEL_BC = ("PP", "PP", "NN")


@dataclass(frozen=True)
class Machine:
    """Bandwidths, latencies and kernel costs of one kind of GPU cluster (SI units: s, B/s)."""

    name: str
    gpus_per_node: int
    hbm_bw: float  # effective device-memory bandwidth (a device copy: read + write)
    solve_passes: float  # local spectral solve: HBM passes over the real field (FFTs both ways + z solve)
    ptdma_extra_passes: float  # reconstruction pass of P-TDMA beyond Thomas (Algorithm 2)
    zsolve_passes: float  # one z-implicit diffusion solve of one component
    substep_other_passes: float  # everything else of an RK substep (pads, explicit terms, divergence, ...)
    intra_pair_bw: float  # one GPU to one peer in its node
    intra_a2a_bw: float  # out of one GPU sending to two or more peers in its node at once
    inter_bw: float  # out of one GPU to other nodes (its share of the node's network)
    exchange_latency: float  # fixed cost of one exchange that has remote pieces (direct / MPI)
    peer_latency: float = 0.0  # per remote peer of the busiest GPU
    ns_exchange_latency: float | None = None  # the same inside a time step (None: exchange_latency)
    solve_overhead: float = 0.0  # Dask: a submitted solve beyond its exchanges (fused granularity)
    task_hop: float = 0.0  # Dask stage granularity: a dependent task without data
    stage_exchange_base: float = 0.0  # Dask stage granularity: an exchange of piece tasks ...
    stage_exchange_per_source: float = 0.0  # ... plus this per source piece of a destination
    run_overhead: float = 0.0  # one run of steps submitted and its clock gathered
    host_step_floor: float = 0.0  # host (Python) time of one step's kernel launches, no exchanges
    host_round: float = 0.0  # host time of one exchange round inside a fused task (cut, NCCL calls, join)
    host_distributed_solve: float = 0.0  # host time of one distributed tridiagonal solve (pz > 1) beyond its rounds
    # GPU time of each distributed tridiagonal solve in a step (pz > 1) beyond the transfers of its
    # exchanges: the reduction kernels on partial columns and the pencils' waits for each other
    gpu_distributed_solve: float = 0.0
    # the exchange rounds of which code: "current", "rows" (the pressure's rows on its transpose at
    # (py, 1)) or "legacy" (up to 65d480e); see daskflow.perfmodel.step
    code: str = "current"
    notes: str = ""


# Fitted on the 4 x H200 host (NVLink NV18, dask-cuda, UCX); see calibrate() and docs/performance.md.
H200_DASK = Machine(
    name="4xH200 daskflow (Dask + UCX direct exchanges)",
    gpus_per_node=4,
    hbm_bw=4.14e12,  # poisson_single_H200: 512^3 float64 device copy 0.519 ms (read + write 2.15 GB)
    solve_passes=19.6,  # poisson_single_H200: 512^3 solve 5.08 ms
    ptdma_extra_passes=2.0,  # Algorithm 2 reconstruction reads + writes d once (kernel structure)
    zsolve_passes=25.1,  # channel_step_H200: implicit solve of one component 0.917 ms, 512x256x144
    substep_other_passes=254.0,  # channel_step_H200: 38.2 ms / 3 substeps minus its solves
    intra_pair_bw=318e9,  # transpose_4xH200_run1: raw peer copies, 2 GPUs, 1 GiB: 0.5 GiB out in 1.69 ms
    intra_a2a_bw=188e9,  # transpose_4xH200: raw all-to-all, 4 GPUs, 1 GiB: 0.75 GiB out in 4.27 ms
    inter_bw=25e9,  # not measured (one host); a placeholder of one 200 Gb/s NIC per GPU
    exchange_latency=3.3e-3,  # transpose_4xH200 direct chained (64 MiB, 1 GiB) minus links and copies
    # channel_step_4xH200_pencils41: 166.5 ms per step at pencils (4, 1) (code at 65d480e: one round per
    # halo, reductions riding on halos) minus the model's compute, transfers and copies, per exchange
    ns_exchange_latency=6.44e-3,
    solve_overhead=7.0e-3,  # poisson_distributed, 1 GPU: median chained 12.0 ms minus the 4.9 ms floor
    task_hop=6.25e-3,  # DESIGN.md section 6: one hop between dependent tasks (chain of 50)
    stage_exchange_base=10.2e-3,  # transpose stage chained (2 and 4 GPUs, both files): least squares
    stage_exchange_per_source=3.4e-3,
    run_overhead=2 * 6.25e-3,  # one submit + one clock gather per run
    code="legacy",  # the H200 files ran the code up to 65d480e: its exchange rounds
    notes="fitted on docs/results (Nov 2026, 4 x NVIDIA H200); inter-node bandwidth not measured",
)

# Fitted on the 4 x H100 host (NVLink NV18, dask-cuda over TCP, NCCL exchanges inside fused tasks,
# the code at 15d02a8 / edd50b3) by calibrate_h100(); every number names the file it comes from.
H100_NVLINK = Machine(
    name="4xH100 daskflow (Dask + NCCL inside fused tasks)",
    gpus_per_node=4,
    # channel_step_4xH100_fixed_layouts (call 2, padded_copy): 512x256x144 float64 device copy 0.1035 ms
    hbm_bw=2.92e12,
    # channel_step_4xH100_fixed_layouts (call 3, one GPU, 46.1 ms per step): per-substep breakdown
    solve_passes=18.9,  # Poisson solve 0.978 ms
    ptdma_extra_passes=2.0,  # as H200_DASK (kernel structure)
    zsolve_passes=21.7,  # implicit solve of one component 1.121 ms
    substep_other_passes=213.0,  # 46.1 ms / 3 substeps minus its solves
    intra_pair_bw=343e9,  # transpose_4xH100_tcp_synced: NCCL floor, 2 GPUs, 1 GiB: 0.5 GiB out in 1.56 ms
    intra_a2a_bw=313e9,  # transpose_4xH100_tcp_synced: NCCL floor, 4 GPUs, 1 GiB: 0.75 GiB out in 2.57 ms
    inter_bw=25e9,  # not measured (one host); a placeholder of one 200 Gb/s NIC per GPU
    exchange_latency=37.2e-6,  # exchange_latency_4xH100: NCCL link time of a 1 MiB exchange (GPU side)
    solve_overhead=12.9e-3,  # poisson_distributed_4xH100_weak_nccl, 1 GPU: median chained minus the floor
    host_step_floor=22.4e-3,  # channel_step_floor_4xH100: one GPU, 64x64x32 (no GPU work to speak of)
    host_round=1.37e-3,  # channel_step_floor_4xH100: (4 GPUs (4, 1) 45.7 ms - 22.4 ms) / 17 rounds
    host_distributed_solve=2.77e-3,  # channel_step_4xH100_fixed_layouts (call 3): (1, 4) 70.5 ms, 6 per step
    notes="fitted on docs/results (Nov 2026, 4 x NVIDIA H100, NCCL); inter-node bandwidth not measured",
)

# Fitted on the 4 x H200 host (NVLink NV18, dask-cuda over TCP, NCCL exchanges inside fused tasks, the
# code at c24df85, whose pressure rows ride on the y->x transpose) by calibrate_h200(); every number
# names the file it comes from. Steps are fitted and checked on their steady time (runs' fixed cost out).
H200_NCCL = Machine(
    name="4xH200 daskflow (Dask + NCCL inside fused tasks)",
    gpus_per_node=4,
    hbm_bw=4.14e12,  # poisson_single_H200: 512^3 float64 device copy 0.519 ms (read + write 2.15 GB)
    # channel_step_4xH200_control_interval (one GPU, 16.95 ms per step): per-substep breakdown
    solve_passes=18.7,  # Poisson solve 0.682 ms
    ptdma_extra_passes=2.0,  # as H200_DASK (kernel structure)
    zsolve_passes=6.49,  # implicit solve of one component 0.237 ms
    substep_other_passes=116.8,  # 16.95 ms / 3 substeps minus its solves
    intra_pair_bw=322e9,  # transpose_4xH200_nccl: NCCL floor, 2 GPUs, 1 GiB: 0.5 GiB out in 1.67 ms
    intra_a2a_bw=301e9,  # transpose_4xH200_nccl: NCCL floor, 4 GPUs, 1 GiB: 0.75 GiB out in 2.67 ms
    inter_bw=25e9,  # not measured (one host); a placeholder of one 200 Gb/s NIC per GPU
    exchange_latency=16.7e-6,  # nccl_p2p_settings_2xH200: 1.8 MiB each way in 22.6 us, minus its bytes
    solve_overhead=4.08e-3,  # poisson_distributed_4xH200_weak_nccl, 1 GPU: median chained minus the floor
    host_step_floor=5.68e-3,  # channel_step_floor_4xH200: one GPU, 64x64x32, CUDA graphs off
    host_round=1.10e-3,  # channel_step_floor_4xH200: (4 GPUs (4, 1) 21.06 ms - 5.68 ms) / 14 rounds
    # channel_step_graphs_4xH200_step_slabs (second call): (2, 2) replayed from CUDA graphs, 23.91 ms
    # steady, against its GPU timeline without them, 20.39 ms, / 6 distributed solves a step
    gpu_distributed_solve=0.589e-3,
    code="rows",  # 14 rounds at (4, 1) and (2, 1), 23 at (2, 2)
    notes="fitted on docs/results (Nov 2026, 4 x NVIDIA H200, NCCL); inter-node bandwidth not measured",
)

# The seed paper's Leonardo booster node (Table 1): NVIDIA A100 64 GB, 4 GPUs per node, 800 Gb/s
# between two GPUs in a node, 100 Gb/s per GPU between nodes, 1.6 TB/s HBM. Kernels are daskflow's
# (passes as measured on the H200, and the device's cost of a distributed z solve), and so is the
# host: the H200 host's floor per step and per round (``without_host`` drops it: the GPU and the
# links alone). Communication as MPI/NCCL would do it
# (microsecond latencies, no Dask overhead) -- those latencies are assumptions, not the paper's numbers.
A100_LEONARDO = replace(
    H200_NCCL,
    name="Leonardo booster (A100 64 GB, 4 per node, NVLink 3 + 4 x 100 Gb/s InfiniBand), daskflow's host",
    hbm_bw=1.6e12 * 4.14 / 4.8,  # paper Table 1 (1.6 TB/s) x the copy efficiency measured on the H200
    intra_pair_bw=100e9,  # paper Table 1: intra-node 800 Gb/s (4 NVLink 3 links per GPU pair)
    intra_a2a_bw=300e9,  # 3 peers at 100 GB/s (A100: 12 NVLink 3 links, 300 GB/s per direction)
    inter_bw=12.5e9,  # paper Table 1: 100 Gb/s per GPU (the node's 4 x 100 Gb/s HDR shared by 4 GPUs)
    exchange_latency=20e-6,  # assumption: an MPI/NCCL collective's start-up
    peer_latency=2e-6,  # assumption: one message per peer
    solve_overhead=0.0, task_hop=0.0, stage_exchange_base=0.0, stage_exchange_per_source=0.0, run_overhead=0.0,
    notes="hardware from the seed paper's Table 1; kernel passes, host costs and the device cost of a distributed z "
          "solve from the H200 runs; latencies assumed",
)


def without_host(machine: Machine) -> Machine:
    """``machine`` with no host costs: what the GPUs and the links alone would take."""
    return replace(machine, name=machine.name + ", no host floor", host_step_floor=0.0, host_round=0.0,
                   host_distributed_solve=0.0)


# ------------------------------------------------------------------------------------- geometry


def spectral_sizes(shape, bc=CHANNEL_BC) -> tuple[int, int, bool]:
    """``(nxs, nys, complex)`` after the x and y transforms (cell-centred unknowns)."""
    from daskflow.transforms import spectral_size

    nx, ny, _ = shape
    x_complex = bc[0] == "PP"
    nxs = spectral_size(bc[0], "c", nx, complex_input=False)
    nys = spectral_size(bc[1], "c", ny, complex_input=x_complex)
    return nxs, nys, x_complex or bc[1] == "PP"


@dataclass(frozen=True)
class Layout:
    shape: tuple[int, int, int]
    pencils: tuple[int, int]
    gpus: int
    itemsize: int  # real
    bc: tuple = CHANNEL_BC

    @property
    def py(self) -> int:
        return self.pencils[0]

    @property
    def pz(self) -> int:
        return self.pencils[1]

    @property
    def chunks(self) -> int:
        return self.py * self.pz

    @property
    def spectral(self):
        return spectral_sizes(self.shape, self.bc)

    @property
    def spec_itemsize(self) -> int:
        return self.itemsize * (2 if self.spectral[2] else 1)

    def owner(self, p, q):
        """Worker of chunk ``(p, q)`` (:func:`daskflow.pencils.graph.chunk_owner`)."""
        return (np.asarray(p) * self.pz + np.asarray(q)) % self.gpus

    def chunk_points(self) -> int:
        """Points of the largest chunk."""
        return self.shape[0] * split_sizes(self.shape[1], self.py)[0] * split_sizes(self.shape[2], self.pz)[0]


def _sizes(n, parts):
    return np.asarray(split_sizes(n, parts), dtype=np.int64)


# ------------------------------------------------------------------------------------- exchanges


@dataclass(frozen=True)
class Exchange:
    """One exchange, summarised over GPUs: ``bytes_out`` is the busiest GPU's remote bytes."""

    name: str
    pieces: int
    total_bytes: int  # all pieces, local ones included
    remote_bytes: int  # all pieces that change GPU
    bytes_out: int  # the busiest GPU's remote bytes out
    bytes_out_inter: int  # of which to other nodes (same GPU)
    peers: int  # most remote peers of one GPU
    copy_bytes: int  # busiest GPU's bytes cut + assembled (each read and written once)
    sources_per_destination: int
    transfer_s: float = 0.0
    latency_s: float = 0.0
    copy_s: float = 0.0

    @property
    def time_s(self) -> float:
        return self.transfer_s + self.latency_s + self.copy_s


def _exchange(name, lay: Layout, src_p, src_q, dst_p, dst_q, nbytes, machine: Machine, *,
              assemble=True, dst_owner=None) -> Exchange:
    src_p, src_q, dst_p, dst_q, nbytes = np.broadcast_arrays(src_p, src_q, dst_p, dst_q, nbytes)
    src_p, src_q, dst_p, dst_q, nbytes = (a.ravel() for a in (src_p, src_q, dst_p, dst_q, nbytes))
    so = lay.owner(src_p, src_q)
    do = lay.owner(dst_p, dst_q) if dst_owner is None else dst_owner(dst_p, dst_q)
    g, node = lay.gpus, machine.gpus_per_node
    # bytes[i, j]: from GPU i to GPU j (the diagonal stays on the GPU)
    matrix = np.bincount(so.astype(np.int64) * g + do, weights=nbytes, minlength=g * g).reshape(g, g)
    remote = matrix.copy()
    np.fill_diagonal(remote, 0.0)
    same_node = (np.arange(g)[:, None] // node) == (np.arange(g)[None, :] // node)
    intra_m, inter_m = np.where(same_node, remote, 0.0), np.where(same_node, 0.0, remote)
    out, inter, intra = remote.sum(1), inter_m.sum(1), intra_m.sum(1)
    peers = (remote > 0).sum(1)
    intra_bw = np.where((intra_m > 0).sum(1) <= 1, machine.intra_pair_bw, machine.intra_a2a_bw)
    t_intra = np.maximum(intra / intra_bw, intra_m.max(1) / machine.intra_pair_bw)
    t = np.maximum(t_intra, inter / machine.inter_bw)
    copies = matrix.sum(1) + (matrix.sum(0) if assemble else 0)
    busiest = int(np.argmax(t)) if t.max() > 0 else int(np.argmax(out))
    sources = np.bincount(dst_p * lay.pz + dst_q).max() if len(dst_p) else 0
    latency = 0.0
    if out.any():
        latency = machine.exchange_latency + machine.peer_latency * int(peers.max())
    return Exchange(name, len(nbytes), int(nbytes.sum()), int(out.sum()), int(out[busiest]),
                    int(inter[busiest]), int(peers.max()), int(2 * copies.max()), int(sources),
                    float(t.max()), latency, float(2 * copies.max() / machine.hbm_bw))


def poisson_exchanges(method: str, shape, pencils, gpus: int, dtype="float64", machine: Machine = H200_DASK,
                      bc=CHANNEL_BC) -> list[Exchange]:
    """The exchanges of one Poisson solve, in order, as the code makes them (``machine.code``: P-TDMA
    all-gathers the boundary rows at ``pz <= 2`` in the current code, gathers them into slices and
    scatters the solutions back otherwise)."""
    lay = Layout(tuple(shape), tuple(pencils), gpus, np.dtype(dtype).itemsize, tuple(bc))
    nx, ny, nz = shape
    py, pz = pencils
    nxs, nys, _ = lay.spectral
    s = lay.spec_itemsize
    ny_p, nz_q, xs_p, ys_q = _sizes(ny, py), _sizes(nz, pz), _sizes(nxs, py), _sizes(nys, pz)
    P, Q = np.arange(py), np.arange(pz)
    out = []

    def xy(name):  # within each z group q: src p -> dst p2, piece nz_q * ny_p * xs_p2 (either direction)
        p, q, p2 = P[:, None, None], Q[None, :, None], P[None, None, :]
        nb = nz_q[q] * ny_p[p] * xs_p[p2] * s
        if name == "y->x":  # src p holds xs_p, all y; sends ny_p2 rows
            nb = nz_q[q] * ny_p[p2] * xs_p[p] * s
        return _exchange(name, lay, p, q, p2, q, nb, machine)

    def yz(name):  # within each x group p: src q -> dst q2
        p, q, q2 = P[:, None, None], Q[None, :, None], Q[None, None, :]
        nb = nz_q[q] * ys_q[q2] * xs_p[p] * s if name == "y->z" else nz_q[q2] * ys_q[q] * xs_p[p] * s
        return _exchange(name, lay, p, q, p, q2, nb, machine)

    if py > 1:
        out.append(xy("x->y"))
    if method == "ftm" or pz == 1:
        if pz > 1:
            out += [yz("y->z"), yz("z->y")]
    else:
        R = min(pz, nys)
        red = _sizes(nys, R)
        rows = np.minimum(nz_q, 2)  # boundary rows of each z chunk (nz unknowns, cell centred)
        singular = all(b in ("PP", "NN") for b in bc)
        p, q, r = P[:, None, None], Q[None, :, None], np.arange(R)[None, None, :]
        nb = rows[q] * red[r] * xs_p[p] * s + ((p == 0) & (r == 0) & singular) * nz_q[q] * s
        if machine.code != "legacy" and _gathers(pz):  # every chunk gathers all rows of its x group: one round
            q2 = Q[None, None, :]
            nb = rows[q] * nys * xs_p[p] * s + ((p == 0) & singular) * nz_q[q] * s + 0 * q2
            out.append(_exchange("all-rows", lay, p, q, p, q2, nb, machine))
            return out + ([xy("y->x")] if py > 1 else [])
        reduced_owner = lambda pp, rr: lay.owner(pp, rr)  # noqa: E731  reduced task (p, s) -> chunk_owner
        out.append(_exchange("gather", lay, p, q, p, r, nb, machine, dst_owner=reduced_owner))
        # scatter: src reduced (p, s) -> dst chunk (p, q); the same pieces back (solved rows)
        so = lambda pp, qq: lay.owner(pp, qq)  # noqa: E731
        ex = _exchange("scatter", lay, p, r, p, q, nb, machine, dst_owner=so)
        out.append(ex)
    if py > 1:
        out.append(xy("y->x"))
    return out


def _gathers(pz: int) -> bool:
    """Whether the code's P-TDMA gathers every boundary row at each chunk (one round) on ``pz`` z-chunks."""
    return ZSolve.of(PTDMA, pz).gathers


def task_count(method: str, pencils, nys: int, granularity: str = "stage", workers: int | None = None,
               inputs_may_fail: bool = True) -> int:
    """Tasks of one solve graph (:func:`daskflow.poisson.distributed.build_graph`, without set-up).

    Stage: one task per chunk per fused stage plus one per piece (P-TDMA at ``pz <= 2`` gathers the
    boundary rows in one round, else two by column slice); fused: one task per worker that
    owns a chunk, plus one output ``getitem`` per chunk of a worker that owns several, plus one
    ready marker per chunk when several workers take part and the inputs may still fail (not a
    chained solve's: ``inputs_may_fail=False``).
    """
    py, pz = pencils
    c = py * pz
    if granularity == "fused":
        w = min(workers if workers else c, c)
        owned = [len(range(i, c, w)) for i in range(w)]  # chunks are dealt round-robin
        markers = c if w > 1 and inputs_may_fail else 0
        return sum(1 if n == 1 else 1 + n for n in owned) + markers
    forward = c if py == 1 else c + c * py + c
    finish = 0 if py == 1 else c * py + c
    if pz == 1:
        return forward + finish
    if method == "ftm":
        return forward + 2 * (c * pz + c) + finish
    if _gathers(pz):  # the boundary rows gathered at every chunk of the x group: one round
        return forward + (c * pz + c) + c + finish
    r = min(pz, nys)
    return forward + (py * r * pz + py * r) + c * r + c + finish


def stage_sources(method: str, pencils, nys: int) -> list[int]:
    """Stage granularity: the sources per destination of each exchange of a solve, in order."""
    py, pz = pencils
    xy = [py] if py > 1 else []
    if pz == 1:
        return xy + xy
    middle = [pz, pz] if method == "ftm" else [pz] if _gathers(pz) else [pz, min(pz, nys)]
    return xy + middle + xy


# ------------------------------------------------------------------------------------- predictions


def passes_time(points: int, itemsize: int, passes: float, machine: Machine) -> float:
    return points * itemsize * passes / machine.hbm_bw


def predict_solve(method: str, shape, pencils, gpus: int | None = None, dtype="float64",
                  machine: Machine = H200_DASK, granularity: str = "fused", bc=CHANNEL_BC) -> dict:
    """Predicted time of one Poisson solve (chained: back-to-back solves), split into compute,
    transfer (links), copies (cutting and assembling pieces), latency and overhead (Dask).

    The GPU's time (``gpu_s``: compute + transfer + copies + latency) and the host's (``host_s``:
    :attr:`Machine.host_round` per round, :attr:`Machine.host_distributed_solve` for P-TDMA at
    ``pz > 1``) overlap: the host launches kernels and NCCL calls ahead of the GPU, so the solve
    takes the longer of the two (``total_s`` = max + overhead)."""
    gpus = gpus or pencils[0] * pencils[1]
    itemsize = np.dtype(dtype).itemsize
    lay = Layout(tuple(shape), tuple(pencils), gpus, itemsize, tuple(bc))
    chunks_per_gpu = math.ceil(lay.chunks / gpus)
    points = lay.chunk_points() * chunks_per_gpu
    passes = machine.solve_passes + (machine.ptdma_extra_passes if method == "ptdma" and pencils[1] > 1 else 0)
    compute = passes_time(points, itemsize, passes, machine)
    exchanges = poisson_exchanges(method, shape, pencils, gpus, dtype, machine, bc)
    transfer = sum(e.transfer_s for e in exchanges)
    copies = sum(e.copy_s for e in exchanges)
    if granularity == "stage":
        sources = stage_sources(method, pencils, lay.spectral[1])
        latency = sum(machine.stage_exchange_base + machine.stage_exchange_per_source * n for n in sources)
        overhead = machine.task_hop  # the first map layer; every other layer belongs to an exchange
    else:
        latency = sum(e.latency_s for e in exchanges)
        overhead = machine.solve_overhead
    rounds = len([e for e in exchanges if e.remote_bytes])
    gpu = compute + transfer + copies + latency
    host = rounds * machine.host_round + distributed_solves(method, pencils, machine) * machine.host_distributed_solve
    total = max(gpu, host) + overhead
    return {"method": method, "shape": list(shape), "pencils": list(pencils), "gpus": gpus, "dtype": str(dtype),
            "granularity": granularity, "machine": machine.name, "compute_s": compute, "transfer_s": transfer,
            "copy_s": copies, "latency_s": latency, "overhead_s": overhead, "total_s": total, "gpu_s": gpu,
            "host_s": host, "exchanges": rounds,
            "bytes_out_per_gpu": sum(e.bytes_out for e in exchanges),
            "bytes_out_inter_per_gpu": sum(e.bytes_out_inter for e in exchanges),
            "tasks": task_count(method, pencils, lay.spectral[1], granularity, gpus),
            "by_exchange": {e.name: e.time_s for e in exchanges}}


def distributed_solves(method: str, pencils, machine: Machine) -> int:
    """Distributed tridiagonal solves of one Poisson solve: one for P-TDMA at ``pz > 1``."""
    return int(method == "ptdma" and pencils[1] > 1)


def transpose_exchange(shape, gpus: int, itemsize: int = 8, machine: Machine = H200_DASK) -> Exchange:
    """One x->y transpose of real ``(gpus, 1)`` slabs without transforms (``benchmarks/transpose.py``)."""
    return poisson_exchanges("ftm", shape, (gpus, 1), gpus, np.dtype(f"f{itemsize}"), machine, ("NN", "NN", "NN"))[0]
