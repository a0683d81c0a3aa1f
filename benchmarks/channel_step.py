"""Time step of a turbulent channel: wall time per step, ns per point per step, and where the time
goes (per-stage breakdown on one GPU). Prints one JSON document with the device name.

    python benchmarks/channel_step.py [--shape 512 256 144] [--steps 10] [--implicit z]
    python benchmarks/channel_step.py --gpus 4 ...   # y scaled by 4, one y-slab per GPU worker (UCX)
    python benchmarks/channel_step.py --gpus 2 --comm nccl --variants 1:none 3:ipc   # transpose settings

With ``--gpus N > 1`` the grid's ny is multiplied by N (weak scaling) and the run uses a
``LocalCUDACluster`` with one pencil per GPU: pencils (N, 1), or each ``--layouts PY PZ`` given, each
with every transport of ``--comm`` (``cluster.comm``: nccl, mailbox, auto), all on one cluster.
``--variants SLABS:CE`` repeats every point with the workers' ``daskflow.transpose-slabs`` and
``daskflow.step-transpose-slabs`` set to SLABS and ``daskflow.copy-engine`` to CE (none, nccl or
ipc: the pressure solve's transposes whole or in z slabs, on NCCL's multiprocessors, NCCL's
copy-engine all-to-all or one-sided copies into the peers' memory),
each a new simulation on the same cluster.
After the timed steps, as many steps again run with :mod:`daskflow.profiling` switched on: the
per-phase breakdown (halos, pressure solve, implicit solves, reductions, the rest of the local
operators, and the time spent waiting for peers) in ms per step, per worker. The profiled steps
synchronise the GPU at every phase boundary, so their total is a little above the timed one.
"""

from __future__ import annotations

import argparse
import itertools
import json
import platform
import sys
import time

import numpy as np
from emit import event_seconds


def _config(shape, implicit, pencils, z_solve="direct", cfl_every: int = 1, dt: float | None = None) -> dict:
    return {
        "grid": {"shape": list(shape), "lengths": [12.0, 6.0 * shape[1] / 256, 2.0], "z_stretch": 2.0},
        "physics": {"nu": 1 / 5600 * 2, "forcing": {"kind": "flow_rate", "value": [1.0, 0.0]}},
        "boundaries": {"preset": "channel"},
        "initial": {"kind": "turbulent_channel", "amplitude": 0.2, "seed": 0},
        "time": {"cfl": 0.9, "dt_max": 0.01, "cfl_every": cfl_every, "dt": dt, "implicit_diffusion": implicit},
        "solver": {"poisson": "ptdma", "pencils": list(pencils), "device": "gpu", "z_solve": z_solve},
    }


def cuda_cluster(gpus: int, protocol: str = "tcp", rmm_pool_size: str | None = None):
    """The benchmarks' ``LocalCUDACluster``: one worker per GPU; Dask's comms over ``protocol`` (TCP
    where NCCL carries the exchanges, UCX for the mailbox's pencils). CuPy allocates from its own
    pool, as in ``daskflow run`` by default, unless ``rmm_pool_size`` puts it on an RMM pool
    (``cluster.rmm_pool_size``): RMM's CuPy allocator is a Python call per allocation, a few hundred
    per step, which a GPU worker's step pays on the host."""
    from dask_cuda import LocalCUDACluster

    from daskflow.cluster import worker_environment

    options = {} if rmm_pool_size is None else {"rmm_pool_size": rmm_pool_size,
                                                 "rmm_allocator_external_lib_list": ["cupy"]}
    with worker_environment():
        return LocalCUDACluster(CUDA_VISIBLE_DEVICES=",".join(map(str, range(gpus))), protocol=protocol,
                                dashboard_address=None, **options)


def run_times(run, steps: int, sync=lambda: None, repeat: int = 2) -> list[float]:
    """Seconds of each of ``repeat`` calls ``run(steps)``, timed between two ``sync()``."""
    times = []
    for _ in range(repeat):
        sync()
        start = time.perf_counter()
        run(steps)
        sync()
        times.append(time.perf_counter() - start)
    return times


