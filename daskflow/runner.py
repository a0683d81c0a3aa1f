"""``daskflow run / validate / info``: configured runs from the command line.

``run`` validates the configuration before anything starts, starts the embedded cluster (one
worker per pencil: a ``LocalCluster``, or dask-cuda GPU workers over UCX; with ``solver.pencils:
auto`` ``cluster.workers`` or :func:`daskflow.cluster.default_workers`) or connects to a scheduler
address, resolves ``auto`` solver settings (printing the autotuner's table), prints the dashboard
link, advances the simulation in segments with a progress line after each, and ends every run with
the last step's fields and a checkpoint. ``time.steps`` is the length of the run counted from its
initial state, so ``--restart`` continues the same run to the same final step (``time.end_time`` is
a time, also absolute). On Ctrl-C or SIGTERM (a walltime) the run stops after the current step,
writes a checkpoint and exits 0 printing the command that resumes it; a second Ctrl-C stops at once.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import math
import os
import platform
import shlex
import signal
import sys
import time
from pathlib import Path

from daskflow.cluster import default_workers, job_script
from daskflow.cluster import start as start_cluster
from daskflow.config import load

RESTART_SECTIONS = ("grid", "boundaries", "physics", "time", "solver", "output")  # checked against the store


def config_file(name: str) -> str:
    """``name`` itself when it is a file, else the shipped example of that name (``channel-small``
    or ``channel-small.yaml``), so an installed package runs its examples without a checkout."""
    if Path(name).exists() or Path(name).parent != Path("."):
        return name
    from daskflow import data

    stem = name.removesuffix(".yaml")
    try:
        return str(data.path("examples", f"{stem}.yaml"))
    except FileNotFoundError:
        examples = sorted(p.stem for p in data.folder("examples").glob("*.yaml"))
        raise ValueError(f"configuration {name!r}: no such file, nor a shipped example (examples: "
                         f"{', '.join(examples)})") from None


def _config(args) -> dict:
    args.config = config_file(args.config)
    cfg = load(args.config)
    if args.cluster is not None:  # --cluster KIND or a scheduler address
        kinds = ("auto", "none", "local", "local-cuda", "slurm", "pbs")
        if args.cluster in kinds:
            cfg["cluster"]["kind"] = args.cluster
        elif args.cluster.startswith("scheduler-file:"):
            cfg["cluster"].update(kind="scheduler-file", scheduler_file=args.cluster.split(":", 1)[1])
        else:
            cfg["cluster"].update(kind="address", address=args.cluster)
    if args.steps is not None:
        cfg["time"]["steps"] = args.steps
        cfg["time"]["end_time"] = None
    if args.output is not None:
        cfg["output"]["store"] = args.output
    if args.pencils is not None:
        cfg["solver"]["pencils"] = list(args.pencils)
    store_path = cfg["output"]["store"]
    if args.restart:
        from daskflow.io import store

        if not store_path:
            raise ValueError("--restart needs output.store (the store to continue)")
        if not store.has_checkpoint(store_path):
            raise ValueError(f"config output.store: {store_path!r} holds no complete checkpoint to restart from")
        _check_writable(store_path, existing=True)
        from daskflow.simulation import check_restart

        check_restart(store_path, load(copy.deepcopy(cfg)))
    elif store_path:
        from daskflow.io import store

        if store.exists(store_path):
            raise ValueError(f"config output.store: {store_path!r} already exists; use --restart to continue it or "
                             "--output NEW to start another")
        _check_writable(store_path)
    cfg = load(copy.deepcopy(cfg))
    from daskflow.simulation import check

    check(cfg)  # everything the simulation will need, before any cluster starts
    return cfg


def _check_writable(store_path: str, existing: bool = False) -> None:
    """A new store's parent folder, or an existing store's folders, must be writable (a read-only
    mount is refused before anything runs)."""
    from daskflow.io import store

    if not store.is_local(store_path):
        return  # remote stores are checked by zarr when the run writes them
    path = Path(store_path.removeprefix("file://")).resolve()
    if existing:
        folders = [path, path / "scalars", path / "checkpoint"]
        if not all(os.access(folder, os.W_OK) for folder in folders):
            raise ValueError(f"config output.store: {store_path!r} is not writable (a read-only mount or "
                             "permissions): a restart writes into it")
        return
    if not path.parent.is_dir() or not os.access(path.parent, os.W_OK):
        raise ValueError(f"config output.store: cannot create {store_path!r} ({path.parent} is not a writable "
                         "directory)")


def validate(args) -> int:
    from daskflow.simulation import check

    args.config = config_file(args.config)
    cfg = load(args.config)
    check(cfg)
    from daskflow.io import store

    if cfg["output"]["store"] and not store.exists(cfg["output"]["store"]):
        _check_writable(cfg["output"]["store"])
    print(f"{args.config}: valid ({'x'.join(map(str, cfg['grid']['shape']))} cells, "
          f"pencils {cfg['solver']['pencils']}, output {cfg['output']['store'] or 'none'})")
    print(_resolved(cfg))
    return 0


def _resolved(cfg: dict) -> str:
    """The configuration as a run would use it (every default filled in), and the memory it needs."""
    import yaml
    from dask.utils import format_bytes

    from daskflow import resources

    per_worker, setup = resources.worker_bytes(cfg), resources.setup_bytes(cfg)
    memory = (f"# memory: about {format_bytes(per_worker)} per worker (one pencil) during a time step, on the GPU "
              f"when the run is on GPUs; {format_bytes(setup)} on this host to build the initial fields")
    return f"{memory}\n{yaml.safe_dump(cfg, sort_keys=False, default_flow_style=None).rstrip()}"


def jobscript(args) -> int:
    print(job_script(load(config_file(args.config))["cluster"]))
    return 0


def info(args) -> int:
    from daskflow import __version__
    from daskflow.backend import compiled_loops, cupy_or_none, device_name
    from daskflow.cluster import protocol_for
    from daskflow.config import DEFAULTS
    from daskflow.pencils import nccl, ucx

    cp = cupy_or_none()
    versions = {name: _version(name) for name in ("dask", "distributed", "numpy", "numba", "zarr", "xarray", "cupy",
                                                   "dask_cuda", "distributed_ucxx")}
    versions["nccl"] = nccl.version()
    versions["ucx"] = ucx.version()
    cuda_cluster = cp is not None and importlib.util.find_spec("dask_cuda") is not None
    gpus = cp.cuda.runtime.getDeviceCount() if cp else 0
    # what cluster.comm: auto picks for a run on several GPU workers of this machine, and Dask's comms then
    comm = "nccl" if cuda_cluster and gpus > 1 and nccl.available() else "mailbox"
    protocol = protocol_for(DEFAULTS["cluster"], cuda_cluster)
    print(json.dumps({"daskflow": __version__, "python": platform.python_version(), "versions": versions,
                      "gpus": gpus, "gpu": device_name(cp) if cp else None,
                      "ucx": importlib.util.find_spec("distributed_ucxx") is not None,
                      "nccl": versions["nccl"] is not None,
                      "compiled_cpu_loops": compiled_loops(),
                      "default_cluster": f"LocalCUDACluster ({protocol.upper()})" if cuda_cluster else "LocalCluster",
                      "exchanges": comm}, indent=2))
    return 0


def _version(module: str) -> str | None:
    """The installed version of the distribution that provides ``module`` (``cupy`` comes from
    ``cupy-cuda13x`` or ``cupy-cuda12x``, ``distributed_ucxx`` from ``distributed-ucxx-cu13``), or
    None when it is not installed."""
    from importlib import metadata

    for distribution in metadata.packages_distributions().get(module, [module.replace("_", "-")]):
        try:
            return metadata.version(distribution)
        except metadata.PackageNotFoundError:
            continue
    return None


class _Stop:
    """Ctrl-C / SIGTERM, acknowledged at once: the first asks the run to stop after the current step
    (a checkpoint is then written), or, during start-up, before the first step; a second one stops
    at once."""

    def __init__(self) -> None:
        self.signal: str | None = None
        self.running = self.done = False
        self.previous = {sig: signal.signal(sig, self._handle) for sig in (signal.SIGINT, signal.SIGTERM)}

    def restore(self) -> None:
        """Put back the handlers there were before (``run`` may be called from Python)."""
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)

    def _handle(self, signum, frame) -> None:
        name = signal.Signals(signum).name
        if self.done:
            return
        if self.signal is not None:
            raise KeyboardInterrupt(name)
        self.signal = name
        then = ("after the current step and writing a checkpoint" if self.running
                else "once start-up is done, before the first step")
        print(f"\ndaskflow run: {name} received: stopping {then} (press Ctrl-C again to stop at once)",
              file=sys.stderr, flush=True)

    def requested(self) -> bool:
        return self.signal is not None


def resume_command(args) -> str:
    """The command line that continues this run (the given one, with ``--restart``)."""
    words = ["daskflow", "run", args.config]
    for option, value in (("--output", args.output), ("--cluster", args.cluster), ("--steps", args.steps),
                          ("--report-every", args.report_every or None)):
        if value is not None:
            words += [option, str(value)]
    if args.pencils is not None:
        words += ["--pencils", *map(str, args.pencils)]
    return shlex.join([*words, "--restart"])


def run(args) -> int:
    cfg = _config(args)
    stop = _Stop()
    try:
        with start_cluster(cfg["cluster"], _workers(cfg, args.restart)) as client:
            code = _run(args, cfg, client, stop)
        stop.done = True  # a signal while the cluster shuts down changes nothing now
        return code
    except KeyboardInterrupt as interrupt:
        from daskflow.io.output import last_checkpoint

        store = cfg["output"]["store"]
        kept = f"; {last_checkpoint(store)}" if store and stop.running else ""
        print(f"\ndaskflow run: {interrupt.args[0] if interrupt.args else 'SIGINT'}: stopped at once{kept}",
              file=sys.stderr)
        return 130
    finally:
        stop.restore()
        if cfg["output"]["store"] and not args.restart and not stop.running:
            _discard_unstarted(cfg["output"]["store"])


def _discard_unstarted(store_path: str) -> None:
    """Remove a store this process created when the run never started (a failed or interrupted
    start-up): it holds no step, and left in place it would block both a new run and a restart."""
    from daskflow.io import store

    if str(store_path) not in store.CREATED_HERE or not store.exists(store_path) or store.has_checkpoint(store_path):
        return
    if store.is_local(store_path):
        import shutil

        shutil.rmtree(store_path.removeprefix("file://"), ignore_errors=True)
    else:
        import fsspec

        fs, root = fsspec.core.url_to_fs(store_path)
        fs.rm(root, recursive=True)


def _start(args, cfg: dict, client):
    from daskflow import Simulation

    if client is not None:
        print(f"daskflow: {len(client.scheduler_info()['workers'])} workers, dashboard "
              f"{client.dashboard_link}", file=sys.stderr)
    if not args.restart:
        return Simulation(cfg, client)
    sim = Simulation.restart(cfg["output"]["store"], client=client, **{key: cfg[key] for key in RESTART_SECTIONS})
    t = cfg["time"]
    goal = f"t = {t['end_time']:g}" if t["end_time"] is not None else f"step {sim.first_step + t['steps']}"
    print(f"daskflow run: restarting {cfg['output']['store']} from step {sim.step}, t = {sim.time:.6g}, running to "
          f"{goal}", file=sys.stderr)
    return sim


def _run(args, cfg: dict, client, stop: _Stop) -> int:
    sim = _start(args, cfg, client)
    if sim.autotune is not None:
        for line in sim.autotune.lines():
            print(line, file=sys.stderr)
    print(run_header(sim, cfg), file=sys.stderr)
    until = cfg["time"]["end_time"]
    last = None if until is not None else sim.first_step + cfg["time"]["steps"]  # time.steps counts from the start
    segment = args.report_every or max(1, (last - sim.step if last else 200) // 20)
    progress = _Progress(sim, last, until)
    if stop.requested():  # during start-up: nothing ran, nothing to keep
        print(f"daskflow run: {stop.signal}: stopped before the first step", file=sys.stderr)
        return 130
    stop.running = True
    while not stop.requested() and (last is None or sim.step < last) and (until is None or not _reached(sim, until)):
        try:
            sim.run(steps=segment if last is None else min(segment, last - sim.step), until=until, stop=stop.requested)
        except RuntimeError as exc:  # store failures, blow-ups, repeated worker loss: the message says what to do
            print(f"\ndaskflow run: {exc}", file=sys.stderr)
            return 1
        diag = sim.diagnostics()
        progress.line(diag)
        problem = _blow_up(diag)
        if problem:
            from daskflow.io.output import last_checkpoint

            kept = last_checkpoint(sim.store) if sim.store else "no store is written"
            print(f"\ndaskflow run: the flow blew up at step {sim.step} ({problem}); stopped, {kept}", file=sys.stderr)
            return 1
    progress.end()
    try:
        sim.finish()  # the last step's fields and checkpoint, so the run can be continued or extended
    except RuntimeError as exc:
        print(f"daskflow run: {exc}", file=sys.stderr)
        return 1
    if stop.signal and sim.store:
        print(f"daskflow run: {stop.signal} at step {sim.step}; checkpoint written. Resume with: "
              f"{resume_command(args)}", file=sys.stderr)
    summary = {"steps": sim.step, "time": sim.time, "dt": sim.dt, "store": sim.store, "stopped_by": stop.signal}
    print(json.dumps(summary))
    return 0


def run_header(sim, cfg: dict) -> str:
    """One line saying what runs: grid, viscosity and Reynolds number, pencils and solver, device,
    store and how far."""
    g, t, s = cfg["grid"], cfg["time"], sim.config["solver"]
    nu = cfg["physics"]["nu"]
    goal = f"to t = {t['end_time']:g}" if t["end_time"] is not None else f"to step {sim.first_step + t['steps']}"
    return (f"daskflow run: {'x'.join(map(str, g['shape']))} cells, lengths {g['lengths']}, nu {nu:g} "
            f"(1/nu = {1 / nu:.4g}), pencils {s['pencils']} {s['poisson']}, {sim.where}, "
            f"store {sim.store or 'none'}, from step {sim.step} {goal}")


def _reached(sim, until: float) -> bool:
    return sim.time >= until * (1 - 1e-14)


class _Progress:
    """The progress line after each segment: rate over the last segments, ETA as h:mm:ss."""

    WINDOW = 5  # segments the rate is averaged over

    def __init__(self, sim, last: int | None, until: float | None) -> None:
        self.sim, self.last, self.until = sim, last, until
        self.marks = [(time.perf_counter(), sim.step)]
        self.interactive = sys.stderr.isatty()

    def line(self, diag: dict) -> None:
        sim = self.sim
        self.marks = [*self.marks[-self.WINDOW:], (time.perf_counter(), sim.step)]
        (t0, s0), (t1, s1) = self.marks[0], self.marks[-1]
        rate = (s1 - s0) / max(t1 - t0, 1e-9)
        left = (self.last - sim.step) if self.last is not None else (self.until - sim.time) / max(sim.dt, 1e-300)
        eta = time.strftime("%H:%M:%S", time.gmtime(max(left, 0) / rate)) if rate > 0 else "--:--:--"
        text = (f"step {sim.step}  t {sim.time:.4f}  dt {sim.dt:.3e}  CFL {diag['cfl']:.2f}  "
                f"Re_tau {diag['re_tau']:.1f}  div {diag['div_max']:.1e}  Ub {diag['bulk_velocity']:.4f}  "
                f"{rate:.1f} steps/s  ETA {eta}")
        print(("\r" + text) if self.interactive else text, file=sys.stderr, end="" if self.interactive else "\n")

    def end(self) -> None:
        if self.interactive:
            print(file=sys.stderr)


def _workers(cfg: dict, restart: bool) -> int:
    """Workers of the embedded cluster: one per pencil; with ``solver.pencils: auto`` the restarted
    checkpoint's pencils (so its decomposition can be kept), else the cluster's default count."""
    pencils = cfg["solver"]["pencils"]
    if pencils != "auto":
        return pencils[0] * pencils[1]
    if restart and not cfg["cluster"]["workers"]:
        from daskflow.io import store

        stored = store.root_config(cfg["output"]["store"])["solver"]["pencils"]
        if stored != "auto":
            return stored[0] * stored[1]
    return default_workers(cfg["cluster"])


CFL_LIMIT = 1.05 * math.sqrt(3)  # RK3's advective stability limit is sqrt(3) (time.cfl = 1 runs at it)
DIVERGENCE_LIMIT = 1e-6


def _blow_up(diag: dict) -> str | None:
    """Why the flow is no longer trustworthy (NaN/Inf, CFL or divergence beyond their limits), or None."""
    if not all(value == value and abs(value) != float("inf") for value in diag.values()):
        return "NaN or Inf in the fields"
    if diag["cfl"] > CFL_LIMIT:
        return f"CFL {diag['cfl']:.2f} beyond {CFL_LIMIT}"
    if diag["div_max"] > DIVERGENCE_LIMIT:
        return f"max |div u| {diag['div_max']:.2e} beyond {DIVERGENCE_LIMIT}"
    return None
