"""The Poisson/Helmholtz solve as a Dask task graph on real ``distributed`` clusters."""

import itertools

import dask.array as da
import numpy as np
import pytest
from distributed import Client, LocalCluster, wait

from daskflow import Grid, HelmholtzSolver, PoissonSolver
from daskflow.bc import BC_PAIRS
from daskflow.poisson.distributed import build_graph, home_chunks, persist_home

GRID = Grid((9, 8, 8), (2.0, 1.0, 2.0), z_stretch=2.0)  # nz = 8: (1, 4) has two z points per chunk
DECOMPOSITIONS = [(1, 1), (2, 1), (1, 2), (2, 2), (3, 2), (1, 4)]
# 20 distinct triples; each axis sees every pair (shifted cycles through BC_PAIRS)
TRIPLES = [(BC_PAIRS[i], BC_PAIRS[(i + dy) % 5], BC_PAIRS[(i + dz) % 5])
           for dy, dz in [(1, 2), (3, 1), (0, 4), (2, 0)] for i in range(5)]


@pytest.fixture(scope="module")
def client():
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as c:
        yield c


def _rhs(seed=0):
    return np.asfortranarray(np.random.default_rng(seed).standard_normal(GRID.shape))


def test_triples_cover_every_pair():
    assert len(TRIPLES) == 20
    for axis in range(3):
        assert {t[axis] for t in TRIPLES} == set(BC_PAIRS)


@pytest.mark.parametrize("bc", TRIPLES, ids=["-".join(t) for t in TRIPLES])
def test_dask_solve_equals_single_array(client, bc):
    b = _rhs()
    reference = PoissonSolver(GRID, bc, "ccc", "ftm", (1, 1)).solve(b)
    scale = np.abs(reference).max()
    results = {}
    for method, pencils in itertools.product(("ftm", "ptdma"), DECOMPOSITIONS):
        solver = PoissonSolver(GRID, bc, "ccc", method, pencils)
        out = solver.solve(da.from_array(b, chunks=(9, 3, 5)))  # not the home chunks: rechunked
        assert out.chunks == home_chunks(solver)
        results[method, pencils] = out
    computed = dict(zip(results, client.gather(client.compute(list(results.values()))), strict=True))
    for (method, pencils), x in computed.items():
        np.testing.assert_allclose(x, reference, rtol=0, atol=1e-12 * scale, err_msg=f"{method} {pencils}")
        np.testing.assert_allclose(x, computed["ptdma" if method == "ftm" else "ftm", pencils],
                                   rtol=0, atol=1e-12 * scale)


def test_helmholtz_and_face_placement_on_the_cluster(client):
    b = _rhs(1)
    for stagger, bc in [("ccf", ("PP", "DD", "NN")), ("fcc", ("DD", "PP", "DD")), ("cfc", ("NN", "ND", "PP"))]:
        solver = HelmholtzSolver(GRID, bc, stagger, alpha=0.2, method="ptdma", pencils=(2, 2))
        x = solver.solve(da.from_array(b, chunks=home_chunks(solver))).compute()
        np.testing.assert_allclose(x, solver.solve(b), rtol=0, atol=1e-12 * np.abs(x).max())


def test_threaded_cluster():
    with LocalCluster(n_workers=2, threads_per_worker=2, processes=False, dashboard_address=None) as cluster, \
            Client(cluster):
        b = _rhs(3)
        solver = PoissonSolver(GRID, ("DN", "PP", "PP"), "ccc", "ptdma", (3, 2))
        x = solver.solve(da.from_array(b, chunks=home_chunks(solver))).compute()
        np.testing.assert_allclose(x, solver.solve(b), rtol=0, atol=1e-12 * np.abs(x).max())


def _task_count(grid, method, pencils):
    solver = PoissonSolver(grid, ("PP", "PP", "NN"), "ccc", method, pencils)
    b = da.zeros(grid.shape, chunks=home_chunks(solver))
    return len(build_graph(solver, b).tasks)


@pytest.mark.parametrize("method", ["ftm", "ptdma"])
def test_task_count_grows_with_chunks_not_points(method):
    small, large = Grid((16, 16, 16)), Grid((16, 16, 64))
    for pencils in [(1, 1), (2, 2), (4, 4), (1, 8)]:
        n_small, n_large = _task_count(small, method, pencils), _task_count(large, method, pencils)
        chunks = pencils[0] * pencils[1]
        print(f"{method} pencils={pencils}: {n_small} tasks per solve, {n_small / chunks:.1f} per chunk")
        assert n_small == n_large
    assert _task_count(small, method, (4, 4)) > _task_count(small, method, (2, 2))


