"""daskflow: pencil-distributed DNS of wall turbulence on Dask, on CPUs (NumPy) and GPUs (CuPy)."""

from daskflow import settings  # noqa: F401 - registers the daskflow.* dask keys' defaults at import, as dask does
from daskflow.grid import Grid
from daskflow.poisson import HelmholtzSolver, PoissonSolver
from daskflow.simulation import Simulation
from daskflow.version import __version__


def open_run(store):
    """The groups of a run's Zarr store as lazy xarray datasets (see :func:`daskflow.analysis.open_run`)."""
    from daskflow.analysis import open_run as _open_run

    return _open_run(store)


__all__ = ["Grid", "HelmholtzSolver", "PoissonSolver", "Simulation", "__version__", "open_run"]
