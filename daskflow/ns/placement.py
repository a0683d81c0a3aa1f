"""Fields that enter a cluster on the workers: every worker reads its pencil's region of a
checkpoint from the store, or evaluates ``set()``'s functions on its pencil's coordinates, the way
it builds its part of the initial condition (:func:`daskflow.ns.runs.initialize_pencil`). The
client sends only small things: the plan, the checkpoint slot and clock, the functions, and the
arrays a user gives to ``set()`` (cut into pencils, each sent to its worker).

These bodies are independent tasks, one per pencil, with no exchange between workers:
:func:`placed` waits for them and reports a damaged checkpoint as a read of the whole slot in one
process would (the first damaged file in the order of the fields and their chunks).
"""

from __future__ import annotations

import numpy as np

from daskflow.backend import to_numpy
from daskflow.ns import initial
from daskflow.ns.domain import FlowPlan, holds_wall, keep_pencil_walls, pencil_region
from daskflow.ns.runs import FIELDS

COMPONENTS = {"u": 0, "v": 1, "w": 2, "p": None}


def to_device(pencil: dict, plan: FlowPlan) -> dict:
    """A host pencil on the worker's GPU (CuPy, in the operators' memory order) when ``plan`` runs
    there, with the modules its runs will use loaded as part of the set-up (:func:`load_modules`)."""
    load_modules(plan)
    if plan.device != "gpu":
        return pencil
    import cupy

    from daskflow.ns.operators import memory_order

    order = memory_order(cupy)
    return {k: cupy.asarray(v, order=order) if isinstance(v, np.ndarray) else v for k, v in pencil.items()}


def load_modules(plan: FlowPlan) -> None:
    """Load on this worker what a run of ``plan`` will import, as part of the run's set-up instead
    of in its first steps: the GPU transforms (cuFFT through ``cupyx.scipy.fft``) and, for a run
    that writes a store, zarr. On a GPU host with one worker these took most of the main job's
    first segment (``docs/performance.md``)."""
    if plan.device == "gpu":
        from daskflow.poisson.stages import gpu_irfft2

        gpu_irfft2()
    if plan.output is not None and plan.output.store:
        from daskflow.io import store  # noqa: F401 - zarr and its codecs


def _host(plan: FlowPlan, values) -> np.ndarray:
    """A Fortran-ordered host copy in the plan's dtype (as ``Simulation.set`` makes in process)."""
    return np.array(to_numpy(values), dtype=plan.poisson_plan.dtype, order="F", copy=True)


def _finish(plan: FlowPlan, key: tuple[int, int], pencil: dict, made: set) -> dict:
    """``pencil`` on the worker's device with its velocity wall faces reset (a field not in
    ``made``, the ones made here, is copied before its wall face changes: a task's inputs are
    never changed)."""
    pencil = to_device(pencil, plan)
    bcs, counts = plan.bcs, plan.poisson_plan.decomposition.pencils
    for component, name in enumerate(("u", "v", "w")):
        if holds_wall(bcs, counts, key, component):
            if name not in made:
                pencil[name] = pencil[name].copy(order="K")
            pencil[name] = keep_pencil_walls(bcs, plan.grid, counts, key, pencil[name], component)
    return pencil


def read_pencil(plan: FlowPlan, key: tuple[int, int], path: str, slot: str, clock: dict) -> dict:
    """Pencil ``key`` read from checkpoint ``slot`` of the store ``path`` (its chunks verified,
    :func:`daskflow.io.store.read_region`) with ``clock``: runs on the pencil's worker."""
    from daskflow.io import store

    fields = store.read_region(path, slot, pencil_region(plan.poisson_plan.decomposition, key))
    pencil = {name: _host(plan, fields.pop(name)) for name in FIELDS}
    return _finish(plan, key, {**pencil, **clock}, set(FIELDS))


def set_pencil(plan: FlowPlan, key: tuple[int, int], pencil: dict, arrays: dict | None, functions: dict) -> dict:
    """``pencil`` with the fields of ``arrays`` (this pencil's parts of whole arrays) and of
    ``functions`` (``f(x, y, z)``, evaluated here on this pencil's coordinates of each field's own
    staggered position) replaced: runs on the pencil's worker; the other fields are kept."""
    region = pencil_region(plan.poisson_plan.decomposition, key)
    shape = (plan.grid.shape[0], *(r.stop - r.start for r in region[1:]))
    new = {name: _host(plan, value) for name, value in (arrays or {}).items()}
    for name, f in functions.items():
        new[name] = _host(plan, np.broadcast_to(to_numpy(f(*initial.positions(plan.grid, COMPONENTS[name],
                                                                                region))), shape))
    return _finish(plan, key, {**pencil, **new}, set(new))


def placed(client, futures: list) -> list:
    """``futures`` (one task per pencil) once all have finished; if any failed, they are cancelled
    and the error raised: among damaged checkpoint regions
    (:class:`~daskflow.io.store.CheckpointError`), the one a read of the whole slot meets first;
    any other error before those."""
    from distributed import wait

    from daskflow.io.store import CheckpointError

    wait(futures)
    errors = [f.exception() for f in futures if f.status == "error"]
    if not errors:
        return futures
    client.cancel(futures)
    other = [e for e in errors if not isinstance(e, CheckpointError)]
    if other:
        raise other[0]
    raise min(errors, key=lambda e: getattr(e, "order", (-1, -1)))


__all__ = ["COMPONENTS", "placed", "read_pencil", "set_pencil", "to_device"]