def test_ptdma_4x4_needs_at_most_25_tasks_per_chunk():
    grid = Grid((16, 16, 16))
    count = _task_count(grid, "ptdma", (4, 4))
    print(f"ptdma (4, 4): {count} tasks, {count / 16:.2f} per chunk; ftm: {_task_count(grid, 'ftm', (4, 4))}")
    assert count <= 25 * 16


def test_pencils_change_worker_only_inside_exchanges():
    """Read every worker's incoming-transfer log: the only keys that ever move between workers
    are transpose pieces and P-TDMA boundary rows (gathered at pz = 2), and each output chunk stays home."""
    with LocalCluster(n_workers=4, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as c:
        c.wait_for_workers(4)  # the scheduler's view lags behind registering workers: the chunks go to all four
        for method in ("ptdma", "ftm"):
            solver = PoissonSolver(GRID, ("PP", "PP", "NN"), "ccc", method, (2, 2))
            b = persist_home(solver, _rhs(4), c)
            wait(solver.solve(b))  # set-up: plan on every worker, P-TDMA coefficients on their workers
            c.amm.run_once()  # the memory manager drops idle replicas: the plan must survive it
            c.run(lambda dask_worker: dask_worker.transfer_incoming_log.clear())
            out = solver.solve(b)
            wait(out)
            logs = c.run(lambda dask_worker: [k for entry in dask_worker.transfer_incoming_log
                                              for k in entry["keys"]])
            moved = {k[0].rsplit("-", 2)[0] if isinstance(k, tuple) else k for keys in logs.values() for k in keys}
            allowed = {"daskflow-cut-for-y-pencil", "daskflow-cut-for-x-pencil", "daskflow-cut-for-z-pencil",
                       "daskflow-cut-for-y-from-z", "daskflow-cut-all-boundary-rows"}  # pz = 2: rows gathered
            assert moved and moved <= allowed, moved
            workers = sorted(c.scheduler_info()["workers"])
            who = c.who_has(out)
            for (_, _, p, q), holders in who.items():
                assert holders == (workers[(p * 2 + q) % 4],)
            np.testing.assert_allclose(out.compute(), solver.solve(_rhs(4)), rtol=0, atol=1e-12)


@pytest.mark.parametrize("method", ["ptdma", "ftm"])
def test_fused_granularity_equals_single_array(client, method):
    """One task per worker per solve, pieces sent directly between workers."""
    b = _rhs(5)
    outs, refs = [], []
    for bc in TRIPLES[::3]:
        for pencils in [(2, 2), (3, 2), (1, 4), (2, 1)]:
            solver = PoissonSolver(GRID, bc, "ccc", method, pencils, granularity="fused")
            outs.append(solver.solve(da.from_array(b, chunks=(9, 3, 5))))
            refs.append(PoissonSolver(GRID, bc, "ccc", "ftm").solve(b))
    for x, ref in zip(client.gather(client.compute(outs)), refs, strict=True):
        np.testing.assert_allclose(x, ref, rtol=0, atol=1e-12 * np.abs(ref).max())


@pytest.mark.parametrize("pencils, tasks_per_solve", [((1, 1), 1), ((2, 1), 2), ((2, 2), 2 + 4)])
def test_chained_fused_solves_run_only_the_tasks_they_need(client, pencils, tasks_per_solve):
    """Each task on the path from one solve to the next costs a round trip to the scheduler. A
    worker that owns one chunk returns it as the solution's key (no ``getitem`` behind it), and no
    task stands between a solve's inputs and its fused tasks: (1, 1) and (2, 1) on two workers are
    one task per worker and solve, (2, 2) two fused tasks and four outputs."""
    from distributed import get_task_stream

    solver = PoissonSolver(GRID, ("PP", "PP", "NN"), "ccc", "ptdma", pencils, granularity="fused")
    b = _rhs(9)
    x = persist_home(solver, b, client)
    wait(solver.solve(x))  # set-up: plan and P-TDMA coefficients on the workers
    with get_task_stream(client) as stream:
        for _ in range(3):
            x = solver.solve(x)
        wait(x)
    assert len(stream.data) == 3 * tasks_per_solve
    expected = b
    for _ in range(3):
        expected = solver.solve(expected)
    np.testing.assert_allclose(x.compute(), expected, rtol=0, atol=1e-12 * np.abs(expected).max())


def test_a_fused_solve_submitted_again_is_a_run_of_its_own(client):
    """A fused solve is a collective run, not a pure function of its input: the same solve
    submitted again right after the last one was dropped (the scheduler may still hold some of its
    keys, with the exchanges' run id of that submission) gets keys of its own and runs in full."""
    solver = PoissonSolver(GRID, ("PP", "PP", "NN"), "ccc", "ptdma", (2, 2), granularity="fused")
    b = _rhs(10)
    x = persist_home(solver, b, client)
    first = solver.solve(x)
    wait(first)
    name = first.name
    del first
    for _ in range(3):
        again = solver.solve(x)
        assert again.name != name
        np.testing.assert_allclose(again.compute(), solver.solve(b), rtol=0, atol=1e-12 * np.abs(b).max())
        name = again.name
        del again


def test_concurrent_fused_solves_do_not_deadlock(client):
    """Two solves in flight on one-thread workers: waiting tasks secede, both finish."""
    b = _rhs(6)
    solvers = [PoissonSolver(GRID, ("PP", "NN", bc), "ccc", "ptdma", (2, 2), granularity="fused")
               for bc in ("NN", "DD")]
    outs = [s.solve(da.from_array(b, chunks=home_chunks(s))) for s in solvers]
    for s, x in zip(solvers, client.gather(client.compute(outs), ), strict=True):
        np.testing.assert_allclose(x, s.solve(b), rtol=0, atol=1e-12 * np.abs(x).max())


@pytest.mark.parametrize("trusted, queries", [(1e9, 1), (0.0, 3)], ids=["within-the-time", "after-it"])
def test_chained_solves_ask_the_scheduler_for_its_workers_only_when_the_list_is_old(client, monkeypatch,
                                                                                     trusted, queries):
    from daskflow.poisson import distributed

    solver = PoissonSolver(GRID, ("PP", "PP", "NN"), "ccc", "ptdma", (2, 1), granularity="fused")
    b = _rhs(8)
    x = persist_home(solver, b, client)
    asked = []
    real = distributed.live_workers
    monkeypatch.setattr(distributed, "live_workers", lambda c: asked.append(1) or real(c))
    monkeypatch.setattr(distributed, "WORKERS_TRUSTED", trusted)
    for _ in range(3):
        x = solver.solve(x)
    expected = b
    for _ in range(3):
        expected = solver.solve(expected)
    np.testing.assert_allclose(x.compute(), expected, rtol=0, atol=1e-12 * np.abs(expected).max())
    assert len(asked) == queries


def test_bad_granularity_is_rejected():
    with pytest.raises(ValueError, match="granularity"):
        PoissonSolver(GRID, granularity="coarse")


@pytest.mark.parametrize("pencils", [(2, 2), (2, 1)])
def test_a_failing_input_fails_every_fused_task_at_once(client, pencils):
    """An input chunk that raises must not leave the other workers' fused tasks waiting for its
    pieces (the exchanges' timeout is ten minutes): they are aborted, and the next solve works."""
    import time

    from distributed import futures_of

    solver = PoissonSolver(GRID, ("PP", "PP", "NN"), "ccc", "ptdma", pencils, granularity="fused")

    def boom(block, block_info=None):
        if block_info[0]["chunk-location"] == (0, 1, 0):
            raise RuntimeError("bad chunk")
        return block

    b = da.from_array(_rhs(7), chunks=home_chunks(solver)).map_blocks(boom, dtype=float)
    start = time.perf_counter()
    out = solver.solve(b)
    wait(out)
    assert all(f.status == "error" for f in futures_of(out))  # every task, not only the bad chunk's
    with pytest.raises(RuntimeError, match="bad chunk"):
        out.compute()
    assert time.perf_counter() - start < 300  # a bound for a hang, not a speed expectation
    good = _rhs(7)
    np.testing.assert_allclose(solver.solve(da.from_array(good, chunks=home_chunks(solver))).compute(),
                               solver.solve(good), rtol=0, atol=1e-12 * np.abs(good).max())


def test_a_failing_peer_aborts_the_others():
    """A fused task that fails in the middle aborts the run on its peers instead of a 600 s wait."""
    import time

    solver = PoissonSolver(GRID, ("PP", "PP", "NN"), "ccc", "ptdma", (1, 2), granularity="fused")
    with LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None) as cluster, Client(cluster) as c:
        b = da.from_array(_rhs(8), chunks=home_chunks(solver))
        solver.solve(b).compute()
        c.run(_fail_in_the_exchange)
        start = time.perf_counter()
        with pytest.raises(RuntimeError):
            solver.solve(b + 1).compute()
        assert time.perf_counter() - start < 30


