"""The typed run configuration: frozen dataclasses holding a validated configuration.

:func:`daskflow.config.load` validates a configuration (a dict or a YAML file, :mod:`daskflow.config`)
and returns a :class:`RunConfig`, one attribute per section (``cfg.time.steps``,
``cfg.physics.forcing.kind``, ``cfg.grid.mesh``: the :class:`~daskflow.grid.Grid`, built once).
These are standard-library dataclasses, not pydantic models: that would be a new dependency, and
the validation, with its one-line messages naming the key (``config KEY: ...``, "did you mean" for
an unknown key), already exists in :mod:`daskflow.config`; these classes only hold its result.

Every section maps one to one onto its dict: a key is an attribute of the same name, a list is a
tuple (so the whole object is immutable and hashable), and the optional mappings (the overrides of
``boundaries``, ``output.slices``, ``cluster.tls`` files) are sections whose absent keys are ``None``.
``to_dict()`` gives back exactly the validated dict (what the store's attributes hold, what a restart
compares and ``daskflow validate`` prints). A ``RunConfig`` pickles (workers receive it) and, for
code written against the dict, its sections are also read by key (``cfg["physics"]["nu"]``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, fields
from typing import Any, ClassVar

from daskflow.grid import Grid


def _frozen(value: Any) -> Any:
    """``value`` of a validated dict with its lists as tuples (a mapping must be a section)."""
    if isinstance(value, dict):
        raise TypeError(f"a mapping in a configuration section must be a section of its own: {value!r}")
    return tuple(_frozen(v) for v in value) if isinstance(value, list) else value


def _plain(value: Any) -> Any:
    """``value`` as the validated dict holds it (sections as dicts, tuples as lists)."""
    if isinstance(value, Section):
        return value.to_dict()
    return [_plain(v) for v in value] if isinstance(value, tuple) else value


class Section:
    """A configuration section: a frozen dataclass whose fields are the section's keys.

    ``NESTED`` names the fields that hold a section of their own when the dict holds a mapping there;
    in a ``SPARSE`` section an absent key is ``None`` (and ``None`` is left out of ``to_dict()``)."""

    NESTED: ClassVar[dict[str, type[Section]]] = {}
    SPARSE: ClassVar[bool] = False

    @classmethod
    def from_dict(cls, data: dict) -> Section:
        """The section of the validated dict ``data`` (its keys exactly the fields, or fewer if sparse)."""
        names = [f.name for f in fields(cls)]
        unknown = set(data) - set(names)
        if unknown:
            raise KeyError(f"{cls.__name__} has no field {sorted(map(str, unknown))[0]!r}")
        values = {}
        for name in names:
            value = data.get(name) if cls.SPARSE else data[name]
            nested = cls.NESTED.get(name)
            values[name] = nested.from_dict(value) if nested and isinstance(value, dict) else _frozen(value)
        return cls(**values)

    def to_dict(self) -> dict:
        """The section as the validated dict holds it (JSON-serialisable plain data)."""
        values = ((f.name, getattr(self, f.name)) for f in fields(self))
        return {name: _plain(value) for name, value in values if not (self.SPARSE and value is None)}

    def __getitem__(self, key: str) -> Any:
        """Read by key, as the dict is read (``None`` of a sparse section counts as absent)."""
        if key not in {f.name for f in fields(self)} or (self.SPARSE and getattr(self, key) is None):
            raise KeyError(key)
        return getattr(self, key)


@dataclass(frozen=True)
class GridConfig(Section):
    """``grid``: cells, box lengths and the z stretching."""

    shape: tuple[int, int, int]
    lengths: tuple[float, float, float]
    z_stretch: float
    z_cluster: str

    @functools.cached_property
    def mesh(self) -> Grid:
        """The :class:`~daskflow.grid.Grid` of this section (built at the first use, then kept)."""
        return Grid(self.shape, self.lengths, self.z_stretch, self.z_cluster)


@dataclass(frozen=True)
class ForcingConfig(Section):
    """``physics.forcing``: ``kind`` and its two numbers (x, y)."""

    kind: str
    value: tuple[float, float]


@dataclass(frozen=True)
class PhysicsConfig(Section):
    """``physics``: viscosity, forcing and the form of the advection term."""

    NESTED = {"forcing": ForcingConfig}

    nu: float
    forcing: ForcingConfig
    advection: str


@dataclass(frozen=True)
class BoundaryOverride(Section):
    """``boundaries.u|v|w|p``: the pairs (and, for velocities, the wall values) a preset's are replaced by."""

    SPARSE = True

    x: str | None = None
    y: str | None = None
    z: str | None = None
    x_values: tuple[float, float] | None = None
    y_values: tuple[float, float] | None = None
    z_values: tuple[float, float] | None = None


