"""Distributed solves with CuPy chunks on dask-cuda workers over UCX (2 and 4 GPUs).

Runs on a GPU host with dask-cuda and distributed-ucxx; skips cleanly elsewhere. The client
process never creates a CUDA context: right-hand sides are made on the host and moved to the GPUs
inside worker tasks, and results come back through ``.get()`` on the workers.
"""

import importlib.util
import os

import dask.array as da
import numpy as np
import pytest

from daskflow import Grid, HelmholtzSolver, PoissonSolver
from daskflow.poisson.distributed import home_chunks

pytestmark = pytest.mark.gpu

GRID = Grid((16, 12, 16), (2.0, 1.0, 2.0), z_stretch=2.0)
CASES = [(("PP", "PP", "NN"), "ccc"), (("NN", "DD", "DN"), "ccc"), (("DN", "PP", "PP"), "ccf"),
         (("PP", "ND", "DD"), "fcc"), (("DD", "NN", "ND"), "cfc")]


def _visible_gpus() -> int:
    try:
        import subprocess

        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=True).stdout
        return sum(line.startswith("GPU ") for line in out.splitlines())
    except (OSError, subprocess.CalledProcessError):
        return 0


@pytest.fixture(scope="module", params=[2, 4], ids=lambda n: f"{n}gpus")
def cuda_client(request):
    gpus = request.param
    if importlib.util.find_spec("dask_cuda") is None or importlib.util.find_spec("cupy") is None:
        pytest.skip("needs dask-cuda and CuPy")
    if _visible_gpus() < gpus:
        pytest.skip(f"needs {gpus} GPUs")
    from dask_cuda import LocalCUDACluster
    from distributed import Client

    protocol = os.environ.get("DASKFLOW_TEST_PROTOCOL", "ucx")
    with LocalCUDACluster(CUDA_VISIBLE_DEVICES=",".join(map(str, range(gpus))), protocol=protocol,
                          dashboard_address=None) as cluster, Client(cluster) as client:
        # the tests count the workers from the client's cached scheduler_info: fresh once they are all in
        client.wait_for_workers(gpus)
        yield client


def _to_gpu(x):
    import cupy

    return cupy.asarray(x)


def _to_host(x):
    return x.get()


