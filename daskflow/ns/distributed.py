"""The time loop on a Dask cluster: one pencil per worker, whole runs as one task per worker.

Every worker holds one x-pencil of ``u, v, w, p``. ``run`` submits one fused task per worker
(:func:`run_on_worker`) that advances its pencil through all requested steps with the bodies of
:mod:`daskflow.ns.runs`: halos, CFL and bulk-velocity reductions, the pressure Poisson solve (FTM or
P-TDMA) and the implicit diffusion solves all exchange pieces directly between workers through the
run's transport (:mod:`daskflow.pencils.transport`). No field passes through the client or the
scheduler during a run.
"""

from __future__ import annotations

import numpy as np

from daskflow.ns import runs
from daskflow.ns.domain import FlowDomain, FlowPlan
from daskflow.pencils.executor import Member
from daskflow.profiling import PhaseClock, TimedDomain, device_sync, merge, phases_enabled


def _on_worker(plan: FlowPlan, run_id: str, workers: list[str], pencil: dict, body, comm=None):
    """Run ``body(stepper, state, worker)`` for this worker's pencil as one collective task: outside
    the thread pool, aborting the run on every peer if it fails; ``comm`` (a
    :class:`~daskflow.pencils.transport.CommSpec`) carries its exchanges."""
    from distributed import get_worker

    from daskflow.pencils.direct import collective, gpu_switch_interval
    from daskflow.pencils.link import exchange_timeout
    from daskflow.pencils.transport import communicator

    worker = get_worker()
    state = runs.state_of(pencil)
    with collective(worker, run_id, workers, gpu_switch_interval() if plan.device == "gpu" else None):
        transport = communicator(worker, comm, exchange_timeout(), run_id)
        member = Member(worker.address, workers, plan.poisson_plan.decomposition.pz, transport, run_id)
        domain = FlowDomain(plan, member)
        clock = PhaseClock(device_sync(plan.device)) if phases_enabled() else None
        stepper = runs.stepper_for(plan, domain if clock is None else TimedDomain(domain, clock))
        if clock is None:
            out = body(stepper, state, worker)
        else:
            with clock("task"):
                out = body(stepper, state, worker)
            _record_phases(worker, clock, domain)
        domain.finish()
    return out


def _record_phases(worker, clock: PhaseClock, domain: FlowDomain) -> None:
    """Add this task's phase times, and its waits for peers, to ``worker.daskflow_phases``."""
    clock.add("waiting: halos, reductions, z solves", domain.ex.waited)
    clock.add("waiting: pressure solve", domain.ex_pressure.waited)
    worker.daskflow_phases = merge(getattr(worker, "daskflow_phases", {}), clock.report())


def run_on_worker(plan: FlowPlan, run_id: str, workers: list[str], pencil: dict, ready: list, steps, until,
                  stoppable: bool = False, comm=None) -> dict:
    """Body of the fused task: advance this worker's pencil; returns the new pencil state.
    ``ready`` (ignored) holds markers of every worker's pencil, so a failed one fails all tasks.
    ``stoppable``: the run ends after the step in which any worker received :func:`request_stop`
    for it (:func:`daskflow.ns.runs.advance_pencil`)."""
    def body(stepper, state, worker):
        requests = worker.__dict__.setdefault("daskflow_stop_requests", set())
        asked = (lambda: run_id in requests) if stoppable else None
        runs.advance_pencil(plan, stepper, state, steps, until, asked, hook=_test_kill_hook)
        requests.discard(run_id)
        return runs.pencil_of(state, stepper.domain)

    return _on_worker(plan, run_id, workers, pencil, body, comm)


def request_stop(run_id: str, dask_worker=None) -> None:
    """Ask this worker's part of run ``run_id`` to stop after the current step (see
    :func:`run_on_worker`); sent by the client to every worker of the run."""
    dask_worker.__dict__.setdefault("daskflow_stop_requests", set()).add(run_id)


def final_on_worker(plan: FlowPlan, run_id: str, workers: list[str], pencil: dict, ready: list, fields: bool,
                    checkpoint: bool, comm=None) -> dict:
    """Write the final field snapshot and/or checkpoint of this worker's pencil (all workers
    together); returns the pencil."""
    def body(stepper, state, worker):
        runs.final_output(plan, stepper, state, fields, checkpoint)
        return pencil

    return _on_worker(plan, run_id, workers, pencil, body, comm)


def checkpoint_on_worker(plan: FlowPlan, run_id: str, workers: list[str], pencil: dict, ready: list,
                         comm=None) -> dict:
    """Write this worker's pencil into a new checkpoint (all workers together); returns the pencil."""
    def body(stepper, state, worker):
        runs.write_checkpoint(plan, stepper, state)
        return pencil

    return _on_worker(plan, run_id, workers, pencil, body, comm)


def diagnostics_on_worker(plan: FlowPlan, run_id: str, workers: list[str], pencil: dict, ready: list,
                          comm=None) -> dict:
    """The scalars record (CFL, divergence, bulk velocity, Re_tau, ...) reduced across the pencils."""
    def body(stepper, state, worker):
        return runs.diagnostics(plan, stepper, state)

    return _on_worker(plan, run_id, workers, pencil, body, comm)


def _test_kill_hook(state, domain) -> None:
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


__all__ = ["checkpoint_on_worker", "diagnostics_on_worker", "field_of", "final_on_worker", "request_stop",
           "run_on_worker", "to_device"]
