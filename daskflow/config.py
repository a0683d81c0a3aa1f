"""Run configuration: schema, defaults and validation (errors name the offending key).

A configuration is a dict (or a YAML file) with the sections ``grid``, ``physics``, ``boundaries``,
``time``, ``initial`` and ``solver``. ``initial: {kind: checkpoint, path: STORE}`` starts a new run
from the fields and clock of another run's latest checkpoint (same grid shape).
``physics.advection`` is ``divergence`` (conservative form, the default) or ``skew_symmetric``
(kinetic-energy conserving; :func:`daskflow.ns.operators.skew_advection`). ``solver.pencils`` is
``[py, pz]`` or ``auto`` and ``solver.poisson`` is ``ptdma``, ``ftm`` or ``auto``: ``auto`` times
the candidates on the live cluster at set-up and writes the fastest into the run's configuration
(:mod:`daskflow.autotune`; in process ``pencils: auto`` is ``[1, 1]``). ``cluster.comm`` is the
transport of the pencils' exchanges inside a run (:mod:`daskflow.pencils.transport`): ``nccl``,
``ucx``, ``mailbox`` or ``auto`` (NCCL on GPU workers, else the mailbox). Unknown keys are errors;
missing keys take the defaults below. :func:`load` returns a complete, validated, plain-data dict
(JSON-serialisable), so it can be stored with the output and compared on restart. Nothing is
executed: YAML is read with ``yaml.safe_load``.
"""

from __future__ import annotations

import copy
import numbers
from pathlib import Path
from typing import Any

from daskflow.bc import BC_PAIRS
from daskflow.grid import Z_CLUSTERS
from daskflow.ns.boundaries import PRESETS
from daskflow.pencils.transport import COMMS

FORCING = ("none", "pressure_gradient", "flow_rate")
ADVECTION = ("divergence", "skew_symmetric")  # daskflow.ns.operators.ADVECTION
IMPLICIT = ("none", "z", "xyz")
INITIAL = ("zero", "uniform", "poiseuille", "couette", "turbulent_channel", "taylor_green", "checkpoint")
MEANS = ("log_law", "laminar")
POISSON = ("ptdma", "ftm", "auto")  # auto: the fastest on the live cluster (daskflow.autotune)
AUTO = "auto"  # solver.pencils: auto picks the fastest (py, pz) with py * pz = workers
Z_SOLVES = ("direct", "transpose")
DTYPES = ("float64", "float32")
DEVICES = ("auto", "cpu", "gpu")

DEFAULTS: dict[str, Any] = {
    "grid": {"shape": [32, 32, 32], "lengths": [1.0, 1.0, 1.0], "z_stretch": 0.0, "z_cluster": "both"},
    "physics": {"nu": 1.0e-3, "forcing": {"kind": "none", "value": [0.0, 0.0]}, "advection": "divergence"},
    "boundaries": {"preset": "channel"},
    "time": {"steps": 100, "end_time": None, "cfl": 0.95, "dt_max": 0.01, "dt": None, "implicit_diffusion": "none"},
    "initial": {"kind": "zero", "amplitude": 0.1, "seed": 0, "value": [0.0, 0.0, 0.0], "mean": "log_law",
                "path": None},
    "solver": {"poisson": "ptdma", "pencils": [1, 1], "dtype": "float64", "device": "auto", "z_solve": "direct"},
    "output": {"store": None, "scalars_every": 1, "profiles_every": 10, "fields_every": 0, "slices_every": 0,
               "slices": {}, "checkpoint_every": 0, "compression": "zstd", "shards": "auto"},
}
COMPRESSION = ("zstd", "none")
CLUSTERS = ("auto", "none", "local", "local-cuda", "slurm", "pbs", "address", "scheduler-file")
PROTOCOLS = ("auto", "tcp", "ucx", "tls")
DEFAULTS["cluster"] = {
    "kind": "auto", "workers": None, "threads_per_worker": 1, "protocol": "auto", "rmm_pool_size": None,
    "dashboard_address": "127.0.0.1:0", "address": None, "scheduler_file": None,
    "queue": None, "account": None, "walltime": "01:00:00", "cores": 8, "memory": "64GB", "gpus_per_node": 4,
    "nodes": 1, "job_extra_directives": [], "tls": None, "max_failures": 3, "comm": "auto",
}
COMPONENT_KEYS = {"x", "y", "z", "x_values", "y_values", "z_values"}


def _fail(path: str, message: str):
    raise ValueError(f"config {path}: {message}")