@pytest.mark.parametrize("granularity", ["stage", "fused"])
def test_cupy_chunks_equal_single_array(cuda_client, granularity):
    gpus = len(cuda_client.scheduler_info()["workers"])
    b = np.asfortranarray(np.random.default_rng(7).standard_normal(GRID.shape))
    decompositions = [(1, gpus), (gpus, 1), (2, gpus // 2)]
    outs, refs = [], []
    for bc, stagger in CASES:
        for method in ("ptdma", "ftm"):
            for pencils in decompositions:
                solver = PoissonSolver(GRID, bc, stagger, method, pencils, granularity=granularity)
                gpu_b = da.from_array(b, chunks=home_chunks(solver)).map_blocks(_to_gpu, dtype=float)
                outs.append(solver.solve(gpu_b).map_blocks(_to_host, dtype=float))
                refs.append(solver.solve(b))
        helm = HelmholtzSolver(GRID, bc, stagger, alpha=0.3, method="ptdma", pencils=(1, gpus),
                               granularity=granularity)
        gpu_b = da.from_array(b, chunks=home_chunks(helm)).map_blocks(_to_gpu, dtype=float)
        outs.append(helm.solve(gpu_b).map_blocks(_to_host, dtype=float))
        refs.append(helm.solve(b))
    results = cuda_client.gather(cuda_client.compute(outs))
    for x, ref in zip(results, refs, strict=True):
        np.testing.assert_allclose(x, ref, rtol=0, atol=1e-12 * np.abs(ref).max())


def test_channel_on_gpu_workers_equals_numpy(cuda_client):
    """The distributed time loop with CuPy pencils (one per GPU) equals the in-process NumPy run."""
    import copy

    from daskflow import Simulation

    gpus = len(cuda_client.scheduler_info()["workers"])
    cfg = {"grid": {"shape": [16, 8 * gpus, 24], "lengths": [4.0, 2.0, 2.0], "z_stretch": 1.8},
           "physics": {"nu": 0.01, "forcing": {"kind": "flow_rate", "value": [0.6667, 0.0]}},
           "boundaries": {"preset": "channel"}, "initial": {"kind": "turbulent_channel", "amplitude": 0.3},
           "time": {"cfl": 0.5, "dt_max": 0.05, "implicit_diffusion": "z"}}
    reference = Simulation({**copy.deepcopy(cfg), "solver": {"device": "cpu"}}).run(steps=10)
    for pencils in ([gpus, 1], [1, gpus], [2, gpus // 2]):
        sim = Simulation({**copy.deepcopy(cfg), "solver": {"pencils": pencils, "device": "gpu"}},
                         client=cuda_client).run(steps=10)
        for name in "uvwp":
            got = getattr(sim, name).map_blocks(_to_host, dtype=float).compute()
            ref = getattr(reference.state, name)
            np.testing.assert_allclose(got, ref, rtol=0, atol=1e-10 * np.abs(ref).max())
        assert abs(sim.bulk_velocity() - 0.6667) < 1e-12


def test_event_profile_leaves_the_run_unchanged(cuda_client):
    """An event-timed profile (``profile_workers(events=True)``) charges every phase on the device's
    timeline, its exchanges inside the phases that make them, and changes no field bit."""
    import copy

    from daskflow import Simulation
    from daskflow.profiling import profile_workers

    gpus = len(cuda_client.scheduler_info()["workers"])
    cfg = {"grid": {"shape": [16, 8 * gpus, 24], "lengths": [4.0, 2.0, 2.0], "z_stretch": 1.8},
           "physics": {"nu": 0.01, "forcing": {"kind": "flow_rate", "value": [0.6667, 0.0]}},
           "boundaries": {"preset": "channel"},
           "initial": {"kind": "turbulent_channel", "amplitude": 0.3},
           "time": {"dt": 0.01, "implicit_diffusion": "z"}, "solver": {"pencils": [gpus, 1], "device": "gpu"}}
    plain, timed = (Simulation(copy.deepcopy(cfg), client=cuda_client).run(steps=1) for _ in range(2))
    plain.run(steps=2)
    with profile_workers(cuda_client, events=True) as collect:
        timed.run(steps=2)
        reports = collect()
    for name in "uvwp":
        a, b = (getattr(sim, name).map_blocks(_to_host, dtype=float).compute() for sim in (plain, timed))
        np.testing.assert_array_equal(a, b)
    assert len(reports) == gpus
    for report in reports.values():
        task = report["task"]["seconds"]
        # pencils (n, 1): the pressure's rows come with its transpose, its padding is the solve's
        assert report["halo"]["calls"] == 12 and report["poisson"]["calls"] == 6
        assert report["exchange: transport"]["calls"] >= 24
        assert 0 < sum(e["seconds"] for p, e in report.items() if p in ("halo", "poisson", "implicit")) < task
        assert all("lag" in entry for entry in report.values())


def test_gpu_workers_write_their_pencils_to_the_store(cuda_client, tmp_path):
    """CuPy pencils are written from the GPU workers that own them; the store equals a CPU run's."""
    import copy

    import xarray as xr

    from daskflow import Simulation

    gpus = len(cuda_client.scheduler_info()["workers"])
    cfg = {"grid": {"shape": [16, 8 * gpus, 24], "lengths": [4.0, 2.0, 2.0], "z_stretch": 1.8},
           "physics": {"nu": 0.01, "forcing": {"kind": "flow_rate", "value": [0.6667, 0.0]}},
           "boundaries": {"preset": "channel"}, "initial": {"kind": "turbulent_channel", "amplitude": 0.3},
           "time": {"cfl": 0.5, "dt_max": 0.05, "implicit_diffusion": "z"},
           "output": {"scalars_every": 1, "profiles_every": 2, "fields_every": 2, "checkpoint_every": 2}}
    cpu = copy.deepcopy(cfg)
    cpu["output"]["store"] = str(tmp_path / "cpu.zarr")
    cpu["solver"] = {"device": "cpu"}
    Simulation(cpu).run(steps=4)
    gpu = copy.deepcopy(cfg)
    gpu["output"]["store"] = str(tmp_path / "gpu.zarr")
    gpu["solver"] = {"device": "gpu", "pencils": [gpus, 1]}
    Simulation(gpu, client=cuda_client).run(steps=4)
    for group in ("fields", "profiles", "scalars"):
        a = xr.open_zarr(str(tmp_path / "cpu.zarr"), group=group, consolidated=False)
        b = xr.open_zarr(str(tmp_path / "gpu.zarr"), group=group, consolidated=False)
        for name in a.data_vars:
            np.testing.assert_allclose(b[name].values, a[name].values, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("pencils, workers", [(None, "1 gpu worker,"), (["1", "2"], "2 gpu workers")])
def test_the_main_job_on_a_one_gpu_host(tmp_path, pencils, workers):
    """The main job on a host with one GPU: as shipped (``pencils: auto``, a grid that fits one GPU)
    on one GPU worker; with two pencils asked for, two dask-cuda workers share the GPU and exchange
    through the mailbox (NCCL needs a GPU per rank). Both runs complete."""
    import subprocess
    import sys

    import xarray as xr

    if importlib.util.find_spec("dask_cuda") is None or importlib.util.find_spec("cupy") is None:
        pytest.skip("needs dask-cuda and CuPy")
    if _visible_gpus() < 1:
        pytest.skip("needs a GPU")
    from daskflow import data

    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "0"}
    store = tmp_path / "small.zarr"
    extra = [] if pencils is None else ["--pencils", *pencils]
    proc = subprocess.run([sys.executable, "-m", "daskflow", "run", str(data.folder("examples") / "channel-small.yaml"),
                           "--steps", "4", "--output", str(store), *extra], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert workers in proc.stdout + proc.stderr
    scalars = xr.open_zarr(store, group="scalars")
    assert int(scalars.step[-1]) == 4 and float(scalars.div_max[-1]) < 1e-10
