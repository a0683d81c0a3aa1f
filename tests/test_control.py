"""The batching intervals of a cluster's control streams while daskflow runs pencils on it."""

import copy

import dask
import dask.array as da
import numpy as np
from distributed import Client, LocalCluster
from distributed.diagnostics.plugin import SchedulerPlugin

from daskflow import Grid, PoissonSolver, Simulation
from daskflow.pencils import control
from daskflow.poisson.distributed import home_chunks
from tests.helpers import CHANNEL


def _flat(intervals: dict) -> dict:
    """Per stream kind, the set of intervals found on the cluster."""
    out = {}
    for kind, value in intervals.items():
        values = value.values() if isinstance(value, dict) else value if isinstance(value, list) else [value]
        out[kind] = set(values)
    return out


def _two_pencil_channel() -> dict:
    cfg = copy.deepcopy(CHANNEL)
    cfg["grid"]["shape"] = [8, 8, 8]
    cfg["solver"] = {"pencils": [2, 1], "device": "cpu"}
    return cfg


def test_a_pencil_run_shortens_every_control_stream_also_of_workers_that_join_later():
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        before = _flat(control.intervals(client))
        assert before == {kind: {value} for kind, value in control.DISTRIBUTED.items()}
        sim = Simulation(_two_pencil_channel(), client=client)
        sim.run(steps=2)
        assert sim.step == 2
        chosen = dask.config.get("daskflow.control-interval")
        assert chosen < min(control.DISTRIBUTED.values())
        assert _flat(control.intervals(client)) == {kind: {chosen} for kind in control.DISTRIBUTED}
        cluster.scale(3)
        client.wait_for_workers(3)
        after = control.intervals(client)
        assert len(after["workers"]) == len(after["scheduler to workers"]) == 3
        assert _flat(after) == {kind: {chosen} for kind in control.DISTRIBUTED}
        control.set_intervals(client, control.DISTRIBUTED)
        assert _flat(control.intervals(client)) == {kind: {value} for kind, value in control.DISTRIBUTED.items()}


def test_a_distributed_solve_sets_the_configured_interval():
    grid = Grid((8, 12, 16), (2.0, 1.0, 2.0), z_stretch=2.0)
    rhs = np.asfortranarray(np.random.default_rng(3).standard_normal(grid.shape))
    with dask.config.set({"daskflow.control-interval": 0.001}), \
            LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        solver = PoissonSolver(grid, ("PP", "NN", "DN"), "ccc", "ptdma", (1, 2), granularity="fused")
        x = solver.solve(da.from_array(rhs, chunks=home_chunks(solver))).compute()
        assert _flat(control.intervals(client)) == {kind: {0.001} for kind in control.DISTRIBUTED}
    np.testing.assert_allclose(x, solver.solve(rhs), rtol=0, atol=1e-12 * np.abs(x).max())


def test_a_stream_without_an_interval_is_left_alone():
    class Other:
        pass

    assert control.set_interval(None, 0.001) is False
    assert control.set_interval(Other(), 0.001) is False
    stream = Other()
    stream.interval = 0.01
    assert control.set_interval(stream, 0.001) is True
    assert stream.interval == 0.001


def test_the_latency_benchmark_times_both_modes_and_leaves_daskflow_s_intervals(monkeypatch):
    """``benchmarks/control_latency.py`` on CPU workers: every figure of both modes, in alternation,
    and the cluster back on daskflow's intervals afterwards."""
    import os

    from tests.helpers import ROOT, benchmark_module

    monkeypatch.syspath_prepend(os.path.join(ROOT, "benchmarks"))
    bench = benchmark_module("control_latency")
    grid = Grid((8, 8, 16), (2.0, 1.0, 2.0), z_stretch=2.0)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        solver = PoissonSolver(grid, ("PP", "PP", "NN"), "ccc", "ptdma", (1, 2), granularity="fused", device="cpu")
        rhs = da.random.default_rng(0).standard_normal(grid.shape, chunks=home_chunks(solver)).persist()
        rows = bench.measure(client, solver, rhs, repeat=1, chain=2, pause=0.0, rounds=2)
        chosen = dask.config.get("daskflow.control-interval")
        assert _flat(control.intervals(client)) == {kind: {chosen} for kind in control.DISTRIBUTED}
    assert [r["mode"] for r in rows] == ["daskflow", "distributed"] * 2
    assert all(r[k] > 0 for r in rows for k in ("noop_ms", "solve_ms", "chained_ms"))
    assert set(bench.summary(rows)) == {"daskflow", "distributed"}


