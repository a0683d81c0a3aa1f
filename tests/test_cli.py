"""The command line, run for real in a subprocess (the README's main job)."""

import json
import subprocess
import sys


def _run(*args: str, timeout: float = 300):
    return subprocess.run([sys.executable, "-m", "daskflow", *args], capture_output=True, text=True,
                          timeout=timeout)


def test_poisson_demo_on_an_embedded_cluster():
    proc = _run("poisson", "--shape", "24", "16", "16", "--pencils", "1", "2", "--device", "cpu")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["ran"] == "local Dask cluster"
    assert result["relative_residual"] < 1e-12
    assert result["max_error_vs_exact"] < 0.05  # second-order discretisation error at 16 cells
    assert "dashboard" in proc.stderr


def test_poisson_demo_in_process_with_ftm():
    proc = _run("poisson", "--shape", "16", "16", "16", "--pencils", "2", "2", "--method", "ftm",
                "--cluster", "none", "--device", "cpu", "--bc", "DD", "NN", "ND")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["relative_residual"] < 1e-12


def test_bad_input_is_a_clear_error_before_any_cluster():
    proc = _run("poisson", "--shape", "16", "16", "16", "--pencils", "1", "12", "--device", "cpu")
    assert proc.returncode == 2
    assert "pencils" in proc.stderr and "P-TDMA needs at least two z points" in proc.stderr
    assert "Traceback" not in proc.stderr and "dashboard" not in proc.stderr
    proc = _run("poisson", "--bc", "PN", "PP", "NN")
    assert proc.returncode == 2 and "invalid choice" in proc.stderr


# ---------------------------------------------------------------------------- help, typos, verbosity, errors

def _small(tmp_path, name="run.yaml", **cluster):
    import yaml

    from tests.helpers import CHANNEL

    cfg = {**CHANNEL, "grid": {**CHANNEL["grid"], "shape": [16, 8, 16]}, "time": {**CHANNEL["time"], "steps": 4},
           "output": {"store": str(tmp_path / "run.zarr"), "fields_every": 4, "checkpoint_every": 4},
           "cluster": cluster}
    path = tmp_path / name
    path.write_text(yaml.safe_dump(cfg))
    return path


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def test_help_is_plain_text(capsys):
    """``--help`` of the command and of every subcommand: no reStructuredText (``literal``, :role:`x`)."""
    import re

    import pytest

    from daskflow.cli import main

    proc = _run("--help")
    assert proc.returncode == 0 and "daskflow run" in proc.stdout and "-v, --verbose" in proc.stdout
    texts = [proc.stdout]
    for command in ("run", "validate", "info", "jobscript", "poisson"):
        with pytest.raises(SystemExit) as exit_:
            main([command, "--help"])
        assert exit_.value.code == 0
        texts.append(capsys.readouterr().out)
    for text in texts:
        assert "``" not in text and not re.search(r":\w+:`", text), text


def test_mistyped_commands_options_and_values_get_the_closest_valid_one(tmp_path):
    proc = _run("rn", "channel-small")
    assert proc.returncode == 2 and "did you mean 'run'?" in proc.stderr
    proc = _run("run", "channel-small", "--stpes", "3")
    assert proc.returncode == 2 and "usage: daskflow run" in proc.stderr and "did you mean --steps?" in proc.stderr
    proc = _run("poisson", "--method", "ftn")
    assert proc.returncode == 2 and "did you mean 'ftm'?" in proc.stderr
    store = str(tmp_path / "x.zarr")
    for args, expected in ((["chanel-small", "--output", store], "did you mean 'channel-small'?"),
                           (["channel-small", "--output", store, "--cluster", "lcoal"], "did you mean 'local'?"),
                           (["channel-small", "--output", "memory://x/run.zarr"], "--cluster none")):
        proc = _run("run", *args)  # a store in this process's memory: the workers cannot reach it
        assert proc.returncode == 2 and len(_lines(proc.stderr)) == 1 and expected in proc.stderr, proc.stderr
    assert list(tmp_path.iterdir()) == []  # refused before anything was written