def _merge(defaults: dict, given: dict, path: str) -> dict:
    if not isinstance(given, dict):
        _fail(path or "(root)", f"must be a mapping, got {type(given).__name__}")
    out = copy.deepcopy(defaults)
    for key, value in given.items():
        where = f"{path}.{key}" if path else str(key)
        if key not in defaults:
            _fail(where, f"unknown key (allowed: {', '.join(sorted(defaults))})")
        if isinstance(defaults[key], dict) and defaults[key] and key != "boundaries":
            out[key] = _merge(defaults[key], value if value is not None else {}, where)
        else:
            out[key] = value
    return out


def _number(value, path: str, positive: bool = False, minimum: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or value != value:
        _fail(path, f"must be a number, got {value!r}")
    if positive and not value > 0:
        _fail(path, f"must be positive, got {value!r}")
    if minimum is not None and value < minimum:
        _fail(path, f"must be >= {minimum}, got {value!r}")
    return float(value)


def _integer(value, path: str) -> int:
    """A non-negative whole number (floats with a fraction are refused, not truncated)."""
    number = _number(value, path, minimum=0.0)
    if number != int(number):
        _fail(path, f"must be a whole number, got {value!r}")
    return int(number)


def _vector(value, n: int, path: str, kind=float, positive: bool = False) -> list:
    if not isinstance(value, (list, tuple)) or len(value) != n:
        _fail(path, f"must be a list of {n} {'integers' if kind is int else 'numbers'}, got {value!r}")
    if kind is int:
        if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in value):
            _fail(path, f"must be {n} positive integers, got {value!r}")
        return [int(v) for v in value]
    return [_number(v, f"{path}[{i}]", positive=positive) for i, v in enumerate(value)]


def _choice(value, allowed, path: str):
    if value not in allowed:
        _fail(path, f"must be one of {', '.join(map(str, allowed))}; got {value!r}")
    return value


def _boundaries(section) -> dict:
    if not isinstance(section, dict):
        _fail("boundaries", "must be a mapping")
    for key, value in section.items():
        if key == "preset":
            _choice(value, PRESETS, "boundaries.preset")
        elif key in ("u", "v", "w", "p"):
            if not isinstance(value, dict):
                _fail(f"boundaries.{key}", "must be a mapping")
            allowed = {"x", "y", "z"} if key == "p" else COMPONENT_KEYS
            for sub, entry in value.items():
                where = f"boundaries.{key}.{sub}"
                if sub not in allowed:
                    _fail(where, f"unknown key (allowed: {', '.join(sorted(allowed))})")
                if sub in ("x", "y", "z"):
                    _choice(entry, BC_PAIRS, where)
                else:
                    value[sub] = _vector(entry, 2, where)
        else:
            _fail(f"boundaries.{key}", "unknown key (allowed: preset, u, v, w, p)")
    return section