def _fail_in_the_exchange(dask_worker):
    """Make this worker's chunk (0, 1) raise inside its first exchange, the boundary rows' gather
    at pencils (1, 2), after its forward transforms and reduction (a test hook)."""
    from daskflow.pencils import direct

    original = direct.DirectExecutor.exchange

    def exchange(self, *args, **kwargs):
        if self.exchanges == 0 and self.owner((0, 1)) == self.me:
            raise RuntimeError("peer failure")
        return original(self, *args, **kwargs)

    direct.DirectExecutor.exchange = exchange


def _switch_intervals(interval):
    import sys

    from distributed import get_worker

    from daskflow.pencils.direct import collective

    worker = get_worker()
    with collective(worker, "switch-test", [worker.address], interval):
        inside = sys.getswitchinterval()
    return inside, sys.getswitchinterval()


def test_a_collective_sets_the_gil_switch_interval_only_while_it_runs(client):
    """GPU fused tasks shorten the GIL switch interval (their event loop receives the peers' pieces)
    for their body only; without one the worker's interval is left alone."""
    import sys

    default = sys.getswitchinterval()
    inside, after = client.submit(_switch_intervals, 2e-4, pure=False).result()
    assert inside == pytest.approx(2e-4) and after == pytest.approx(default)
    inside, after = client.submit(_switch_intervals, None, pure=False).result()
    assert inside == after == pytest.approx(default)


