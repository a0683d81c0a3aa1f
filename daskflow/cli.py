"""The ``daskflow`` command: ``run``, ``validate``, ``info``, ``jobscript`` (carried out by
:mod:`daskflow.runner`) and ``poisson`` (a manufactured-solution Poisson solve, checked against the
exact solution). The parser's texts are plain (``--help`` shows them as they are), mistyped commands
and options get the closest valid one, and ``-v`` / ``-q`` set what the terminal shows
(:class:`daskflow.runner.Console`).
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import sys
import time

import numpy as np

from daskflow.backend import cupy_or_none, device_name, to_numpy
from daskflow.bc import BC_PAIRS
from daskflow.grid import Grid
from daskflow.manufactured import manufactured
from daskflow.poisson import PoissonSolver
from daskflow.poisson.plan import DTYPES, METHODS


def _to_gpu(block):
    import cupy

    return cupy.asarray(block)


def poisson_on_cluster(args, solver: PoissonSolver, rhs: np.ndarray, gpu: bool) -> tuple:
    """Solve the demo problem as a Dask graph on the embedded cluster; returns (x, seconds)."""
    import dask.array as da
    from distributed import wait

    from daskflow.cluster import start
    from daskflow.config import DEFAULTS
    from daskflow.poisson.distributed import home_chunks, persist_home
    from daskflow.run_config import ClusterConfig
    from daskflow.runner import CONSOLE

    section = ClusterConfig.from_dict({**DEFAULTS["cluster"], "kind": "local-cuda" if gpu else "local"})
    with start(section, args.pencils[0] * args.pencils[1], worker_output=CONSOLE.worker_log(),
               log_level=CONSOLE.dask_level()) as client:
        CONSOLE.say(f"daskflow: {len(client.scheduler_info()['workers'])} workers, dashboard {client.dashboard_link}")
        b = da.from_array(rhs, chunks=home_chunks(solver))
        if gpu:
            b = b.map_blocks(_to_gpu, dtype=rhs.dtype)
        b = persist_home(solver, b, client)
        wait(solver.solve(b))  # set-up and warm-up
        timings = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            x = solver.solve(b)
            wait(x)
            timings.append(time.perf_counter() - start)
        return x.map_blocks(to_numpy, dtype=rhs.dtype).compute(), float(np.median(timings))


def poisson_demo(args: argparse.Namespace) -> dict:
    gpu = cupy_or_none() if args.device in ("auto", "gpu") else None
    if args.device == "gpu" and gpu is None:
        raise SystemExit("daskflow poisson: --device gpu needs CuPy and a CUDA device")
    grid = Grid(tuple(args.shape), tuple(args.lengths), z_stretch=args.stretch)
    solver = PoissonSolver(grid, tuple(args.bc), "ccc", method=args.method, pencils=tuple(args.pencils),
                           dtype=args.dtype, granularity=args.granularity)
    if args.cluster == "local":
        exact, rhs = (v.astype(args.dtype, order="F") for v in manufactured(grid, args.bc))
        x, seconds = poisson_on_cluster(args, solver, rhs, gpu is not None)
        residual = float(np.linalg.norm(solver.apply(x.astype(args.dtype, order="F")) - solver.compatible(rhs))
                         / np.linalg.norm(solver.compatible(rhs)))
        err = x - exact
        if solver.plan.singular:
            err -= err.mean()
        return _report(args, grid, gpu or np, residual, float(np.abs(err).max()), seconds, "local Dask cluster")
    xp = gpu or np
    exact, rhs = (xp.asarray(v, dtype=args.dtype, order="F") for v in manufactured(grid, args.bc))
    x = solver.solve(rhs)  # warm-up (plans, kernels)
    timings = []
    for _ in range(args.repeat):
        if gpu is not None:
            gpu.cuda.Device().synchronize()
        start = time.perf_counter()
        x = solver.solve(rhs)
        if gpu is not None:
            gpu.cuda.Device().synchronize()
        timings.append(time.perf_counter() - start)
    target = solver.compatible(rhs)
    residual = float(xp.linalg.norm(solver.apply(x) - target) / xp.linalg.norm(target))
    err = to_numpy(x) - to_numpy(exact)
    if solver.plan.singular:
        err -= err.mean()
    return _report(args, grid, xp, residual, float(np.abs(err).max()), float(np.median(timings)), "in process")


def _report(args, grid: Grid, xp, residual: float, error: float, seconds: float, where: str) -> dict:
    return {
        "device": device_name(xp),
        "ran": where,
        "shape": list(grid.shape),
        "bc": list(args.bc),
        "method": args.method,
        "pencils": list(args.pencils),
        "granularity": args.granularity,
        "dtype": args.dtype,
        "relative_residual": residual,
        "max_error_vs_exact": error,
        "seconds_per_solve": seconds,
    }


DESCRIPTION = """\
Direct numerical simulation of wall turbulence (incompressible Navier-Stokes, staggered finite
differences, pencil decomposition) on Dask: on this machine, on GPUs, or on a batch system."""

EPILOG = """\
examples:
  daskflow run channel-small                the shipped 48 x 32 x 32 channel, embedded cluster
  daskflow run run.yaml --restart           continue from the latest checkpoint of its store
  daskflow validate run.yaml                check a configuration, print it with its defaults
  daskflow jobscript run.yaml --kind slurm  the batch script of one node of workers
  daskflow info                             versions, GPUs, NCCL and UCX, default cluster