def steady(run, steps: int, sync=lambda: None, repeat: int = 2) -> tuple[float, float]:
    """``(seconds per step, seconds per run)`` of ``run(n)`` (one run of ``n`` steps, ``Simulation.run``) from the best
    of ``repeat`` timings of runs of ``steps`` and ``4 * steps`` steps: a run's fixed cost (tasks
    submitted and gathered, solver set-ups) apart from the steps' own."""
    short, long = min(run_times(run, steps, sync, repeat)), min(run_times(run, 4 * steps, sync, repeat))
    per_step = (long - short) / (3 * steps)
    return per_step, short - steps * per_step


def distributed(args) -> list[dict]:
    """Weak scaling points: ``args.gpus`` GPU workers, ny scaled, one pencil per worker; every
    decomposition of ``args.layouts`` with every transport of ``args.comm``, on one cluster."""
    from distributed import Client

    from daskflow import Simulation
    from daskflow.ns import graphs
    from daskflow.profiling import profile_workers

    shape = [args.shape[0], args.shape[1] * args.gpus, args.shape[2]]
    layouts = args.layouts or [[args.gpus, 1]]
    variants = [variant.split(":") for variant in args.variants] or [[None, None]]
    rows = []
    with cuda_cluster(args.gpus, args.protocol, args.rmm_pool_size) as cluster, Client(cluster) as client:
        device = cluster_device(client)
        for pencils, comm, (slabs, engine) in itertools.product(layouts, args.comm, variants):
            settings = {}
            if slabs is not None:
                settings = {"daskflow.transpose-slabs": int(slabs), "daskflow.step-transpose-slabs": int(slabs),
                            "daskflow.copy-engine": engine}
                client.run(_set_config, settings)
            cfg = _config(shape, args.implicit, pencils, args.z_solve, args.cfl_every, args.dt)
            cfg["cluster"] = {"comm": comm}
            sim = Simulation(cfg, client=client)
            sim.run(steps=2)  # warm-up: communicators, kernels, FFT plans, pools
            counts, first = graphs.counts(client), sim.step
            runs = []
            for _ in range(args.runs):
                start = time.perf_counter()
                sim.run(steps=args.steps)
                runs.append((time.perf_counter() - start) / args.steps)
            seconds = float(np.median(runs))
            per_step, per_run = steady(sim.run, args.steps)
            replayed = _graph_report(counts, graphs.counts(client), sim.step - first)
            with profile_workers(client) as reports:
                sim.run(steps=args.steps)
                phases = {worker: _per_step_ms(report, args.steps) for worker, report in reports().items()}
            with profile_workers(client, events=True) as reports:
                sim.run(steps=args.steps)
                timeline = {worker: _per_step_ms(report, args.steps) for worker, report in reports().items()}
            row = {"benchmark": "channel_step", "device": device, "gpus": args.gpus, "shape": shape,
                   "pencils": pencils, "comm": sim.comm, "protocol": args.protocol, "settings": settings,
                   "cfl_every": args.cfl_every, "dt": args.dt,
                   "implicit_diffusion": args.implicit,
                   "z_solve": args.z_solve, "rmm_pool_size": args.rmm_pool_size,
                   "seconds_per_step": seconds, "seconds_per_step_runs": runs,
                   "seconds_per_step_steady": per_step, "seconds_per_run": per_run,
                   "ns_per_point_per_step": seconds / np.prod(shape) * 1e9,
                   "divergence_max": sim.divergence_max(), "cuda_graphs": replayed, "phases_ms_per_step": phases,
                   "device_phases_ms_per_step": timeline,
                   "halo_round_ms": _halo_round_ms(list(phases.values())),
                   "exchange_fraction": _exchange_fraction(phases),
                   "device_exchange_fraction": _device_exchange_fraction(timeline),
                   "note": "one fused task per worker per run; all steps of a run inside it"}
            print(json.dumps(row), file=sys.stderr)
            rows.append(row)
    return rows


def _graph_report(before: dict, after: dict, steps: int) -> dict:
    """The timed steps' CUDA graphs (:func:`daskflow.ns.graphs.counts` before and after them):
    per worker, the steps replayed from one out of ``steps``, and the graphs captured or given up
    (a failed capture, or no room) meanwhile."""
    return {"steps": steps, **{worker: {key: n - before[worker][key] for key, n in after[worker].items()}
                               for worker in after}}


