"""Which steps may be captured as CUDA graphs, and how the graphs of pencils' steps are kept from one
run to the next (the capture itself runs on GPUs: tests/test_gpu_transport.py, tests/test_gpu_ns.py)."""

import copy
from types import SimpleNamespace

import dask
import numpy as np

from daskflow import Simulation
from daskflow.ns import graphs
from tests.helpers import CHANNEL


class _Graphs:
    """Stands in for :class:`graphs.StepGraphs` (which needs CuPy)."""

    def __init__(self, collective: bool = False) -> None:
        self.collective = collective


def _pencil(plan, key=(0, 0), shape=(4, 4, 4), pencils=2, largest=None):
    """A pencil's domain and state: fields of ``shape``, the decomposition's largest pencil
    ``largest`` points (``shape``'s by default)."""
    transport = SimpleNamespace(capturable=True)
    dec = SimpleNamespace(indices=[(i, 0) for i in range(pencils)])
    points = int(np.prod(shape)) if largest is None else largest
    return (SimpleNamespace(plan=plan, key=key, transport=transport, dec=dec, largest_pencil_points=points),
            SimpleNamespace(u=np.zeros(shape)))


def test_numpy_fields_are_never_captured():
    domain, state = _pencil(object())
    with dask.config.set({"daskflow.distributed-cuda-graphs": True}):
        assert graphs.for_stepper(SimpleNamespace(domain=domain), state) is None


def test_a_transports_graphs_are_kept_per_plan_and_pencil_the_most_recent_ones(monkeypatch):
    monkeypatch.setattr(graphs, "StepGraphs", _Graphs)
    plan_a, plan_b, plan_c = object(), object(), object()
    domain, state = _pencil(plan_a)
    transport = domain.transport
    first = graphs._kept(transport, domain, state)
    assert first.collective and graphs._kept(transport, domain, state) is first  # the next run: the same graphs
    other_pencil = SimpleNamespace(plan=plan_a, key=(1, 0), transport=transport)
    assert graphs._kept(transport, other_pencil, state) is not first
    assert graphs._kept(transport, domain, SimpleNamespace(u=np.zeros((4, 4, 8)))) is not first  # another size
    for plan in (plan_b, plan_c):
        graphs._kept(transport, SimpleNamespace(plan=plan, key=(0, 0), transport=transport), state)
    assert len(transport.step_graphs) == graphs.KEEP
    assert graphs._kept(transport, domain, state) is not first  # plan_a's graphs went with the older entries


def test_steps_with_implicit_xyz_diffusion_keep_no_graph_beyond_their_run(monkeypatch):
    """Their Helmholtz set-ups are dropped at the end of a run; a kept graph would read them after."""
    monkeypatch.setattr(graphs, "StepGraphs", _Graphs)
    monkeypatch.setattr(graphs, "is_cupy_array", lambda a: True)  # NumPy stands in for CuPy fields
    domain, state = _pencil(object())
    first = graphs.for_stepper(SimpleNamespace(domain=domain, implicit="xyz"), state)
    assert first.collective and not hasattr(domain.transport, "step_graphs")
    assert graphs.for_stepper(SimpleNamespace(domain=domain, implicit="xyz"), state) is not first
    kept = graphs.for_stepper(SimpleNamespace(domain=domain, implicit="z"), state)
    assert graphs.for_stepper(SimpleNamespace(domain=domain, implicit="z"), state) is kept


def test_a_new_plan_at_a_reused_address_gets_graphs_of_its_own(monkeypatch):
    monkeypatch.setattr(graphs, "StepGraphs", _Graphs)
    plan = object()
    domain, state = _pencil(plan)
    first = graphs._kept(domain.transport, domain, state)
    key = next(iter(domain.transport.step_graphs))
    domain.transport.step_graphs[key] = (object(), first)  # as if another plan had lived at plan's id
    assert graphs._kept(domain.transport, domain, state) is not first


def test_a_run_that_ends_before_any_capture_keeps_its_fields():
    """A run of one or two steps ends before its graph exists (no buffers yet): its fields stay;
    a kept graph's buffers are copied out of the fields a run returns."""
    state = SimpleNamespace(**{name: np.full(3, i, dtype=float) for i, name in enumerate(graphs.FIELDS)})
    fields = [getattr(state, name) for name in graphs.FIELDS]
    for collective in (False, True):
        empty = object.__new__(graphs.StepGraphs)
        empty.collective, empty.buffers = collective, []
        empty.detach(state)
        assert all(getattr(state, name) is field for name, field in zip(graphs.FIELDS, fields, strict=True))
    kept = object.__new__(graphs.StepGraphs)
    kept.collective, kept.buffers = True, fields
    kept.detach(state)
    for name, buffer in zip(graphs.FIELDS, fields, strict=True):
        assert getattr(state, name) is not buffer
        np.testing.assert_array_equal(getattr(state, name), buffer)


