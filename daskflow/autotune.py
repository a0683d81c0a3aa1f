"""``pencils: auto``, ``poisson: auto`` and ``cluster.comm: auto``: time the candidates on the live
cluster, keep the fastest.

At set-up (the way cuDecomp's autotuner does it) every candidate decomposition ``(py, pz)`` with
``py * pz`` = number of workers (one pencil per worker, as :class:`daskflow.Simulation` runs),
each requested algorithm (FTM, P-TDMA) and each exchange backend solves the pressure Poisson
problem a few times on the workers; the fastest median wins, the table is logged (logger
``daskflow.autotune``; ``daskflow run`` prints it) and the choice is cached so a second run on the
same problem and cluster skips the timing.

* :func:`decompositions` / :func:`candidates`: pure planning. A candidate is valid when
  :class:`~daskflow.poisson.plan.SpectralPlan` accepts it (no empty chunk in any layout; P-TDMA
  needs two z points per chunk; FTM needs ``pz`` <= the number of y modes). With ``pz = 1`` both
  methods run the same stages, so only P-TDMA is listed there (``distinct=False`` keeps both).
* :func:`time_candidates`: the timing. On a ``distributed`` client each candidate runs exactly the
  code path of the simulation's pressure solve: the plan and the P-TDMA set-up are placed on the
  workers as :class:`~daskflow.poisson.PoissonSolver` does for ``granularity="fused"``
  (:func:`~daskflow.poisson.distributed.cluster_state`), then one task per worker runs the
  algorithm several times back to back with a :class:`~daskflow.pencils.direct.DirectExecutor`
  (pieces sent directly between workers through the candidate's exchange backend: with
  ``comm="auto"`` every backend usable on the workers is a candidate, NCCL, UCX and the mailbox on
  GPU workers), as the simulation's fused step task does. Each solve is
  timed on the workers (GPU synchronised), the per-solve time is the slowest worker's; no client
  round trip is inside the timing (the simulation has none either). The candidates take turns in
  a few rounds, so a slow spell of the machine does not fall on one of them only. Without a client
  the in-process solver is timed (``pencils`` emulated).
* :func:`autotune`: candidates, cache look-up, timing, choice, cache write, log.

Cache (:mod:`daskflow.autotune_cache`): a JSON file, ``$DASKFLOW_CACHE_DIR/autotune.json`` (else
``$XDG_CACHE_HOME/daskflow`` or ``~/.cache/daskflow``). The key (:func:`cache_key`) holds
everything that changes which candidate is fastest: the grid shape, the boundary conditions and
placement (they pick the transforms: complex FFT, DCT, DST, and the sizes), the dtype, the
candidate list (so ``pencils``/``poisson`` fixed or ``auto`` are separate entries) and the
exchange backends timed, the daskflow version, and the cluster shape: number of workers, threads
per worker, number of hosts, comms protocol, device kind (cpu/gpu) and device names. The box
lengths and the z stretching are *not* in the key: they change coefficient values, never the work
or the messages. An unreadable cache is ignored (with a warning) and rewritten; an unwritable one
only warns.
"""

from __future__ import annotations

import logging
import statistics
import time
import uuid
from contextlib import nullcontext
from dataclasses import dataclass, field

import numpy as np

from daskflow.autotune_cache import (
    STAGGER,
    cache_key,
    cache_path,
    describe_cluster,
    key_text,
    read_cache,
    write_cache,
)
from daskflow.grid import Grid

logger = logging.getLogger("daskflow.autotune")

METHODS = ("ptdma", "ftm")
WARMUP = 1  # untimed solves per candidate and round
REPEATS = 6  # timed solves per candidate
ROUNDS = 3  # interleaved rounds over the candidates

#: Solves timed by this process so far (all candidates, warm-up included): tests count them to
#: tell a cache hit (no solve) from a miss.
timed_solves = 0


# ---------------------------------------------------------------- planning (pure)

