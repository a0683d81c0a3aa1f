"""What ``daskflow run`` promises about the end of a run, restarts and stop requests (in
subprocesses, the real CLI; every wait is for a step count, never a time)."""

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import yaml
import zarr

from daskflow.io import store
from daskflow.runner.execute import _Stop
from tests.helpers import CHANNEL

HANG_GUARD = 600  # seconds: only against a hung test, never a speed requirement


def _config(tmp_path, name="run.yaml", **sections) -> Path:
    cfg = {key: dict(value) for key, value in CHANNEL.items()}
    cfg["grid"] = {**CHANNEL["grid"], "shape": [16, 8, 16]}
    cfg["output"] = {"store": str(tmp_path / "run.zarr"), "scalars_every": 1, "profiles_every": 2,
                     "fields_every": 4, "slices_every": 3, "slices": {"z": [0.5]}, "checkpoint_every": 5}
    for key, value in sections.items():
        cfg[key] = {**cfg.get(key, {}), **value}
    path = tmp_path / name
    path.write_text(yaml.safe_dump(cfg))
    return path


def _daskflow(*args, cwd):
    return subprocess.run([sys.executable, "-m", "daskflow", *map(str, args)], capture_output=True, text=True,
                          timeout=HANG_GUARD, cwd=cwd)


def _summary(proc) -> dict:
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


def test_a_normal_end_keeps_the_final_state_and_a_restart_continues_bit_for_bit(tmp_path):
    config = _config(tmp_path, time={"steps": 7})
    first = _daskflow("run", config, "--cluster", "none", cwd=tmp_path)
    assert _summary(first)["steps"] == 7
    assert "16x8x16 cells" in first.stderr and "in process" in first.stderr and "from step 0 to step 7" in first.stderr
    fields, clock = store.read_checkpoint(str(tmp_path / "run.zarr"))
    assert clock["step"] == 7  # the last step, although checkpoint_every is 5
    assert store.last_step(str(tmp_path / "run.zarr"), "fields") == 7  # and its fields
    proc = _daskflow("run", config, "--cluster", "none", "--restart", "--steps", 12, cwd=tmp_path)
    assert "restarting" in proc.stderr and "from step 7" in proc.stderr and "running to step 12" in proc.stderr
    assert _summary(proc)["steps"] == 12
    reference = tmp_path / "ref"
    reference.mkdir()
    straight = _config(reference, time={"steps": 12})
    _summary(_daskflow("run", straight, "--cluster", "none", cwd=reference))
    for group in ("scalars", "profiles", "slices/z"):
        xr.testing.assert_identical(xr.open_zarr(str(tmp_path / "run.zarr"), group=group).load(),
                                    xr.open_zarr(str(reference / "run.zarr"), group=group).load())
    restarted = zarr.open_group(str(tmp_path / "run.zarr"), mode="r")["fields"]
    straight_fields = zarr.open_group(str(reference / "run.zarr"), mode="r")["fields"]
    assert list(restarted["step"][...]) == [0, 4, 7, 8, 12] and list(straight_fields["step"][...]) == [0, 4, 8, 12]
    np.testing.assert_array_equal(restarted["u"][-1], straight_fields["u"][-1])


def test_time_steps_is_the_length_of_the_run_also_on_restart(tmp_path):
    config = _config(tmp_path, time={"steps": 6})
    _summary(_daskflow("run", config, "--cluster", "none", cwd=tmp_path))
    proc = _daskflow("run", config, "--cluster", "none", "--restart", cwd=tmp_path)
    assert _summary(proc)["steps"] == 6 and "running to step 6" in proc.stderr  # nothing left to run
    steps = xr.open_zarr(str(tmp_path / "run.zarr"), group="scalars")["step"].values
    assert list(steps) == list(range(1, 7))


@pytest.mark.parametrize(("change", "setting"), [
    ({"grid": {"shape": [16, 8, 24]}}, "grid.shape"),
    ({"physics": {"nu": 0.02}}, "physics.nu"),
    ({"boundaries": {"preset": "couette"}}, "boundaries"),
])
def test_an_incompatible_restart_is_refused_naming_the_setting_and_both_values(tmp_path, change, setting):
    _summary(_daskflow("run", _config(tmp_path, time={"steps": 2}), "--cluster", "none", cwd=tmp_path))
    changed = _config(tmp_path, "changed.yaml", time={"steps": 4}, **change)
    before = sorted(p.name for p in (tmp_path / "run.zarr" / "scalars").rglob("*"))
    proc = _daskflow("run", changed, "--cluster", "none", "--restart", cwd=tmp_path)
    assert proc.returncode == 2 and f"config {setting}" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    new = str(list(change.values())[0].popitem()[1])
    assert new.replace(" ", "") in proc.stderr.replace(" ", ""), proc.stderr  # the configured value is named
    assert sorted(p.name for p in (tmp_path / "run.zarr" / "scalars").rglob("*")) == before  # nothing written


