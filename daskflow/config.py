"""Run configuration: schema, defaults and validation (errors name the offending key).

A configuration is a dict (or a YAML file) with the sections ``grid``, ``physics``, ``boundaries``,
``time``, ``initial``, ``solver``, ``output`` and ``cluster``. ``initial: {kind: checkpoint, path:
STORE}`` starts a new run from the fields and clock of another run's latest checkpoint (same grid
shape). ``physics.advection`` is ``divergence`` (conservative form, the default) or
``skew_symmetric`` (kinetic-energy conserving; :func:`daskflow.ns.operators.skew_advection`).
``solver.pencils`` is ``[py, pz]`` or ``auto`` and ``solver.poisson`` is ``ptdma``, ``ftm`` or
``auto``: ``auto`` times the candidates on the live cluster at set-up and writes the fastest into the
run's configuration (:mod:`daskflow.autotune`; in process ``pencils: auto`` is ``[1, 1]``).
``cluster.comm`` is the transport of the pencils' exchanges inside a run
(:mod:`daskflow.pencils.transport`): ``nccl``, ``ucx``, ``mailbox`` or ``auto`` (on a cluster of
several workers every usable backend is timed with the run's decomposition and pressure solver and
the fastest runs; the configuration keeps ``auto`` and the store notes the choice).

Required, without defaults (they set the physics): ``grid.shape``, ``physics.nu`` and
``physics.forcing.kind`` (``none``, ``pressure_gradient`` or ``flow_rate``; the latter two also need
``physics.forcing.value``). Other missing keys take the defaults below; unknown keys are errors.

Limits, all checked before anything is allocated (each error is a one-line ``ValueError``
``config KEY: ...`` naming the key and what is allowed):

- numbers are finite (``.inf``, ``.nan`` and integers beyond a float are refused);
- ``grid.shape``: integers in [1, :data:`MAX_AXIS_CELLS`] whose run fits the memory available
  (:mod:`daskflow.resources`: estimated bytes per worker against this host's memory or
  ``cluster.memory``; ``solver.max_memory_fraction``, default 0.8, is the share a run may plan to
  use, ``null`` switches the check off);
- ``grid.z_stretch`` in [0, :data:`MAX_Z_STRETCH`]: the tanh/sinh clustering of
  :func:`daskflow.grid.stretching_function` makes the wall cells vanish beyond about 20;
- ``time.cfl`` in (0, :data:`CFL_MAX`]: it scales the RK3 stability limits (``dt = cfl * sqrt(3) /
  max(|u|/dx + |v|/dy + |w|/dz)``, and ``cfl * 2.5 / (4 nu sum 1/dx^2)`` for explicit diffusion:
  :meth:`daskflow.ns.stepper.Stepper.dt_limit`), so 1 is the limit itself;
- ``time.cfl_every`` in [1, :data:`MAX_CFL_EVERY`]: the CFL limit is evaluated at every step whose
  number is a multiple of it (1: every step), and the step size of the step before is held between
  (each evaluation is a reduction over the pencils that the host waits for);
- ``cluster.workers`` and the pencils' product ``py * pz`` in [1, :data:`MAX_WORKERS`];
- ``cluster.tls``: ``null`` (the default: see :mod:`daskflow.cluster`), ``false`` (plain TCP) or a
  mapping of exactly ``ca_file``, ``cert`` and ``key``, each a readable file;
- the input itself (:mod:`daskflow.config_input`): YAML is read with a ``yaml.SafeLoader`` subclass
  (nothing is executed; YAML 1.2 numbers, so ``1e-3`` is a float; duplicate keys refused) and every
  input, file or dict, is bounded in size (aliases counted as often as they repeat) and depth.

:func:`validate` returns a complete, validated, plain-data dict (JSON-serialisable), so it can be
stored with the output and compared on restart; validating it again gives it back unchanged.
:func:`load` returns the same configuration typed and frozen, a :class:`~daskflow.run_config.RunConfig`
(its ``to_dict()`` is that dict).
"""

