"""Worker loss during a run: recovery from the last checkpoint, and a clean stop after too many."""

import copy

import numpy as np
import pytest
from distributed import Client, LocalCluster

from daskflow import Simulation
from daskflow.backend import to_numpy
from daskflow.io import store
from tests.helpers import CHANNEL


def _config(path, max_failures=3):
    cfg = copy.deepcopy(CHANNEL)
    cfg["solver"] = {"pencils": [1, 2]}
    cfg["output"] = {"store": str(path), "scalars_every": 1, "profiles_every": 0, "checkpoint_every": 4}
    cfg["cluster"] = {"max_failures": max_failures}
    return cfg


def _cluster(tmp_path, times):
    marker = tmp_path / "kills"
    marker.mkdir()
    env = {"DASKFLOW_TEST_KILL_WORKER": f"6:{marker}:{times}"}  # the worker of chunk (0, 1) dies after step 6
    return LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None, env=env), marker


def test_killed_worker_is_replaced_and_the_run_finishes_unchanged(tmp_path):
    reference = Simulation({**copy.deepcopy(CHANNEL)}).run(steps=12)
    cluster, marker = _cluster(tmp_path, times=1)
    with cluster, Client(cluster) as client:
        sim = Simulation(_config(tmp_path / "run.zarr"), client=client).run(steps=12)
        assert len(list(marker.iterdir())) == 1  # the kill happened
        assert sim.step == 12
        u = to_numpy(sim.u.compute())
    np.testing.assert_allclose(u, to_numpy(reference.state.u), rtol=0, atol=1e-12)
    import xarray as xr

    steps = xr.open_zarr(str(tmp_path / "run.zarr"), group="scalars", consolidated=False)["step"].values
    assert list(steps) == list(range(1, 13))  # records after the checkpoint were rewritten once


def test_repeated_losses_stop_cleanly_with_the_checkpoint_intact(tmp_path):
    cluster, marker = _cluster(tmp_path, times=10)
    with cluster, Client(cluster) as client:
        sim = Simulation(_config(tmp_path / "run.zarr", max_failures=2), client=client)
        with pytest.raises(RuntimeError, match="max_failures = 2"):
            sim.run(steps=12)
    assert len(list(marker.iterdir())) == 3
    fields, clock = store.read_checkpoint(str(tmp_path / "run.zarr"))
    assert clock["step"] == 4 and np.isfinite(fields["u"]).all()


def _stall_first_pencil(dask_worker=None):
    """Make this worker's next runs fail the way a peer's missing piece does (TimeoutError)."""
    import daskflow.ns.runs as runs

    def advance(*args, **kwargs):
        raise TimeoutError("daskflow exchange: pieces [...] did not arrive in 0.1 s (test)")

    runs.advance = advance


@pytest.mark.timeout(120)
def test_a_task_timeout_reaches_the_caller():
    """A run whose task raises TimeoutError (an exchange that waited too long) fails with it, and
    is not mistaken for the client's own wait timing out (which would loop for ever)."""
    with LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        cfg = copy.deepcopy(CHANNEL)
        cfg["solver"] = {"pencils": [1, 2]}
        sim = Simulation(cfg, client=client).run(steps=1)
        client.run(_stall_first_pencil)
        with pytest.raises(TimeoutError, match="did not arrive"):
            sim.run(steps=1)


def test_a_momentarily_empty_or_slow_scheduler_reply_does_not_abort_a_run(monkeypatch):
    """The client's wait times out (as it does whenever a run outlasts it) while the scheduler's
    worker list reads empty: that is no evidence of a loss, and the run finishes unchanged."""
    import distributed

    reference = Simulation(copy.deepcopy(CHANNEL)).run(steps=6)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        cfg = copy.deepcopy(CHANNEL)
        cfg["solver"] = {"pencils": [1, 2]}
        sim = Simulation(cfg, client=client).run(steps=1)
        real_wait, real_info = distributed.wait, Client.scheduler_info
        timeouts = []

        def slow_wait(futures, timeout=None, **kwargs):  # the first three waits time out
            if len(timeouts) < 3:
                timeouts.append(timeout)
                raise TimeoutError
            return real_wait(futures, timeout=timeout, **kwargs)

        monkeypatch.setattr(distributed, "wait", slow_wait)
        monkeypatch.setattr(Client, "scheduler_info", lambda self, **kw: {**real_info(self, **kw), "workers": {}})
        sim.run(steps=5)
        assert len(timeouts) == 3
        np.testing.assert_allclose(to_numpy(sim.u.compute()), to_numpy(reference.state.u), rtol=0, atol=1e-12)
