"""CUDA graphs of the GPU time step: one captured RK3 step, replayed while the step size stays.

A small grid's GPU step is bound by its host: a few hundred kernel launches, each a Python call,
take about 4.6 ms per step on an H100 for the 48 x 32 x 32 example, whose kernels run for a
fraction of that. A CUDA graph replays the same launches with one call. :class:`StepGraphs`
records one step of a single-pencil GPU stepper (CuPy stream capture) once the same ``dt`` comes
twice in a row (a fixed ``time.dt``, or the CFL step held at ``time.dt_max``) and replays it for
every later step of that size; a new ``dt`` drops the graph and the steps run as before. A replay
runs the captured kernels with the captured arguments on the same buffers: the fields it gives
are those of the uncaptured step, bit for bit (tested).

Memory: the captured step's temporaries come from a pool of the graph's own (the addresses the
graph writes stay reserved for it); the step of the same ``dt`` before the capture runs on that
pool, so that every allocation of the capture finds a free block there (a capture cannot allocate
device memory). Graphs are made for pencils of at most ``daskflow.cuda-graph-points`` points (dask
config; 0: never): on larger ones the GPU's own work hides the launches, and the pool would hold a
second copy of the step's temporaries.
"""

from __future__ import annotations

import dataclasses
import logging

from daskflow.backend import is_cupy_array

logger = logging.getLogger(__name__)

FIELDS = ("u", "v", "w", "p")


def for_stepper(stepper, state) -> StepGraphs | None:
    """A :class:`StepGraphs` for ``stepper`` where its steps can be captured: CuPy fields of one
    pencil holding the whole domain, at most ``daskflow.cuda-graph-points`` points, and no
    phase profiling (which waits for the device inside the step)."""
    from daskflow import settings
    from daskflow.profiling import phases_enabled

    limit = settings.get("cuda-graph-points")
    domain = stepper.domain
    if not (is_cupy_array(state.u) and getattr(domain, "single", False)) or phases_enabled():
        return None
    if state.u.size > limit:
        return None
    return StepGraphs()


class StepGraphs:
    """Capture and replay of a stepper's steps (see the module docstring). It holds no reference to
    the stepper (which holds it): a worker's stepper of one run, and with it the graph and its
    pool, goes as soon as the run ends."""

    def __init__(self) -> None:
        import cupy

        self.pool = cupy.cuda.MemoryPool()
        self.stream = cupy.cuda.Stream(non_blocking=True)
        self.dt: float | None = None  # the step size of the previous step
        self.warm = False  # a step of size ``dt`` ran on the pool: a capture finds its blocks there
        self.graph = None
        self.buffers: list = []  # the graph's fields (u, v, w, p): read at the start, written at the end
        self.gradient = None  # the forcing gradient the graph writes (a device scalar), or a float
        self.failed = False

    def step(self, stepper, state, dt: float) -> bool:
        """Advance ``state`` by one step of ``stepper`` of size ``dt`` from a graph when there is (or
        now can be) one for ``dt``; ``False`` when the caller must run the step itself."""
        import cupy

        if self.failed:
            return False
        if dt != self.dt:
            self.graph, self.buffers, self.warm, self.dt = None, [], False, dt
            return False
        if self.graph is None:
            if not self.warm:
                with cupy.cuda.using_allocator(self.pool.malloc):
                    stepper.substeps(state, dt)
                stepper.finish_step(state, dt)
                self.warm = True
                return True
            if not self._capture(stepper, state, dt):
                return False
        self._replay(stepper, state, dt)
        return True

    def _capture(self, stepper, state, dt: float) -> bool:
        import cupy

        self.buffers = [getattr(state, name).copy() for name in FIELDS]
        gradient_buffer = cupy.empty((), dtype=state.u.dtype)  # allocated outside the capture, as the buffers
        shadow = dataclasses.replace(state, **dict(zip(FIELDS, self.buffers, strict=True)), history=[])
        self.stream.wait_event(cupy.cuda.get_current_stream().record())
        graph = None
        try:
            with cupy.cuda.using_allocator(self.pool.malloc), self.stream:
                self.stream.begin_capture()
                try:
                    stepper.substeps(shadow, dt)
                    for buffer, name in zip(self.buffers, FIELDS, strict=True):
                        if getattr(shadow, name) is not buffer:  # close the loop: the next replay reads them
                            buffer[...] = getattr(shadow, name)
                    self.gradient = shadow.forcing_gradient  # a float, unless the forcing keeps it on the device
                    if is_cupy_array(self.gradient):
                        gradient_buffer[...] = self.gradient
                        self.gradient = gradient_buffer
                finally:
                    graph = self.stream.end_capture()
        except Exception as error:  # noqa: BLE001 - any failure: the steps run uncaptured, as before
            logger.warning("daskflow: the time step could not be captured as a CUDA graph (%s: %s); "
                           "the steps run without one", type(error).__name__, error)
            self.failed, self.buffers = True, []
            return False
        self.graph = graph
        return True

    def _replay(self, stepper, state, dt: float) -> None:
        import cupy

        current = cupy.cuda.get_current_stream()
        for buffer, name in zip(self.buffers, FIELDS, strict=True):
            if getattr(state, name) is not buffer:  # fields set from elsewhere since the last replay
                buffer[...] = getattr(state, name)
        self.stream.wait_event(current.record())
        self.graph.launch(self.stream)
        current.wait_event(self.stream.record())
        state.u, state.v, state.w, state.p = self.buffers
        state.history = []
        state.forcing_gradient = self.gradient
        stepper.finish_step(state, dt)