from __future__ import annotations

import copy
import difflib
import math
import numbers
import os
from pathlib import Path
from typing import Any

from daskflow import resources
from daskflow.bc import BC_PAIRS
from daskflow.config_input import check_size, key_name, read
from daskflow.grid import Z_CLUSTERS
from daskflow.ns.boundaries import PRESETS
from daskflow.pencils.transport import COMMS
from daskflow.run_config import RunConfig

FORCING = ("none", "pressure_gradient", "flow_rate")
ADVECTION = ("divergence", "skew_symmetric")  # daskflow.ns.advection.ADVECTION
IMPLICIT = ("none", "z", "xyz")
INITIAL = ("zero", "uniform", "poiseuille", "couette", "turbulent_channel", "taylor_green", "checkpoint")
MEANS = ("log_law", "laminar")
POISSON = ("ptdma", "ftm", "auto")  # auto: the fastest on the live cluster (daskflow.autotune)
AUTO = "auto"  # solver.pencils: auto picks the fastest (py, pz) with py * pz = workers
Z_SOLVES = ("direct", "transpose")
DTYPES = ("float64", "float32")
DEVICES = ("auto", "cpu", "gpu")
MAX_AXIS_CELLS = 1 << 24  # per axis; the memory check bounds the product
MAX_Z_STRETCH = 10.0  # lower/upper clustering: smallest to largest cell 1e-8 at 10, cells vanish near 20
CFL_MAX = 1.0  # time.cfl scales the RK3 limits (Stepper.dt_limit): 1 is the advective limit sqrt(3) itself
MAX_CFL_EVERY = 1000  # time.cfl_every: steps a CFL step size is held; beyond, a flow's change would go unseen
MAX_WORKERS = 4096  # cluster.workers, solver.pencils py * pz, cluster.nodes * gpus_per_node
#: keys without a default (they set the physics), and what they are
REQUIRED = {"grid.shape": "[nx, ny, nz] cells", "physics.nu": "the kinematic viscosity",
            "physics.forcing": "{kind: none | pressure_gradient | flow_rate, value: [x, y]}"}

