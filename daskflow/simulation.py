"""``Simulation``: a configured incompressible flow, advanced in time.

    sim = Simulation({"grid": {...}, "physics": {...}, "boundaries": {"preset": "channel"}, ...})
    sim.run(steps=100)
    sim.u, sim.v, sim.w, sim.p          # Dask arrays, logical shape (nx, ny, nz)
    sim.time, sim.step, sim.dt

The configuration schema is :mod:`daskflow.config`. Fields are stored on the device chosen by
``solver.device`` (CuPy on a GPU, NumPy otherwise) and advanced in this process by the RK3
projection stepper of :mod:`daskflow.ns.stepper`; the pressure and implicit-diffusion solves use the
configured ``solver.poisson`` method and ``solver.pencils`` decomposition.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from daskflow.backend import cupy_or_none, to_numpy
from daskflow.config import load
from daskflow.grid import Grid
from daskflow.ns import boundaries as nsb
from daskflow.ns import initial
from daskflow.ns.domain import LocalDomain
from daskflow.ns.stepper import State, Stepper


class Simulation:
    """An incompressible DNS configured by ``config`` (dict or YAML path)."""

    def __init__(self, config: dict | str, client=None) -> None:
        self.config = load(config)
        cfg = self.config
        g = cfg["grid"]
        self.grid = Grid(tuple(g["shape"]), tuple(g["lengths"]), g["z_stretch"], g["z_cluster"])
        self.boundaries = nsb.build(cfg["boundaries"])
        self._check_forcing()
        device = cfg["solver"]["device"]
        gpu = cupy_or_none() if device in ("auto", "gpu") else None
        if device == "gpu" and gpu is None:
            raise ValueError("config solver.device: 'gpu' needs CuPy and a CUDA device")
        self.xp = gpu or np
        self.client = client
        s = cfg["solver"]
        domain = LocalDomain(self.grid, self.boundaries, s["poisson"], tuple(s["pencils"]), s["dtype"])
        physics = cfg["physics"]
        self.stepper = Stepper(domain, physics["nu"], physics["forcing"], cfg["time"]["implicit_diffusion"])
        zeros = [self.xp.zeros(self.grid.shape, dtype=s["dtype"], order="F") for _ in range(4)]
        self.state = State(*zeros)
        self._initial()

    def _check_forcing(self) -> None:
        kind = self.config["physics"]["forcing"]["kind"]
        if kind != "none" and not self.boundaries.periodic(0):
            raise ValueError(f"config physics.forcing.kind: {kind!r} needs a periodic x direction")

    # ------------------------------------------------------------------ fields

    def _array(self, values) -> Any:
        return self.xp.asarray(np.asfortranarray(values), dtype=self.config["solver"]["dtype"], order="F")

    def set(self, **fields: Any) -> None:
        """Set ``u, v, w, p`` from arrays ``(nx, ny, nz)`` or functions ``f(x, y, z)`` evaluated at
        each variable's own staggered position."""
        for name, value in fields.items():
            if name not in ("u", "v", "w", "p"):
                raise ValueError(f"set(): unknown field {name!r} (allowed: u, v, w, p)")
            component = {"u": 0, "v": 1, "w": 2, "p": None}[name]
            if isinstance(value, Callable):
                value = np.broadcast_to(value(*initial.positions(self.grid, component)), self.grid.shape)
            value = to_numpy(value)
            if value.shape != self.grid.shape:
                raise ValueError(f"set(): {name} must have shape {self.grid.shape}, got {value.shape}")
            setattr(self.state, name, self._array(value))
        for i, name in enumerate(("u", "v", "w")):
            setattr(self.state, name, self.stepper.domain.keep_walls(getattr(self.state, name), i))

    def _initial(self) -> None:
        ini, physics = self.config["initial"], self.config["physics"]
        kind = ini["kind"]
        if kind == "uniform":
            self.set(**{c: np.full(self.grid.shape, v) for c, v in zip("uvw", ini["value"], strict=True)})
        elif kind == "poiseuille":
            self.set(u=initial.laminar_channel(self.grid, physics["nu"], physics["forcing"]))
        elif kind == "couette":
            self.set(u=initial.couette(self.grid, *self.boundaries.u.values[2]))
        elif kind == "taylor_green":
            u, v, w = initial.taylor_green(self.grid, ini["amplitude"] or 1.0)
            self.set(u=u, v=v, w=w)
        elif kind == "turbulent_channel":
            base = initial.laminar_channel(self.grid, physics["nu"], physics["forcing"])
            du, dv, dw = initial.channel_perturbation(self.grid, ini["amplitude"] * max(np.abs(base).max(), 1.0),
                                                      ini["seed"])
            self.set(u=base + du, v=dv, w=dw)

    def _dask(self, a):
        import dask.array as da

        from daskflow.pencils.layout import split_sizes

        py, pz = self.config["solver"]["pencils"]
        nx, ny, nz = self.grid.shape
        return da.from_array(a, chunks=((nx,), split_sizes(ny, py), split_sizes(nz, pz)), asarray=False)

    @property
    def u(self):
        return self._dask(self.state.u)

    @property
    def v(self):
        return self._dask(self.state.v)

    @property
    def w(self):
        return self._dask(self.state.w)

    @property
    def p(self):
        return self._dask(self.state.p)

    @property
    def time(self) -> float:
        return self.state.time

    @property
    def step(self) -> int:
        return self.state.step

    @property
    def dt(self) -> float:
        return self.state.dt

    # ------------------------------------------------------------------ running

    def next_dt(self) -> float:
        t = self.config["time"]
        return t["dt"] if t["dt"] is not None else self.stepper.stable_dt(self.state, t["cfl"], t["dt_max"])

    def run(self, steps: int | None = None, until: float | None = None) -> Simulation:
        """Advance ``steps`` steps (default ``time.steps``) or until time ``until`` (default
        ``time.end_time`` when set); the last step is shortened to land on ``until``."""
        t = self.config["time"]
        until = until if until is not None else (t["end_time"] if steps is None else None)
        steps = steps if steps is not None else (None if until is not None else t["steps"])
        done = 0
        while (steps is None or done < steps) and (until is None or self.time < until * (1 - 1e-14)):
            dt = self.next_dt()
            if until is not None:
                dt = min(dt, until - self.time)
            self.stepper.step(self.state, dt)
            done += 1
        return self

    def divergence_max(self) -> float:
        """Largest |div u| over the cells."""
        return self.stepper.divergence_max(self.state)

    def bulk_velocity(self) -> float:
        return self.stepper.bulk_velocity(self.state.u)