def _halo_round_ms(reports: list[dict]) -> float:
    """Mean time of one halo round (local padding and the exchange), over the workers."""
    return float(np.mean([r["halo_ms_per_call"] for r in reports if "halo_ms_per_call" in r]))


def _exchange_fraction(phases: dict) -> float:
    """The largest share of a worker's step spent inside exchanges (moving pieces and waiting)."""
    return max(sum(v for k, v in p.items() if k.startswith("waiting")) / p["task"] for p in phases.values())


#: phases timed inside others (a phase's exchanges) or beside them (waits for peers)
NESTED = ("waiting", "exchange:")


def _device_exchange_fraction(timeline: dict) -> float:
    """The largest share of a worker's GPU time spent in exchanges (cutting pieces, moving them,
    waiting on the stream for the peers' pieces), from an event-timed profile."""
    return max(sum(v for k, v in p.items() if k.startswith("exchange:")) / p["task"] for p in timeline.values())


def _per_step_ms(report: dict, steps: int) -> dict:
    """A worker's phase report as ms per step, the local operators being the task's remainder, and
    the mean time of one halo round."""
    out = {phase: 1e3 * entry["seconds"] / steps for phase, entry in report.items()}
    timed = sum(v for k, v in out.items() if k != "task" and not k.startswith(NESTED))
    out["local operators (rest)"] = out["task"] - timed
    if report.get("halo", {}).get("calls"):
        out["halo_ms_per_call"] = 1e3 * report["halo"]["seconds"] / report["halo"]["calls"]
    for phase, entry in report.items():
        if "lag" in entry:  # event-timed profile: how far the GPU ran behind the host, mean per call
            out[f"lag_ms_per_call: {phase}"] = 1e3 * entry["lag"] / entry["calls"]
    return out


def _device_name() -> str:
    import cupy

    from daskflow.backend import device_name

    return device_name(cupy)


def cluster_device(client) -> str:
    """The GPU model of the cluster's workers (the first name, sorted, if they differ)."""
    return sorted(set(client.run(_device_name).values()))[0]


