"""Poisson and Helmholtz solvers: set-up (plan), per-chunk stages, FTM and P-TDMA algorithms."""

from daskflow.poisson.solver import HelmholtzSolver, PoissonSolver

__all__ = ["HelmholtzSolver", "PoissonSolver"]
