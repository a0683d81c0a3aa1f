"""What a decomposition costs one GPU by itself: a pencil's time step with its peers mirrored, against
the one-GPU step of the same points. Prints one JSON document with the device name.

    python benchmarks/pencil_floor.py --layouts 2 1 --layouts 4 1 --layouts 2 2   # 512 x 256 x 144 per pencil
    python benchmarks/pencil_floor.py --device cpu --shape 32 16 16 --layouts 2 1 --steps 2

Each point runs the fused-task code of rank 0 of pencils ``(py, pz)`` of a grid ``(nx, py ny,
pz nz)`` (``--shape``: one pencil, the weak-scaling load of ``channel_step.py --gpus``; even splits,
so an nx with nx // 2 + 1 divisible by py: 510 for 512) in this
process, over a :class:`~daskflow.pencils.mirror.MirrorLink`: every exchange is answered with
copies of what the rank sent, so the pencil does all its own work (cuts, packing, halos, split
transforms, distributed z solves, reductions; on a GPU its step captured as a CUDA graph as on the
workers) and nothing waits for a wire or a peer. The one-GPU step of ``--shape`` runs beside it
(pencils (1, 1), in process, as ``channel_step.py`` times it). Their difference is the floor a
decomposition adds before any transfer: with the multi-GPU step of ``channel_step.py`` it splits the
gap to one GPU into the pencil's own work and the exchanges' transfers and waits. After the timed
steps, as many again run with the phases timed (:mod:`daskflow.profiling`; CUDA events on a GPU),
for both.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np
from channel_step import _config, _per_step_ms, run_times, steady
from emit import device_synchronize

from daskflow.backend import array_module, device_name


def _on(args, shape, py: int, pz: int, dt: float | None) -> dict:
    """``channel_step.py``'s configuration of ``shape`` at pencils ``(py, pz)`` on ``--device``."""
    config = _config(shape, args.implicit, (py, pz), cfl_every=args.cfl_every, dt=dt)
    config["solver"]["device"] = args.device
    return config


def _timed(advance, steps: int, runs: int) -> dict:
    """Median of ``runs`` runs of ``steps`` steps of ``advance(n)``, and the steady per-step time."""
    times = [t / steps for t in run_times(advance, steps, device_synchronize, runs)]
    per_step, per_run = steady(advance, steps, device_synchronize)
    return {"ms_per_step": 1e3 * float(np.median(times)), "ms_per_step_runs": [1e3 * t for t in times],
            "ms_per_step_steady": 1e3 * per_step, "ms_per_run": 1e3 * per_run}


def _profiled(make_stepper, advance, device: str, steps: int) -> dict:
    """Phases of ``steps`` more steps, ``advance(stepper, n)`` with a stepper timed by the phase clock."""
    import dask

    from daskflow.profiling import TimedDomain, phase_clock

    # profiled steps are not captured (graphs.for_stepper): the events time each phase's kernels
    with dask.config.set({"daskflow.profile-phases": True, "daskflow.profile-events": True}):
        clock = phase_clock(device)
        stepper = make_stepper(clock)
        stepper.domain = TimedDomain(stepper.domain, clock)
        with clock("task"):
            advance(stepper, steps)
    return _per_step_ms(clock.report(), steps)


def one_pencil(args) -> dict:
    """The in-process step of ``--shape`` on one device: pencils (1, 1)."""
    from daskflow import Simulation
    from daskflow.ns import graphs

    sim = Simulation(_on(args, args.shape, 1, 1, args.dt))
    sim.run(steps=2)
    before = graphs.local_counts()
    row = _timed(lambda n: sim.run(steps=n), args.steps, args.runs)
    row["cuda_graphs"] = {k: v - before[k] for k, v in graphs.local_counts().items()}
    stepper, domain = sim.stepper, sim.stepper.domain
    try:
        row["phases_ms_per_step"] = _profiled(lambda clock: stepper, lambda timed, n: sim.run(steps=n), args.device,
                                              args.steps)
    finally:
        stepper.domain = domain
    return {"pencils": [1, 1], "shape": list(args.shape), "dt": float(sim.state.dt), **row}


