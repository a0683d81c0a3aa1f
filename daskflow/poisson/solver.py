"""Public Poisson and Helmholtz solvers on NumPy and CuPy arrays.

``PoissonSolver(grid, bc, stagger, method, pencils).solve(b)`` returns ``x`` with ``L x = b``;
``HelmholtzSolver(..., alpha).solve(b)`` returns ``x`` with ``(I - alpha L) x = b``. ``L`` is the
second-order staggered Laplacian of :mod:`daskflow.stencils` with homogeneous boundary conditions.

Arrays have the logical shape ``(nx, ny, nz)``. Internally chunks are stored z-slowest/x-fastest,
so the fastest input is Fortran-ordered (``b.T`` C-contiguous); results come back in that order.
With an in-memory array, ``pencils = (py, pz)`` emulates the distributed decomposition inside the
process, running exactly the stages a Dask cluster runs.

Any axis may have one cell, for every boundary pair at cell centres (a quasi-two-dimensional
problem: the axis adds its 1x1 Laplacian to the diagonal). A one-cell axis cannot be split by the
pencils (``pz = 1`` for one z cell, ``py = 1`` for one x or y cell); with ``pz = 1`` P-TDMA is plain
Thomas, so its two-points-per-chunk rule does not apply.
"""

from __future__ import annotations

import uuid
from typing import Any

import numpy as np

from daskflow.backend import array_module, is_cupy_array, is_dask_array
from daskflow.bc import Boundaries
from daskflow.grid import Grid
from daskflow.pencils.executor import LocalExecutor
from daskflow.pencils.layout import assemble
from daskflow.pencils.transport import COMMS
from daskflow.poisson import algorithms
from daskflow.poisson.plan import DTYPES, METHODS, SpectralPlan
from daskflow.stencils import apply_along
from daskflow.zsolve import spectral
from daskflow.zsolve.choice import PTDMA, ZSolve

DEVICES = (None, "cpu", "gpu")
GRANULARITIES = ("stage", "fused")