def test_slices_after_a_restart_have_no_duplicate_times(tmp_path):
    config = _config(tmp_path, time={"steps": 8}, output={"checkpoint_every": 2, "slices_every": 1})
    _summary(_daskflow("run", config, "--cluster", "none", cwd=tmp_path))
    path = str(tmp_path / "run.zarr")
    store.set_current(path, "a" if store.current_slot(path) == "b" else "b")  # as if killed after step 6
    assert store.read_checkpoint(path)[1]["step"] == 6
    _summary(_daskflow("run", config, "--cluster", "none", "--restart", "--steps", 10, cwd=tmp_path))
    times = xr.open_zarr(path, group="slices/z")["step"].values
    assert list(times) == list(range(1, 11))


@contextlib.contextmanager
def _running(command: list, cwd):
    """A ``daskflow run`` in its own process group; killed on the way out if still running, so a
    failed test leaves no 100000-step run behind."""
    proc = subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()


def _committed_steps(path: Path) -> int:
    try:
        return xr.open_zarr(str(path), group="scalars")["step"].size
    except (OSError, ValueError, KeyError):  # not created yet
        return 0


@pytest.mark.parametrize("target", ["command", "process group"])
def test_sigterm_stops_after_the_current_step_whatever_the_segment(tmp_path, target):
    """SIGTERM to the command alone (in process), or to its whole process group with an embedded
    two-worker cluster (what a batch system does at the walltime): the run stops long before its
    100000-step progress segment ends, writes a checkpoint of the step it stopped at, prints the
    command that resumes it, and exits 0."""
    config = _config(tmp_path, time={"steps": 100000}, output={"checkpoint_every": 1})
    cluster = ["--cluster", "none"] if target == "command" else ["--cluster", "local", "--pencils", "1", "2"]
    command = [sys.executable, "-m", "daskflow", "run", str(config), *cluster, "--report-every", "100000",
               "--output", str(tmp_path / "mine.zarr")]
    with _running(command, tmp_path) as proc:
        while _committed_steps(tmp_path / "mine.zarr") < 3 and proc.poll() is None:
            try:
                proc.wait(timeout=0.1)
            except subprocess.TimeoutExpired:
                pass
        seen = _committed_steps(tmp_path / "mine.zarr")
        (proc.send_signal if target == "command" else lambda sig: os.killpg(proc.pid, sig))(signal.SIGTERM)
        out, err = proc.communicate(timeout=HANG_GUARD)
    assert proc.returncode == 0, err
    assert "SIGTERM received" in err and "Traceback" not in err
    assert f"--output {tmp_path / 'mine.zarr'}" in err and "--restart" in err  # the resume hint keeps the overrides
    summary = json.loads(out.splitlines()[-1])
    assert summary["stopped_by"] == "SIGTERM" and seen <= summary["steps"] < 100000
    _, clock = store.read_checkpoint(str(tmp_path / "mine.zarr"))
    assert clock["step"] == summary["steps"]


def test_a_signal_is_acknowledged_and_a_second_one_stops_at_once(capsys):
    before = signal.getsignal(signal.SIGTERM)
    _Stop().restore()
    assert signal.getsignal(signal.SIGTERM) is before  # the handlers are put back
    stop = _Stop()
    try:
        stop._handle(signal.SIGINT, None)  # during start-up: acknowledged, the run will not start
        assert stop.requested() and "before the first step" in capsys.readouterr().err
        with pytest.raises(KeyboardInterrupt):  # the second one
            stop._handle(signal.SIGTERM, None)
        stop = _Stop()
        stop.running = True
        stop._handle(signal.SIGTERM, None)
        assert stop.signal == "SIGTERM" and "after the current step" in capsys.readouterr().err
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def test_a_failed_start_leaves_no_store_behind(tmp_path):
    """Pencils the cluster cannot give (more than its workers): refused after the store was made;
    the store goes, and the same command with a fixed setting runs."""
    config = _config(tmp_path, time={"steps": 2}, solver={"pencils": [1, 2]}, cluster={"workers": 1})
    proc = _daskflow("run", config, "--cluster", "local", cwd=tmp_path)
    assert proc.returncode == 2 and "solver.pencils" in proc.stderr, proc.stderr
    assert not (tmp_path / "run.zarr").exists()
    assert _summary(_daskflow("run", config, "--cluster", "none", cwd=tmp_path))["steps"] == 2


@pytest.mark.parametrize("moment", [1, 2])
def test_ctrl_c_at_any_moment_of_start_up_exits_with_one_line(tmp_path, moment):
    """SIGINT once the process has got as far as ``moment`` (1: the store exists, 2: the first
    record is committed): a clean exit (stopped before the first step, or after the current one with
    a checkpoint), no traceback, no store left without a step. (A SIGINT before the interpreter has
    imported its own ``site`` module ends in CPython's fatal error, before any daskflow code runs.)"""
    config = _config(tmp_path, time={"steps": 100000}, output={"checkpoint_every": 1})
    path = tmp_path / "run.zarr"
    reached = {1: lambda: (path / "zarr.json").exists(), 2: lambda: _committed_steps(path) > 0}[moment]
    command = [sys.executable, "-m", "daskflow", "run", str(config), "--cluster", "local", "--pencils", "1", "2"]
    with _running(command, tmp_path) as proc:
        while not reached() and proc.poll() is None:
            try:
                proc.wait(timeout=0.05)
            except subprocess.TimeoutExpired:
                pass
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=HANG_GUARD)
    assert proc.returncode in (0, 130), err
    assert "Traceback" not in err and "Error" not in err, err
    assert not path.exists() or store.has_checkpoint(str(path))
