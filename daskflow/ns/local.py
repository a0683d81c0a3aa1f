"""The pencils of an in-process simulation: one participant (this thread, the whole field) or a
:class:`~daskflow.pencils.team.Team` of threads, each running the bodies of :mod:`daskflow.ns.runs`
on its own :class:`~daskflow.ns.domain.FlowDomain` exactly as cluster workers do."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from daskflow.ns import runs
from daskflow.ns.domain import FlowDomain, FlowPlan
from daskflow.ns.stepper import State, Stepper
from daskflow.pencils.executor import Member
from daskflow.pencils.team import Team


class LocalPencils:
    """``plan``'s pencils in this process, over the whole fields of a :class:`State` (kept whole
    between calls: the simulation's view of them)."""

    def __init__(self, plan: FlowPlan) -> None:
        self.plan = plan
        py, pz = plan.poisson_plan.pencils
        self.team = Team(py * pz)
        members = [Member(me, self.team.members, pz, self.team.transports[me], "local") for me in self.team.members]
        self.steppers = [runs.stepper_for(plan, FlowDomain(plan, member)) for member in members]

    def call(self, body: Callable[[Stepper, State], Any], state: State) -> list:
        """``body(stepper, pencil state)`` for every participant; returns their results. One pencil
        is the whole field (no copy); with several, ``state``'s fields are cut into pencils for the
        team and put back together after it."""
        if len(self.steppers) == 1:
            return [body(self.steppers[0], state)]
        from daskflow.backend import array_module

        xp = array_module(state.u)
        pencils = []
        for stepper in self.steppers:
            region = stepper.domain.region
            fields = [xp.asfortranarray(getattr(state, name)[region]) for name in runs.FIELDS]
            pencils.append(State(*fields, state.time, state.step, state.dt, [], state.forcing_gradient))
        try:
            return self.team.run(lambda i: body(self.steppers[i], pencils[i]))
        finally:  # as far as they got (every step is collective: all reach the same step unless one fails)
            for stepper, pencil in zip(self.steppers, pencils, strict=True):
                for name in runs.FIELDS:
                    getattr(state, name)[stepper.domain.region] = getattr(pencil, name)
            state.time, state.step, state.dt = pencils[0].time, pencils[0].step, pencils[0].dt
            state.forcing_gradient = pencils[0].forcing_gradient

    # the simulation's operations, as the cluster's pencils offer them (:class:`~daskflow.ns.distributed.WorkerPencils`)

    def advance(self, state: State, steps: int | None, until: float | None, stop=None) -> None:
        self.call(lambda stepper, pencil: runs.advance_pencil(self.plan, stepper, pencil, steps, until, stop), state)

    def initialize(self, state: State) -> None:
        self.call(lambda stepper, pencil: runs.initialize_pencil(self.plan, stepper, pencil), state)

    def final(self, state: State, fields: bool, checkpoint: bool) -> None:
        self.call(lambda stepper, pencil: runs.final_output(self.plan, stepper, pencil, fields, checkpoint), state)

    def checkpoint(self, state: State) -> None:
        self.call(lambda stepper, pencil: runs.write_checkpoint(self.plan, stepper, pencil), state)

    def diagnostics(self, state: State) -> dict:
        return self.call(lambda stepper, pencil: runs.diagnostics(self.plan, stepper, pencil), state)[0]
