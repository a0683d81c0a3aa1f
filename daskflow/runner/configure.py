"""The configuration a command runs: the file or shipped example it names, the command line's
overrides, and the checks made before anything starts (``daskflow validate`` prints their verdict,
``daskflow jobscript`` the batch script of the configuration's workers)."""

from __future__ import annotations

import difflib
import os
import re
from pathlib import Path

from daskflow.cluster import job_script
from daskflow.config import load, updated
from daskflow.run_config import RunConfig
from daskflow.runner.console import CONSOLE

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


def run_config(args) -> RunConfig:
    """The configuration ``daskflow run`` runs: the file (or shipped example) ``args.config`` names,
    with the command line's overrides, its store checked and everything the simulation will need
    checked before any cluster starts. ``args.config`` becomes the file's path."""
    args.config = config_file(args.config)
    cfg = _with_options(load(args.config), args)
    _check_store(cfg, args.restart)
    from daskflow.simulation import check

    check(cfg)  # everything the simulation will need, before any cluster starts
    return cfg


def _with_options(cfg: RunConfig, args) -> RunConfig:
    """``cfg`` with the command line's ``--cluster`` (a cluster kind, a scheduler address or a scheduler
    file), ``--steps``, ``--output`` and ``--pencils``, validated again."""
    sections = {}
    if args.cluster is not None:  # --cluster KIND or a scheduler address
        if args.cluster in CLUSTER_KINDS:
            sections["cluster"] = {"kind": args.cluster}
        elif args.cluster.startswith("scheduler-file:"):
            sections["cluster"] = {"kind": "scheduler-file", "scheduler_file": args.cluster.split(":", 1)[1]}
        elif "://" in args.cluster or re.fullmatch(r"[\w.\-\[\]:]+:\d+", args.cluster):
            sections["cluster"] = {"kind": "address", "address": args.cluster}
        else:
            close = difflib.get_close_matches(args.cluster, CLUSTER_KINDS, n=1)
            guess = f"did you mean {close[0]!r}? " if close else ""
            raise ValueError(f"--cluster {args.cluster!r} is neither a cluster kind ({guess}one of "
                             f"{', '.join(CLUSTER_KINDS)}) nor a scheduler address (tcp://HOST:PORT) or "
                             "scheduler-file:PATH")
    if args.steps is not None:
        sections["time"] = {"steps": args.steps, "end_time": None}
    if getattr(args, "report_every", 0) < 0:
        raise ValueError(f"--report-every {args.report_every}: steps between progress lines must be a positive "
                         "count, or 0 for a line about every 2 s")
    if args.output is not None:
        sections["output"] = {"store": args.output}
    if args.pencils is not None:
        sections["solver"] = {"pencils": list(args.pencils)}
    return updated(cfg, **sections) if sections else cfg


def _check_store(cfg: RunConfig, restart: bool) -> None:
    """The store a run writes: one the workers can reach; with ``restart`` an existing one holding a
    checkpoint, writable and made by a matching configuration, else a new one that can be created."""
    store_path = cfg.output.store
    if store_path and str(store_path).startswith("memory://") and cfg.cluster.kind != "none":
        raise ValueError(f"config output.store: {store_path!r} lives in this process's memory, which the workers "
                         "of a cluster cannot write; use --cluster none, or a path or URL the workers share")
    if restart:
        from daskflow.io import store

        if not store_path:
            raise ValueError("--restart needs output.store (the store to continue)")
        if not store.has_checkpoint(store_path):
            raise ValueError(f"config output.store: {store_path!r} holds no complete checkpoint to restart from")
        _check_writable(store_path, existing=True)
        from daskflow.simulation import check_restart

        check_restart(store_path, cfg)
    elif store_path:
        from daskflow.io import store

        if store.exists(store_path):
            raise ValueError(f"config output.store: {store_path!r} already exists; use --restart to continue it or "
                             "--output NEW to start another")
        _check_writable(store_path)


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

    if cfg.output.store and not store.exists(cfg.output.store):
        _check_writable(cfg.output.store)
    print(f"{args.config}: valid ({'x'.join(map(str, cfg.grid.shape))} cells, "
          f"pencils {cfg.to_dict()['solver']['pencils']}, output {cfg.output.store or 'none'})")
    if CONSOLE.verbosity >= 0:  # -q: the verdict only
        print(_resolved(cfg))
    return 0


def _resolved(cfg: RunConfig) -> str:
    """The configuration as a run would use it (every default filled in), and the memory it needs."""
    import yaml
    from dask.utils import format_bytes

    from daskflow import resources

    per_worker, setup = resources.worker_bytes(cfg), resources.setup_bytes(cfg)
    memory = (f"# memory: about {format_bytes(per_worker)} per worker (one pencil) during a time step, on the GPU "
              f"when the run is on GPUs; {format_bytes(setup)} on this host to build the initial fields")
    return f"{memory}\n{yaml.safe_dump(cfg.to_dict(), sort_keys=False, default_flow_style=None).rstrip()}"


def jobscript(args) -> int:
    """The batch script of the workers of ``cluster`` (``--kind`` replaces ``cluster.kind``): its
    scheduler is ``cluster.address``, or the scheduler file ``cluster.scheduler_file``, else
    ``--scheduler-file`` (default ``CONFIG-scheduler.json`` in the current directory)."""
    args.config = config_file(args.config)
    cfg = load(args.config)
    section = (updated(cfg, cluster={"kind": args.kind}) if getattr(args, "kind", None) else cfg).cluster
    default = getattr(args, "scheduler_file", None) or f"{Path(args.config).name.removesuffix('.yaml')}-scheduler.json"
    print(job_script(section, scheduler_file=os.path.abspath(default), config=args.config))
    return 0
