"""The time loop on real ``distributed`` clusters: one pencil per worker, runs as fused tasks."""

import copy

import numpy as np
import pytest
from distributed import Client, LocalCluster

from daskflow import Simulation
from daskflow.backend import to_numpy
from tests.helpers import CHANNEL as BASE_CHANNEL
from tests.helpers import FLOW_RATE

CHANNEL = {**BASE_CHANNEL, "physics": {"nu": 0.01, "forcing": FLOW_RATE}}


@pytest.fixture(scope="module", params=[(4, (2, 2)), (3, (1, 3))], ids=["2x2", "1x3"])
def cluster(request):
    workers, pencils = request.param
    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None) as c, \
            Client(c) as client:
        yield client, list(pencils)


@pytest.mark.parametrize("implicit, z_solve", [("none", "direct"), ("z", "direct"), ("z", "transpose")])
@pytest.mark.parametrize("poisson", ["ptdma", "ftm"])
def test_twenty_steps_equal_the_single_chunk_run(cluster, implicit, z_solve, poisson):
    """Both z-implicit paths: ``direct`` (all-gather of the boundary rows at pz = 2, column slices at
    pz = 3) and ``transpose`` (x->y transpose around the solve; a no-op at py = 1)."""
    client, pencils = cluster
    cfg = copy.deepcopy(CHANNEL)
    cfg["time"]["implicit_diffusion"] = implicit
    reference = Simulation(cfg).run(steps=20)
    cfg["solver"] = {"poisson": poisson, "pencils": pencils, "z_solve": z_solve}
    sim = Simulation(cfg, client=client).run(steps=20)
    assert sim.step == 20 and sim.time == pytest.approx(reference.time, rel=1e-14)
    for name in "uvwp":
        field = getattr(sim, name)
        assert (len(field.chunks[1]), len(field.chunks[2])) == tuple(pencils)
        ref = to_numpy(getattr(reference.state, name))
        np.testing.assert_allclose(to_numpy(field.compute()), ref, rtol=0, atol=1e-10 * np.abs(ref).max())
    assert sim.divergence_max() < 1e-12
    assert abs(sim.bulk_velocity() - 0.6667) < 1e-12


def test_runs_continue_and_set_works_between_runs(cluster):
    client, pencils = cluster
    cfg = copy.deepcopy(CHANNEL)
    cfg["solver"] = {"pencils": pencils}
    sim = Simulation(cfg, client=client).run(steps=3).run(steps=2)
    reference = Simulation(CHANNEL).run(steps=5)
    np.testing.assert_allclose(to_numpy(sim.u.compute()), to_numpy(reference.state.u), rtol=0, atol=1e-10)
    sim.set(v=np.zeros(sim.grid.shape))
    reference.set(v=np.zeros(sim.grid.shape))
    sim.run(steps=2)
    reference.run(steps=2)
    np.testing.assert_allclose(to_numpy(sim.w.compute()), to_numpy(reference.state.w), rtol=0, atol=1e-10)


def test_a_run_is_one_task_per_worker_and_brings_its_clock(cluster, monkeypatch):
    """Once the pencils are computed a run needs no ready markers and no task to read the clock
    (each would cost a round trip): one task per worker, the clock published by the first. Should
    the clock's event not come, it is read from the first pencil."""
    from distributed import get_task_stream

    from daskflow.ns import distributed

    client, pencils = cluster
    cfg = copy.deepcopy(CHANNEL)
    cfg["solver"] = {"pencils": pencils}
    reference = Simulation(CHANNEL).run(steps=3)
    sim = Simulation(cfg, client=client).run(steps=1)
    with get_task_stream(client) as stream:
        sim.run(steps=1)
    assert len(stream.data) == pencils[0] * pencils[1]
    monkeypatch.setattr(distributed, "clocks_of", lambda client: {})
    sim.run(steps=1)
    assert sim.step == 3 and sim.time == pytest.approx(reference.time, rel=1e-14)
    assert sim.dt == pytest.approx(reference.dt, rel=1e-12)