@dataclass(frozen=True)
class BoundariesConfig(Section):
    """``boundaries``: a preset (``None``: not given, the channel's) and per-variable overrides."""

    SPARSE = True
    NESTED = {"u": BoundaryOverride, "v": BoundaryOverride, "w": BoundaryOverride, "p": BoundaryOverride}

    preset: str | None = None
    u: BoundaryOverride | None = None
    v: BoundaryOverride | None = None
    w: BoundaryOverride | None = None
    p: BoundaryOverride | None = None


@dataclass(frozen=True)
class TimeConfig(Section):
    """``time``: how long a run goes and how its steps are chosen."""

    steps: int | None
    end_time: float | None
    cfl: float
    dt_max: float
    dt: float | None
    cfl_every: int  # steps between CFL evaluations (the step size held between them)
    implicit_diffusion: str


@dataclass(frozen=True)
class InitialConfig(Section):
    """``initial``: the initial condition."""

    kind: str
    amplitude: float
    seed: int
    value: tuple[float, float, float]
    mean: str
    path: str | None


@dataclass(frozen=True)
class SolverConfig(Section):
    """``solver``: pressure solver, decomposition (``pencils``: ``(py, pz)`` or ``"auto"``), dtype, device."""

    poisson: str
    pencils: tuple[int, int] | str
    dtype: str
    device: str
    z_solve: str
    max_memory_fraction: float | None


@dataclass(frozen=True)
class SlicesConfig(Section):
    """``output.slices``: the planes of each axis that has slices (``None``: none)."""

    SPARSE = True

    x: tuple[float, ...] | None = None
    y: tuple[float, ...] | None = None
    z: tuple[float, ...] | None = None

    @property
    def planes(self) -> dict[str, tuple[float, ...]]:
        """The axes that have slices, each with its planes (in x, y, z order; empty: no slices)."""
        return {axis: getattr(self, axis) for axis in "xyz" if getattr(self, axis) is not None}


@dataclass(frozen=True)
class OutputConfig(Section):
    """``output``: the store and how often each record is written."""

    NESTED = {"slices": SlicesConfig}

    store: str | None
    scalars_every: int
    profiles_every: int
    fields_every: int
    slices_every: int
    slices: SlicesConfig
    checkpoint_every: int
    compression: str
    shards: str


@dataclass(frozen=True)
class TLSFiles(Section):
    """``cluster.tls`` given as files (PEM)."""

    ca_file: str
    cert: str
    key: str


@dataclass(frozen=True)
class ClusterConfig(Section):
    """``cluster``: where the run's workers come from (``tls``: ``None``, ``False`` or :class:`TLSFiles`)."""

    NESTED = {"tls": TLSFiles}

    kind: str
    workers: int | None
    threads_per_worker: int
    protocol: str
    rmm_pool_size: str | None
    dashboard_address: str | None
    address: str | None
    scheduler_file: str | None
    queue: str | None
    account: str | None
    walltime: str | None
    cores: int
    memory: str | None
    gpus_per_node: int
    nodes: int
    job_extra_directives: tuple[str, ...]
    tls: TLSFiles | bool | None
    max_failures: int
    comm: str


@dataclass(frozen=True)
class RunConfig(Section):
    """A complete, validated run configuration (made by :func:`daskflow.config.load`)."""

    NESTED = {"grid": GridConfig, "physics": PhysicsConfig, "boundaries": BoundariesConfig, "time": TimeConfig,
              "initial": InitialConfig, "solver": SolverConfig, "output": OutputConfig, "cluster": ClusterConfig}

    grid: GridConfig
    physics: PhysicsConfig
    boundaries: BoundariesConfig
    time: TimeConfig
    initial: InitialConfig
    solver: SolverConfig
    output: OutputConfig
    cluster: ClusterConfig
