"""daskflow: pencil-distributed DNS of wall turbulence on Dask, on CPUs (NumPy) and GPUs (CuPy)."""

from daskflow.grid import Grid
from daskflow.poisson import HelmholtzSolver, PoissonSolver
from daskflow.simulation import Simulation

__version__ = "0.1.0"
__all__ = ["Grid", "HelmholtzSolver", "PoissonSolver", "Simulation", "__version__"]
