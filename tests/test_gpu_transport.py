"""The NCCL transport on dask-cuda workers: the same numbers as the mailbox, bit for bit, and
recovery from a lost worker. Runs on a GPU host with dask-cuda; skips cleanly elsewhere."""

import copy
import importlib.util
import os

import dask.array as da
import numpy as np
import pytest

from daskflow import Grid, PoissonSolver, Simulation
from daskflow.poisson.distributed import home_chunks
from tests.test_gpu_distributed import _to_gpu, _to_host, _visible_gpus

pytestmark = pytest.mark.gpu

CHANNEL = {"grid": {"shape": [16, 16, 24], "lengths": [4.0, 2.0, 2.0], "z_stretch": 1.8},
           "physics": {"nu": 0.01, "forcing": {"kind": "flow_rate", "value": [0.6667, 0.0]}},
           "boundaries": {"preset": "channel"}, "initial": {"kind": "turbulent_channel", "amplitude": 0.3},
           "time": {"cfl": 0.5, "dt_max": 0.05, "implicit_diffusion": "z"}}


def _needs(gpus: int) -> None:
    if importlib.util.find_spec("dask_cuda") is None or importlib.util.find_spec("cupy") is None:
        pytest.skip("needs dask-cuda and CuPy")
    if _visible_gpus() < gpus:
        pytest.skip(f"needs {gpus} GPUs")


def _cluster(gpus: int, protocol: str | None = None):
    from dask_cuda import LocalCUDACluster

    return LocalCUDACluster(CUDA_VISIBLE_DEVICES=",".join(map(str, range(gpus))),
                            protocol=protocol or os.environ.get("DASKFLOW_TEST_PROTOCOL", "ucx"),
                            dashboard_address=None)


@pytest.fixture(scope="module", params=[2, 4], ids=lambda n: f"{n}gpus")
def cuda_client(request):
    _needs(request.param)
    from distributed import Client

    with _cluster(request.param) as cluster, Client(cluster) as client:
        # the tests count the workers from the client's cached scheduler_info: fresh once they are all in
        client.wait_for_workers(request.param)
        yield client


def _channel(pencils, comm, shape=None):
    cfg = copy.deepcopy(CHANNEL)
    if shape is not None:
        cfg["grid"]["shape"] = shape
    cfg["solver"] = {"pencils": list(pencils), "device": "gpu"}
    cfg["cluster"] = {"comm": comm}
    return cfg


def _fields(sim) -> dict:
    return {name: getattr(sim, name).map_blocks(_to_host, dtype=float).compute() for name in "uvwp"}