Messages: daskflow's own lines go to the terminal; Dask's warnings and log messages (the workers'
included) go to the run's log file, STORE.log beside its store, and reach the terminal with -v.
A failure is one line; -v also prints its traceback. -q leaves errors and the final result."""


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors suggest the closest valid command, choice or option."""

    def error(self, message: str):
        chosen = re.search(r"argument ([^:]+): invalid choice: '([^']*)'", message)
        if chosen:
            for action in self._actions:
                names = [*action.option_strings, action.dest, action.metavar or ""]
                if action.choices and chosen.group(1) in names + ["/".join(action.option_strings)]:
                    close = difflib.get_close_matches(chosen.group(2), [str(c) for c in action.choices], n=1)
                    if close:
                        message = f"{message}; did you mean {close[0]!r}?"
                    break
        super().error(message)

    def reject_unknown(self, words: list[str]):
        """Refuse the words it did not recognise, each option with the closest one this parser has."""
        known = [option for action in self._actions for option in action.option_strings]
        guesses = {}
        for word in words:
            if word.startswith("-"):
                close = difflib.get_close_matches(word.split("=", 1)[0], known, n=1)
                if close:
                    guesses[word] = close[0]
        hint = ""
        if len(guesses) == 1:
            hint = f"; did you mean {next(iter(guesses.values()))}?"
        elif guesses:
            hint = f"; did you mean {', '.join(f'{right} for {wrong}' for wrong, right in guesses.items())}?"
        self.error(f"unrecognized arguments: {' '.join(words)}{hint}")