DEFAULTS: dict[str, Any] = {
    "grid": {"shape": None, "lengths": [1.0, 1.0, 1.0], "z_stretch": 0.0, "z_cluster": "both"},
    "physics": {"nu": None, "forcing": {"kind": None, "value": None}, "advection": "divergence"},
    "boundaries": {"preset": "channel"},
    "time": {"steps": 100, "end_time": None, "cfl": 0.95, "dt_max": 0.01, "dt": None, "cfl_every": 1,
             "implicit_diffusion": "none"},
    "initial": {"kind": "zero", "amplitude": 0.1, "seed": 0, "value": [0.0, 0.0, 0.0], "mean": "log_law",
                "path": None},
    "solver": {"poisson": "ptdma", "pencils": [1, 1], "dtype": "float64", "device": "auto", "z_solve": "direct",
               "max_memory_fraction": 0.8},
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
TLS_KEYS = ("ca_file", "cert", "key")  # what daskflow.cluster.security_for reads
COMPONENT_KEYS = {"x", "y", "z", "x_values", "y_values", "z_values"}


def _fail(path: str, message: str):
    raise ValueError(f"config {path}: {message}")


def _short(value) -> str:
    """``repr(value)`` cut to one short line (the input is bounded, but a message stays readable)."""
    try:
        text = repr(value)
    except ValueError:  # an integer beyond Python's printable digits
        return "a very large integer"
    return text if len(text) <= 80 else f"{text[:77]}..."


def unknown_key(key, allowed) -> str:
    """The message for an unknown key: the closest allowed key when one is close, and all of them."""
    close = difflib.get_close_matches(str(key), [str(a) for a in allowed], n=1, cutoff=0.6)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return f"unknown key ({hint}allowed: {', '.join(sorted(map(str, allowed)))})"


def _merge(defaults: dict, given: dict, path: str) -> dict:
    if not isinstance(given, dict):
        _fail(path or "(root)", f"must be a mapping, got {type(given).__name__}")
    out = copy.deepcopy(defaults)
    for key, value in given.items():
        where = f"{path}.{key_name(key)}" if path else key_name(key)
        if key not in defaults:
            _fail(where, unknown_key(key, defaults))
        if isinstance(defaults[key], dict) and defaults[key] and key != "boundaries":
            out[key] = _merge(defaults[key], value if value is not None else {}, where)
        else:
            out[key] = value
    return out


def _number(value, path: str, positive: bool = False, minimum: float | None = None,
            maximum: float | None = None) -> float:
    """A finite float (``bool`` is not a number); ``positive``: > 0; within ``[minimum, maximum]``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        _fail(path, f"must be a finite number, got {_short(value)}")
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if not math.isfinite(number):
        _fail(path, f"must be a finite number, got {_short(value)}")
    if positive and not number > 0:
        _fail(path, f"must be positive, got {_short(value)}")
    if (minimum is not None and number < minimum) or (maximum is not None and number > maximum):
        _fail(path, f"must lie in [{minimum}, {maximum}], got {_short(value)}")
    return number


def _integer(value, path: str, minimum: int = 0, maximum: int | None = None) -> int:
    """A whole number in ``[minimum, maximum]`` (floats with a fraction are refused, not truncated)."""
    number = _number(value, path)
    if number != int(number):
        _fail(path, f"must be a whole number, got {_short(value)}")
    if number < minimum or (maximum is not None and number > maximum):
        _fail(path, f"must be a whole number in [{minimum}, {maximum if maximum is not None else 'inf'}], "
                    f"got {_short(value)}")
    return int(number)


def _vector(value, n: int, path: str, kind=float, positive: bool = False, maximum: int | None = None) -> list:
    if not isinstance(value, (list, tuple)) or len(value) != n:
        _fail(path, f"must be a list of {n} {'integers' if kind is int else 'numbers'}, got {_short(value)}")
    if kind is int:
        if not all(isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= maximum for v in value):
            _fail(path, f"must be {n} integers in [1, {maximum}], got {_short(value)}")
        return [int(v) for v in value]
    return [_number(v, f"{path}[{i}]", positive=positive) for i, v in enumerate(value)]


def _choice(value, allowed, path: str):
    if isinstance(value, (list, dict)) or value not in allowed:
        _fail(path, f"must be one of {', '.join(map(str, allowed))}; got {_short(value)}")
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
                    _fail(where, unknown_key(sub, allowed))
                if sub in ("x", "y", "z"):
                    _choice(entry, BC_PAIRS, where)
                else:
                    value[sub] = _vector(entry, 2, where)
        else:
            _fail(f"boundaries.{key}", unknown_key(key, ("preset", "u", "v", "w", "p")))
    return section


def _grid(g: dict) -> None:
    if g["shape"] is not None:
        g["shape"] = _vector(g["shape"], 3, "grid.shape", int, maximum=MAX_AXIS_CELLS)
    g["lengths"] = _vector(g["lengths"], 3, "grid.lengths", positive=True)
    g["z_stretch"] = _number(g["z_stretch"], "grid.z_stretch", minimum=0.0, maximum=MAX_Z_STRETCH)
    _choice(g["z_cluster"], Z_CLUSTERS, "grid.z_cluster")


def _physics(ph: dict) -> None:
    if ph["nu"] is not None:
        ph["nu"] = _number(ph["nu"], "physics.nu", positive=True)
    forcing = ph["forcing"]
    if forcing["kind"] is not None:
        _choice(forcing["kind"], FORCING, "physics.forcing.kind")
        if forcing["value"] is None and forcing["kind"] != "none":
            _fail("physics.forcing.value", f"required with kind {forcing['kind']} (two numbers [x, y]: the mean "
                                           "pressure gradient, or the bulk velocity of flow_rate); no default")
        forcing["value"] = _vector([0.0, 0.0] if forcing["value"] is None else forcing["value"], 2,
                                   "physics.forcing.value")
    _choice(ph["advection"], ADVECTION, "physics.advection")


def _time(t: dict) -> None:
    t["steps"] = None if t["steps"] is None else _integer(t["steps"], "time.steps")
    for key in ("end_time", "dt"):
        if t[key] is not None:
            t[key] = _number(t[key], f"time.{key}", positive=True)
    if t["steps"] is None and t["end_time"] is None:
        _fail("time.steps", "and time.end_time are both null: set one of them (a run must end)")
    t["cfl"] = _number(t["cfl"], "time.cfl", positive=True)
    if t["cfl"] > CFL_MAX:
        _fail("time.cfl", f"must lie in (0, {CFL_MAX}], got {t['cfl']}: it scales the RK3 stability limits "
                          "(dt = cfl * sqrt(3) / max(|u|/dx + |v|/dy + |w|/dz): 1 is the advective limit sqrt(3) "
                          "= 1.73 itself; explicit diffusion: cfl * 2.5 / (4 nu sum 1/dx^2))")
    t["dt_max"] = _number(t["dt_max"], "time.dt_max", positive=True)
    t["cfl_every"] = _integer(t["cfl_every"], "time.cfl_every", minimum=1, maximum=MAX_CFL_EVERY)
    _choice(t["implicit_diffusion"], IMPLICIT, "time.implicit_diffusion")


def _initial(i: dict) -> None:
    _choice(i["kind"], INITIAL, "initial.kind")
    i["amplitude"] = _number(i["amplitude"], "initial.amplitude", minimum=0.0)
    i["seed"] = _integer(i["seed"], "initial.seed", maximum=2**63 - 1)
    i["value"] = _vector(i["value"], 3, "initial.value")
    if i["path"] is not None and not isinstance(i["path"], str):
        _fail("initial.path", f"must be a store (path or URL) or null, got {_short(i['path'])}")
    if i["kind"] == "checkpoint" and i["path"] is None:
        _fail("initial.path", "must be the store (path or URL) whose checkpoint starts the run; got None")
    _choice(i["mean"], MEANS, "initial.mean")


def _solver(s: dict) -> None:
    _choice(s["poisson"], POISSON, "solver.poisson")
    if s["pencils"] != AUTO:
        pencils = s["pencils"]
        if (not isinstance(pencils, (list, tuple)) or len(pencils) != 2
                or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in pencils)):
            _fail("solver.pencils", f"must be auto or 2 positive integers [py, pz]; got {_short(pencils)}")
        if pencils[0] * pencils[1] > MAX_WORKERS:
            _fail("solver.pencils", f"py * pz = {pencils[0] * pencils[1]} pencils (one worker each) is beyond "
                                    f"{MAX_WORKERS}")
        s["pencils"] = [int(v) for v in pencils]
    _choice(s["dtype"], DTYPES, "solver.dtype")
    _choice(s["device"], DEVICES, "solver.device")
    _choice(s["z_solve"], Z_SOLVES, "solver.z_solve")
    if s["max_memory_fraction"] is not None:
        s["max_memory_fraction"] = _number(s["max_memory_fraction"], "solver.max_memory_fraction", positive=True)
        if s["max_memory_fraction"] > 1:
            _fail("solver.max_memory_fraction", f"must lie in (0, 1] or be null (no memory check), got "
                                                f"{s['max_memory_fraction']}")


def _output(o: dict, lengths: list) -> None:
    if o["store"] is not None and not isinstance(o["store"], str):
        _fail("output.store", f"must be a path (string) or null, got {_short(o['store'])}")
    for key in ("scalars_every", "profiles_every", "fields_every", "slices_every", "checkpoint_every"):
        o[key] = _integer(o[key], f"output.{key}")
    if not isinstance(o["slices"], dict):
        _fail("output.slices", f"must be a mapping of axis (x, y, z) to a list of coordinates, got "
                               f"{_short(o['slices'])}")
    for axis, planes in o["slices"].items():
        if axis not in ("x", "y", "z"):
            _fail(f"output.slices.{axis}", "unknown axis (allowed: x, y, z)")
        if not isinstance(planes, list) or not planes:
            _fail(f"output.slices.{axis}", f"must be a non-empty list of coordinates, got {_short(planes)}")
        length = lengths["xyz".index(axis)]
        o["slices"][axis] = [_number(v, f"output.slices.{axis}[{i}]") for i, v in enumerate(planes)]
        for i, v in enumerate(o["slices"][axis]):
            if not 0.0 <= v <= length:
                _fail(f"output.slices.{axis}[{i}]", f"must lie in [0, {length}] (the box), got {v}")
    _choice(o["compression"], COMPRESSION, "output.compression")
    _choice(o["shards"], ("auto", "none"), "output.shards")  # ignored: read so that older stores restart


def _missing(cfg: dict) -> None:
    """The required keys (:data:`REQUIRED`) that are not given, all named in one error."""
    forcing = cfg["physics"]["forcing"]
    given = {"grid.shape": cfg["grid"]["shape"], "physics.nu": cfg["physics"]["nu"], "physics.forcing": forcing["kind"]}
    missing = [key for key, value in given.items() if value is None]
    if missing:
        key = missing[0]
        if key == "physics.forcing" and forcing["value"] is not None:
            key = "physics.forcing.kind"  # the section is there, its kind is not
        also = f"; also missing: {', '.join(missing[1:])}" if missing[1:] else ""
        _fail(key, f"required, no default (it sets the physics): {REQUIRED[missing[0]]}{also}")


def validate(config: dict) -> dict:
    """A complete validated copy of ``config`` (a dict); raises ``ValueError`` naming the key."""
    return _validated(config)[0]


def _validated(config: dict) -> tuple[dict, RunConfig]:
    """The validated dict of ``config`` and the :class:`RunConfig` holding it."""
    if config is None or (isinstance(config, dict) and not config):
        _fail("(root)", f"empty configuration; required: {', '.join(REQUIRED)}")
    check_size(config)  # bounded before anything copies or prints it
    cfg = _merge(DEFAULTS, config, "")
    _grid(cfg["grid"])
    _physics(cfg["physics"])
    cfg["boundaries"] = _boundaries(copy.deepcopy(cfg["boundaries"]) if cfg["boundaries"] else {"preset": "channel"})
    _time(cfg["time"])
    _initial(cfg["initial"])
    _solver(cfg["solver"])
    _output(cfg["output"], cfg["grid"]["lengths"])
    _cluster(cfg["cluster"])
    if cfg["cluster"]["comm"] == "nccl" and cfg["solver"]["device"] == "cpu":
        _fail("cluster.comm", "'nccl' moves GPU pencils and needs solver.device gpu or auto; got solver.device cpu "
                              "(use auto or mailbox)")
    _missing(cfg)
    typed = RunConfig.from_dict(cfg)
    resources.check(typed)  # arithmetic on the configuration: nothing is allocated
    return cfg, typed


def _cluster(c: dict) -> None:
    _choice(c["kind"], CLUSTERS, "cluster.kind")
    _choice(c["protocol"], PROTOCOLS, "cluster.protocol")
    _choice(c["comm"], COMMS, "cluster.comm")
    c["threads_per_worker"] = _integer(c["threads_per_worker"], "cluster.threads_per_worker", 1, 1024)
    c["cores"] = _integer(c["cores"], "cluster.cores", 1, 1 << 16)
    c["gpus_per_node"] = _integer(c["gpus_per_node"], "cluster.gpus_per_node", 1, 64)
    c["nodes"] = _integer(c["nodes"], "cluster.nodes", 1, MAX_WORKERS)
    if c["nodes"] * c["gpus_per_node"] > MAX_WORKERS:
        _fail("cluster.nodes", f"times cluster.gpus_per_node is {c['nodes'] * c['gpus_per_node']} workers, beyond "
                               f"{MAX_WORKERS}")
    if c["workers"] is not None:
        c["workers"] = _integer(c["workers"], "cluster.workers", 1, MAX_WORKERS)
    c["max_failures"] = _integer(c["max_failures"], "cluster.max_failures", 0, 1000)
    for key in ("rmm_pool_size", "dashboard_address", "address", "scheduler_file", "queue", "account", "walltime",
                "memory"):
        if c[key] is not None and not isinstance(c[key], str):
            _fail(f"cluster.{key}", f"must be a string or null, got {_short(c[key])}")
    if c["memory"] is not None:
        _memory(c["memory"])
    if c["kind"] == "address" and not c["address"]:
        _fail("cluster.address", "is required when cluster.kind is 'address' (e.g. tcp://host:8786)")
    if c["kind"] == "scheduler-file" and not c["scheduler_file"]:
        _fail("cluster.scheduler_file", "is required when cluster.kind is 'scheduler-file'")
    directives = c["job_extra_directives"]
    if not isinstance(directives, list) or not all(isinstance(d, str) for d in directives):
        _fail("cluster.job_extra_directives", "must be a list of strings")
    _tls(c["tls"])


def _memory(text: str) -> None:
    from dask.utils import parse_bytes

    try:
        size = parse_bytes(text)
    except (ValueError, TypeError):
        size = 0
    if not size > 0:
        _fail("cluster.memory", f"must be a size such as 64GB (the memory of one job), got {_short(text)}")


def _tls(tls) -> None:
    """``null``, ``false`` or exactly :data:`TLS_KEYS`, each a readable file (see :mod:`daskflow.cluster`)."""
    if tls is None or tls is False:
        return
    if not isinstance(tls, dict):
        _fail("cluster.tls", f"must be null (the default), false (no TLS) or a mapping of ca_file, cert and key "
                             f"(PEM files), got {_short(tls)}")
    for key in tls:
        if key not in TLS_KEYS:
            _fail(f"cluster.tls.{key}", f"unknown key (allowed: {', '.join(TLS_KEYS)})")
    for key in TLS_KEYS:
        if key not in tls:
            _fail(f"cluster.tls.{key}", f"missing (cluster.tls needs all of {', '.join(TLS_KEYS)}: PEM files)")
        path = tls[key]
        if not isinstance(path, str) or not path:
            _fail(f"cluster.tls.{key}", f"must be the path of a PEM file, got {_short(path)}")
        if not (os.path.isfile(path) and os.access(path, os.R_OK)):
            _fail(f"cluster.tls.{key}", f"{path!r} is not a readable file")


def load(source: RunConfig | dict | str | Path) -> RunConfig:
    """The validated, typed configuration of a dict or a YAML file path (read by
    :func:`daskflow.config_input.read`); a :class:`RunConfig` is returned as it is (it was validated)."""
    from daskflow import settings

    settings.check()  # daskflow's dask keys too: refused here, before any cluster starts
    if isinstance(source, RunConfig):
        return source
    if isinstance(source, (str, Path)):
        source = read(source)
    return _validated(source)[1]


def updated(config: RunConfig, **sections: dict) -> RunConfig:
    """``config`` with the keys of each given section replaced (``time={"dt": 0.1}``), validated again."""
    plain = config.to_dict()
    for name, values in sections.items():
        if name not in plain:
            _fail(name, unknown_key(name, plain))
        plain[name] = {**plain[name], **values}
    return load(plain)