def test_a_runs_tasks_leave_together_and_before_the_futures_it_lets_go(cluster, monkeypatch):
    """The client batches what it sends within 10 ms of one another. The fused tasks of a run leave
    as one graph (one update of the scheduler's graph, not one per task) in one batch, and the
    futures done with (the inputs of the run before, a record's tasks) are let go in the batch of the
    next call's tasks, never in one just before them."""
    client, pencils = cluster
    cfg = copy.deepcopy(CHANNEL)
    cfg["solver"] = {"pencils": pencils}
    sim = Simulation(cfg, client=client).run(steps=1)
    batches = []  # what the client's batched stream wrote, batch by batch
    graphs = []  # the keys of every graph update sent
    comm = client.scheduler_comm.comm
    write = comm.write

    async def recording(msgs, *args, **kwargs):
        batches.append([(m.get("op"), key) for m in msgs for key in m.get("keys", ())])
        graphs.extend(set(m["keys"]) for m in msgs if m.get("op") == "update-graph")
        return await write(msgs, *args, **kwargs)

    monkeypatch.setattr(comm, "write", recording)
    outputs = []
    for _ in range(3):
        sim.run(steps=1)
        outputs.append({future.key for future in sim._cluster.pencils})
        assert set(sim.diagnostics()) >= {"cfl", "div_max"}
    sim.run(steps=1)
    client.sync(client.scheduler.identity)  # a round trip: what was queued before has left
    batch_of = {entry: b for b, batch in enumerate(batches) for entry in batch}
    order = {entry: n for n, entry in enumerate(entry for batch in batches for entry in batch)}
    for keys in outputs:
        assert len({batch_of[("update-graph", key)] for key in keys}) == 1  # one batch per run
        assert sum(1 for graph in graphs if graph & keys) == 1 and keys <= next(g for g in graphs if g & keys)
    submitted = sorted(n for (op, _), n in order.items() if op == "update-graph")
    position_batch = [b for b, batch in enumerate(batches) for _ in batch]
    for run, keys in enumerate(outputs[:-1]):
        # the inputs of the next run are let go with the call after that run (its record), in the
        # batch that carries that call's tasks, not before it
        last_of_run = max(order[("update-graph", key)] for key in outputs[run + 1])
        record = position_batch[min(n for n in submitted if n > last_of_run)]
        assert min(batch_of[("client-releases-keys", key)] for key in keys) >= record, run


def test_pencils_must_match_the_workers(cluster):
    client, _ = cluster
    cfg = copy.deepcopy(CHANNEL)
    cfg["solver"] = {"pencils": [2, 3]}
    with pytest.raises(ValueError, match="solver.pencils"):
        Simulation(cfg, client=client)


def test_ftm_with_one_point_z_chunks_and_implicit_z():
    """z = 6 cells on 4 pencils (2, 2, 1, 1 points): w's last chunk holds no unknown at all."""
    cfg = copy.deepcopy(CHANNEL)
    cfg["grid"]["shape"] = [8, 8, 6]
    cfg["time"]["implicit_diffusion"] = "z"
    reference = Simulation(cfg).run(steps=3)
    cfg["solver"] = {"poisson": "ftm", "pencils": [1, 4]}
    with LocalCluster(n_workers=4, threads_per_worker=1, dashboard_address=None) as c, Client(c) as client:
        sim = Simulation(cfg, client=client).run(steps=3)
        for name in "uvwp":
            ref = to_numpy(getattr(reference.state, name))
            np.testing.assert_allclose(to_numpy(getattr(sim, name).compute()), ref, rtol=0,
                                       atol=1e-10 * np.abs(ref).max())


def test_fully_implicit_diffusion_on_the_cluster(cluster):
    client, pencils = cluster
    cfg = copy.deepcopy(CHANNEL)
    cfg["time"]["implicit_diffusion"] = "xyz"
    reference = Simulation(cfg).run(steps=6)
    cfg["solver"] = {"pencils": pencils}
    sim = Simulation(cfg, client=client).run(steps=6)
    ref = to_numpy(reference.state.u)
    np.testing.assert_allclose(to_numpy(sim.u.compute()), ref, rtol=0, atol=1e-10 * np.abs(ref).max())


def test_every_pencil_is_scattered_under_its_own_key(cluster):
    """A scattered dict would put each pencil's fields under the shared keys 'u', 'v', ...: pencils
    overwrote each other (wrong fields under load). Each pencil must be one future of its own."""
    client, pencils = cluster
    cfg = copy.deepcopy(CHANNEL)
    cfg["solver"] = {"pencils": pencils}
    sim = Simulation(cfg, client=client)
    sim._cluster.scatter(sim.state)
    assert len({f.key for f in sim._cluster.pencils}) == len(sim._cluster.pencils)
    held = {key for keys in client.has_what().values() for key in keys}
    assert not held & {"u", "v", "w", "p", "time", "step", "dt", "forcing_gradient"}
    for name in "uvwp":
        np.testing.assert_array_equal(to_numpy(getattr(sim, name).compute()), to_numpy(getattr(sim.state, name)))


@pytest.mark.parametrize("implicit", ["none", "z"])
def test_duct_with_walls_on_y_and_z_equals_the_single_chunk_run(cluster, implicit):
    """Walls on both decomposed axes (a square duct, moving wall on top): every halo edge of a
    pencil comes from a diagonal neighbour, a wall along y, a wall along z, or both."""
    client, pencils = cluster
    cfg = copy.deepcopy(CHANNEL)
    cfg["boundaries"] = {"preset": "channel", "u": {"y": "DD", "z_values": [0.0, 0.5]}, "v": {"y": "DD"},
                         "w": {"y": "DD"}}
    cfg["time"]["implicit_diffusion"] = implicit
    reference = Simulation(cfg).run(steps=6)
    cfg["solver"] = {"pencils": pencils}
    sim = Simulation(cfg, client=client).run(steps=6)
    for name in "uvwp":
        ref = to_numpy(getattr(reference.state, name))
        np.testing.assert_allclose(to_numpy(getattr(sim, name).compute()), ref, rtol=0, atol=1e-10 * np.abs(ref).max())


