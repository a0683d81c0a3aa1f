"""TLS between client, scheduler and workers: a secured cluster runs solves and simulations, a client
without the certificates is refused."""

import gc

import dask
import numpy as np
import pytest
from distributed import Client, LocalCluster
from distributed.security import Security

from daskflow import PoissonSolver, Simulation
from daskflow.backend import to_numpy
from daskflow.grid import Grid
from daskflow.poisson.distributed import home_chunks
from tests.helpers import CHANNEL


def test_tls_cluster_runs_and_refuses_clients_without_certificates():
    pytest.importorskip("cryptography")
    security = Security.temporary()
    with LocalCluster(n_workers=2, threads_per_worker=1, protocol="tls", security=security,
                      dashboard_address=None) as cluster:
        assert cluster.scheduler_address.startswith("tls://")
        with Client(cluster, security=security) as client:
            import dask.array as da

            grid = Grid((8, 8, 8), (1.0, 1.0, 1.0))
            solver = PoissonSolver(grid, ("PP", "PP", "NN"), method="ptdma", pencils=(1, 2), granularity="fused")
            b = np.asfortranarray(np.random.default_rng(0).standard_normal(grid.shape))
            x = solver.solve(da.from_array(b, chunks=home_chunks(solver))).compute()
            np.testing.assert_allclose(x, solver.solve(b), atol=1e-12)
            cfg = {**CHANNEL, "solver": {"pencils": [1, 2]}}
            sim = Simulation(cfg, client=client).run(steps=2)
            np.testing.assert_allclose(to_numpy(sim.u.compute()), to_numpy(Simulation(CHANNEL).run(steps=2).state.u),
                                       atol=1e-12)
        # A Client whose connection fails has already made itself dask's default scheduler and stays
        # so until it is garbage collected: later in-process computations in this test session would
        # then ask for a client that no longer exists. Restore the setting and collect the failures.
        with dask.config.set(scheduler=dask.config.get("scheduler", None)):
            with pytest.raises(TypeError, match="ssl_context"):
                Client(cluster.scheduler_address, timeout="3s")  # no certificates at all
            with pytest.raises((OSError, TimeoutError)):
                Client(cluster.scheduler_address, security=Security.temporary(), timeout="3s")  # a stranger's CA
            gc.collect()
    assert dask.config.get("scheduler", None) is None
