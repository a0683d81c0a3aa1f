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
graph writes stay reserved for it); the step before the first capture runs on that pool, so
that every allocation of the capture finds a free block there (a capture cannot allocate device
memory). A step with another ``dt`` allocates the same blocks: after a new ``dt``, the next step
with it is captured at once. A single pencil's graphs are made up to ``daskflow.cuda-graph-points``
points (dask config; 0: never): on larger ones the GPU's own work hides the launches, and the pool
would hold a second copy of the step's temporaries. Pencils on several GPUs, whose hosts also drive
every exchange round, have a limit of their own, ``daskflow.distributed-cuda-graph-points``. A GPU
without room for that second copy runs its steps uncaptured (its pencils agree).

Pencils on several GPUs (``daskflow.distributed-cuda-graphs``) capture their step the same way, its
NCCL exchanges included (NCCL records its kernels into the graph; a replay on every pencil moves the
pieces as the uncaptured step does): a step of pencils is bound by its host's Python around each
exchange round, not by its GPU (``docs/performance.md``). Every pencil takes the same
decisions (the same ``dt`` sequence), and after a capture the pencils agree in one reduction that
all of them captured, else all run uncaptured from then on. A CFL step's ``dt`` comes from the
domain's rate: once a graph exists the pencils reduce it in a small round before the step, which
then replays where ``dt`` stays (else the rate rides on the step's first halo round, uncaptured).
Their graphs stay with the pencils' transport from one run to the next (:func:`_kept`), with the
memory pool of the step's temporaries: a later run of the same step size replays at once. A kept
graph reads every device array its kernels were given, so only steps whose set-ups outlive their run
(the pressure's and the z solves', cached with the plan) keep theirs; the Helmholtz set-ups of
implicit x, y and z diffusion go with their run, and so do its graphs.
"""

from __future__ import annotations

import collections
import dataclasses
import logging

from daskflow.backend import is_cupy_array

logger = logging.getLogger(__name__)

FIELDS = ("u", "v", "w", "p")
# What the step graphs of this process did, for benchmarks and diagnostics: ``captured`` graphs,
# ``replayed`` steps, and ``uncaptured`` graphs (a capture that failed here or on a peer pencil, or
# no room for the pool: their steps then run from the host).
COUNTS: collections.Counter = collections.Counter()
# A step's temporaries against its four fields' bytes: about 100 of the 130 bytes per point a GPU
# step holds (the 512 x 256 x 144 channel on an H200), with some margin.
TEMPORARIES = 3.5


# Pencils of at least this many points (the largest) pipeline the pressure solve's transposes in
# their captured step (daskflow.step-transpose-slabs): there a slab's transfer is long against
# NCCL's per-call latency. On two H200s, 3 slabs made the captured 512 x 256 x 144 step per GPU
# (18.9 M points) 1-3 % faster, and 128 x 128 x 128 (2.1 M) 3 %, 64 x 64 x 32 5-10 % slower.
PIPELINED_POINTS = 16 * 2**20


def transpose_slabs(domain) -> int | None:
    """The z slabs of the pressure transposes in the captured step of ``domain``'s pencils:
    ``daskflow.step-transpose-slabs`` for pencils of at least :data:`PIPELINED_POINTS` points (the
    largest; every pencil decides alike), else ``None`` (``daskflow.transpose-slabs`` applies)."""
    from daskflow import settings

    return int(settings.get("step-transpose-slabs")) if domain.largest_pencil_points >= PIPELINED_POINTS else None


def local_counts() -> dict:
    """``{"captured": graphs, "replayed": steps, "uncaptured": graphs}`` of this process since it
    started (:data:`COUNTS`): whether its steps replay CUDA graphs, or a capture was given up (a
    failed capture on any pencil, no room for the graph's pool)."""
    return {key: COUNTS[key] for key in ("captured", "replayed", "uncaptured")}


def counts(client) -> dict:
    """:func:`local_counts` of every worker of ``client``, by worker address."""
    return client.run(local_counts)


def for_stepper(stepper, state) -> StepGraphs | None:
    """A :class:`StepGraphs` for ``stepper`` where its steps can be captured: CuPy fields, no phase
    profiling (which waits for the device inside the step), and either one pencil holding the whole
    domain, at most ``daskflow.cuda-graph-points`` points, or (``daskflow.distributed-cuda-graphs``)
    pencils of at most ``daskflow.distributed-cuda-graph-points`` points (the largest) whose exchanges go
    through a transport that a capture can record (NCCL, point to point)."""
    from daskflow import settings
    from daskflow.profiling import phases_enabled

    domain = stepper.domain
    single = getattr(domain, "single", False)
    limit = settings.get("cuda-graph-points" if single else "distributed-cuda-graph-points")
    # pencils decide alike: by the largest one (uneven splits differ by a plane), as they must all
    # capture or none
    points = state.u.size if single else domain.largest_pencil_points
    if not is_cupy_array(state.u) or phases_enabled() or points > limit:
        return None
    if single:
        return StepGraphs()
    transport = getattr(domain, "transport", None)
    if (settings.get("distributed-cuda-graphs") and getattr(transport, "capturable", False)
            and settings.get("copy-engine") != "nccl"):
        if getattr(stepper, "implicit", None) == "xyz":
            # its Helmholtz set-ups are the run's (FlowDomain.finish drops them), so is its graph:
            # kept, it would replay on freed memory in the next run
            return StepGraphs(collective=True)
        return _kept(transport, domain, state)
    return None


KEEP = 2  # steps of this many plans keep their graphs with a transport (the most recently used)


def _kept(transport, domain, state) -> StepGraphs:
    """The :class:`StepGraphs` of this pencil's steps, kept with its transport (its NCCL
    communicator) from one run to the next: a run of the same plan and step size replays the graph
    an earlier run captured, without capturing again (a capture costs a step's host time and the
    graph's instantiation). A failed run aborts the transport, and its graphs go with it."""
    kept = transport.__dict__.setdefault("step_graphs", {})
    key = (id(domain.plan), domain.key, state.u.shape, state.u.dtype.str)
    entry = kept.pop(key, None)
    if entry is None or entry[0] is not domain.plan:
        entry = (domain.plan, StepGraphs(collective=True))
    kept[key] = entry  # the most recently used last
    while len(kept) > KEEP:
        kept.pop(next(iter(kept)))  # its graph and the graph's memory pool go
    return entry[1]


def _where(error: BaseException) -> str:
    """The innermost daskflow frame of ``error``'s traceback, as ``module.py:line in function``."""
    import os
    import traceback

    frames = [f for f in traceback.extract_tb(error.__traceback__) if f"{os.sep}daskflow{os.sep}" in f.filename]
    if not frames:
        return "an unknown place"
    f = frames[-1]
    return f"{os.path.basename(f.filename)}:{f.lineno} in {f.name}"


class StepGraphs:
    """Capture and replay of a stepper's steps (see the module docstring). It holds no reference to
    the stepper (which holds it): a single pencil's stepper of one run, and with it the graph and
    its pool, goes as soon as the run ends; pencils' graphs are kept with their transport
    (:func:`_kept`)."""

    def __init__(self, collective: bool = False) -> None:
        import cupy

        self.collective = collective  # pencils on several GPUs: their captures must all succeed
        self.pool = cupy.cuda.MemoryPool()
        self.stream = cupy.cuda.Stream(non_blocking=True)
        self.dt: float | None = None  # the step size of the previous step
        self.warm = False  # a step ran on the pool: a capture finds its blocks there
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
        if dt != self.dt:  # the pool stays warm: its blocks fit a step with any dt
            self.graph, self.buffers, self.dt = None, [], dt
            return False
        if self.graph is None:
            if not self.warm:
                if not self._room(stepper, state):
                    self.failed = True  # the steps run uncaptured, as before
                    COUNTS["uncaptured"] += 1
                    return False
                with cupy.cuda.using_allocator(self.pool.malloc):
                    stepper.substeps(state, dt)
                stepper.finish_step(state, dt)
                self.warm = True
                return True
            captured = self._capture(stepper, state, dt)
            if not self._everywhere(stepper, captured):
                self.failed, self.graph, self.buffers = True, None, []  # every pencil runs uncaptured
                captured = False
            COUNTS["captured" if captured else "uncaptured"] += 1
            if not captured:
                return False
        self._replay(stepper, state, dt)
        COUNTS["replayed"] += 1
        return True

    def _room(self, stepper, state) -> bool:
        """Whether the device has room for the graph's pool, a second copy of the step's
        temporaries (:data:`TEMPORARIES` times the fields' bytes): an allocation failing inside the
        step on the pool would fail the run, not just its capture. Pencils agree in one reduction."""
        import cupy

        free, _ = cupy.cuda.runtime.memGetInfo()
        room = self._everywhere(stepper, free >= TEMPORARIES * sum(getattr(state, name).nbytes for name in FIELDS))
        if not room:
            logger.warning("daskflow: no room on the GPU for a CUDA graph of the time step (its memory pool "
                           "would hold a second copy of the step's temporaries); the steps run without one")
        return room

    def _everywhere(self, stepper, ok: bool) -> bool:
        """Whether ``ok`` holds on every pencil (one small reduction among pencils; one pencil's own)."""
        if not self.collective:
            return ok
        return stepper.domain.allreduce(0.0 if ok else 1.0, "max") == 0.0

    def detach(self, state) -> None:
        """Give ``state`` fields of its own where they are the graph's buffers (at the end of a run:
        the fields it returns must not change under a later run's replays of a kept graph). Nothing
        to do without a graph, or for a single pencil's, which goes with its run."""
        if not (self.collective and self.buffers):
            return
        for buffer, name in zip(self.buffers, FIELDS, strict=True):
            if getattr(state, name) is buffer:
                setattr(state, name, buffer.copy())

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
            logger.warning("daskflow: the time step could not be captured as a CUDA graph (%s: %s, at %s); "
                           "the steps run without one", type(error).__name__, error, _where(error))
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
