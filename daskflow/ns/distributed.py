"""The time loop on a Dask cluster: one pencil per worker, whole runs as one task per worker.

Every worker holds one x-pencil of ``u, v, w, p`` (and the RK history). ``run`` submits one fused
task per worker (:func:`run_on_worker`) that advances its pencil through all requested steps: halos,
CFL and bulk-velocity reductions, the pressure Poisson solve (FTM or P-TDMA) and the implicit
diffusion solves all exchange pieces directly between workers (:mod:`daskflow.pencils.direct`).
No field ever passes through the client or the scheduler during a run.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from daskflow.grid import Grid
from daskflow.ns.boundaries import FlowBoundaries
from daskflow.ns.domain import ChunkDomain
from daskflow.ns.stepper import State, Stepper
from daskflow.poisson.plan import SpectralPlan
from daskflow.profiling import PhaseClock, TimedDomain, device_sync, merge, phases_enabled

FIELDS = ("u", "v", "w", "p")


@dataclass
class FlowPlan:
    """What every worker needs to step its pencil (small: shipped once per run)."""

    grid: Grid
    bcs: FlowBoundaries
    nu: float
    forcing: dict
    implicit: str
    time: dict
    poisson_plan: SpectralPlan
    device: str
    output: dict | None = None  # the ``output`` config section when a store is written
    z_solve: str = "direct"  # distributed z-implicit diffusion: "direct" (from x-pencils) or "transpose"
    advection: str = "divergence"  # physics.advection: "divergence" or "skew_symmetric"


def advance(time: dict, stepper: Stepper, state: State, steps: int | None, until: float | None,
            after_step=None, should_stop=None) -> State:
    """The run loop shared by the in-process and the distributed simulation: a fixed ``time.dt``
    or the CFL limit, the last step shortened to land on ``until``; ``after_step(stepper, state)``
    (the output writer) runs after every step, then ``should_stop()`` (a stop request: the loop
    ends after that step; collective on a cluster, so every pencil stops at the same step)."""
    def landing(dt: float) -> float:  # the last step shortened to land on ``until``
        return dt if until is None else min(dt, until - state.time)

    done = 0
    while (steps is None or done < steps) and (until is None or state.time < until * (1 - 1e-14)):
        if time["dt"] is not None:
            stepper.step(state, landing(time["dt"]))
        else:  # the CFL limit, from the rate maximised during the step's first halo exchange
            stepper.step(state, lambda rate: landing(stepper.dt_limit(rate, time["cfl"], time["dt_max"])))
        done += 1
        if after_step is not None:
            after_step(stepper, state)
        if should_stop is not None and should_stop():
            break
    return state


def _on_worker(plan: FlowPlan, run_id: str, workers: list[str], pencil: dict, body, comm=None):
    """Run ``body(stepper, state, domain)`` for this worker's pencil as one collective task: outside
    the thread pool, aborting the run on every peer if it fails; ``comm`` (a
    :class:`~daskflow.pencils.transport.CommSpec`) carries its exchanges."""
    from distributed import get_worker

    from daskflow.pencils.direct import collective, exchange_timeout, gpu_switch_interval
    from daskflow.pencils.transport import communicator

    worker = get_worker()
    state = State(*(pencil[name] for name in FIELDS), pencil["time"], pencil["step"], pencil["dt"], [],
                  pencil["forcing_gradient"])
    with collective(worker, run_id, workers, gpu_switch_interval() if plan.device == "gpu" else None):
        domain = ChunkDomain(plan, worker, run_id, workers, communicator(worker, comm, exchange_timeout(), run_id))
        clock = PhaseClock(device_sync(plan.device)) if phases_enabled() else None
        stepper = Stepper(domain if clock is None else TimedDomain(domain, clock), plan.nu, plan.forcing,
                          plan.implicit, plan.advection)
        if clock is None:
            out = body(stepper, state, domain)
        else:
            with clock("task"):
                out = body(stepper, state, domain)
            _record_phases(worker, clock, domain)
        domain.finish()
    return out


def _record_phases(worker, clock: PhaseClock, domain: ChunkDomain) -> None:
    """Add this task's phase times, and its waits for peers, to ``worker.daskflow_phases``."""
    clock.add("waiting: halos, reductions, z solves", domain.ex.waited)
    clock.add("waiting: pressure solve", domain.ex_pressure.waited)
    worker.daskflow_phases = merge(getattr(worker, "daskflow_phases", {}), clock.report())


def _pencil(state: State, domain: ChunkDomain) -> dict:
    return {**{name: getattr(state, name) for name in FIELDS}, "time": state.time, "step": state.step,
            "dt": state.dt, "forcing_gradient": state.forcing_gradient, "key": domain.key}


