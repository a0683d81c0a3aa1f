"""Where a time step's wall time goes, phase by phase (for benchmarks; off by default).

Switched on with the dask config key ``daskflow.profile-phases`` (environment variable
``DASK_DASKFLOW__PROFILE_PHASES=1``, set before the workers start). The stepper's domain is then
wrapped in a :class:`TimedDomain` that charges each layout-dependent operation (halo padding,
pressure solve, implicit solves, reductions) to a phase, and every exchange records how long the
task sat waiting for its peers' pieces. A phase boundary waits for the GPU, so kernels are charged
to the phase that launched them; that serialises host and device, which is why this is a
measurement mode and never the default.

With ``daskflow.profile-events`` on as well, a GPU worker times its phases by CUDA events recorded on
the compute stream instead (:class:`EventClock`): no boundary waits, so host and device overlap as
in an unprofiled run, and each phase is charged the GPU's time between its first and last launch,
idle gaps included. The clock also reports how far the device ran behind the host at each phase's
end: near zero, the host was holding the device up there.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from contextlib import contextmanager

#: stepper-visible domain methods and the phase each is charged to (where the pressure solve
#: returns its solution padded, from rows its transpose brought, the padding is the solve's)
PHASES = {"pad_velocity": "halo", "pad_and_reduce": "halo", "pad": "halo", "solve_pressure": "poisson",
          "solve_pressure_padded": "poisson",
          "implicit_z": "implicit", "implicit_xyz": "implicit", "allreduce": "reduction",
          "allreduce_many": "reduction"}


def phases_enabled() -> bool:
    """Whether ``daskflow.profile-phases`` is set in this process's dask config."""
    from daskflow import settings

    return settings.get("profile-phases")


def events_enabled() -> bool:
    """Whether ``daskflow.profile-events`` is set in this process's dask config."""
    from daskflow import settings

    return settings.get("profile-events")


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


class EventClock(PhaseClock):
    """A :class:`PhaseClock` of the device's timeline: each phase is the time between CUDA events
    recorded on the current stream at its start and end (no synchronisation until :meth:`report`).
    Besides ``seconds``, a phase's entry holds ``lag``: the summed time by which the device reached
    the phase's end after the host had launched it (host-bound phases show a lag near zero)."""

    def __init__(self) -> None:
        import cupy

        super().__init__(lambda: None)
        self._cupy = cupy
        self._marks: list = []  # (phase, start event, end event, host seconds at the end)
        cupy.cuda.get_current_stream().synchronize()  # the reference: device and host level here
        self._origin, self._host_origin = self._event(), time.perf_counter()
        self.lag: dict[str, float] = defaultdict(float)

    def _event(self):
        event = self._cupy.cuda.Event()
        event.record()
        return event

    @contextmanager
    def __call__(self, phase: str):
        start = self._event()
        try:
            yield
        finally:
            self._marks.append((phase, start, self._event(), time.perf_counter()))

    def report(self) -> dict:
        if self._marks:
            self._marks[-1][2].synchronize()
        elapsed = self._cupy.cuda.get_elapsed_time
        for phase, start, end, host in self._marks:
            self.add(phase, elapsed(start, end) / 1e3)
            self.lag[phase] += elapsed(self._origin, end) / 1e3 - (host - self._host_origin)
        self._marks = []
        return {k: {**v, "lag": self.lag.get(k, 0.0)} for k, v in super().report().items()}


def phase_clock(device: str) -> PhaseClock:
    """The clock of a profiled run on ``device``: :class:`EventClock` on a GPU with
    ``daskflow.profile-events`` on, else a :class:`PhaseClock` that waits at every boundary."""
    if device == "gpu" and events_enabled():
        return EventClock()
    return PhaseClock(device_sync(device))


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
        slot = total.setdefault(phase, dict.fromkeys(entry, 0))
        for key, value in entry.items():
            slot[key] = slot.get(key, 0) + value
    return total


def _switch(on: bool, events: bool, dask_worker=None) -> None:
    import dask

    dask.config.set({"daskflow.profile-phases": on, "daskflow.profile-events": events and on})
    dask_worker.daskflow_phases = {}


def _report(dask_worker=None) -> dict:
    return dict(getattr(dask_worker, "daskflow_phases", {}))


@contextmanager
def profile_workers(client, events: bool = False):
    """Profile the runs made inside the block on every worker of ``client`` (``events``: GPU workers
    by CUDA events, :class:`EventClock`); yields a function returning ``{worker: report}`` (the
    phases of all those runs added up)."""
    client.run(_switch, True, events)
    try:
        yield lambda: client.run(_report)
    finally:
        client.run(_switch, False, False)
