"""``daskflow run / validate / info``: configured runs from the command line.

``run`` validates the configuration before anything starts, starts the embedded cluster (one
worker per pencil: a ``LocalCluster``, or dask-cuda GPU workers over UCX; with ``solver.pencils:
auto`` ``cluster.workers`` or :func:`daskflow.cluster.default_workers`) or connects to a scheduler
address, resolves ``auto`` solver settings (printing the autotuner's table), prints the dashboard
link, advances the simulation in segments with a progress
line after each, and on Ctrl-C or SIGTERM (a walltime) finishes the segment, writes a checkpoint and
exits 0 saying how to resume.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import platform
import signal
import sys
import time
from pathlib import Path

from daskflow.cluster import default_workers, job_script
from daskflow.cluster import start as start_cluster
from daskflow.config import load


def _config(args) -> dict:
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

    cfg = load(args.config)
    check(cfg)
    from daskflow.io import store

    if cfg["output"]["store"] and not store.exists(cfg["output"]["store"]):
        _check_writable(cfg["output"]["store"])
    print(f"{args.config}: valid ({'x'.join(map(str, cfg['grid']['shape']))} cells, "
          f"pencils {cfg['solver']['pencils']}, output {cfg['output']['store'] or 'none'})")
    return 0


def jobscript(args) -> int:
    print(job_script(load(args.config)["cluster"]))
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


def _version(name: str) -> str | None:
    try:
        from importlib.metadata import version

        return version(name.replace("_", "-"))
    except Exception:  # noqa: BLE001 - not installed
        return None


class _Stop:
    """Remembers a SIGINT/SIGTERM so the run can stop cleanly after the current segment."""

    def __init__(self) -> None:
        self.signal = None
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._handle)

    def _handle(self, signum, frame) -> None:
        self.signal = signal.Signals(signum).name


def run(args) -> int:
    from daskflow import Simulation

    cfg = _config(args)
    with start_cluster(cfg["cluster"], _workers(cfg, args.restart)) as client:
        if client is not None:
            print(f"daskflow: {len(client.scheduler_info()['workers'])} workers, dashboard "
                  f"{client.dashboard_link}", file=sys.stderr)
        if args.restart:  # the store's configuration, with this file's time, solver and output settings
            sim = Simulation.restart(cfg["output"]["store"], client=client, time=cfg["time"], solver=cfg["solver"],
                                     output=cfg["output"])
        else:
            sim = Simulation(cfg, client)
        if sim.autotune is not None:
            for line in sim.autotune.lines():
                print(line, file=sys.stderr)
        total = cfg["time"]["steps"]
        until = cfg["time"]["end_time"]
        segment = args.report_every or max(1, (total or 200) // 20)
        stop, start, first_step = _Stop(), time.perf_counter(), sim.step
        interactive = sys.stderr.isatty()
        while (total is None or sim.step - first_step < total) and (until is None or sim.time < until * (1 - 1e-14)):
            steps = segment if total is None else min(segment, total - (sim.step - first_step))
            try:
                sim.run(steps=steps, until=until)
            except RuntimeError as exc:  # store failures, repeated worker loss: the message says what to do
                print(f"\ndaskflow run: {exc}", file=sys.stderr)
                return 1
            done = sim.step - first_step
            rate = done / (time.perf_counter() - start)
            eta = (total - done) / rate if total else (until - sim.time) / (sim.dt * rate) if until else 0.0
            diag = sim.diagnostics()
            line = (f"step {sim.step}  t {sim.time:.4f}  dt {sim.dt:.3e}  CFL {diag['cfl']:.2f}  "
                    f"Re_tau {diag['re_tau']:.1f}  div {diag['div_max']:.1e}  Ub {diag['bulk_velocity']:.4f}  "
                    f"{rate:.1f} steps/s  ETA {eta:.0f} s")
            print(("\r" + line) if interactive else line, file=sys.stderr, end="" if interactive else "\n")
            problem = _blow_up(diag)
            if problem:
                print(f"\ndaskflow run: the flow blew up at step {sim.step} ({problem}); stopped, the last good "
                      "checkpoint is kept", file=sys.stderr)
                return 1
            if stop.signal:
                break
        if interactive:
            print(file=sys.stderr)
        if stop.signal and sim.store:
            sim.checkpoint()
            print(f"daskflow run: {stop.signal} at step {sim.step}; checkpoint written. Resume with: "
                  f"daskflow run {args.config} --restart", file=sys.stderr)
        summary = {"steps": sim.step, "time": sim.time, "dt": sim.dt, "store": sim.store, "stopped_by": stop.signal}
        print(json.dumps(summary))
    return 0


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


CFL_LIMIT = 1.7  # RK3's advective stability limit is sqrt(3)
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
