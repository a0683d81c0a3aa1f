"""``daskflow run``: the embedded cluster (or a scheduler), the simulation advanced in segments with a
progress line after each, the stop that Ctrl-C or SIGTERM asks for, and the log and store a run
leaves behind (see :mod:`daskflow.runner`)."""

from __future__ import annotations

import json
import os
import shlex
import signal
import tempfile
import time

from daskflow.cluster import default_workers, gpu_memory, uses_local_gpus
from daskflow.cluster import start as start_cluster
from daskflow.resources import fits_one_gpu
from daskflow.run_config import RunConfig
from daskflow.runner.configure import run_config
from daskflow.runner.console import CONSOLE, describe
from daskflow.runner.progress import Progress, Segments, blow_up, run_header

RESTART_SECTIONS = ("grid", "boundaries", "physics", "time", "solver", "output")  # checked against the store


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
    cfg = run_config(args)
    console = CONSOLE
    opened = console.log_path is None  # this run keeps the log (the CLI's poisson or a caller may have one)
    if opened:
        path, keep = _log_file(cfg.output.store)
        new_file = not os.path.exists(path)
        console.open_log(path, keep)
    stop = _Stop()
    doing = {"what": "while starting the cluster"}  # where a failure happened, for its message
    try:
        with start_cluster(cfg.cluster, _workers(cfg, args.restart), worker_output=console.worker_log(),
                           log_level=console.dask_level()) as client:
            code = _run(args, cfg, client, stop, doing)
        stop.done = True  # a signal while the cluster shuts down changes nothing now
        return code
    except KeyboardInterrupt as interrupt:
        from daskflow.io.output import last_checkpoint

        store = cfg.output.store
        kept = f"; {last_checkpoint(store)}" if store and stop.running else ""
        console.error(f"daskflow run: {interrupt.args[0] if interrupt.args else 'SIGINT'}: stopped at once{kept}")
        return 130
    except ValueError:  # a setting the cluster or the store refused: the caller reports it in one line
        raise
    except Exception as exc:  # noqa: BLE001 - on a worker or here: one line, the traceback in the log
        stop.done = True
        where = doing["what"]
        store = cfg.output.store
        if store and stop.running and not describe(exc)[1]:
            from daskflow.io.output import last_checkpoint

            kept = last_checkpoint(store)
            where = f"{where} ({kept}; fix the cause, then resume with {resume_command(args)})" \
                if "is kept" in kept else f"{where} ({kept})"
        console.failure("daskflow run", exc, where)
        return 1
    finally:
        stop.restore()
        if cfg.output.store and not args.restart and not stop.running:
            _discard_unstarted(cfg.output.store)
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


def _start(args, cfg: RunConfig, client):
    from daskflow import Simulation

    if client is not None:
        CONSOLE.say(f"daskflow: {len(client.scheduler_info()['workers'])} workers, dashboard {client.dashboard_link}")
    if not args.restart:
        return Simulation(cfg, client)
    plain = cfg.to_dict()
    sim = Simulation.restart(cfg.output.store, client=client, **{key: plain[key] for key in RESTART_SECTIONS})
    t = cfg.time
    goal = f"t = {t.end_time:g}" if t.end_time is not None else f"step {sim.first_step + t.steps}"
    CONSOLE.say(f"daskflow run: restarting {cfg.output.store} from step {sim.step}, t = {sim.time:.6g}, running "
                f"to {goal}")
    return sim


def _run(args, cfg: RunConfig, client, stop: _Stop, doing: dict) -> int:
    console = CONSOLE
    doing["what"] = "while setting up the run (initial fields, store)"
    sim = _start(args, cfg, client)
    if sim.autotune is not None:
        for line in sim.autotune.lines():
            console.say(line)
    console.say(run_header(sim, cfg, console.log_path if console.keep_log else None))
    until = cfg.time.end_time
    last = None if until is not None else sim.first_step + cfg.time.steps  # time.steps counts from the start
    segments = Segments(args.report_every or (last - sim.step if last else 200) // 20, fixed=bool(args.report_every))
    progress = Progress(sim, last, until)
    if stop.requested():  # during start-up: nothing ran, nothing to keep
        console.error(f"daskflow run: {stop.signal}: stopped before the first step")
        return 130
    stop.running = True
    while not stop.requested() and (last is None or sim.step < last) and (until is None or not _reached(sim, until)):
        doing["what"] = f"in the steps after step {sim.step}"
        start, first = time.perf_counter(), sim.step
        sim.run(steps=segments.steps if last is None else min(segments.steps, last - sim.step), until=until,
                stop=stop.requested)
        segments.done(sim.step - first, time.perf_counter() - start)
        diag = sim.diagnostics()
        progress.line(diag)
        problem = blow_up(diag)
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


def _reached(sim, until: float) -> bool:
    """Whether the simulation reached time ``until`` (up to the round-off of its accumulated time)."""
    return sim.time >= until * (1 - 1e-14)


def _workers(cfg: RunConfig, restart: bool) -> int:
    """Workers of the embedded cluster: one per pencil; with ``solver.pencils: auto`` the restarted
    checkpoint's pencils (so its decomposition can be kept), one GPU worker for a grid that fits one
    GPU (pencils there cost exchanges and buy nothing), else the cluster's default count."""
    pencils = cfg.solver.pencils
    if pencils != "auto":
        return pencils[0] * pencils[1]
    if cfg.cluster.workers:
        return int(cfg.cluster.workers)
    if restart:
        from daskflow.io import store

        stored = store.root_config(cfg.output.store)["solver"]["pencils"]
        if stored != "auto":
            return stored[0] * stored[1]
    if uses_local_gpus(cfg.cluster) and fits_one_gpu(cfg, gpu_memory()):
        return 1
    return default_workers(cfg.cluster)
