"""The CPU time step: a 128 x 64 x 64 turbulent channel step (explicit diffusion, float64) against
the seed's Fortran code on the same kind of machine (36 ms per step with 2 MPI ranks, 69 ms with 1;
about 120 bytes per point). Prints ONE JSON document.

    python benchmarks/cpu_channel.py [--steps 5] [--segments 5] [--output docs/results/cpu_channel_NAME.json]
        [--baseline OTHER_CHECKOUT [--rounds 3]]

Modes, each in its own child process (thread counts are fixed before NumPy is imported):

* ``inprocess-1t``: ``Simulation(config)`` in this process, on 1 thread;
* ``inprocess-1t-array-code``: the same with the compiled loops switched off (``DASKFLOW_NUMBA=0``):
  the NumPy array code they replace, measured in the same run;
* ``inprocess-2t``: the same with 2 threads for daskflow's slab pool (``DASKFLOW_THREADS``; BLAS
  stays on 1, see ``SINGLE_THREADED``);
* ``cluster-2x1`` and ``cluster-1x2``: a ``distributed.LocalCluster`` of 2 single-thread process
  workers, ``solver.pencils`` (2, 1) and (1, 2), one pencil per worker, started with the allocator
  settings daskflow gives the workers it starts (``daskflow.cluster.WORKER_MALLOC``).

Beside the modes, the machine's memory bandwidth on 1 and 2 threads (``triad_gb_per_s``, the STREAM
triad as a compiled loop): how much a second thread can buy a step whose loops are bound by memory.

``--baseline DIR`` measures a second checkout of daskflow (e.g. ``git worktree add /tmp/base HEAD~1``)
in the same run: every mode of both checkouts, ``--rounds`` times, alternating which checkout goes
first, so that a change of the machine's load shows in both. Each mode reports the round with the
median time (all rounds listed) under ``results`` and ``baseline.results``, and ``speedup`` is the
baseline's time over this checkout's.

Time per step is the median over ``--segments`` runs of ``--steps`` steps after a warm-up run (on a
cluster every run is one fused task per worker, so the per-run submission cost is included, spread
over ``--steps`` steps). Memory per point: in process, the tracemalloc peak of the allocations made
during one step (NumPy reports its buffers to tracemalloc) plus the resident fields, and the RSS
high-water mark minus the RSS after the imports; on a cluster, the workers' RSS high-water marks
minus their RSS before the simulation was created, summed over the workers.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys

from emit import emit

SHAPE = (128, 64, 64)
FORTRAN = {"ms_per_step": {"1": 69.0, "2": 36.0}, "bytes_per_point": 120.0,
           "source": "the seed's Fortran code, measured on the same kind of 2-core machine (1 and 2 MPI ranks)"}
THREAD_VARIABLES = ("OMP_NUM_THREADS", "DASKFLOW_THREADS")
# BLAS stays on one thread in every mode: the step's only BLAS call is a small matrix-vector product
# per Poisson solve, and OpenBLAS's spinning helper threads took a core from the step (2 threads,
# 128 x 64 x 64: 69 ms per step with OPENBLAS_NUM_THREADS=2 against 63 ms with 1).
SINGLE_THREADED = ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
#: mode: (threads, the Fortran rank count it is compared with)
MODES = {"inprocess-1t": (1, "1"), "inprocess-1t-array-code": (1, "1"), "inprocess-2t": (2, "2"),
         "cluster-2x1": (1, "2"), "cluster-1x2": (1, "2")}
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if os.path.isdir(os.path.join(REPO, "daskflow")):  # measure this checkout, not an installed copy
    sys.path.insert(0, REPO)


def config(pencils=(1, 1)) -> dict:
    return {
        "grid": {"shape": list(SHAPE), "lengths": [6.0, 3.0, 2.0], "z_stretch": 2.0, "z_cluster": "both"},
        "physics": {"nu": 1 / 2800, "forcing": {"kind": "flow_rate", "value": [1.0, 0.0]}},
        "boundaries": {"preset": "channel"},
        "initial": {"kind": "turbulent_channel", "amplitude": 0.2, "seed": 0},
        "time": {"cfl": 0.9, "dt_max": 0.01, "implicit_diffusion": "none"},
        "solver": {"poisson": "ptdma", "pencils": list(pencils), "dtype": "float64", "device": "cpu"},
    }


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _peak_rss() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # kB on Linux


def _segments(run, steps: int, segments: int, cpu_clock) -> tuple[list[float], list[float]]:
    """Wall and CPU seconds per step of ``segments`` runs of ``steps`` steps."""
    import time

    wall, cpu = [], []
    for _ in range(segments):
        start, start_cpu = time.perf_counter(), cpu_clock()
        run(steps)
        wall.append((time.perf_counter() - start) / steps)
        cpu.append(max(end - begin for end, begin in zip(cpu_clock(), start_cpu, strict=True)) / steps)
    return wall, cpu


def _summary(times: tuple[list[float], list[float]], points: int) -> dict:
    import statistics

    wall, cpu = times
    median = statistics.median(wall)
    return {"ms_per_step": 1e3 * median, "ns_per_point_per_step": median / points * 1e9,
            "ms_per_step_segments": [round(1e3 * t, 3) for t in wall],
            "cpu_ms_per_step": 1e3 * statistics.median(cpu),
            "note_cpu": "CPU seconds of the process (cluster: the busiest worker) per step; less sensitive than "
                        "wall time to other load on the machine"}


def in_process(args) -> dict:
    import tracemalloc

    import numpy as np

    import daskflow
    from daskflow import Simulation

    before_runtime = _rss()
    _load_compiled_loops()
    baseline = _rss()
    sim = Simulation(config())
    points = int(np.prod(SHAPE))
    sim.run(steps=max(2, args.steps // 2))  # warm-up: FFT plans, caches
    out = _summary(_segments(lambda n: sim.run(steps=n), args.steps, args.segments, _cpu_seconds), points)
    st = sim.state
    resident = sum(a.nbytes for a in (st.u, st.v, st.w, st.p))
    tracemalloc.start()
    sim.run(steps=1)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    out.update({
        "bytes_per_point_tracemalloc": (peak + resident) / points,
        "bytes_per_point_step_temporaries": peak / points,
        "bytes_per_point_resident_fields": resident / points,
        "bytes_per_point_rss": (_peak_rss() - baseline) / points,
        "rss_baseline_mb": baseline / 2**20,
        "rss_compiled_loops_runtime_mb": (baseline - before_runtime) / 2**20,
        "note_rss": "RSS growth of the run itself; the compiled loops' runtime (Numba and LLVM, a fixed cost "
                    "whatever the grid) is loaded before the baseline and reported apart",
        "divergence_max": sim.divergence_max(),
        "versions": {"numpy": np.__version__, "daskflow": daskflow.__version__},
    })
    return out


def _load_compiled_loops() -> None:
    """Load every compiled loop the benchmark runs, with the same types (Numba, LLVM and the cached
    machine code: a fixed cost of the compiled CPU path, whatever the grid), by one step of a
    16 x 8 x 8 version of the benchmark's channel (P-TDMA over two z chunks, emulated)."""
    from daskflow import Simulation
    from daskflow.backend import compiled_loops

    if compiled_loops():
        tiny = config((1, 2))
        tiny["grid"]["shape"] = [16, 8, 8]
        Simulation(tiny).run(steps=1)