def _decompositions(gpus: int) -> list:
    return [(gpus, 1), (1, gpus)] + ([(2, gpus // 2)] if gpus == 4 else [])


def test_nccl_steps_equal_the_mailbox_bit_for_bit(cuda_client):
    """Halos (faces, edges, corners), the CFL and bulk-velocity reductions, the pressure solve's
    transposes and reduced systems and the z-implicit solves: the same bits through either transport."""
    gpus = len(cuda_client.scheduler_info()["workers"])
    for pencils in _decompositions(gpus):
        runs = {}
        for comm in ("mailbox", "nccl"):
            sim = Simulation(_channel(pencils, comm), client=cuda_client)
            assert sim.comm == comm
            sim.run(steps=6)
            runs[comm] = (_fields(sim), sim.diagnostics())
        for name in "uvwp":
            np.testing.assert_array_equal(runs["nccl"][0][name], runs["mailbox"][0][name])
        assert runs["nccl"][1] == runs["mailbox"][1]


def _set_config(values: dict) -> None:
    import dask

    dask.config.set(values)


def _copy_engine_used(dask_worker=None) -> str | None:
    """The copy-engine transport this worker's communicators made (``"nccl"``, ``"ipc"``), if any."""
    from daskflow.pencils import ipc

    engines = {getattr(t.link, "_engine", None) for t in dask_worker.daskflow_transports.values()} - {None}
    return None if not engines else "ipc" if all(isinstance(e, ipc.IpcEngine) for e in engines) else "nccl"


@pytest.mark.parametrize("engine", ["nccl", "ipc"])
@pytest.mark.parametrize("gpus", [2, 4])
def test_copy_engine_transposes_equal_the_mailbox_bit_for_bit(gpus, engine):
    """With ``daskflow.copy-engine`` the pressure solve's transposes move on the copy engines, whole
    and in three z slabs: at (gpus, 1) as NCCL all-to-alls; within pairs of pencils, at (2, 1) and
    (2, 2), as one-sided copies into the peer's receive windows, which captured steps replay (the
    steps of a fixed size here, their transposes in the same slabs; at (4, 1) they stay point to
    point). The same bits as the mailbox."""
    _needs(gpus)
    import dask
    from distributed import Client

    from daskflow.pencils import copy_engine, ipc

    if not {"nccl": copy_engine, "ipc": ipc}[engine].available():
        pytest.skip(f"needs the {engine} copy-engine transport (NCCL 2.28 or later; CUDA IPC)")
    layouts = [(gpus, 1), *([(2, 2)] if gpus == 4 and engine == "ipc" else [])]  # (2, 2) after (4, 1)
    with dask.config.set({"daskflow.copy-engine": engine}), _cluster(gpus) as cluster, Client(cluster) as client:
        client.run(_set_pipelined_points, 1)  # these small pencils' captured steps pipeline too
        for pencils in layouts:
            runs = {}
            for comm, slabs in (("mailbox", 1), ("nccl", 1), ("nccl", 3)):
                client.run(_set_config, {"daskflow.transpose-slabs": slabs, "daskflow.step-transpose-slabs": slabs})
                before = sum(client.run(_count_replays).values())
                cfg = _channel(pencils, comm)
                cfg["time"] = {**cfg["time"], "dt": 1e-3}
                sim = Simulation(cfg, client=client)
                sim.run(steps=6)
                runs[comm, slabs] = (_fields(sim), sim.diagnostics(),
                                     sum(client.run(_count_replays).values()) - before)
            used = engine if engine == "nccl" or pencils[0] == 2 else None
            assert set(client.run(_copy_engine_used).values()) == {used}
            for key in (("nccl", 1), ("nccl", 3)):
                for name in "uvwp":
                    np.testing.assert_array_equal(runs[key][0][name], runs["mailbox", 1][0][name])
                assert runs[key][1] == runs["mailbox", 1][1]
                assert (runs[key][2] > 0) == (engine == "ipc")  # NCCL's all-to-all is never captured


def test_auto_times_nccl_and_the_mailbox_on_gpu_workers(cuda_client, tmp_path, monkeypatch):
    """On GPU workers ``auto`` times NCCL against the mailbox on the run's own pressure solve and
    runs on the faster."""
    monkeypatch.setenv("DASKFLOW_CACHE_DIR", str(tmp_path / "cache"))
    gpus = len(cuda_client.scheduler_info()["workers"])
    sim = Simulation(_channel((gpus, 1), "auto", [64, 32 * gpus, 48]), client=cuda_client)
    table = sim.autotune.table
    assert [row["comm"] for row in table] == ["nccl", "mailbox"]
    assert sim.comm == sim.autotune.comm == min(table, key=lambda row: row["median_ms"])["comm"]


def test_nccl_poisson_solves_equal_the_mailbox_bit_for_bit(cuda_client):
    """Fused FTM and P-TDMA solves (x->y, y->z transposes, boundary-row gathers and scatters)."""
    gpus = len(cuda_client.scheduler_info()["workers"])
    grid = Grid((16, 12, 16), (2.0, 1.0, 2.0), z_stretch=2.0)
    b = np.asfortranarray(np.random.default_rng(3).standard_normal(grid.shape))
    for method in ("ptdma", "ftm"):
        for pencils in _decompositions(gpus):
            out = {}
            for comm in ("mailbox", "nccl"):
                solver = PoissonSolver(grid, ("PP", "NN", "DN"), "ccc", method, pencils, granularity="fused",
                                       comm=comm)
                gpu_b = da.from_array(b, chunks=home_chunks(solver)).map_blocks(_to_gpu, dtype=float)
                out[comm] = solver.solve(gpu_b).map_blocks(_to_host, dtype=float).compute()
            np.testing.assert_array_equal(out["nccl"], out["mailbox"])
            np.testing.assert_allclose(out["nccl"], solver.solve(b), rtol=0, atol=1e-12 * np.abs(out["nccl"]).max())


def test_gpu_pencils_over_nccl_equal_the_one_gpu_run(cuda_client):
    """Four (or two) GPUs over NCCL against one GPU in process, 20 steps: equal to 1e-13."""
    gpus = len(cuda_client.scheduler_info()["workers"])
    shape = [16, 8 * gpus, 24]
    one = cuda_client.submit(_one_gpu_run, _channel((1, 1), "auto", shape), 20, pure=False).result()
    for pencils in _decompositions(gpus):
        sim = Simulation(_channel(pencils, "nccl", shape), client=cuda_client).run(steps=20)
        got = _fields(sim)
        for name in "uvwp":
            np.testing.assert_allclose(got[name], one[name], rtol=0, atol=1e-13 * np.abs(one[name]).max())


def _count_replays(dask_worker=None) -> int:
    """The time steps this worker's process has replayed from CUDA graphs so far."""
    from daskflow.ns import graphs

    return graphs.COUNTS["replayed"]


# physics of other paths through the step: explicit and fully implicit diffusion, skew-symmetric
# advection, a fixed pressure gradient, single precision
OTHER_PHYSICS = ({"time": {"implicit_diffusion": "xyz"}, "physics": {"advection": "skew_symmetric"}},
                 {"time": {"implicit_diffusion": "none"}, "solver": {"dtype": "float32"},
                  "physics": {"forcing": {"kind": "pressure_gradient", "value": [0.02, 0.0]}}})


def _variants(gpus: int) -> list:
    """(pencils, timing, physics) of the captured test: every decomposition with the channel's
    physics, a CFL step size that changes at every evaluation (no dt_max to hold it), and the other
    physics, at the first decomposition."""
    first = _decompositions(gpus)[0]
    return ([(pencils, timing, {}) for pencils in _decompositions(gpus) for timing in ({"dt": 0.004}, {"cfl_every": 4})]
            + [(first, {"cfl_every": 3, "dt_max": 1.0}, {})]
            + [(first, {"cfl_every": 3}, physics) for physics in OTHER_PHYSICS])


def test_captured_pencil_steps_equal_the_uncaptured_ones_bit_for_bit(cuda_client):
    """With ``daskflow.distributed-cuda-graphs`` the pencils capture their step, NCCL's halos,
    transposes and z-solve rows included, and replay it, also in the next run: the bits of the steps
    run one by one, over steps of a fixed size and over CFL steps with the held ones replayed between
    (and the CFL steps themselves where the step size stays), also for other physics; a run's fields
    stay as it left them while a later run replays. Four pencils too, whose graphs with the
    freed set-ups of implicit x, y and z diffusion (kept across runs then) gave other fields. These
    small pencils pipeline their captured transposes as large ones do (the uncaptured runs keep them
    whole): the slabs give the same bits."""
    from daskflow import settings

    gpus = len(cuda_client.scheduler_info()["workers"])
    previous = cuda_client.run(_set_pipelined_points, 1)
    try:
        _captured_equals_uncaptured(cuda_client, _variants(gpus))
    finally:
        for worker, points in previous.items():
            cuda_client.run(_set_pipelined_points, points, workers=[worker])
    cuda_client.run(_set_config, {"daskflow.distributed-cuda-graphs": settings.DEFAULTS["daskflow"]
                                  ["distributed-cuda-graphs"]})


def _set_pipelined_points(points: int, dask_worker=None) -> int:
    """Set :data:`daskflow.ns.graphs.PIPELINED_POINTS` on a worker; returns the value it had."""
    from daskflow.ns import graphs

    previous, graphs.PIPELINED_POINTS = graphs.PIPELINED_POINTS, points
    return previous


def _captured_equals_uncaptured(cuda_client, variants) -> None:
    """Every ``(pencils, timing, physics)`` of ``variants`` with graphs off and on: the same bits,
    replays only with graphs on, a run's fields untouched by the next run's replays."""
    for pencils, timing, physics in variants:
        runs = {}
        for graphs in (False, True):
            cuda_client.run(_set_config, {"daskflow.distributed-cuda-graphs": graphs})
            cfg = _channel(pencils, "nccl")
            for section, values in physics.items():
                cfg[section] = {**cfg.get(section, {}), **values}
            cfg["time"] = {**cfg["time"], **timing}
            before = sum(cuda_client.run(_count_replays).values())
            sim = Simulation(cfg, client=cuda_client)
            sim.run(steps=5)
            first, held = _fields(sim)["u"], sim.u  # ``held``: the first run's pencils themselves
            sim.run(steps=7)  # replays the graph the first run captured, where its dt is the same
            replays = sum(cuda_client.run(_count_replays).values()) - before
            runs[graphs] = (_fields(sim), sim.diagnostics(), sim.time)
            assert (replays > 0) == graphs, (pencils, timing, physics, replays)
            np.testing.assert_array_equal(held.map_blocks(_to_host, dtype=float).compute(), first)
        for name in "uvwp":
            np.testing.assert_array_equal(runs[True][0][name], runs[False][0][name])
        assert runs[True][1:] == runs[False][1:]


def _one_gpu_run(cfg: dict, steps: int) -> dict:
    sim = Simulation(cfg).run(steps=steps)
    return {name: getattr(sim.state, name).get() for name in "uvwp"}


IPC_SLABS = {"daskflow.copy-engine": "ipc", "daskflow.transpose-slabs": 3}


@pytest.mark.parametrize("pencils, settings", [((1, 2), {}), ((2, 1), IPC_SLABS)], ids=["nccl", "ipc"])
def test_a_killed_worker_with_nccl_recovers_from_the_checkpoint(tmp_path, pencils, settings):
    """The worker of the last pencil dies after step 6; the communicator of the survivors is aborted
    (with ``ipc``, its flags released), a new one is built over the replacement, and the run
    finishes with the fields of a run that lost nothing."""
    _needs(2)
    import dask
    from distributed import Client

    cfg = _channel(pencils, "nccl")
    reference = Simulation({**copy.deepcopy(cfg), "cluster": {"comm": "auto"}, "solver": {"device": "cpu"}})
    reference.run(steps=12)
    marker = tmp_path / "kills"
    marker.mkdir()
    cfg["output"] = {"store": str(tmp_path / "run.zarr"), "scalars_every": 1, "profiles_every": 0,
                     "checkpoint_every": 4}
    os.environ["DASKFLOW_TEST_KILL_WORKER"] = f"6:{marker}:1"
    try:
        with dask.config.set(settings), _cluster(2) as cluster, Client(cluster) as client:
            sim = Simulation(cfg, client=client).run(steps=12)
            assert len(list(marker.iterdir())) == 1  # the kill happened
            assert sim.step == 12 and sim.comm == "nccl"
            got = _fields(sim)
    finally:
        del os.environ["DASKFLOW_TEST_KILL_WORKER"]
    for name in "uvw":
        ref = getattr(reference.state, name)
        np.testing.assert_allclose(got[name], ref, rtol=0, atol=1e-10 * np.abs(ref).max())


def test_ucx_steps_equal_the_mailbox_bit_for_bit_on_gpus():
    """UCXX endpoints between GPU workers (CuPy pieces, Dask's own comms over TCP); on a host with
    one GPU, two workers share it (UCX moves device pieces between processes of one GPU too)."""
    _needs(1)
    from daskflow.pencils import ucx

    if not ucx.available():  # installed is not enough: UCXX loads its UCX libraries at import
        pytest.skip("needs UCXX that imports")
    from distributed import Client

    from daskflow.cluster import shared_gpu_cluster_class

    cluster = (_cluster(2, protocol="tcp") if _visible_gpus() >= 2 else
               shared_gpu_cluster_class()(CUDA_VISIBLE_DEVICES="0", n_workers=2, protocol="tcp",
                                          dashboard_address=None))
    with cluster, Client(cluster) as client:
        client.wait_for_workers(2)
        for pencils in ((2, 1), (1, 2)):
            runs = {}
            for comm in ("mailbox", "ucx"):
                sim = Simulation(_channel(pencils, comm), client=client)
                assert sim.comm == comm
                sim.run(steps=4)
                runs[comm] = _fields(sim)
            for name in "uvwp":
                np.testing.assert_array_equal(runs["ucx"][name], runs["mailbox"][name])