def decompositions(workers: int) -> list[tuple[int, int]]:
    """Every ``(py, pz)`` with ``py * pz == workers``, ``py`` ascending."""
    if workers < 1:
        raise ValueError(f"autotune: the number of workers must be positive, got {workers}")
    return [(py, workers // py) for py in range(1, workers + 1) if workers % py == 0]


def valid(grid: Grid, bc, pencils: tuple[int, int], method: str, dtype="float64", stagger: str = STAGGER) -> bool:
    """Whether the Poisson plan accepts ``pencils`` and ``method`` on ``grid`` (every chunk at least
    the size the plan needs)."""
    from daskflow.bc import Boundaries
    from daskflow.poisson.plan import SpectralPlan

    try:
        SpectralPlan(grid, Boundaries.parse(tuple(bc), stagger), 0.0, 1.0, method, tuple(pencils), np.dtype(dtype))
    except ValueError:
        return False
    return True


def candidates(grid: Grid, bc, workers: int | None = None, methods=METHODS, pencils=None, dtype="float64",
               accept=None, distinct: bool = True, stagger: str = STAGGER) -> list[tuple[tuple[int, int], str]]:
    """Valid ``((py, pz), method)`` pairs: ``pencils`` (a list of ``(py, pz)``) or, by default, every
    decomposition of ``workers``; ``accept(pencils)`` may refuse more (for example decompositions that
    do not tile a restart's store). With ``distinct`` FTM is left out where ``pz = 1`` and P-TDMA is
    listed (the same stages run)."""
    options = [tuple(p) for p in pencils] if pencils is not None else decompositions(int(workers))
    out = []
    for p in options:
        if accept is not None and not accept(p):
            continue
        for method in methods:
            if distinct and method == "ftm" and p[1] == 1 and "ptdma" in methods:
                continue
            if valid(grid, bc, p, method, dtype, stagger):
                out.append(((int(p[0]), int(p[1])), method))
    return out


# ---------------------------------------------------------------- timing

def _random_chunk(shape: tuple, dtype: str, xp_name: str, seed: int):
    """A standard-normal logical chunk made where it lives, Fortran-ordered (the solver's fast order)."""
    import importlib

    xp = importlib.import_module(xp_name)
    return xp.random.default_rng(seed).standard_normal(tuple(shape)[::-1], dtype=dtype).T


def _synchronize(blocks) -> None:
    from daskflow.backend import is_cupy_array

    for block in blocks:
        if is_cupy_array(block):
            import cupy

            cupy.cuda.Device().synchronize()
            return


def _timed_solves(algorithm, plan, run_id: str, workers: list[str], pz: int, inputs: list, warmup: int,
                  repeats: int, comm=None) -> list[float]:
    """One worker's part of ``warmup + repeats`` solves back to back; seconds per timed solve.

    The body of the simulation's pressure solve: the algorithm with a direct executor whose pieces
    go to the peers through the transport ``comm`` (a :class:`~daskflow.pencils.transport.CommSpec`;
    default the mailbox), one secession from the thread pool for all solves."""
    from distributed import get_worker

    from daskflow.pencils.direct import collective
    from daskflow.pencils.executor import DirectExecutor
    from daskflow.pencils.layout import chunk_owner
    from daskflow.pencils.link import exchange_timeout
    from daskflow.pencils.transport import MailboxTransport, communicator

    worker = get_worker()
    owner = lambda k: chunk_owner(k, workers, pz)  # noqa: E731
    blocks, *setup = (dict(zip(map(tuple, keys), values, strict=True)) for keys, values in inputs)
    times = []
    with collective(worker, run_id, workers) if len(workers) > 1 else nullcontext():
        transport = (communicator(worker, comm, exchange_timeout(), run_id) if len(workers) > 1
                     else MailboxTransport(worker, exchange_timeout()))
        ex = DirectExecutor(plan, worker.address, run_id, owner, transport)
        for _ in range(warmup + repeats):
            t0 = time.perf_counter()
            out = algorithm(ex, plan, blocks, *setup)
            _synchronize(out.values())
            times.append(time.perf_counter() - t0)
        ex.finish()
    return times[warmup:]


def _row(pencils, method: str, seconds: list[float], wall: float, comm: str | None = None,
         error: str | None = None) -> dict:
    """A timing table row; a candidate that failed (``error``) has no times and is never chosen."""
    times = {"median_ms": None, "min_ms": None, "max_ms": None}
    if seconds:
        times = {"median_ms": 1e3 * statistics.median(seconds), "min_ms": 1e3 * min(seconds),
                 "max_ms": 1e3 * max(seconds)}
    row = {"pencils": list(pencils), "method": method, "comm": comm, **times, "repeats": len(seconds),
           "wall_s": wall, "samples_ms": [1e3 * t for t in seconds]}
    return row if error is None else {**row, "error": error}


class _ClusterCandidate:
    """One candidate placed on the workers: plan, P-TDMA set-up and input chunks (shared by the
    candidates with the same pencils)."""

    def __init__(self, client, grid: Grid, bc, stagger: str, dtype: str, pencils, method: str, device: str,
                 inputs: dict, comm: str | None = None) -> None:
        from daskflow.pencils.layout import chunk_owner, pencil_chunks
        from daskflow.pencils.transport import make_comm
        from daskflow.poisson import PoissonSolver, algorithms, stages
        from daskflow.poisson.distributed import cluster_state

        xp_name = "cupy" if device == "gpu" else "numpy"
        self.client = client
        self.solver = PoissonSolver(grid, tuple(bc), stagger, method, tuple(pencils), dtype, granularity="fused")
        state = cluster_state(self.solver, client, xp_name)  # plan and P-TDMA set-up, placed as a fused solve does
        self.workers, dec = state.workers, self.solver.plan.decomposition
        self.plans, self.pz = state.plans, dec.pz
        # the communicator a run with this transport would use (shared with it: built once)
        self.comm = make_comm(client, state.participants, comm or "mailbox", device)
        owner = {k: chunk_owner(k, self.workers, dec.pz) for k in [*dec.indices, *state.factors]}
        if tuple(pencils) not in inputs:
            chunks = pencil_chunks(grid.shape, dec.pencils)
            inputs[tuple(pencils)] = {
                (p, q): client.submit(_random_chunk, (chunks[0][0], chunks[1][p], chunks[2][q]), dtype, xp_name,
                                      p * dec.pz + q, workers=[owner[(p, q)]], allow_other_workers=False, pure=False)
                for p, q in dec.indices}
        blocks = inputs[tuple(pencils)]
        head, tail = [stages.to_memory_order], [stages.to_logical_order]
        self.algorithm, uses_setup = algorithms.for_method(method, dec.pz, head, tail)  # as the solver's graph does
        extra = (state.coefficients, state.factors) if uses_setup else ()
        self.inputs = {}
        for worker in self.workers:
            mine = [([list(k) for k in d if owner[k] == worker], [v for k, v in d.items() if owner[k] == worker])
                    for d in (blocks, *extra)]
            if mine[0][0]:
                self.inputs[worker] = mine

    def run(self, warmup: int, repeats: int) -> list[float]:
        """Seconds per timed solve (the slowest worker's)."""
        run_id = f"daskflow-autotune-{uuid.uuid4().hex}"
        from daskflow.pencils.transport import submit_together

        futures = submit_together(self.client, [
            (worker, _timed_solves, (self.algorithm, self.plans[worker], run_id, self.workers, self.pz, inputs, warmup,
                                     repeats, self.comm), {})
            for worker, inputs in self.inputs.items()])
        per_worker = self.client.gather(futures)
        return [max(column) for column in zip(*per_worker, strict=True)]  # a solve ends when its slowest part does


class _LocalCandidate:
    """One candidate in this process (the in-process solver, ``pencils`` emulated)."""

    def __init__(self, grid: Grid, bc, stagger: str, dtype: str, pencils, method: str, device: str,
                 inputs: dict, comm: str | None = None) -> None:
        from daskflow.poisson import PoissonSolver

        self.solver = PoissonSolver(grid, tuple(bc), stagger, method, tuple(pencils), dtype)
        if "b" not in inputs:
            inputs["b"] = _random_chunk(grid.shape, dtype, "cupy" if device == "gpu" else "numpy", 0)
        self.b = inputs["b"]

    def run(self, warmup: int, repeats: int) -> list[float]:
        seconds = []
        for i in range(warmup + repeats):
            t0 = time.perf_counter()
            _synchronize([self.solver.solve(self.b)])
            if i >= warmup:
                seconds.append(time.perf_counter() - t0)
        return seconds


def time_candidates(grid: Grid, bc, dtype, cands, client=None, device: str = "cpu", warmup: int = WARMUP,
                    repeats: int = REPEATS, stagger: str = STAGGER, rounds: int = ROUNDS,
                    comms=(None,)) -> list[dict]:
    """One row per candidate ``((py, pz), method)`` and exchange backend of ``comms`` (``None``: in
    process, nothing moves): ``median_ms``, ``min_ms``, ``max_ms`` (and every sample,
    ``samples_ms``) of ``repeats`` warm solves, ``wall_s`` (the candidate's share of the time: set-up,
    data, all solves). On ``client``'s workers (one task per worker, see the module docstring), else
    in this process. A candidate that fails (a backend that cannot start here) gets a row with its
    ``error`` and no times; when every candidate fails, the first error is raised.

    The candidates are interleaved: all are set up first (their inputs and P-TDMA set-ups are held
    at once: a few fields' worth per candidate), then ``rounds`` rounds each run ``warmup`` untimed and
    about ``repeats / rounds`` timed solves of every candidate in turn, so that a slow spell of the
    machine (other jobs, clocks) lands on all candidates alike."""
    global timed_solves
    if repeats < 1 or warmup < 0 or rounds < 1:
        raise ValueError(f"autotune: repeats and rounds must be >= 1 and warmup >= 0, got {repeats}, {rounds} "
                         f"and {warmup}")
    rounds = min(rounds, repeats)
    dtype = str(np.dtype(dtype))
    inputs: dict = {}
    entries = [(p, m, c) for p, m in cands for c in comms]
    prepared: list = []
    walls: list[float] = []
    errors: list[Exception | None] = []
    for pencils, method, comm in entries:
        t0 = time.perf_counter()
        args = (grid, bc, stagger, dtype, pencils, method, device, inputs, comm)
        candidate, error = None, None
        try:
            candidate = _ClusterCandidate(client, *args) if client is not None else _LocalCandidate(*args)
        except Exception as exc:  # noqa: BLE001 - a backend that cannot start here is a row, not a failure
            error = exc
        prepared.append(candidate)
        errors.append(error)
        walls.append(time.perf_counter() - t0)
    samples: list[list[float]] = [[] for _ in entries]
    for r in range(rounds):
        count = repeats // rounds + (r < repeats % rounds)
        for i, candidate in enumerate(prepared):
            if errors[i] is not None:
                continue
            t0 = time.perf_counter()
            try:
                samples[i] += candidate.run(warmup, count)
            except Exception as exc:  # noqa: BLE001 - as above; its communicator is checked before the next run
                errors[i] = exc
                _forget_failed_run(client)
            walls[i] += time.perf_counter() - t0
            timed_solves += warmup + count
    del prepared, inputs
    if all(error is not None for error in errors):
        raise errors[0]
    rows = [_row(p, m, [] if error else seconds, wall, c, None if error is None else f"{type(error).__name__}: {error}")
            for (p, m, c), seconds, wall, error in zip(entries, samples, walls, errors, strict=True)]
    for row in rows:
        logger.debug("autotune %s %s %s: %s", row["pencils"], row["method"], row["comm"],
                     row.get("error") or f"{row['median_ms']:.3f} ms")
    return rows


def _forget_failed_run(client) -> None:
    """After a candidate's run failed on ``client``'s workers: the next run asks them whether its
    communicator is still alive (the failure aborted it)."""
    if client is not None:
        from daskflow.pencils.transport import comm_failed

        comm_failed(client)


def fastest(rows: list[dict]) -> dict:
    """The row with the smallest median among those that ran (ties: the earlier row)."""
    return min((r for r in rows if r["median_ms"] is not None), key=lambda r: r["median_ms"])


# ---------------------------------------------------------------- the autotuner

@dataclass
class AutotuneResult:
    """The choice (``pencils``, ``method`` and, on a cluster, the exchanges' backend ``comm``), the
    timing ``table`` (empty when there was one candidate only), whether it came from the cache, the
    cache ``key`` and the ``path``."""

    pencils: tuple[int, int]
    method: str
    table: list[dict] = field(default_factory=list)
    cached: bool = False
    key: dict | None = None
    path: str | None = None
    seconds: float = 0.0
    note: str = ""  # why nothing was timed ("the only candidate", "kept from the checkpoint")
    comm: str | None = None  # None: in process, or not chosen here (the run resolves cluster.comm itself)

    def lines(self) -> list[str]:
        """The table as text, fastest marked."""
        source = "from the cache " + str(self.path) if self.cached else f"timed in {self.seconds:.1f} s"
        comm = f", comm {self.comm}" if self.comm else ""
        if not self.table:
            return [f"autotune: pencils {list(self.pencils)}, poisson {self.method}{comm} "
                    f"({self.note or 'not timed'})"]
        out = [f"autotune: {len(self.table)} candidates, {source}" + (f" ({self.note})" if self.note else ""),
               f"  {'pencils':>10}  {'method':6}  {'comm':8}  {'median ms':>10}  {'min ms':>10}"]
        chosen = (self.pencils, self.method, self.comm)
        for r in sorted(self.table, key=lambda r: (r["median_ms"] is None, r["median_ms"] or 0.0)):
            head = f"  {str(r['pencils']):>10}  {r['method']:6}  {r.get('comm') or '-':8}"
            if r["median_ms"] is None:
                out.append(f"{head}  failed: {r.get('error', '')}")
                continue
            mark = "  <- chosen" if (tuple(r["pencils"]), r["method"], r.get("comm")) == chosen else ""
            out.append(f"{head}  {r['median_ms']:10.3f}  {r['min_ms']:10.3f}{mark}")
        return out

    def summary(self) -> dict:
        return {"pencils": list(self.pencils), "method": self.method, "comm": self.comm, "cached": self.cached,
                "table": self.table}


def detect_device(client=None, device: str | None = "auto") -> str:
    """``cpu`` or ``gpu``: ``device`` unless ``auto``/``None``, then GPU when every worker (or this
    process) sees one."""
    if device in ("cpu", "gpu"):
        return device
    from daskflow.backend import cupy_or_none

    if client is None:
        return "gpu" if cupy_or_none() is not None else "cpu"
    return "gpu" if all(client.run(_has_gpu).values()) else "cpu"


def _has_gpu() -> bool:
    from daskflow.backend import cupy_or_none

    return cupy_or_none() is not None


def autotune(grid: Grid, bc=("PP", "PP", "NN"), dtype="float64", client=None, pencils="auto", method="auto",
             device: str | None = "auto", warmup: int = WARMUP, repeats: int = REPEATS, cache: bool = True,
             accept=None, stagger: str = STAGGER, rounds: int = ROUNDS, comm: str = "auto") -> AutotuneResult:
    """Pick ``pencils`` (``"auto"`` or ``(py, pz)``), ``method`` (``"auto"``, ``"ptdma"`` or ``"ftm"``)
    and, on a cluster, the exchanges' backend ``comm`` (``"auto"`` or one of
    :data:`~daskflow.pencils.transport.COMMS`) for the Poisson problem on ``grid`` with boundary
    conditions ``bc`` and placement ``stagger`` (the pressure's: cell-centred).

    ``pencils="auto"``: every decomposition of the client's worker count (in process: ``(1, 1)``).
    ``comm="auto"``: every backend usable on the workers
    (:func:`~daskflow.pencils.transport.comm_candidates`), each timed with every decomposition and
    method; a named one carries the timing alone. ``accept(pencils)`` may refuse decompositions.
    Raises ``ValueError`` (naming ``solver.pencils``) when no candidate fits the grid."""
    t0 = time.perf_counter()
    workers = 1
    if client is not None:
        from daskflow.pencils.graph import live_workers

        live = live_workers(client)
        workers = len(live)
    options = decompositions(workers) if pencils == "auto" else [tuple(int(v) for v in pencils)]
    methods = METHODS if method == "auto" else (method,)
    cands = candidates(grid, bc, methods=methods, pencils=options, dtype=dtype, accept=accept, stagger=stagger)
    if not cands:
        raise ValueError(f"solver.pencils: no decomposition among {[list(p) for p in options]} with "
                         f"poisson {'/'.join(methods)} fits the grid {list(grid.shape)} on {workers} worker(s) "
                         "(set cluster.workers or solver.pencils)")
    comms: list = [None]
    if client is not None and workers > 1:
        from daskflow.pencils.transport import choose_comm, comm_candidates

        device = detect_device(client, device)
        comms = (comm_candidates(client, live, device) if comm == "auto"
                 else [choose_comm(client, live, comm, device, setting="cluster.comm")])
    if len(cands) * len(comms) == 1:
        (p, m), = cands
        return AutotuneResult(p, m, seconds=time.perf_counter() - t0, note="the only candidate", comm=comms[0])
    device = detect_device(client, device)  # a no-op once resolved above
    key = cache_key(grid, bc, dtype, cands, describe_cluster(client, device), stagger, comms)
    path = cache_path()
    if cache:
        hit = read_cache(path).get(key_text(key))
        if hit is not None and (tuple(hit["pencils"]), hit["method"], hit.get("comm")) in [
                (p, m, c) for p, m in cands for c in comms]:
            result = AutotuneResult(tuple(hit["pencils"]), hit["method"], hit["table"], True, key, str(path),
                                    time.perf_counter() - t0, comm=hit.get("comm"))
            _log(result)
            return result
    table = time_candidates(grid, bc, dtype, cands, client, device, warmup, repeats, stagger, rounds, comms)
    best = fastest(table)
    result = AutotuneResult(tuple(best["pencils"]), best["method"], table, False, key, str(path),
                            time.perf_counter() - t0, comm=best["comm"])
    if cache:
        write_cache(key, {"pencils": best["pencils"], "method": best["method"], "comm": best["comm"],
                          "table": table, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")}, path)
    _log(result)
    return result


def _log(result: AutotuneResult) -> None:
    for line in result.lines():
        logger.info(line)


def tuned_solver(grid: Grid, bc=("PP", "PP", "NN"), stagger: str = "ccc", dtype="float64", client=None,
                 pencils="auto", method="auto", device: str = "auto", alpha: float | None = None, **solver_args):
    """A :class:`~daskflow.poisson.PoissonSolver` (with ``alpha``: a
    :class:`~daskflow.poisson.HelmholtzSolver`) with the ``pencils`` and ``method`` that
    :func:`autotune` picks where they are ``"auto"``; the choice is the solver's ``autotune``
    attribute. ``solver_args`` go to the solver (``granularity``, ``comm``: ``"auto"``, the default,
    is timed too on a cluster)."""
    from daskflow.bc import Boundaries
    from daskflow.poisson import HelmholtzSolver, PoissonSolver

    b = Boundaries.parse(bc, stagger)
    result = autotune(grid, b.bc, dtype, client, pencils, method, device, stagger="".join(b.stagger),
                      comm=solver_args.get("comm", "auto"))
    if result.comm is not None:
        solver_args["comm"] = result.comm
    solver_args["device"] = None if device == "auto" else device
    if alpha is None:
        solver = PoissonSolver(grid, bc, stagger, result.method, result.pencils, dtype, **solver_args)
    else:
        solver = HelmholtzSolver(grid, bc, stagger, alpha, result.method, result.pencils, dtype, **solver_args)
    solver.autotune = result
    return solver