def test_a_cluster_that_refuses_the_plugins_keeps_distributeds_intervals_and_runs(monkeypatch, caplog):
    """A scheduler without daskflow cannot load its plugin: the run goes on with distributed's
    intervals on the cluster's side and a warning saying so."""
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        register = client.register_plugin

        def refuse(plugin, name=None):
            if isinstance(plugin, SchedulerPlugin):  # unpickled on the scheduler
                raise ModuleNotFoundError("No module named 'daskflow'")
            return register(plugin, name=name)

        monkeypatch.setattr(client, "register_plugin", refuse)
        sim = Simulation(_two_pencil_channel(), client=client)
        sim.run(steps=2)
        assert sim.step == 2
        found = control.intervals(client)
        chosen = dask.config.get("daskflow.control-interval")
        assert found["client"] == chosen  # the client's own stream needs nothing from the cluster
        assert set(found["workers"].values()) == {chosen}  # worker plugins travel as bytes to the workers
        assert set(found["scheduler to workers"].values()) == {control.DISTRIBUTED["scheduler to workers"]}
    assert "keep distributed's batching intervals" in caplog.text


def test_the_chain_timeline_sees_every_solve_of_every_worker(monkeypatch):
    """``benchmarks/poisson_chain_timeline.py`` on CPU workers: each chain's fused tasks are all
    recorded, in order, on both workers, with gaps between them and the medians it reports."""
    import os

    from tests.helpers import ROOT, benchmark_module

    monkeypatch.syspath_prepend(os.path.join(ROOT, "benchmarks"))
    bench = benchmark_module("poisson_chain_timeline")
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        client.run(bench._install, False)
        r = bench.measure(client, (8, 16, 16), (1, 2), "ptdma", chain=4, repeat=2, gpu=False)
    spans = list(r["last_timeline"].values())
    assert [len(s) for s in spans] == [4, 4]
    for s in spans:
        pairs = zip(s[:-1], s[1:], strict=True)
        assert all(entry <= leave <= next_entry for (entry, leave, *_), (next_entry, *_) in pairs)
    assert all(r[k] > 0 for k in ("chained_ms", "host_task_ms", "gap_ms", "entry_interval_ms"))
    assert r["bound"] is None  # CPU workers: their host spans are all there is


def test_the_chain_timeline_tells_a_host_bound_chain_from_a_device_bound_one(monkeypatch):
    """A chain whose devices keep pace with the last host's entries is host-bound; one whose devices
    fall behind the hosts is device-bound (spans: host entry, exit, device start, end, ms)."""
    import os

    from tests.helpers import ROOT, benchmark_module

    monkeypatch.syspath_prepend(os.path.join(ROOT, "benchmarks"))
    bench = benchmark_module("poisson_chain_timeline")
    late = {"a": [(10.0 * k, 10.0 * k + 2, 10.0 * k + 5, 10.0 * k + 9) for k in range(6)],
            "b": [(10.0 * k + 5, 10.0 * k + 7, 10.0 * k + 5, 10.0 * k + 9) for k in range(6)]}
    behind = {w: [(e, x, 12.0 * k + 5, 12.0 * k + 16) for k, (e, x, _, _) in enumerate(spans)]
              for w, spans in late.items()}
    host = bench.summarize([late], gpu=True)
    assert host["bound"] == "host" and host["entry_interval_ms"] == 10.0 and host["gap_ms"] == 8.0
    device = bench.summarize([behind], gpu=True)
    assert device["bound"] == "device" and device["device_interval_ms"] == 12.0