def test_pencils_and_one_pencil_are_captured_up_to_their_points_limits(monkeypatch):
    monkeypatch.setattr(graphs, "StepGraphs", _Graphs)
    monkeypatch.setattr(graphs, "is_cupy_array", lambda a: True)  # NumPy stands in for CuPy fields
    domain, state = _pencil(object(), shape=(8, 8, 8))
    single = SimpleNamespace(single=True)
    for limit, captured in ((512, True), (511, False)):
        with dask.config.set({"daskflow.distributed-cuda-graph-points": limit, "daskflow.cuda-graph-points": 0}):
            assert (graphs.for_stepper(SimpleNamespace(domain=domain), state) is not None) == captured
            assert graphs.for_stepper(SimpleNamespace(domain=single), state) is None
        with dask.config.set({"daskflow.distributed-cuda-graph-points": 0, "daskflow.cuda-graph-points": limit}):
            assert graphs.for_stepper(SimpleNamespace(domain=domain), state) is None
            assert (graphs.for_stepper(SimpleNamespace(domain=single), state) is not None) == captured
    with dask.config.set({"daskflow.distributed-cuda-graphs": False}):
        assert graphs.for_stepper(SimpleNamespace(domain=domain), state) is None
        assert graphs.for_stepper(SimpleNamespace(domain=single), state) is not None



def test_pencils_decide_by_the_largest_pencil(monkeypatch):
    """An uneven split: a pencil under the limit whose neighbour is over it runs uncaptured too (the
    pencils' captures are collective)."""
    monkeypatch.setattr(graphs, "StepGraphs", _Graphs)
    monkeypatch.setattr(graphs, "is_cupy_array", lambda a: True)
    domain, state = _pencil(object(), shape=(8, 8, 8), largest=8 * 9 * 8)
    with dask.config.set({"daskflow.distributed-cuda-graph-points": 8 * 8 * 8}):
        assert graphs.for_stepper(SimpleNamespace(domain=domain), state) is None
    with dask.config.set({"daskflow.distributed-cuda-graph-points": 8 * 9 * 8}):
        assert graphs.for_stepper(SimpleNamespace(domain=domain), state) is not None

def _fake_cupy(monkeypatch, free_bytes: int) -> None:
    """A ``cupy`` module with what :meth:`graphs.StepGraphs.step` uses around its calls of the stepper."""
    import contextlib
    import sys

    cuda = SimpleNamespace(using_allocator=lambda malloc: contextlib.nullcontext(),
                           runtime=SimpleNamespace(memGetInfo=lambda: (free_bytes, 2 * free_bytes)))
    monkeypatch.setitem(sys.modules, "cupy", SimpleNamespace(cuda=cuda))


def _recording_graphs(monkeypatch, events: list, collective: bool = False) -> graphs.StepGraphs:
    """A :class:`graphs.StepGraphs` without CuPy whose captures and replays append to ``events``."""
    step_graphs = object.__new__(graphs.StepGraphs)
    step_graphs.__dict__.update(collective=collective, pool=SimpleNamespace(malloc=None), dt=None, warm=False,
                                graph=None, buffers=[], failed=False)

    def capture(stepper, state, dt):
        events.append(("capture", dt))
        step_graphs.graph = ("graph", dt)
        return True

    monkeypatch.setattr(step_graphs, "_capture", capture)
    monkeypatch.setattr(step_graphs, "_replay", lambda stepper, state, dt: events.append(("replay", dt)))
    return step_graphs


def _recording_stepper(events: list, peers_room: bool = True):
    domain = SimpleNamespace(allreduce=lambda value, op: max(value, 0.0 if peers_room else 1.0))
    return SimpleNamespace(domain=domain, substeps=lambda state, dt: events.append(("on pool", dt)),
                           finish_step=lambda s, dt: None)


STATE = SimpleNamespace(**{name: np.zeros(10) for name in graphs.FIELDS})  # 320 bytes of fields


def test_after_a_new_dt_the_next_step_with_it_is_captured_at_once(monkeypatch):
    """The first capture follows a step on the graph's pool; a later ``dt`` (the next CFL step's) is
    captured at its second step, the pool's blocks being there already."""
    _fake_cupy(monkeypatch, free_bytes=10**9)
    events = []
    step_graphs = _recording_graphs(monkeypatch, events)
    stepper = _recording_stepper(events)
    before = graphs.COUNTS.copy()
    done = [step_graphs.step(stepper, STATE, dt) for dt in (0.1, 0.1, 0.1, 0.1, 0.2, 0.2, 0.2)]
    assert done == [False, True, True, True, False, True, True]
    assert events == [("on pool", 0.1), ("capture", 0.1), ("replay", 0.1), ("replay", 0.1),
                      ("capture", 0.2), ("replay", 0.2), ("replay", 0.2)]
    assert graphs.COUNTS - before == {"captured": 2, "replayed": 4}  # what a benchmark reads