class _SpectralSolver:
    def __init__(self, grid: Grid, bc, stagger: str, method: str, pencils, dtype, device: str | None,
                 granularity: str, identity: float, scale: float, comm: str = "auto", normalised: bool = True) -> None:
        if not isinstance(grid, Grid):
            raise ValueError(f"grid must be a daskflow.Grid, got {type(grid).__name__}")
        if method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {method!r}")
        if (not hasattr(pencils, "__len__") or len(pencils) != 2
                or not all(isinstance(v, (int, np.integer)) and v >= 1 for v in pencils)):
            raise ValueError(f"pencils must be two positive integers (py, pz), got {pencils!r}")
        if str(np.dtype(dtype)) not in DTYPES:
            raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
        if device not in DEVICES:
            raise ValueError(f"device must be one of {DEVICES}, got {device!r}")
        if granularity not in GRANULARITIES:
            raise ValueError(f"granularity must be one of {GRANULARITIES}, got {granularity!r}")
        if comm not in COMMS:
            raise ValueError(f"comm must be one of {COMMS}, got {comm!r}")
        boundaries = Boundaries.parse(bc, stagger)
        for axis, n in enumerate(grid.shape):
            if boundaries.n_unknowns(axis, n) < 1:
                raise ValueError(f"grid.shape[{axis}] = {n} is too small for bc {boundaries.bc[axis]!r} "
                                 f"with stagger {boundaries.stagger[axis]!r}: the only stored face is the "
                                 "boundary, which leaves no unknowns along that axis")
        self.grid = grid
        self.boundaries = boundaries
        self.method = method
        self.pencils = (int(pencils[0]), int(pencils[1]))
        self.dtype = np.dtype(dtype)
        self.device = device
        self.granularity = granularity
        self.comm = comm
        self.plan = SpectralPlan(grid, boundaries, identity, scale, method, self.pencils, self.dtype, normalised)
        self.token = uuid.uuid4().hex  # unique per solver: graph keys never collide between solvers
        self._ptdma_cache: dict = {}

    @property
    def bc(self) -> tuple[str, str, str]:
        return self.boundaries.bc

    @property
    def stagger(self) -> str:
        return "".join(self.boundaries.stagger)

    # ------------------------------------------------------------------ input checks

    def _check(self, b: Any, name: str, allow_dask: bool = False):
        if allow_dask and is_dask_array(b):
            self._check_properties(b, b._meta, name)
            return None
        if not (isinstance(b, np.ndarray) or is_cupy_array(b)):
            kinds = "a NumPy, CuPy or Dask array" if allow_dask else "a NumPy or CuPy array"
            raise ValueError(f"{name} must be {kinds}, got {type(b).__name__}")
        self._check_properties(b, b, name)
        return array_module(b)

    def _check_properties(self, b: Any, meta: Any, name: str) -> None:
        if tuple(b.shape) != self.grid.shape:
            raise ValueError(f"{name} must have shape {self.grid.shape} (nx, ny, nz), got {tuple(b.shape)}")
        if b.dtype != self.dtype:
            raise ValueError(f"{name} must have dtype {self.dtype} (the solver's dtype), got {b.dtype}")
        if self.device == "gpu" and not is_cupy_array(meta):
            raise ValueError(f"{name} holds NumPy data but the solver was built with device='gpu'")
        if self.device == "cpu" and is_cupy_array(meta):
            raise ValueError(f"{name} holds CuPy data but the solver was built with device='cpu'")

    # ------------------------------------------------------------------ solve

    def solve(self, b):
        """Solve for right-hand side ``b`` of shape ``(nx, ny, nz)``; same array type out.

        A Dask array runs as a task graph over pencil chunks (:mod:`daskflow.poisson.distributed`)
        and comes back as a Dask array in the solver's home chunks.

        For ``f`` placement on a bounded axis the last stored plane is the boundary face: ``b`` is
        ignored there and the solution takes the boundary condition. For singular problems (no
        Dirichlet end anywhere) the incompatible part of ``b`` (its weighted mean) is projected out
        and the solution has zero weighted mean.
        """
        xp = self._check(b, "b", allow_dask=True)
        if xp is None:
            from daskflow.poisson.distributed import solve_dask

            return solve_dask(self, b)
        a = b.T  # memory order (z, y, x)
        dec = self.plan.decomposition
        blocks = {(p, q): a[dec.z[q], dec.y[p], :] for p, q in dec.indices}
        setup = self._ptdma_coefficients(xp) if ZSolve.of(self.method, dec.pz).kind == PTDMA else ()
        out = algorithms.solve(LocalExecutor(self.plan), self.plan, blocks, self.method, setup)
        if len(out) == 1:
            return out[(0, 0)].T
        rows = [assemble([out[(p, q)] for p in range(dec.py)], 1) for q in range(dec.pz)]
        return assemble(rows, 0).T

    def _ptdma_coefficients(self, xp):
        """Algorithm-2 coefficients of every chunk and the reduced factorisations (cached; P-TDMA at ``pz > 1``)."""
        dev = xp.cuda.Device().id if xp.__name__ == "cupy" else None
        key = (xp.__name__, dev)
        if key not in self._ptdma_cache:
            dec = self.plan.decomposition
            self._ptdma_cache[key] = ({k: spectral.ptdma_setup(self.plan, k, xp) for k in dec.indices},
                                      {k: spectral.reduced_factor_at(self.plan, k, xp)
                                       for k in spectral.reduced_factor_keys(self.plan)})
        return self._ptdma_cache[key]

    # ------------------------------------------------------------------ operator

    def _unknowns(self) -> tuple[slice, slice, slice]:
        return tuple(slice(0, self.boundaries.n_unknowns(ax, n)) for ax, n in enumerate(self.grid.shape))

    def laplacian(self, x):
        """``L x`` on the unknowns (zero on stored boundary faces)."""
        xp = self._check(x, "x")
        inner = self._unknowns()
        u = x[inner]
        out = xp.zeros_like(x)
        total = xp.zeros_like(u)
        for axis in range(3):
            total += apply_along(u, self.boundaries.laplacian_1d(axis, self.grid.widths(axis)), axis)
        out[inner] = total
        return out

    def apply(self, x):
        """The discrete operator of this solver applied to ``x`` (same array type; zero on stored
        boundary faces)."""
        out = self.plan.scale * self.laplacian(x)
        if self.plan.identity:
            inner = self._unknowns()
            out[inner] += self.plan.identity * x[inner]
        return out

    def compatible(self, b):
        """The part of ``b`` the solver satisfies exactly: boundary faces zeroed and, for singular
        problems, the weighted mean removed (what ``apply(solve(b))`` returns)."""
        xp = self._check(b, "b")
        inner = self._unknowns()
        out = xp.zeros_like(b)
        u = b[inner]
        if self.plan.singular:
            # weights of the left null vector: volume along x and y, computed along z
            wx, wy = (xp.asarray(self.boundaries.control_widths(ax, self.grid.widths(ax))) for ax in (0, 1))
            wz = xp.asarray(self.plan.z_null)
            weights = wx[:, None, None] * wy[None, :, None] * wz[None, None, :]
            u = u - (weights * u).sum() / weights.sum()
        out[inner] = u
        return out