def _cpu_seconds() -> list[float]:
    import time

    return [time.process_time()]


def _worker_memory():
    return _rss(), _peak_rss()


def on_cluster(args) -> dict:
    import numpy as np
    from distributed import Client, LocalCluster

    from daskflow import Simulation
    from daskflow.cluster import worker_environment

    points = int(np.prod(SHAPE))
    with worker_environment():  # the workers daskflow itself starts (daskflow.cluster.WORKER_MALLOC)
        cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None)
    with cluster, Client(cluster) as client:
        client.wait_for_workers(2)
        client.run(_load_compiled_loops)
        before = client.run(_worker_memory)
        sim = Simulation(config(args.pencils), client=client)
        sim.run(steps=max(2, args.steps // 2))
        workers = lambda: [v[0] for _, v in sorted(client.run(_cpu_seconds).items())]  # noqa: E731
        out = _summary(_segments(lambda n: sim.run(steps=n), args.steps, args.segments, workers), points)
        after = client.run(_worker_memory)
        grown = sum(after[w][1] - before[w][0] for w in after)
        out.update({
            "pencils": list(args.pencils),
            "bytes_per_point_rss": grown / points,
            "worker_rss_baseline_mb": {w: v[0] / 2**20 for w, v in before.items()},
            "worker_rss_peak_mb": {w: v[1] / 2**20 for w, v in after.items()},
            "divergence_max": sim.divergence_max(),
        })
    return out


def triad(threads: int, n: int = 20_000_000, repeat: int = 10) -> dict:
    """The memory bandwidth of ``threads`` threads: the STREAM triad ``a = b + s c`` as a compiled
    parallel loop over float64 arrays of ``n`` values, bytes read and written per second, best of
    ``repeat``."""
    import time

    import numba
    import numpy as np

    @numba.njit(parallel=True)
    def kernel(a, b, c, s):
        for i in numba.prange(a.size):
            a[i] = b[i] + s * c[i]

    numba.set_num_threads(threads)
    a, b, c = np.empty(n), np.ones(n), np.ones(n)
    kernel(a, b, c, 0.5)
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        kernel(a, b, c, 0.5)
        best = min(best, time.perf_counter() - start)
    return {"threads": threads, "gb_per_s": 3 * a.nbytes / best / 1e9}


def _child(mode: str, threads: int, args, repo: str = REPO) -> dict:
    """One mode in a child process, with the daskflow (and this benchmark) of checkout ``repo``."""
    env = dict(os.environ)
    env["DASKFLOW_NUMBA"] = "0" if mode.endswith("array-code") else "1"
    env.update({name: str(threads) for name in THREAD_VARIABLES})
    env.update({name: "1" for name in SINGLE_THREADED})
    env["PYTHONPATH"] = os.pathsep.join([repo, *filter(None, [env.get("PYTHONPATH")])])
    script = os.path.join(repo, "benchmarks", os.path.basename(__file__))
    cmd = [sys.executable, script, "--child", mode, "--steps", str(args.steps), "--segments", str(args.segments)]
    result = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        return {"error": result.stderr[-2000:]}
    return json.loads(result.stdout.strip().splitlines()[-1])  # the document is the last line


def cpu_model() -> str:
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def short_cpu_name(model: str) -> str:
    words = model.replace("(R)", "").replace("(TM)", "").replace("CPU", "").replace("Processor", "").split()
    words = [w.strip("@").lower() for w in words if w.strip("@") and not w.endswith("GHz")]
    return "-".join(words) or "cpu"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=5, help="steps per timed segment")
    parser.add_argument("--segments", type=int, default=5, help="timed segments (the median is reported)")
    parser.add_argument("--output", help="also write the JSON document to this path")
    parser.add_argument("--modes", nargs="*", default=[*MODES])
    parser.add_argument("--baseline", help="another checkout of daskflow, measured alternately with this one")
    parser.add_argument("--rounds", type=int, default=1, help="runs of every mode (of each checkout)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        if args.child == "triad":
            print(json.dumps(triad(int(os.environ["DASKFLOW_THREADS"]))))
            return
        if args.child.startswith("cluster"):
            args.pencils = (2, 1) if args.child == "cluster-2x1" else (1, 2)
            out = on_cluster(args)
        else:
            out = in_process(args)
        print(json.dumps(out))
        return

    import dask
    import distributed
    import numpy as np
    import scipy

    import daskflow

    threads = {mode: spec[0] for mode, spec in MODES.items()}
    fortran_ranks = {mode: spec[1] for mode, spec in MODES.items()}
    checkouts = [REPO] + ([os.path.abspath(args.baseline)] if args.baseline else [])
    runs = {repo: {mode: [] for mode in args.modes} for repo in checkouts}
    load_before = os.getloadavg()
    for round_ in range(args.rounds):
        for repo in checkouts if round_ % 2 == 0 else checkouts[::-1]:
            for mode in args.modes:
                runs[repo][mode].append(_child(mode, threads[mode], args, repo))
    results = {mode: _against_fortran(_median_round(runs[REPO][mode]), fortran_ranks[mode]) for mode in args.modes}
    bandwidth = {str(t): _child("triad", t, args)["gb_per_s"] for t in (1, 2)}
    model = cpu_model()
    doc = {
        "benchmark": "cpu_channel",
        "device": model, "cpu_short_name": short_cpu_name(model), "cores": os.cpu_count(),
        "load_average_before_after": [round(v, 2) for v in load_before + os.getloadavg()],
        "threads_per_mode": {m: threads[m] for m in args.modes},
        "shape": list(SHAPE), "points": int(np.prod(SHAPE)), "config": config(),
        "steps_per_segment": args.steps, "segments": args.segments,
        "versions": {"numpy": np.__version__, "scipy": scipy.__version__, "dask": dask.__version__,
                     "distributed": distributed.__version__, "daskflow": daskflow.__version__,
                     "python": platform.python_version()},
        "fortran_reference": FORTRAN,
        "triad_gb_per_s": bandwidth,
        "note_triad": "STREAM triad a = b + s c over 160 MB arrays (compiled, best of 10) per thread count: "
                      "the most two threads can gain on a loop bound by memory bandwidth",
        "targets": {"ms_per_step_2_cores": 72.0, "ms_per_step_1_core": 138.0, "bytes_per_point": 240.0},
        "checkout": _describe(REPO),
        "rounds": args.rounds,
        "results": results,
        "command": "python benchmarks/cpu_channel.py " + " ".join(sys.argv[1:]),
    }
    if args.baseline:
        base = checkouts[1]
        doc["baseline"] = {**_describe(base), "results": {
            mode: _against_fortran(_median_round(runs[base][mode]), fortran_ranks[mode]) for mode in args.modes}}
        doc["speedup"] = {mode: doc["baseline"]["results"][mode]["ms_per_step"] / results[mode]["ms_per_step"]
                          for mode in args.modes
                          if "ms_per_step" in results[mode] and "ms_per_step" in doc["baseline"]["results"][mode]}
        doc["note_speedup"] = "the baseline checkout's ms_per_step over this checkout's, per mode"
    emit(doc, args.output)


def _median_round(rounds: list[dict]) -> dict:
    """The round with the median time (the first error if every round failed), all rounds listed."""
    done = sorted((r for r in rounds if "ms_per_step" in r), key=lambda r: r["ms_per_step"])
    if not done:
        return rounds[0]
    out = dict(done[(len(done) - 1) // 2])
    out["ms_per_step_rounds"] = [round(r["ms_per_step"], 3) for r in rounds if "ms_per_step" in r]
    out["cpu_ms_per_step_rounds"] = [round(r["cpu_ms_per_step"], 3) for r in rounds if "ms_per_step" in r]
    return out


def _against_fortran(r: dict, ranks: str) -> dict:
    if "ms_per_step" in r:
        ref = FORTRAN["ms_per_step"][ranks]
        r["fortran_ms_per_step"] = ref
        r["ratio_to_fortran"] = r["ms_per_step"] / ref
        r["within_2x_time"] = r["ratio_to_fortran"] <= 2.0
        mem = r.get("bytes_per_point_tracemalloc", r.get("bytes_per_point_rss"))
        r["memory_ratio_to_fortran"] = mem / FORTRAN["bytes_per_point"]
        r["within_2x_memory"] = r["memory_ratio_to_fortran"] <= 2.0
    return r


def _describe(repo: str) -> dict:
    """The checkout's path, commit and whether it has changes not committed."""
    def git(*argv):
        done = subprocess.run(["git", "-C", repo, *argv], capture_output=True, text=True, check=False)
        return done.stdout.strip() if done.returncode == 0 else None

    status = git("status", "--porcelain", "--untracked-files=no")
    return {"path": repo, "commit": git("rev-parse", "HEAD"), "modified": bool(status) if status is not None else None}


if __name__ == "__main__":
    main()
