"""What one participant does with its pencil, on any backend: advance it, write output and
checkpoints, compute the diagnostics record.

These bodies are the same for a cluster worker inside its fused task (:mod:`daskflow.ns.distributed`)
and for an in-process run (one participant, or a :class:`~daskflow.pencils.team.Team` of threads:
:class:`daskflow.simulation.Simulation`). Everything collective in them (reductions, halo
exchanges, store barriers) goes through the participant's :class:`~daskflow.ns.domain.FlowDomain`,
so every participant must call the same body with the same arguments.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from daskflow.ns.domain import FlowDomain, FlowPlan
from daskflow.ns.stepper import State, Stepper
from daskflow.run_config import TimeConfig

FIELDS = ("u", "v", "w", "p")


def state_of(pencil: dict) -> State:
    """The stepper's :class:`State` of a pencil dict (fields and clock)."""
    return State(*(pencil[name] for name in FIELDS), pencil["time"], pencil["step"], pencil["dt"], [],
                 pencil["forcing_gradient"])


def pencil_of(state: State, domain: FlowDomain) -> dict:
    """A pencil dict (fields, clock and chunk key) of ``state``."""
    return {**{name: getattr(state, name) for name in FIELDS}, "time": state.time, "step": state.step,
            "dt": state.dt, "forcing_gradient": state.forcing_gradient, "key": domain.key}


def stepper_for(plan: FlowPlan, domain) -> Stepper:
    """The RK3 stepper of ``plan`` on ``domain`` (a :class:`FlowDomain`, possibly timed)."""
    return Stepper(domain, plan.nu, plan.forcing, plan.implicit, plan.advection)


def advance(time: TimeConfig, stepper: Stepper, state: State, steps: int | None, until: float | None,
            after_step=None, should_stop=None) -> State:
    """The run loop: a fixed ``time.dt`` or the CFL limit (evaluated at the steps whose number is a
    multiple of ``time.cfl_every``, the step size of the step before held between: the schedule
    follows the step number and the checkpointed step size, so a restart takes the same steps), the
    last step shortened to land on ``until``; ``after_step(stepper, state)`` (the output writer)
    runs after every step, then ``should_stop()`` (a stop request: the loop ends after that step;
    collective, so every pencil stops at the same step)."""
    def landing(dt: float) -> float:  # the last step shortened to land on ``until``
        return dt if until is None else min(dt, until - state.time)

    done = 0
    while (steps is None or done < steps) and (until is None or state.time < until * (1 - 1e-14)):
        if time.dt is not None:
            stepper.step(state, landing(time.dt))
        elif state.step % time.cfl_every and state.dt > 0:  # held: no wait for the domain's rate
            stepper.step(state, landing(state.dt))
        else:  # the CFL limit, from the rate maximised during the step's first halo exchange
            stepper.step(state, lambda rate: landing(stepper.dt_limit(rate, time.cfl, time.dt_max)))
        done += 1
        if after_step is not None:
            after_step(stepper, state)
        if should_stop is not None and should_stop():
            break
    return state


def writer_for(plan: FlowPlan):
    """The output writer of ``plan`` (``None`` without a store)."""
    output = plan.output
    if output is None or not output.store:
        return None
    from daskflow.io.output import Output

    return Output(output.store, output, plan.nu, background=plan.poisson_plan.decomposition.pencils == (1, 1))


def advance_pencil(plan: FlowPlan, stepper: Stepper, state: State, steps: int | None, until: float | None,
                   stop_requested: Callable[[], bool] | None = None, hook=None) -> State:
    """Advance this participant's pencil ``steps`` steps or to ``until``, writing the store's
    records. ``stop_requested`` (this participant's own view): after every step the participants
    agree (one small all-reduction) whether any of them was asked to stop, and all stop after that
    step if so. ``hook(state, domain)`` runs after every step (tests)."""
    writer = writer_for(plan)
    domain = stepper.domain

    def after_step(stepper, state):
        if stop_requested is not None:  # rides on the record's reduction when one is written now
            domain.carry(1.0 if stop_requested() else 0.0)
        if writer is not None:
            writer(stepper, state)
        if hook is not None:
            hook(state, domain)

    def should_stop() -> bool:
        if domain.carried_result is None:  # no reduction this step: a small round of its own
            domain.allreduce(0.0, "max")
        return domain.carried_result > 0.0

    # on an error, what was handed to the store's thread still reaches the store
    try:
        with contextlib.nullcontext() if writer is None else writer.closing_on_error():
            advance(plan.time, stepper, state, steps, until, after_step,
                    None if stop_requested is None else should_stop)
    except BaseException:
        with contextlib.suppress(Exception):  # the number, where the device can still give it
            state.forcing_gradient = float(state.forcing_gradient)
        raise
    state.forcing_gradient = float(state.forcing_gradient)  # the run's one wait for its last step
    stepper.detach(state)
    if writer is not None:
        writer.finish(domain, state.step)
    return state


def initialize_pencil(plan: FlowPlan, stepper: Stepper, state: State) -> None:
    """Fill this participant's pencil with the initial condition ``plan.initial`` (the ``initial``
    config section) evaluated on its own region, the pressure with zero; a turbulent channel's perturbation
    takes its amplitude from one reduction of its peak over the participants."""
    from daskflow.backend import array_module
    from daskflow.ns import initial

    domain = stepper.domain
    values = initial.velocity(plan.grid, plan.bcs.u.values[2], plan.nu, plan.forcing, plan.initial, domain.region,
                              peak=lambda local: domain.allreduce(local, "max"))
    xp = array_module(state.u)
    for i, (name, value) in enumerate(zip(("u", "v", "w"), values, strict=True)):
        field = getattr(state, name)
        field[...] = xp.asarray(value)
        setattr(state, name, domain.keep_walls(field, i))
    state.p[...] = 0


def final_output(plan: FlowPlan, stepper: Stepper, state: State, fields: bool, checkpoint: bool) -> None:
    """The run's last field snapshot and/or checkpoint (every participant together)."""
    writer_for(plan).final(stepper, state, fields, checkpoint)


def write_checkpoint(plan: FlowPlan, stepper: Stepper, state: State) -> None:
    """A checkpoint of the current state (every participant together), on disk when this returns."""
    writer = writer_for(plan)
    with writer.closing_on_error():
        writer.checkpoint(stepper, state)
    writer.close()


def diagnostics(plan: FlowPlan, stepper: Stepper, state: State) -> dict:
    """The scalars record (CFL, divergence, bulk velocity, Re_tau, ...) reduced across the pencils."""
    from daskflow.io.output import flow_scalars

    return flow_scalars(stepper, state, plan.nu)