def mirrored_stepper(plan, xp, clock=None):
    """The stepper of rank 0 of ``plan``'s pencils over a mirror link of array module ``xp``;
    ``clock``: its executors' phase clock (a profiled run)."""
    from daskflow.ns import runs
    from daskflow.ns.domain import FlowDomain
    from daskflow.pencils.mirror import mirrored_member

    member = mirrored_member(plan.poisson_plan.decomposition, xp)
    member.clock = clock
    return runs.stepper_for(plan, FlowDomain(plan, member))


def pencil_state(stepper, whole):
    """The state of ``stepper``'s pencil cut from the whole fields ``whole`` (a
    :class:`~daskflow.ns.stepper.State`), in the operators' memory order."""
    from daskflow.ns import runs
    from daskflow.ns.operators import memory_order
    from daskflow.ns.stepper import State

    xp, region = array_module(whole.u), stepper.domain.region
    fields = [xp.asarray(getattr(whole, name)[region], order=memory_order(xp)) for name in runs.FIELDS]
    return State(*fields, whole.time, whole.step, whole.dt, [], whole.forcing_gradient)


def mirrored_pencil(config: dict):
    """``(plan, xp, stepper, state, advance)`` of rank 0 of the pencils of simulation ``config``, its
    peers mirrored; ``advance(n, stepper=None)`` runs ``n`` steps (of another stepper of it where
    given). The whole fields, made for its initial condition, are dropped once it is cut out."""
    from daskflow import Simulation
    from daskflow.ns import runs

    sim = Simulation(config)
    plan, xp = sim._flow_plan, sim.xp
    stepper = mirrored_stepper(plan, xp)
    state = pencil_state(stepper, sim.state)
    del sim

    def advance(n, on=None):
        runs.advance_pencil(plan, on or stepper, state, n, None)

    return plan, xp, stepper, state, advance


def mirrored(args, py: int, pz: int, dt: float) -> dict:
    """Rank 0 of pencils ``(py, pz)`` of the weak-scaled grid, its peers mirrored, with a fixed step
    size ``dt``: the mirrored fields are not a flow's (:mod:`daskflow.pencils.mirror`), so a CFL
    step size would follow them wherever they go."""
    from daskflow.ns import graphs, runs

    nx, ny, nz = args.shape
    shape = [nx, ny * py, nz * pz]
    plan, xp, _, state, advance = mirrored_pencil(_on(args, shape, py, pz, dt))
    advance(2)
    before = graphs.local_counts()
    row = _timed(advance, args.steps, args.runs)
    row["cuda_graphs"] = {k: v - before[k] for k, v in graphs.local_counts().items()}
    row["phases_ms_per_step"] = _profiled(lambda clock: mirrored_stepper(plan, xp, clock),
                                          lambda timed, n: advance(n, timed), args.device, args.steps)
    row["finite"] = bool(all(xp.isfinite(getattr(state, name)).all() for name in runs.FIELDS))
    return {"pencils": [py, pz], "shape": shape, "pencil_shape": list(args.shape), **row}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shape", type=int, nargs=3, default=[512, 256, 144], help="points of one pencil")
    parser.add_argument("--layouts", type=int, nargs=2, action="append", metavar=("PY", "PZ"), required=True,
                        help="pencils of a point (repeat for several); equal splits")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--implicit", default="z", choices=["none", "z", "xyz"])
    parser.add_argument("--cfl-every", type=int, default=10, help="time.cfl_every (as the channel_step.py runs)")
    parser.add_argument("--dt", type=float, default=None,
                        help="time.dt of the one-pencil step (default: the CFL's); mirrored pencils hold its last")
    parser.add_argument("--device", default="gpu", choices=["gpu", "cpu"])
    args = parser.parse_args()
    if args.device == "gpu":
        import cupy as xp
    else:
        xp = np
    one = one_pencil(args)
    print(json.dumps(one), file=sys.stderr)
    points = []
    for py, pz in args.layouts:
        row = mirrored(args, py, pz, one["dt"])
        row["over_one_pencil"] = row["ms_per_step"] / one["ms_per_step"]
        row["over_one_pencil_steady"] = row["ms_per_step_steady"] / one["ms_per_step_steady"]
        print(json.dumps(row), file=sys.stderr)
        points.append(row)
    print(json.dumps({"benchmark": "pencil_floor", "device": device_name(xp), "implicit_diffusion": args.implicit,
                      "cfl_every": args.cfl_every, "dt": args.dt, "one_pencil": one, "mirrored": points}, indent=2))


if __name__ == "__main__":
    main()
