"""Where a time step's wall time goes, phase by phase (for benchmarks; off by default).

Switched on with the dask config key ``daskflow.profile-phases`` (environment variable
``DASK_DASKFLOW__PROFILE_PHASES=1``, set before the workers start). The stepper's domain is then
wrapped in a :class:`TimedDomain` that charges each layout-dependent operation (halo padding,
pressure solve, implicit solves, reductions) to a phase, and every exchange records how long the
task sat waiting for its peers' pieces. A phase boundary waits for the GPU, so kernels are charged
to the phase that launched them; that serialises host and device, which is why this is a
measurement mode and never the default.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from contextlib import contextmanager

#: stepper-visible domain methods and the phase each is charged to
PHASES = {"pad_velocity": "halo", "pad_and_reduce": "halo", "pad": "halo", "solve_pressure": "poisson",
          "implicit_z": "implicit", "implicit_xyz": "implicit", "allreduce": "reduction",
          "allreduce_many": "reduction"}


def phases_enabled() -> bool:
    """Whether ``daskflow.profile-phases`` is set in this process's dask config."""
    from daskflow import settings

    return settings.get("profile-phases")


def device_sync(device: str) -> Callable[[], None]:
    """A function that waits for the current GPU stream (``device == "gpu"``), else does nothing."""
    if device != "gpu":
        return lambda: None
    import cupy

    return lambda: cupy.cuda.get_current_stream().synchronize()


class PhaseClock:
    """Seconds and calls per named phase; ``with clock("halo"): ...`` adds one call."""

    def __init__(self, sync: Callable[[], None]) -> None:
        self.sync = sync
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)

    @contextmanager
    def __call__(self, phase: str):
        self.sync()
        start = time.perf_counter()
        try:
            yield
        finally:
            self.sync()
            self.add(phase, time.perf_counter() - start)

    def add(self, phase: str, seconds: float, calls: int = 1) -> None:
        self.seconds[phase] += seconds
        self.calls[phase] += calls

    def report(self) -> dict:
        """``{phase: {"seconds": s, "calls": n}}``."""
        return {k: {"seconds": v, "calls": self.calls[k]} for k, v in self.seconds.items()}


class TimedDomain:
    """A domain whose :data:`PHASES` methods are timed on ``clock``; everything else passes through."""

    def __init__(self, domain, clock: PhaseClock) -> None:
        self._domain = domain
        self._clock = clock

    def __getattr__(self, name: str):
        attr = getattr(self._domain, name)
        phase = PHASES.get(name)
        if phase is None:
            return attr

        def timed(*args, **kwargs):
            with self._clock(phase):
                return attr(*args, **kwargs)

        return timed


def merge(total: dict, report: dict) -> dict:
    """``total`` plus one :meth:`PhaseClock.report` (in place; returns ``total``)."""
    for phase, entry in report.items():
        slot = total.setdefault(phase, {"seconds": 0.0, "calls": 0})
        slot["seconds"] += entry["seconds"]
        slot["calls"] += entry["calls"]
    return total


def _switch(on: bool, dask_worker=None) -> None:
    import dask

    dask.config.set({"daskflow.profile-phases": on})
    dask_worker.daskflow_phases = {}


def _report(dask_worker=None) -> dict:
    return dict(getattr(dask_worker, "daskflow_phases", {}))


@contextmanager
def profile_workers(client):
    """Profile the runs made inside the block on every worker of ``client``; yields a function
    returning ``{worker: report}`` (the phases of all those runs added up)."""
    client.run(_switch, True)
    try:
        yield lambda: client.run(_report)
    finally:
        client.run(_switch, False)