def test_phase_profile_accounts_for_the_task(cluster):
    """With ``daskflow.profile-phases`` on, every worker reports each phase of a run (calls per
    step as the stepper makes them) and the phases fit inside the task's own wall time."""
    from daskflow.profiling import profile_workers

    client, pencils = cluster
    cfg = copy.deepcopy(CHANNEL)
    cfg["time"]["implicit_diffusion"] = "z"
    cfg["solver"] = {"pencils": pencils}
    sim = Simulation(cfg, client=client).run(steps=1)
    with profile_workers(client) as collect:
        sim.run(steps=2)
        reports = collect()
    assert len(reports) == int(np.prod(pencils))
    for report in reports.values():
        calls = {phase: entry["calls"] for phase, entry in report.items()}
        # per substep: two velocity pads (the second one carrying the bulk-velocity sum, the first
        # one of a step the CFL maximum) and the correction's pressure pad, one solve, and the
        # implicit z solves: the three components in one call where z is split (they share their
        # exchange rounds), else one call each; no reduction round of its own
        implicit_calls = 1 if pencils[1] > 1 else 3
        assert calls["halo"] == 2 * 3 * 3 and calls["poisson"] == 2 * 3
        assert calls["implicit"] == 2 * 3 * implicit_calls
        assert "reduction" not in calls and calls["task"] == 1
        # the exchanges' cuts and transports are timed inside the phases that make them
        assert calls["exchange: transport"] == calls["exchange: cut pieces"] >= calls["halo"] + calls["poisson"]
        inside = sum(e["seconds"] for p, e in report.items()
                     if p != "task" and not p.startswith(("waiting", "exchange:")))
        assert 0 < inside <= report["task"]["seconds"]
        assert report["waiting: halos, reductions, z solves"]["seconds"] > 0


def test_the_initial_condition_is_built_on_the_workers(cluster, monkeypatch):
    """No field passes through the client at the start of a run: every worker evaluates the initial
    condition on its own pencil (the turbulent channel's perturbation scaled by one reduction of its
    peak), bit for bit what one process builds, and the run goes on from there."""
    from daskflow.ns.distributed import WorkerPencils

    def no_scatter(self, state):
        raise AssertionError("fields were sent from the client")

    monkeypatch.setattr(WorkerPencils, "scatter", no_scatter)
    client, pencils = cluster
    cfg = copy.deepcopy(CHANNEL)
    cfg["solver"] = {"pencils": pencils}
    sim = Simulation(cfg, client=client)
    reference = Simulation(CHANNEL)
    for name in "uvwp":
        np.testing.assert_array_equal(to_numpy(getattr(sim, name).compute()), to_numpy(getattr(reference.state, name)))
    sim.run(steps=3)
    reference.run(steps=3)
    ref = to_numpy(reference.state.u)
    np.testing.assert_allclose(to_numpy(sim.u.compute()), ref, rtol=0, atol=1e-12 * np.abs(ref).max())


def test_the_run_overhead_benchmark_times_every_run_on_every_worker(monkeypatch):
    """``benchmarks/run_overhead.py`` on CPU workers: one row per run and worker, its times in the
    order of a run's life (entered, stepped, left, seen done by the client)."""
    import os

    from tests.helpers import ROOT, benchmark_module

    monkeypatch.syspath_prepend(os.path.join(ROOT, "benchmarks"))
    bench = benchmark_module("run_overhead")
    cfg = bench._config([16, 16, 8], "z", [2, 1], cfl_every=10)
    cfg["solver"]["device"] = "cpu"
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as c, \
            Client(c) as client:
        rows = bench.measure(client, cfg, steps=2, runs=2, back_to_back=False)
    assert len(rows) == 4 and len({r["worker"] for r in rows}) == 2
    for r in rows:
        assert 0 < r["entered_ms"] < r["left_ms"] < r["returned_ms"]
        assert 0 < r["body_ms"] < r["left_ms"] - r["entered_ms"]


def test_the_workers_load_the_store_with_the_set_up(tmp_path):
    """A run that writes a store has its workers import it while the pencils are made, before the
    first step (zarr's import otherwise fell in the first run segment)."""
    import sys

    cfg = copy.deepcopy(CHANNEL)
    cfg["solver"] = {"pencils": [2, 1]}
    cfg["output"] = {"store": str(tmp_path / "run.zarr"), "scalars_every": 1}
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as c, \
            Client(c) as client:
        def loaded() -> bool:
            return "daskflow.io.store" in sys.modules

        assert not any(client.run(loaded).values())
        Simulation(cfg, client=client)
        assert all(client.run(loaded).values())


def test_the_wall_sides_of_a_pencil_are_its_non_periodic_z_ends():
    from daskflow.ns.halos import wall_sides
    from daskflow.pencils.layout import Decomposition

    dec = Decomposition((8, 8, 12), (5, 8), (2, 3))
    assert [wall_sides(dec, (1, q), False) for q in range(3)] == [(True, False), (False, False), (False, True)]
    assert wall_sides(Decomposition((8, 8, 12), (5, 8), (2, 1)), (0, 0), False) == (True, True)
    assert wall_sides(dec, (0, 0), True) == (False, False)