def _freeze_count(dask_worker=None):
    import gc

    return gc.get_freeze_count()


def test_worker_processes_freeze_their_long_lived_objects_after_a_fused_solve(client):
    """A full collection inside a collective run stalls every peer: after a fused task, a worker
    process collects once and freezes the survivors, so later full collections walk only new
    objects. A worker in the client's process leaves the user's interpreter alone."""
    import gc

    solver = PoissonSolver(GRID, ("PP", "PP", "NN"), "ccc", "ptdma", (1, 2), granularity="fused")
    wait(solver.solve(persist_home(solver, _rhs(11), client)))
    frozen = client.run(_freeze_count)
    assert all(count > 10_000 for count in frozen.values()), frozen  # the modules and the worker's state
    before = gc.get_freeze_count()
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster, \
            Client(cluster) as c:
        wait(solver.solve(persist_home(solver, _rhs(11), c)))
    assert gc.get_freeze_count() == before


def test_a_slow_full_collection_makes_the_next_settle_freeze_again(monkeypatch):
    """Only a full (generation-2) collection longer than SLOW_COLLECTION makes a freeze due; the
    collection that settle makes itself does not."""
    from daskflow.pencils import collector

    watch = collector._FullCollections()
    clock = iter([0.0, 0.001, 1.0, 1.0 + 2 * collector.SLOW_COLLECTION])
    monkeypatch.setattr(collector.time, "perf_counter", lambda: next(clock))
    watch.due = False
    watch("start", {"generation": 1})
    watch("stop", {"generation": 1})  # a young generation: not timed
    watch("start", {"generation": 2})
    watch("stop", {"generation": 2})  # 1 ms: fast
    assert not watch.due
    watch("start", {"generation": 2})
    watch("stop", {"generation": 2})  # slow
    assert watch.due

    monkeypatch.setattr(collector, "_watch", watch)
    calls = []
    monkeypatch.setattr(collector.gc, "collect", lambda: calls.append("collect"))
    monkeypatch.setattr(collector.gc, "freeze", lambda: calls.append("freeze"))

    class Worker:
        nanny = "tcp://127.0.0.1:1"

    assert collector.settle(Worker()) and calls == ["collect", "freeze"] and not watch.due
    assert not collector.settle(Worker()) and calls == ["collect", "freeze"]
    Worker.nanny = None
    watch.due = True
    assert not collector.settle(Worker()) and calls == ["collect", "freeze"]