class PoissonSolver(_SpectralSolver):
    """Solve ``L x = b`` by eigenfunction expansion in x and y and tridiagonal solves in z.

    ``bc``: one two-letter string per axis from ``PP, NN, DD, ND, DN``; ``stagger``: ``c``/``f``
    per axis; ``method``: ``"ptdma"`` or ``"ftm"``; ``pencils = (py, pz)`` (the fastest pair on a
    cluster: :func:`daskflow.autotune.tuned_solver`); ``dtype``: float64 or float32; ``device``:
    ``"cpu"``, ``"gpu"`` or ``None`` (follow the input); ``granularity`` (Dask
    arrays on a distributed cluster): ``"stage"`` (one task per chunk per stage and one per piece,
    visible on the dashboard) or ``"fused"`` (one task per worker per solve, pieces sent directly
    between workers); ``comm``: the transport of the fused exchanges, ``"auto"``, ``"nccl"``, ``"ucx"``
    or ``"mailbox"`` (:mod:`daskflow.pencils.transport`); ``normalised=False`` leaves out the ``1 / n`` of
    the inverse periodic transforms, so that a caller that makes a pass over the solution anyway
    multiplies it by ``solver.plan.inverse_scale`` there (the Navier-Stokes step on the GPU).
    """

    def __init__(self, grid: Grid, bc=("PP", "PP", "NN"), stagger: str = "ccc", method: str = "ptdma",
                 pencils=(1, 1), dtype="float64", device: str | None = None, granularity: str = "stage",
                 comm: str = "auto", normalised: bool = True) -> None:
        super().__init__(grid, bc, stagger, method, pencils, dtype, device, granularity, identity=0.0, scale=1.0,
                         comm=comm, normalised=normalised)


class HelmholtzSolver(_SpectralSolver):
    """Solve ``(I - alpha L) x = b`` (implicit diffusion); arguments as :class:`PoissonSolver`."""

    def __init__(self, grid: Grid, bc=("PP", "PP", "NN"), stagger: str = "ccc", alpha: float = 1.0,
                 method: str = "ptdma", pencils=(1, 1), dtype="float64", device: str | None = None,
                 granularity: str = "stage", comm: str = "auto", normalised: bool = True) -> None:
        if not (np.isfinite(alpha) and alpha > 0):
            raise ValueError(f"alpha must be a positive number, got {alpha!r}")
        self.alpha = float(alpha)
        super().__init__(grid, bc, stagger, method, pencils, dtype, device, granularity,
                         identity=1.0, scale=-float(alpha), comm=comm, normalised=normalised)