def _set_config(values: dict) -> None:
    """Set dask config keys in a worker (for its later tasks)."""
    import dask

    dask.config.set(values)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shape", type=int, nargs=3, default=[512, 256, 144])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--runs", type=int, default=7,
                        help="timed runs of --steps steps; seconds_per_step is their median (a multi-GPU "
                             "run of 10 steps varies by up to 10 %% from one run to the next)")
    parser.add_argument("--implicit", default="z", choices=["none", "z", "xyz"])
    parser.add_argument("--pencils", type=int, nargs=2, default=[1, 1])
    parser.add_argument("--gpus", type=int, default=1)
    parser.add_argument("--layouts", type=int, nargs=2, action="append", metavar=("PY", "PZ"),
                        help="pencils of a multi-GPU point (repeat for several; default (gpus, 1))")
    parser.add_argument("--comm", nargs="+", default=["auto"], choices=["auto", "nccl", "mailbox"],
                        help="transports of the multi-GPU exchanges (cluster.comm), each timed")
    parser.add_argument("--protocol", default="tcp", choices=["tcp", "ucx"],
                        help="Dask's own comms between the workers (cluster.protocol)")
    parser.add_argument("--rmm-pool-size", default=None,
                        help="RMM pool per GPU worker for CuPy (cluster.rmm_pool_size; default none: CuPy's pool)")
    parser.add_argument("--dt", type=float, default=None, help="time.dt: a fixed step size instead of the CFL's")
    parser.add_argument("--cfl-every", type=int, default=1,
                        help="time.cfl_every: steps between CFL evaluations, the step size held between")
    parser.add_argument("--variants", nargs="+", default=[], metavar="SLABS:CE",
                        help="transpose settings to time each point with, e.g. 1:none 3:ipc (daskflow.transpose-slabs, "
                             "daskflow.copy-engine)")
    parser.add_argument("--z-solve", default="direct", choices=["direct", "transpose"],
                        help="distributed z-implicit path (solver.z_solve)")
    args = parser.parse_args()
    if args.gpus > 1:
        print(json.dumps(distributed(args), indent=2))
        return
    import cupy as cp

    import daskflow
    from daskflow import Simulation
    from daskflow.backend import device_name
    from daskflow.ns import graphs
    from daskflow.ns import operators as ops
    from daskflow.profiling import PhaseClock, TimedDomain, device_sync

    pool = cp.get_default_memory_pool()
    pool.free_all_blocks()
    sim = Simulation(_config(args.shape, args.implicit, args.pencils, cfl_every=args.cfl_every, dt=args.dt))
    sim.run(steps=2)  # warm-up: kernels, FFT plans, memory pool
    counts, first = graphs.local_counts(), sim.step
    runs = [event_seconds(cp, lambda: sim.run(steps=args.steps), 1) / args.steps for _ in range(args.runs)]
    step = float(np.median(runs))  # as the multi-GPU points: the median of runs of --steps steps
    per_step, per_run = steady(sim.run, args.steps, cp.cuda.Device().synchronize)
    replayed = _graph_report({"here": counts}, {"here": graphs.local_counts()}, sim.step - first)
    points = int(np.prod(args.shape))
    # CuPy's pool keeps every block it ever handed out, so what it holds now is the run's peak
    # GPU memory (fields, RK history, temporaries, FFT work areas), cuFFT plan caches aside.
    held = pool.total_bytes()
    st, stepper = sim.state, sim.stepper
    domain, clock = stepper.domain, PhaseClock(device_sync("gpu"))
    stepper.domain = TimedDomain(domain, clock)  # the same phases as the multi-GPU profile
    with clock("task"):
        sim.run(steps=args.steps)
    stepper.domain = domain
    padded = stepper.domain.pad_velocity([st.u, st.v, st.w])
    rhs = cp.asfortranarray(cp.random.default_rng(0).standard_normal(sim.grid.shape))
    breakdown = {
        "pad_velocity_ms": event_seconds(cp, lambda: stepper.domain.pad_velocity([st.u, st.v, st.w]), 5),
        "explicit_terms_ms": event_seconds(cp, lambda: stepper.explicit_terms(padded), 5),
        "divergence_ms": event_seconds(cp, lambda: ops.divergence(*padded, stepper.metrics), 5),
        "poisson_solve_ms": event_seconds(cp, lambda: stepper.domain.solve_pressure(rhs), 5),
    }
    if args.implicit == "z":  # as the step solves: a C-ordered increment, in place
        increment = cp.ascontiguousarray(rhs)
        breakdown["implicit_solve_one_component_ms"] = event_seconds(
            cp, lambda: stepper.domain.implicit_z({0: increment}, 1e-3), 5)
    elif args.implicit == "xyz":
        breakdown["implicit_solve_one_component_ms"] = event_seconds(
            cp, lambda: stepper.domain.implicit_xyz(rhs, 0, 1e-3), 5)
    breakdown = {k: 1e3 * v for k, v in breakdown.items()}
    print(json.dumps({
        "benchmark": "channel_step", "device": device_name(cp), "shape": args.shape,
        "lengths": [12.0, 6.0, 2.0], "implicit_diffusion": args.implicit, "pencils": args.pencils,
        "cfl_every": args.cfl_every,
        "seconds_per_step": step, "seconds_per_step_runs": runs, "ns_per_point_per_step": step / points * 1e9,
        "seconds_per_step_steady": per_step, "seconds_per_run": per_run,
        "per_substep_breakdown_ms": breakdown, "substeps_per_step": 3,
        "phases_ms_per_step": _per_step_ms(clock.report(), args.steps),
        "gpu_memory_bytes": held, "gpu_memory_bytes_per_point": held / points,
        "divergence_max": sim.divergence_max(), "cuda_graphs": replayed,
        "target": "<= 2 ns per point per step on one H100",
        "versions": {"daskflow": daskflow.__version__, "cupy": cp.__version__, "python": platform.python_version()},
    }, indent=2))


if __name__ == "__main__":
    main()