def _parser() -> Parser:
    """The ``daskflow`` parser: one sub-parser per command (``parser.commands``), each taking ``-v`` and
    ``-q`` like the parser itself."""
    from daskflow.version import __version__

    verbosity = _verbosity_options()
    parser = Parser(prog="daskflow", description=DESCRIPTION, epilog=EPILOG, parents=[verbosity],
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"daskflow {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=Parser)
    parser.commands = {}

    def command(name: str, text: str, description: str | None = None):
        parser.commands[name] = sub.add_parser(name, help=text, description=description or text,
                                               parents=[verbosity])
        return parser.commands[name]

    _run_options(command("run", "run a configured simulation (YAML), on an embedded cluster by default",
                         "Run the simulation a YAML configuration describes. Progress goes to the terminal, the "
                         "final result (steps, time, dt, store) to standard output as JSON, Dask's messages to "
                         "STORE.log beside a local store (a temporary file otherwise, kept only when the run "
                         "fails)."))
    v = command("validate", "check a configuration without starting anything",
                "Check a configuration and print it as a run would use it (every default filled in), with the "
                "memory it needs; -q prints the verdict only.")
    v.add_argument("config", help="YAML configuration file, or the name of a shipped example")
    command("info", "versions, GPUs, NCCL and UCX, the default cluster")
    _jobscript_options(command("jobscript", "print the batch script of one node of workers (SLURM or PBS)",
                               "Print the batch script dask-jobqueue writes for one node of the configuration's "
                               "workers. The workers join the scheduler at cluster.address, or the one named in a "
                               "scheduler file; the script's first comments say how to start that scheduler and "
                               "the run."))
    _poisson_options(command("poisson", "solve a manufactured Poisson problem and report accuracy and speed"))
    return parser


def _verbosity_options() -> argparse.ArgumentParser:
    """``-v`` / ``-q``, shared by the parser and every command (a parent parser)."""
    verbosity = argparse.ArgumentParser(add_help=False)
    verbosity.add_argument("-v", "--verbose", action="count", default=argparse.SUPPRESS,
                           help="show Dask's warnings and log messages and the traceback of an error (-vv: Dask's "
                                "info messages too)")
    verbosity.add_argument("-q", "--quiet", action="count", default=argparse.SUPPRESS,
                           help="show only errors and the final result")
    return verbosity


def _run_options(r: Parser) -> None:
    """The arguments of ``daskflow run``: the configuration and what the command line overrides in it."""
    r.add_argument("config", help="YAML configuration file, or the name of a shipped example (channel-small)")
    r.add_argument("--steps", type=int, help="override time.steps: the run's length in steps from its initial "
                   "state (a restart continues to the same final step)")
    r.add_argument("--output", help="override output.store")
    r.add_argument("--pencils", type=int, nargs=2, metavar=("PY", "PZ"), help="override solver.pencils")
    r.add_argument("--restart", action="store_true",
                   help="continue the store's run from its latest intact checkpoint, to time.steps (or "
                        "time.end_time); the grid, boundaries, nu and dtype must be the store's")
    r.add_argument("--cluster", default=None,
                   help="override cluster.kind: auto (default: embedded cluster, one worker per pencil; with "
                        "solver.pencils auto one GPU worker for a grid that fits one GPU), none (in process), local, "
                        "local-cuda, slurm, pbs, a scheduler address, or scheduler-file:PATH")
    r.add_argument("--report-every", type=int, default=0,
                   help="steps between progress lines (default: a line about every 2 s)")


def _jobscript_options(j: Parser) -> None:
    """The arguments of ``daskflow jobscript``: the configuration, the batch system and the scheduler file."""
    j.add_argument("config", help="YAML configuration file, or the name of a shipped example")
    j.add_argument("--kind", choices=["slurm", "pbs"], help="the batch system (overrides cluster.kind)")
    j.add_argument("--scheduler-file", metavar="PATH",
                   help="where the scheduler writes its address, when the configuration gives neither "
                        "cluster.address nor cluster.scheduler_file (default: CONFIG-scheduler.json here)")


def _poisson_options(p: Parser) -> None:
    """The arguments of ``daskflow poisson``: the problem, the solver and where it runs."""
    p.add_argument("--shape", type=int, nargs=3, default=[64, 64, 64], metavar=("NX", "NY", "NZ"))
    p.add_argument("--lengths", type=float, nargs=3, default=[2.0, 1.0, 2.0], metavar=("LX", "LY", "LZ"))
    p.add_argument("--stretch", type=float, default=2.0, help="z stretching (0 = uniform)")
    p.add_argument("--bc", nargs=3, default=["PP", "PP", "NN"], choices=BC_PAIRS, metavar="BC",
                   help=f"x y z boundary pairs, each one of {', '.join(BC_PAIRS)}")
    p.add_argument("--method", default="ptdma", choices=METHODS)
    p.add_argument("--pencils", type=int, nargs=2, default=[1, 2], metavar=("PY", "PZ"))
    p.add_argument("--dtype", default="float64", choices=DTYPES)
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "gpu"])
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--cluster", default="local", choices=["local", "none"],
                   help="local: an embedded Dask cluster with one worker per pencil (default); none: in process")
    p.add_argument("--granularity", default="fused", choices=["stage", "fused"],
                   help="Dask graph granularity on a cluster")


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except KeyboardInterrupt:  # Ctrl-C outside a run's own handling (imports, start-up)
        print("daskflow: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader of the output went away (daskflow validate X | head)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _main(argv: list[str] | None) -> int:
    from daskflow.runner import CONSOLE

    parser = _parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        parser.commands[args.command].reject_unknown(unknown)
    CONSOLE.verbosity = getattr(args, "verbose", 0) - getattr(args, "quiet", 0)
    prefix = f"daskflow {args.command}"
    try:
        return _command(args)
    except ValueError as exc:  # configuration and input errors: their message names the setting
        CONSOLE.error(f"{prefix}: {' '.join(str(exc).split())}")
        return 2
    except BrokenPipeError:  # the reader of the output went away: not a failure of the command
        raise
    except Exception as exc:  # noqa: BLE001 - anything else: one line (the traceback with -v)
        CONSOLE.failure(prefix, exc)
        return 1
    finally:
        CONSOLE.close()


def _command(args) -> int:
    if args.command in ("run", "validate", "info", "jobscript"):
        from daskflow.runner import info, jobscript, run, validate

        return {"run": run, "validate": validate, "info": info, "jobscript": jobscript}[args.command](args)
    from daskflow.runner import CONSOLE

    if args.cluster == "local" and args.pencils[0] * args.pencils[1] > 64:
        raise ValueError("--pencils asks for more than 64 workers")
    if args.cluster == "local":
        import tempfile

        fd, path = tempfile.mkstemp(prefix="daskflow-poisson-", suffix=".log")
        os.close(fd)
        CONSOLE.open_log(path, keep=False)  # Dask's messages; kept only if the solve fails
    result = poisson_demo(args)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
