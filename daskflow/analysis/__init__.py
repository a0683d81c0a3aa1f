"""Post-processing of a run's Zarr store: wall units, bulk quantities and plots.

A run writes one Zarr v3 store whose groups (``fields``, ``slices``, ``profiles``, ``scalars``) are
xarray datasets; ``checkpoint`` is raw restart data and is not read here. The root attributes hold
``config`` (the full run configuration), ``grid`` and ``daskflow_version``.

The ``profiles`` group holds plane (x-y) means versus ``time``: ``u, v, p, uu, vv, pp, uv`` at the
cell centres ``z`` and ``w, ww, uw, vw`` at the z faces ``zf`` (``grid.zf[1:]``: the upper face of
every cell, the last one being the top wall ``z = lz``). Second moments are raw means of products,
so covariances are formed here: ``uu - u u`` and, on the faces, ``uw - u_f w`` with ``u_f`` the mean
of the two neighbouring centre values (the wall value at the top wall), the interpolation the writer
uses for the product ``u_f w`` (in a channel ``<w> = 0``, so ``uw`` is already the covariance).

Wall shear stress and the stress balance follow the solver's discretisation (second-order finite
differences on the staggered grid, walls imposed through a mirror ghost cell): the viscous stress on
an interior face is ``nu (U[k+1] - U[k]) / (zc[k+1] - zc[k])`` and on a wall ``nu (U1 - U_wall) / d1``
(``d1`` the first centre's distance to the wall), the flux the scheme applies there. With these the
discrete mean momentum balance holds exactly (steady laminar flow: ``tau_w = G h`` to round-off,
measured on a daskflow run), whereas the textbook second-order one-sided fit through the first two
centres, exact for a continuous parabola, over-estimates the solver's wall stress by ``O(d1 / h)``
(2.6 % on 16 stretched cells); it is available as ``gradient_order=2``.

Units are those of the run (the solver is nondimensional): lengths as ``config.grid.lengths``,
velocities as the run's, ``nu`` kinematic viscosity, stresses kinematic (per unit density,
velocity squared). Walls are at ``z = 0`` and ``z = lz``; the channel half height is ``h = lz / 2``.

Averaging: a time window ``(t0, t1)`` selects the stored samples with ``t0 <= time <= t1`` (both
inclusive up to a round-off tolerance of ``1e-9 max(1, |t|)``; ``None`` = all, also for either end)
and averages them with equal weights; covariances are formed *after*
the time average (mean of raw moments minus the product of time-averaged means), so they are
proper plane-and-time Reynolds averages (a drift of the mean within the window counts as a
fluctuation).

Only the time-averaged profiles (a few times ``nz`` numbers) are ever loaded; :func:`open_run`
is fully lazy (Dask-backed).

The package's modules: :mod:`~daskflow.analysis.reading` (opening a run, time windows),
:mod:`~daskflow.analysis.profiles` (the averaged profiles on the staggered grid),
:mod:`~daskflow.analysis.statistics` (wall units, bulk quantities) and
:mod:`~daskflow.analysis.plots` (figures); every public name is importable from the package.
"""

from daskflow.analysis.plots import KAPPA, LOG_LAW_B, plot_scalars, plot_wall_units
from daskflow.analysis.reading import open_run, time_average
from daskflow.analysis.statistics import bulk_quantities, wall_units

__all__ = [
    "KAPPA",
    "LOG_LAW_B",
    "bulk_quantities",
    "open_run",
    "plot_scalars",
    "plot_wall_units",
    "time_average",
    "wall_units",
]