def validate(config: dict) -> dict:
    """A complete validated copy of ``config`` (a dict); raises ``ValueError`` naming the key."""
    cfg = _merge(DEFAULTS, config, "")
    g = cfg["grid"]
    g["shape"] = _vector(g["shape"], 3, "grid.shape", int)
    g["lengths"] = _vector(g["lengths"], 3, "grid.lengths", positive=True)
    g["z_stretch"] = _number(g["z_stretch"], "grid.z_stretch", minimum=0.0)
    _choice(g["z_cluster"], Z_CLUSTERS, "grid.z_cluster")
    ph = cfg["physics"]
    ph["nu"] = _number(ph["nu"], "physics.nu", positive=True)
    _choice(ph["forcing"]["kind"], FORCING, "physics.forcing.kind")
    ph["forcing"]["value"] = _vector(ph["forcing"]["value"], 2, "physics.forcing.value")
    _choice(ph["advection"], ADVECTION, "physics.advection")
    cfg["boundaries"] = _boundaries(copy.deepcopy(cfg["boundaries"]) if cfg["boundaries"] else {"preset": "channel"})
    t = cfg["time"]
    t["steps"] = None if t["steps"] is None else _integer(t["steps"], "time.steps")
    for key in ("end_time", "dt"):
        if t[key] is not None:
            t[key] = _number(t[key], f"time.{key}", positive=True)
    if t["steps"] is None and t["end_time"] is None:
        _fail("time.steps", "and time.end_time are both null: set one of them (a run must end)")
    t["cfl"] = _number(t["cfl"], "time.cfl", positive=True)
    t["dt_max"] = _number(t["dt_max"], "time.dt_max", positive=True)
    _choice(t["implicit_diffusion"], IMPLICIT, "time.implicit_diffusion")
    i = cfg["initial"]
    _choice(i["kind"], INITIAL, "initial.kind")
    i["amplitude"] = _number(i["amplitude"], "initial.amplitude", minimum=0.0)
    i["seed"] = _integer(i["seed"], "initial.seed")
    i["value"] = _vector(i["value"], 3, "initial.value")
    if i["kind"] == "checkpoint" and not isinstance(i["path"], str):
        _fail("initial.path", f"must be the store (path or URL) whose checkpoint starts the run; got {i['path']!r}")
    _choice(i["mean"], MEANS, "initial.mean")
    s = cfg["solver"]
    _choice(s["poisson"], POISSON, "solver.poisson")
    if s["pencils"] != AUTO:
        pencils = s["pencils"]
        if (not isinstance(pencils, (list, tuple)) or len(pencils) != 2
                or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in pencils)):
            _fail("solver.pencils", f"must be auto or 2 positive integers [py, pz]; got {pencils!r}")
        s["pencils"] = [int(v) for v in pencils]
    _choice(s["dtype"], DTYPES, "solver.dtype")
    _choice(s["device"], DEVICES, "solver.device")
    _choice(s["z_solve"], Z_SOLVES, "solver.z_solve")
    o = cfg["output"]
    if o["store"] is not None and not isinstance(o["store"], str):
        _fail("output.store", f"must be a path (string) or null, got {o['store']!r}")
    for key in ("scalars_every", "profiles_every", "fields_every", "slices_every", "checkpoint_every"):
        o[key] = _integer(o[key], f"output.{key}")
    if not isinstance(o["slices"], dict):
        _fail("output.slices", f"must be a mapping of axis (x, y, z) to a list of coordinates, got {o['slices']!r}")
    for axis, planes in o["slices"].items():
        if axis not in ("x", "y", "z"):
            _fail(f"output.slices.{axis}", "unknown axis (allowed: x, y, z)")
        if not isinstance(planes, list) or not planes:
            _fail(f"output.slices.{axis}", f"must be a non-empty list of coordinates, got {planes!r}")
        length = cfg["grid"]["lengths"]["xyz".index(axis)]
        o["slices"][axis] = [_number(v, f"output.slices.{axis}[{i}]") for i, v in enumerate(planes)]
        for i, v in enumerate(o["slices"][axis]):
            if not 0.0 <= v <= length:
                _fail(f"output.slices.{axis}[{i}]", f"must lie in [0, {length}] (the box), got {v}")
    _choice(o["compression"], COMPRESSION, "output.compression")
    _choice(o["shards"], ("auto", "none"), "output.shards")
    _cluster(cfg["cluster"])
    if cfg["cluster"]["comm"] == "nccl" and s["device"] == "cpu":
        _fail("cluster.comm", "'nccl' moves GPU pencils and needs solver.device gpu or auto; got solver.device cpu "
                              "(use auto or mailbox)")
    return cfg


def _cluster(c: dict) -> None:
    _choice(c["kind"], CLUSTERS, "cluster.kind")
    _choice(c["protocol"], PROTOCOLS, "cluster.protocol")
    _choice(c["comm"], COMMS, "cluster.comm")
    for key in ("threads_per_worker", "cores", "gpus_per_node", "nodes"):
        c[key] = int(_number(c[key], f"cluster.{key}", positive=True))
    if c["workers"] is not None:
        c["workers"] = int(_number(c["workers"], "cluster.workers", positive=True))
    c["max_failures"] = _integer(c["max_failures"], "cluster.max_failures")
    for key in ("rmm_pool_size", "dashboard_address", "address", "scheduler_file", "queue", "account", "walltime",
                "memory"):
        if c[key] is not None and not isinstance(c[key], str):
            _fail(f"cluster.{key}", f"must be a string or null, got {c[key]!r}")
    if c["kind"] == "address" and not c["address"]:
        _fail("cluster.address", "is required when cluster.kind is 'address' (e.g. tcp://host:8786)")
    if c["kind"] == "scheduler-file" and not c["scheduler_file"]:
        _fail("cluster.scheduler_file", "is required when cluster.kind is 'scheduler-file'")
    directives = c["job_extra_directives"]
    if not isinstance(directives, list) or not all(isinstance(d, str) for d in directives):
        _fail("cluster.job_extra_directives", "must be a list of strings")
    if c["tls"] is not None:
        if not isinstance(c["tls"], dict) or set(c["tls"]) - {"ca_file", "cert", "key"}:
            _fail("cluster.tls", "must be a mapping with ca_file, cert and key (PEM file paths)")


def load(source: dict | str | Path) -> dict:
    """Validated configuration from a dict or a YAML file path."""
    if isinstance(source, (str, Path)):
        import yaml

        path = Path(source)
        if not path.is_file():
            raise ValueError(f"config file {str(path)!r} does not exist")
        with path.open() as fh:
            try:
                source = yaml.safe_load(fh) or {}
            except yaml.YAMLError as exc:
                raise ValueError(f"config file {str(path)!r} is not valid YAML: {exc}") from exc
    return validate(source)