def test_dask_messages_go_to_the_log_and_reach_the_terminal_with_verbose(tmp_path):
    """A warning of Dask's (the dashboard's port is taken) stays out of the terminal and goes to
    ``STORE.log`` beside the store; ``-v`` shows it; ``-q`` leaves the final result only."""
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        config = _small(tmp_path, dashboard_address=f"127.0.0.1:{taken.getsockname()[1]}")
        proc = _run("run", str(config), "--cluster", "local", "--pencils", "1", "2", "--steps", "2")
        assert proc.returncode == 0, proc.stderr
        assert "already in use" not in proc.stderr and "distributed" not in proc.stderr
        assert "dashboard" in proc.stderr and "step 2" in proc.stderr and "(log " in proc.stderr
        log = (tmp_path / "run.zarr.log").read_text()
        assert "already in use" in log and "distributed.scheduler" in log and "step 2" in log
        proc = _run("run", str(config), "--cluster", "local", "--pencils", "1", "2", "--restart", "--steps", "3",
                    "-v")
        assert proc.returncode == 0 and "already in use" in proc.stderr, proc.stderr
    proc = _run("-q", "run", str(config), "--cluster", "none", "--restart", "--steps", "4")
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert json.loads(proc.stdout)["steps"] == 4


def test_a_failure_on_a_worker_is_one_line_and_verbose_shows_the_traceback(tmp_path):
    """A store that a worker cannot write (a file where a chunk folder of ``fields/u`` belongs): the
    run stops with one line naming the store, the step, the kept checkpoint, what to do and the log,
    exit 1; the workers' tracebacks go to the log; ``-v`` prints them and the run's traceback."""
    config = _small(tmp_path)
    proc = _run("run", str(config), "--cluster", "none", "-q")
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    chunks = tmp_path / "run.zarr" / "fields" / "u" / "c"
    import shutil

    shutil.rmtree(chunks)
    chunks.write_text("")  # the next snapshot cannot create its chunk folder there
    restart = ("run", str(config), "--cluster", "local", "--pencils", "1", "2", "--restart", "--steps", "8")
    proc = _run(*restart, "-q")
    assert proc.returncode == 1, proc.stderr
    (line,) = _lines(proc.stderr)
    assert "output store" in line and "failed at step 8" in line and "Not a directory" in line, line
    assert "checkpoint of step 4 is kept" in line and "restart" in line and "run.zarr.log" in line, line
    log = (tmp_path / "run.zarr.log").read_text()
    assert "Compute Failed" in log and "Traceback" in log  # the workers' and the run's
    proc = _run(*restart)  # default verbosity: progress lines, then the same one line at the end
    assert proc.returncode == 1 and "Traceback" not in proc.stderr and "Compute Failed" not in proc.stderr
    assert "failed at step 8" in _lines(proc.stderr)[-1]
    proc = _run(*restart, "-v")
    assert proc.returncode == 1 and "Traceback" in proc.stderr and "NotADirectoryError" in proc.stderr
    assert "Compute Failed" in proc.stderr  # the workers' own messages, on the terminal with -v


def test_an_error_is_described_in_one_line(capsys):
    """What the one line says: daskflow's own errors as they are, others by their type; an error Dask
    could not rebuild on the client (a plain Exception holding its repr) by its own name."""
    from daskflow.runner import Console, describe

    assert describe(RuntimeError("x")) == ("RuntimeError: x", False)
    assert describe(Exception("StoreError(\"output store 'a' failed at step 3 (disk full)\")")) == \
        ("output store 'a' failed at step 3 (disk full)", True)
    assert describe(Exception("ZeroDivisionError('division\\nby zero')")) == ("ZeroDivisionError: division by zero",
                                                                            False)
    console = Console(verbosity=0)
    try:
        {}["missing"]
    except KeyError as exc:
        console.failure("daskflow run", exc, "in the steps after step 7")
    err = capsys.readouterr().err
    assert err == "daskflow run: failed in the steps after step 7: KeyError: 'missing' (-v shows the traceback)\n"
    console.verbosity = 1
    try:
        {}["missing"]
    except KeyError as exc:
        console.failure("daskflow run", exc)
    err = capsys.readouterr().err
    assert err.startswith("Traceback") and err.endswith("daskflow run: failed: KeyError: 'missing'\n")


def test_a_quiet_run_over_ucx_prints_its_result_only(tmp_path):
    """With ``cluster.comm: ucx`` on CPU workers (where UCXX imports) the workers' UCX stays quiet
    too: UCXX sets a variable that a UCX without its CUDA components would warn about in every
    worker; ``-q`` leaves the result alone on stdout and nothing on stderr."""
    import importlib.util

    import pytest

    if importlib.util.find_spec("ucxx") is None:
        pytest.skip("needs UCXX (ucxx-cu13 or ucxx-cu12)")
    config = _small(tmp_path, kind="local", comm="ucx", tls=False, protocol="tcp")
    proc = _run("-q", "run", str(config), "--pencils", "1", "2")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "" and "UCX" not in proc.stdout, (proc.stdout, proc.stderr)
    assert json.loads(proc.stdout)["steps"] == 4