def run_on_worker(plan: FlowPlan, run_id: str, workers: list[str], pencil: dict, ready: list, steps, until,
                  stoppable: bool = False, comm=None) -> dict:
    """Body of the fused task: advance this worker's pencil; returns the new pencil state.
    ``ready`` (ignored) holds markers of every worker's pencil, so a failed one fails all tasks.
    ``stoppable``: after every step the workers agree (one small all-reduction) whether any of
    them received :func:`request_stop` for this run, and all stop after that step if so."""
    from distributed import get_worker

    worker = get_worker()
    writer = _writer(plan.output, plan.nu)

    def after_step(stepper, state):
        if writer is not None:
            writer(stepper, state)
        _test_kill_hook(state, stepper.domain)

    def body(stepper, state, domain):
        def should_stop() -> bool:
            asked = run_id in getattr(worker, "daskflow_stop_requests", ())
            return domain.allreduce(1.0 if asked else 0.0, "max") > 0.0

        advance(plan.time, stepper, state, steps, until, after_step, should_stop if stoppable else None)
        getattr(worker, "daskflow_stop_requests", set()).discard(run_id)
        if writer is not None:
            writer.finish(state.step)
        return _pencil(state, domain)

    return _on_worker(plan, run_id, workers, pencil, body, comm)


def request_stop(run_id: str, dask_worker=None) -> None:
    """Ask this worker's part of run ``run_id`` to stop after the current step (see
    :func:`run_on_worker`); sent by the client to every worker of the run."""
    if not hasattr(dask_worker, "daskflow_stop_requests"):
        dask_worker.daskflow_stop_requests = set()
    dask_worker.daskflow_stop_requests.add(run_id)


def final_on_worker(plan: FlowPlan, run_id: str, workers: list[str], pencil: dict, ready: list, fields: bool,
                    checkpoint: bool, comm=None) -> dict:
    """Write the final field snapshot and/or checkpoint of this worker's pencil (all workers
    together); returns the pencil."""
    def body(stepper, state, domain):
        _writer(plan.output, plan.nu).final(stepper, state, fields, checkpoint)
        return pencil

    return _on_worker(plan, run_id, workers, pencil, body, comm)


def _test_kill_hook(state: State, domain) -> None:
    """Test hook: ``DASKFLOW_TEST_KILL_WORKER=step:marker_dir:times`` kills the process owning chunk
    (0, last) right after ``step``, at most ``times`` times in all (counted with files), so worker
    loss happens at a deterministic point of a run."""
    import os

    spec = os.environ.get("DASKFLOW_TEST_KILL_WORKER")
    if not spec:
        return
    step, marker_dir, times = spec.split(":")
    if state.step != int(step) or domain.key != (0, domain.counts[1] - 1):
        return
    done = len(os.listdir(marker_dir))
    if done < int(times):
        open(os.path.join(marker_dir, f"kill-{done}"), "w").close()
        os.kill(os.getpid(), 9)


def _writer(output: dict | None, nu: float):
    if not output or not output.get("store"):
        return None
    from daskflow.io.output import Output

    return Output(output["store"], output, nu)


def checkpoint_on_worker(plan: FlowPlan, run_id: str, workers: list[str], pencil: dict, ready: list,
                         comm=None) -> dict:
    """Write this worker's pencil into a new checkpoint (all workers together); returns the pencil."""
    def body(stepper, state, domain):
        _writer(plan.output, plan.nu).checkpoint(stepper, state)
        return pencil

    return _on_worker(plan, run_id, workers, pencil, body, comm)


def diagnostics_on_worker(plan: FlowPlan, run_id: str, workers: list[str], pencil: dict, ready: list,
                          comm=None) -> dict:
    """The scalars record (CFL, divergence, bulk velocity, Re_tau, ...) reduced across the pencils."""
    from daskflow.io.output import flow_scalars

    def body(stepper, state, domain):
        return flow_scalars(stepper, state, plan.nu)

    return _on_worker(plan, run_id, workers, pencil, body, comm)


def to_device(pencil: dict, device: str) -> dict:
    """Move a host pencil to the worker's GPU (CuPy, in the operators' memory order) when asked to."""
    if device != "gpu":
        return pencil
    import cupy

    from daskflow.ns.operators import memory_order

    order = memory_order(cupy)
    return {k: cupy.asarray(v, order=order) if isinstance(v, np.ndarray) else v for k, v in pencil.items()}


def field_of(pencil: dict, name: str):
    return pencil[name]


__all__ = ["FlowPlan", "advance", "checkpoint_on_worker", "diagnostics_on_worker", "field_of", "final_on_worker",
           "request_stop", "run_on_worker", "to_device"]