def test_no_graph_where_the_gpu_has_no_room_for_its_pool(monkeypatch):
    """Without room for a second copy of the step's temporaries the steps run uncaptured (the step on
    the pool could fail the run); pencils agree, so one without room keeps them all uncaptured."""
    room = int(graphs.TEMPORARIES * 320)
    for free, peers_room, captured in ((room, True, True), (room - 1, True, False), (room, False, False)):
        _fake_cupy(monkeypatch, free_bytes=free)
        events = []
        step_graphs = _recording_graphs(monkeypatch, events, collective=True)
        stepper = _recording_stepper(events, peers_room)
        before = graphs.COUNTS.copy()
        done = [step_graphs.step(stepper, STATE, 0.1) for _ in range(4)]
        assert done == ([False, True, True, True] if captured else [False] * 4)
        assert step_graphs.failed is not captured and (("replay", 0.1) in events) is captured
        assert graphs.COUNTS - before == ({"captured": 1, "replayed": 2} if captured else {"uncaptured": 1})


class _StepGraphsSpy:
    """Stands in for a stepper's :class:`graphs.StepGraphs`: records the step sizes it is asked to replay."""

    def __init__(self, collective: bool, graph) -> None:
        self.collective, self.graph, self.asked = collective, graph, []

    def step(self, stepper, state, dt) -> bool:
        self.asked.append(dt)
        return True


def _cfl_stepper(step_graphs):
    from daskflow.ns.stepper import Stepper

    stepper = object.__new__(Stepper)
    calls = {"allreduce": [], "substeps": []}
    stepper.graphs = step_graphs
    stepper.domain = SimpleNamespace(allreduce=lambda value, op: calls["allreduce"].append((value, op)) or 2 * value)
    stepper.local_rate = lambda state: 3.0
    stepper.substeps = lambda state, dt: calls["substeps"].append(dt) or 0.5
    stepper.finish_step = lambda state, dt: None
    return stepper, calls


def test_a_cfl_step_of_pencils_with_a_graph_reduces_its_rate_first_and_replays():
    """Pencils whose step graph exists reduce the rate in a round of their own and hand the step size
    to the graph; without a graph the rate rides on the step's first halo round (the callable goes
    to the substeps); one pencil takes its own rate."""
    limit = lambda rate: 1.0 / rate  # noqa: E731 - the CFL step size from the domain's rate
    with_graph = _StepGraphsSpy(collective=True, graph=object())
    stepper, calls = _cfl_stepper(with_graph)
    stepper.step(SimpleNamespace(), limit)
    assert calls == {"allreduce": [(3.0, "max")], "substeps": []} and with_graph.asked == [1.0 / 6.0]

    without = _StepGraphsSpy(collective=True, graph=None)
    stepper, calls = _cfl_stepper(without)
    stepper.step(SimpleNamespace(), limit)
    assert calls["allreduce"] == [] and calls["substeps"] == [limit] and without.asked == []

    single = _StepGraphsSpy(collective=False, graph=None)
    stepper, calls = _cfl_stepper(single)
    stepper.step(SimpleNamespace(), limit)
    assert calls == {"allreduce": [], "substeps": []} and single.asked == [1.0 / 3.0]


def test_counts_reports_every_workers_step_graphs():
    """What each worker's step graphs did, read on a cluster (threaded workers share this process's
    counts; NumPy runs never capture, so a run adds nothing)."""
    from distributed import Client, LocalCluster


    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        before = graphs.counts(client)
        assert sorted(before) == sorted(client.scheduler_info()["workers"])
        cfg = copy.deepcopy(CHANNEL)
        cfg["solver"] = {**cfg.get("solver", {}), "pencils": [2, 1]}
        Simulation(cfg, client=client).run(steps=2)
        assert graphs.counts(client) == before
        graphs.COUNTS["replayed"] += 3
        try:
            after = graphs.counts(client)
        finally:
            graphs.COUNTS["replayed"] -= 3
    for worker, counts in after.items():
        assert counts == {**before[worker], "replayed": before[worker]["replayed"] + 3}


def test_only_large_pencils_pipeline_their_captured_transposes():
    """From ``graphs.PIPELINED_POINTS`` points (the largest pencil) ``daskflow.step-transpose-slabs``;
    below, ``None``: ``daskflow.transpose-slabs`` applies."""
    small, _ = _pencil(object(), largest=graphs.PIPELINED_POINTS - 1)
    large, _ = _pencil(object(), largest=graphs.PIPELINED_POINTS)
    assert graphs.transpose_slabs(small) is None and graphs.transpose_slabs(large) == 3
    with dask.config.set({"daskflow.step-transpose-slabs": 5}):
        assert graphs.transpose_slabs(large) == 5
