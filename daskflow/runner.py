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

What the terminal shows is :class:`Console`'s: daskflow's own lines (``-q``: errors and the final
result only), while Dask's warnings and log messages, those of the embedded cluster's workers
included, go to the run's log file (``STORE.log`` beside a local store) and reach the terminal only
with ``-v``. A failure is one line saying what failed, where and what to do; its traceback is in the
log (``-v`` prints it too).
"""

from __future__ import annotations

import ast
import contextlib
import copy
import difflib
import importlib.util
import json
import logging
import math
import os
import platform
import re
import shlex
import signal
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path

from daskflow.cluster import default_workers, job_script
from daskflow.cluster import start as start_cluster
from daskflow.config import load


class Console:
    """Where a command's messages go: the terminal, as far as ``verbosity`` asks, and the log file
    of the command once :meth:`open_log` named one (every message, Dask's log messages and warnings,
    and the traceback of a failure).

    ``verbosity``: ``-1`` (``-q``) errors and the final result only; ``0`` (default) daskflow's own
    lines, Dask's warnings and log messages (those of the embedded cluster's workers too) kept out
    of the terminal; ``1`` (``-v``) Dask's warnings and log messages on the terminal as well, and
    the traceback of a failure; ``2`` (``-vv``) Dask's info messages too."""

    def __init__(self, verbosity: int = 0) -> None:
        self.verbosity = verbosity
        self.log_path: str | None = None
        self.keep_log = True  # a temporary log is removed at close unless something failed
        self.failed = False
        self._log = None
        self._line_open = False  # an interactive progress line waits for its end
        self._undo: list = []

    # ------------------------------------------------------------------ the terminal

    def say(self, text: str) -> None:
        """One of daskflow's own lines (hidden by ``-q``)."""
        self._to_log(text)
        if self.verbosity >= 0:
            self._print(text)

    def result(self, text: str) -> None:
        """A line of the final result, shown even with ``-q``."""
        self._to_log(text)
        self._print(text)

    error = result

    def progress(self, text: str) -> None:
        """A progress line: rewritten in place on a terminal (``\\r``), one line each otherwise."""
        self._to_log(text)
        if self.verbosity < 0:
            return
        if sys.stderr.isatty():
            sys.stderr.write(f"\r{text}")
            sys.stderr.flush()
            self._line_open = True
        else:
            self._print(text)

    def end_line(self) -> None:
        if self._line_open:
            sys.stderr.write("\n")
            sys.stderr.flush()
            self._line_open = False

    def _print(self, text: str) -> None:
        self.end_line()
        print(text, file=sys.stderr, flush=True)

    def failure(self, prefix: str, exc: BaseException, where: str | None = None) -> None:
        """Report ``exc`` in one line (``prefix: what failed [where]; the log``) and keep its
        traceback in the log (on the terminal too with ``-v``)."""
        text = "".join(traceback.format_exception(exc)).rstrip()
        self._to_log(text)
        if self.verbosity >= 1:
            self.end_line()
            print(text, file=sys.stderr, flush=True)
        self.keep_log = self.failed = True
        if self.verbosity >= 1:
            hint = ""
        elif self.log_path:
            hint = f" (traceback in {self.log_path}; -v shows it here)"
        else:
            hint = " (-v shows the traceback)"
        message, own = describe(exc)
        if own:
            self.error(f"{prefix}: {message}{hint}")
        else:
            self.error(f"{prefix}: failed{' ' + where if where else ''}: {message}{hint}")

    # ------------------------------------------------------------------ the log file

    def open_log(self, path: str, keep: bool = True) -> None:
        """Append this command's messages, Dask's log messages and warnings and any traceback to
        ``path``; ``keep=False``: remove it at :meth:`close` unless something failed."""
        self._log = open(path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115 - closed by close()
        self.log_path, self.keep_log = str(path), keep
        self._to_log(f"==== {time.strftime('%Y-%m-%d %H:%M:%S')} daskflow {shlex.join(sys.argv[1:])} "
                     f"(pid {os.getpid()})")
        self._capture_dask()

    def worker_log(self) -> str | None:
        """The file the embedded cluster's workers write their output to (``None``: the terminal)."""
        return self.log_path if self.verbosity < 1 else None

    def dask_level(self) -> int:
        """The level of the embedded cluster's log messages."""
        return logging.INFO if self.verbosity >= 2 else logging.WARNING

    def close(self) -> None:
        """Put back the log handlers and warnings display replaced at :meth:`open_log`, and close
        the log (a temporary one is removed unless something failed)."""
        self.end_line()
        for undo in reversed(self._undo):
            undo()
        self._undo.clear()
        if self._log is not None:
            self._log.close()
            self._log = None
            if not self.keep_log:
                with contextlib.suppress(OSError):
                    os.unlink(self.log_path)
                self.log_path = None

    def _to_log(self, text: str) -> None:
        if self._log is not None:
            self._log.write(text + "\n")

    def _capture_dask(self) -> None:
        """Dask's loggers (distributed, bokeh, tornado, asyncio, ...) write to the log; their
        terminal handlers stay only with ``-v``. daskflow's own logger keeps the terminal for its
        warnings (errors only with ``-q``); Python warnings go to the log, and to the terminal when
        they are daskflow's or with ``-v``."""
        handler = logging.StreamHandler(self._log)
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s: %(message)s"))
        root = logging.getLogger()
        for name in ["", *sorted(logging.root.manager.loggerDict)]:
            logger = logging.getLogger(name)
            if not isinstance(logger, logging.Logger) or name.startswith("daskflow"):
                continue
            terminal = [h for h in logger.handlers if type(h) is logging.StreamHandler
                        and getattr(h, "stream", None) in (sys.stderr, sys.__stderr__)]
            if not terminal and logger is not root:
                continue
            self._add(logger, handler)
            if self.verbosity < 1:
                for h in terminal:
                    self._remove(logger, h)
        if self.verbosity >= 1 and not any(type(h) is logging.StreamHandler for h in root.handlers):
            terminal = logging.StreamHandler(sys.stderr)
            terminal.addFilter(lambda record: not record.name.startswith("daskflow"))  # shown below, once
            self._add(root, terminal, logging.WARNING)
        own = logging.StreamHandler(sys.stderr)
        own.setLevel(logging.ERROR if self.verbosity < 0 else logging.WARNING)
        self._add(logging.getLogger("daskflow"), own)
        shown = warnings.showwarning

        def showwarning(message, category, filename, lineno, file=None, line=None):
            text = warnings.formatwarning(message, category, filename, lineno, line).rstrip()
            self._to_log(text)
            if self.verbosity >= 1 or (self.verbosity == 0 and str(message).startswith("daskflow")):
                self._print(text)

        warnings.showwarning = showwarning
        self._undo.append(lambda: setattr(warnings, "showwarning", shown))

    def _add(self, logger, handler, level=None) -> None:
        if level is not None:
            handler.setLevel(level)
        logger.addHandler(handler)
        self._undo.append(lambda: logger.removeHandler(handler))

    def _remove(self, logger, handler) -> None:
        logger.removeHandler(handler)
        self._undo.append(lambda: logger.addHandler(handler))


#: the console of the command being run (the CLI sets its verbosity)
CONSOLE = Console()
#: daskflow's errors whose message says what happened and what to do (shown as they are)
OWN_ERRORS = ("StoreError", "NonFiniteState", "WorkerLost", "CheckpointError")


def describe(exc: BaseException) -> tuple[str, bool]:
    """``(one line, whether it is one of daskflow's own messages)`` for an error. Errors that Dask
    could not rebuild on the client arrive as a plain ``Exception("Name('message')")``: their name
    and message are recovered."""
    name, text = type(exc).__name__, " ".join(str(exc).split())
    own = type(exc).__module__.startswith("daskflow") and isinstance(exc, (RuntimeError, ValueError))
    stand_in = re.fullmatch(r"(\w+)\((.*)\)", text) if type(exc) is Exception else None
    if stand_in:
        with contextlib.suppress(ValueError, SyntaxError):
            args = ast.literal_eval(f"({stand_in.group(2)},)")
            name, text = stand_in.group(1), " ".join(" ".join(map(str, args)).split())
            own = name in OWN_ERRORS
    if len(text) > 600:
        text = text[:600] + " ..."
    return (text, True) if own else (f"{name}: {text}" if text else name, False)



RESTART_SECTIONS = ("grid", "boundaries", "physics", "time", "solver", "output")  # checked against the store
CLUSTER_KINDS = ("auto", "none", "local", "local-cuda", "slurm", "pbs")  # what --cluster takes besides addresses


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
        close = difflib.get_close_matches(stem, examples, n=1)
        guess = f"did you mean {close[0]!r}? " if close else ""
        raise ValueError(f"configuration {name!r}: no such file, nor a shipped example ({guess}examples: "
                         f"{', '.join(examples)})") from None


def _config(args) -> dict:
    args.config = config_file(args.config)
    cfg = load(args.config)
    if args.cluster is not None:  # --cluster KIND or a scheduler address
        if args.cluster in CLUSTER_KINDS:
            cfg["cluster"]["kind"] = args.cluster
        elif args.cluster.startswith("scheduler-file:"):
            cfg["cluster"].update(kind="scheduler-file", scheduler_file=args.cluster.split(":", 1)[1])
        elif "://" in args.cluster or re.fullmatch(r"[\w.\-\[\]:]+:\d+", args.cluster):
            cfg["cluster"].update(kind="address", address=args.cluster)
        else:
            close = difflib.get_close_matches(args.cluster, CLUSTER_KINDS, n=1)
            guess = f"did you mean {close[0]!r}? " if close else ""
            raise ValueError(f"--cluster {args.cluster!r} is neither a cluster kind ({guess}one of "
                             f"{', '.join(CLUSTER_KINDS)}) nor a scheduler address (tcp://HOST:PORT) or "
                             "scheduler-file:PATH")
    if args.steps is not None:
        cfg["time"]["steps"] = args.steps
        cfg["time"]["end_time"] = None
    if args.output is not None:
        cfg["output"]["store"] = args.output
    if args.pencils is not None:
        cfg["solver"]["pencils"] = list(args.pencils)
    store_path = cfg["output"]["store"]
    if store_path and str(store_path).startswith("memory://") and cfg["cluster"]["kind"] != "none":
        raise ValueError(f"config output.store: {store_path!r} lives in this process's memory, which the workers "
                         "of a cluster cannot write; use --cluster none, or a path or URL the workers share")
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
    if CONSOLE.verbosity >= 0:  # -q: the verdict only
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
    """The batch script of the workers of ``cluster`` (``--kind`` replaces ``cluster.kind``): its
    scheduler is ``cluster.address``, or the scheduler file ``cluster.scheduler_file``, else
    ``--scheduler-file`` (default ``CONFIG-scheduler.json`` in the current directory)."""
    args.config = config_file(args.config)
    section = load(args.config)["cluster"]
    if getattr(args, "kind", None):
        section["kind"] = args.kind
    default = getattr(args, "scheduler_file", None) or f"{Path(args.config).name.removesuffix('.yaml')}-scheduler.json"
    print(job_script(section, scheduler_file=os.path.abspath(default), config=args.config))
    return 0


def info(args) -> int:
    from daskflow.backend import compiled_loops, cupy_or_none, device_name
    from daskflow.cluster import protocol_for
    from daskflow.config import DEFAULTS
    from daskflow.pencils import nccl, ucx
    from daskflow.version import __version__

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
        CONSOLE.say(f"daskflow run: {name} received: stopping {then} (press Ctrl-C again to stop at once)")

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
    console = CONSOLE
    opened = console.log_path is None  # this run keeps the log (the CLI's poisson or a caller may have one)
    if opened:
        path, keep = _log_file(cfg["output"]["store"])
        new_file = not os.path.exists(path)
        console.open_log(path, keep)
    stop = _Stop()
    doing = {"what": "while starting the cluster"}  # where a failure happened, for its message
    try:
        with start_cluster(cfg["cluster"], _workers(cfg, args.restart), worker_output=console.worker_log(),
                           log_level=console.dask_level()) as client:
            code = _run(args, cfg, client, stop, doing)
        stop.done = True  # a signal while the cluster shuts down changes nothing now
        return code
    except KeyboardInterrupt as interrupt:
        from daskflow.io.output import last_checkpoint

        store = cfg["output"]["store"]
        kept = f"; {last_checkpoint(store)}" if store and stop.running else ""
        console.error(f"daskflow run: {interrupt.args[0] if interrupt.args else 'SIGINT'}: stopped at once{kept}")
        return 130
    except ValueError:  # a setting the cluster or the store refused: the caller reports it in one line
        raise
    except Exception as exc:  # noqa: BLE001 - on a worker or here: one line, the traceback in the log
        stop.done = True
        where = doing["what"]
        store = cfg["output"]["store"]
        if store and stop.running and not describe(exc)[1]:
            from daskflow.io.output import last_checkpoint

            kept = last_checkpoint(store)
            where = f"{where} ({kept}; fix the cause, then resume with {resume_command(args)})" \
                if "is kept" in kept else f"{where} ({kept})"
        console.failure("daskflow run", exc, where)
        return 1
    finally:
        stop.restore()
        if cfg["output"]["store"] and not args.restart and not stop.running:
            _discard_unstarted(cfg["output"]["store"])
        if opened:
            if new_file and not stop.running and not console.failed:
                console.keep_log = False  # nothing ran (a refused setting, Ctrl-C): no log beside no store
            console.close()


def _log_file(store_path: str | None) -> tuple[str, bool]:
    """``(path, keep)`` of a run's log: ``STORE.log`` beside a local store, kept; else a temporary
    file, removed after a run that did not fail."""
    from daskflow.io import store

    if store_path and store.is_local(store_path):
        return f"{str(store_path).removeprefix('file://').rstrip('/')}.log", True
    fd, path = tempfile.mkstemp(prefix="daskflow-run-", suffix=".log")
    os.close(fd)
    return path, False


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
        CONSOLE.say(f"daskflow: {len(client.scheduler_info()['workers'])} workers, dashboard {client.dashboard_link}")
    if not args.restart:
        return Simulation(cfg, client)
    sim = Simulation.restart(cfg["output"]["store"], client=client, **{key: cfg[key] for key in RESTART_SECTIONS})
    t = cfg["time"]
    goal = f"t = {t['end_time']:g}" if t["end_time"] is not None else f"step {sim.first_step + t['steps']}"
    CONSOLE.say(f"daskflow run: restarting {cfg['output']['store']} from step {sim.step}, t = {sim.time:.6g}, running "
                f"to {goal}")
    return sim


def _run(args, cfg: dict, client, stop: _Stop, doing: dict) -> int:
    console = CONSOLE
    doing["what"] = "while setting up the run (initial fields, store)"
    sim = _start(args, cfg, client)
    if sim.autotune is not None:
        for line in sim.autotune.lines():
            console.say(line)
    console.say(run_header(sim, cfg, console.log_path if console.keep_log else None))
    until = cfg["time"]["end_time"]
    last = None if until is not None else sim.first_step + cfg["time"]["steps"]  # time.steps counts from the start
    segment = args.report_every or max(1, (last - sim.step if last else 200) // 20)
    progress = _Progress(sim, last, until)
    if stop.requested():  # during start-up: nothing ran, nothing to keep
        console.error(f"daskflow run: {stop.signal}: stopped before the first step")
        return 130
    stop.running = True
    while not stop.requested() and (last is None or sim.step < last) and (until is None or not _reached(sim, until)):
        doing["what"] = f"in the steps after step {sim.step}"
        sim.run(steps=segment if last is None else min(segment, last - sim.step), until=until, stop=stop.requested)
        diag = sim.diagnostics()
        progress.line(diag)
        problem = _blow_up(diag)
        if problem:
            from daskflow.io.output import last_checkpoint

            kept = last_checkpoint(sim.store) if sim.store else "no store is written"
            console.error(f"daskflow run: the flow blew up at step {sim.step} ({problem}); stopped, {kept}")
            return 1
    console.end_line()
    doing["what"] = f"writing the fields and checkpoint of step {sim.step}"
    sim.finish()  # the last step's fields and checkpoint, so the run can be continued or extended
    if stop.signal and sim.store:
        console.result(f"daskflow run: {stop.signal} at step {sim.step}; checkpoint written. Resume with: "
                       f"{resume_command(args)}")
    summary = {"steps": sim.step, "time": sim.time, "dt": sim.dt, "store": sim.store, "stopped_by": stop.signal}
    print(json.dumps(summary))
    return 0


def run_header(sim, cfg: dict, log: str | None = None) -> str:
    """One line saying what runs: grid, viscosity and Reynolds number, pencils and solver, device,
    store (and log) and how far."""
    g, t, s = cfg["grid"], cfg["time"], sim.config["solver"]
    nu = cfg["physics"]["nu"]
    goal = f"to t = {t['end_time']:g}" if t["end_time"] is not None else f"to step {sim.first_step + t['steps']}"
    return (f"daskflow run: {'x'.join(map(str, g['shape']))} cells, lengths {g['lengths']}, nu {nu:g} "
            f"(1/nu = {1 / nu:.4g}), pencils {s['pencils']} {s['poisson']}, {sim.where}, "
            f"store {sim.store or 'none'}{f' (log {log})' if log else ''}, from step {sim.step} {goal}")


def _reached(sim, until: float) -> bool:
    return sim.time >= until * (1 - 1e-14)


class _Progress:
    """The progress line after each segment: rate over the last segments, ETA as h:mm:ss."""

    WINDOW = 5  # segments the rate is averaged over

    def __init__(self, sim, last: int | None, until: float | None) -> None:
        self.sim, self.last, self.until = sim, last, until
        self.marks = [(time.perf_counter(), sim.step)]

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
        CONSOLE.progress(text)


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
