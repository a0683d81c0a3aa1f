"""Checkpoints that never lie: no checkpoint from a non-finite state, damaged slots detected and
the intact one used, torn records never trusted, store failures reported as such."""

import copy
import errno
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
import zarr
from distributed import Client, LocalCluster

from daskflow import Simulation
from daskflow.backend import to_numpy
from daskflow.io import store
from daskflow.io.output import NonFiniteState, Output, StoreError
from tests.helpers import CHANNEL

STEPS = 12


def _config(path, **output) -> dict:
    cfg = copy.deepcopy(CHANNEL)
    cfg["solver"] = {"pencils": [1, 2]}
    cfg["output"] = {"store": str(path), "scalars_every": 1, "profiles_every": 2, "fields_every": 3,
                     "checkpoint_every": 4, **output}
    return cfg


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The uninterrupted run to ``STEPS`` and its store."""
    path = tmp_path_factory.mktemp("reference") / "ref.zarr"
    return Simulation(_config(path)).run(steps=STEPS), path


@pytest.fixture
def two_checkpoints(tmp_path):
    """A store whose run stopped at step 8: slot ``a`` holds step 4, slot ``b`` (current) step 8."""
    path = tmp_path / "run.zarr"
    Simulation(_config(path)).run(steps=8)
    assert store.current_slot(str(path)) == "b"
    return path


def _assert_continues_like_the_reference(path, reference, step: int) -> None:
    sim = Simulation.restart(str(path))
    assert sim.step == step
    sim.run(steps=STEPS - step)
    straight, ref_path = reference
    for name in "uvwp":
        np.testing.assert_array_equal(to_numpy(getattr(sim.state, name)), to_numpy(getattr(straight.state, name)))
    for group in ("scalars", "profiles", "fields"):
        live, ref = zarr.open_group(str(path), mode="r")[group], zarr.open_group(str(ref_path), mode="r")[group]
        for name in ref.array_keys():
            np.testing.assert_array_equal(live[name][...], ref[name][...], err_msg=f"{group}/{name}")


def _chunk_of_u(path: Path, slot: str) -> Path:
    return next(p for p in sorted((path / "checkpoint" / slot / "u" / "c").rglob("*")) if p.is_file())


def _delete(path):
    _chunk_of_u(path, "b").unlink()


def _flip_a_byte(path):
    chunk = _chunk_of_u(path, "b")
    data = bytearray(chunk.read_bytes())
    data[len(data) // 2] ^= 0x01
    chunk.write_bytes(bytes(data))


def _truncate(path):
    chunk = _chunk_of_u(path, "b")
    chunk.write_bytes(chunk.read_bytes()[:-7])


def _break_metadata(path):
    (path / "checkpoint" / "b" / "u" / "zarr.json").write_text("{ not json")


def _bogus_pointer(path):
    (path / "checkpoint" / "CURRENT").write_text("garbage")


@pytest.mark.parametrize("damage", [_delete, _flip_a_byte, _truncate, _break_metadata])
def test_a_damaged_current_slot_falls_back_to_the_other(two_checkpoints, reference, damage, caplog):
    damage(two_checkpoints)
    with caplog.at_level("WARNING", logger="daskflow"):
        _assert_continues_like_the_reference(two_checkpoints, reference, step=4)
    message = caplog.text
    assert "slot a (step 4)" in message and "checkpoint/b/u" in message, message


def test_a_bogus_pointer_uses_the_newest_intact_slot(two_checkpoints, reference):
    _bogus_pointer(two_checkpoints)
    _assert_continues_like_the_reference(two_checkpoints, reference, step=8)


def test_no_intact_slot_names_the_store_the_slots_and_the_files(two_checkpoints):
    _delete(two_checkpoints)
    (two_checkpoints / "checkpoint" / "a" / "p" / "zarr.json").unlink()
    with pytest.raises(store.CheckpointError) as error:
        store.read_checkpoint(str(two_checkpoints))
    text = str(error.value)
    assert str(two_checkpoints) in text and "checkpoint/b/u/c" in text and "checkpoint/a/p/zarr.json" in text


def test_the_cli_reports_a_broken_store_in_one_line(two_checkpoints, tmp_path):
    _delete(two_checkpoints)
    _break_metadata(two_checkpoints)
    (two_checkpoints / "checkpoint" / "a" / "v" / "zarr.json").unlink()
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(_config(two_checkpoints)))
    proc = subprocess.run([sys.executable, "-m", "daskflow", "run", str(config), "--cluster", "none", "--restart"],
                          capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "no intact checkpoint" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_a_torn_record_never_survives_a_restart(two_checkpoints, reference):
    """What a kill between the resize and the write of a record leaves: live arrays longer than the
    committed ones, holding zeros. The restart drops them with everything after the checkpoint."""
    scalars = store.open_for_write(str(two_checkpoints))["scalars"]
    n = scalars["step"].shape[0]
    for name in ("step", "time", "dt"):
        scalars[name].resize((n + 1,))  # grown, never written: zeros
    assert scalars["step"][n] == 0
    from daskflow import open_run

    assert open_run(str(two_checkpoints))["scalars"].sizes["time"] == n  # readers see the committed records
    _assert_continues_like_the_reference(two_checkpoints, reference, step=8)


def test_a_blow_up_keeps_the_last_finite_checkpoint(tmp_path):
    path = tmp_path / "blow.zarr"
    cfg = _config(path, checkpoint_every=2, fields_every=0, profiles_every=0)
    cfg["time"] = {"dt": 0.6, "steps": 200}
    with pytest.raises(NonFiniteState, match=r"no longer finite at step (\d+).*checkpoint of step (\d+) is kept") \
            as error:
        Simulation(cfg).run()
    import re

    bad, kept = map(int, re.search(r"step (\d+).*step (\d+)", str(error.value)).groups())
    assert kept < bad
    assert store.last_step(str(path), "scalars") == bad  # the records up to the blow-up are kept
    fields, clock = store.read_checkpoint(str(path))
    assert clock["step"] == kept and all(np.isfinite(value).all() for value in fields.values())
    other = "a" if clock["slot"] == "b" else "b"
    if store.read_clock(str(path), other) is not None:  # the older slot is finite as well
        assert store.read_clock(str(path), other)["step"] < kept
    restarted = Simulation.restart(str(path))
    assert restarted.step == kept and np.isfinite(to_numpy(restarted.state.u)).all()


def test_a_blow_up_on_the_cli_says_which_checkpoint_is_kept(tmp_path):
    cfg = _config(tmp_path / "blow.zarr", checkpoint_every=2, fields_every=0, profiles_every=0)
    cfg["time"] = {"dt": 0.6, "steps": 200}
    config = tmp_path / "blow.yaml"
    config.write_text(yaml.safe_dump(cfg))
    proc = subprocess.run([sys.executable, "-m", "daskflow", "run", str(config), "--cluster", "none",
                           "--report-every", "100000"], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "no longer finite" in proc.stderr and "checkpoint of step" in proc.stderr, proc.stderr


def _full_disk_on_the_second_pencil(monkeypatch):
    original = Output.fields

    def fields(self, stepper, state):
        if stepper.domain.key == (0, 1) and state.step > 0:  # the initial snapshot goes through
            raise OSError(errno.ENOSPC, "No space left on device", "fields/u/c/0/0/1/0")
        return original(self, stepper, state)

    monkeypatch.setattr(Output, "fields", fields)


def test_a_store_failure_on_the_second_worker_reaches_the_caller(tmp_path, monkeypatch):
    _full_disk_on_the_second_pencil(monkeypatch)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        sim = Simulation(_config(tmp_path / "run.zarr"), client=client)
        with pytest.raises(StoreError, match=r"run.zarr.*failed at step 3.*No space left"):
            sim.run(steps=6)


def test_a_restart_that_adds_slices_is_refused_before_it_runs(two_checkpoints):
    with pytest.raises(ValueError, match=r"config output.slices: .*store has no slices along z"):
        Simulation.restart(str(two_checkpoints), output={"slices": {"z": [0.5]}, "slices_every": 2})
    assert json.loads((two_checkpoints / "zarr.json").read_text())  # untouched, still readable


def test_a_restart_with_other_slice_planes_is_refused(tmp_path):
    path = tmp_path / "sliced.zarr"
    Simulation(_config(path, slices_every=2, slices={"z": [0.5]})).run(steps=4)
    with pytest.raises(ValueError, match=r"config output.slices: .*along z at these planes"):
        Simulation.restart(str(path), output={"slices": {"z": [1.5]}})
    assert Simulation.restart(str(path), output={"slices": {"z": [0.5]}}).step == 4


def test_a_store_removed_during_a_run_is_reported_as_such(tmp_path):
    import shutil

    path = tmp_path / "gone.zarr"
    sim = Simulation(_config(path)).run(steps=3)
    shutil.rmtree(path)
    with pytest.raises(StoreError, match=r"gone.zarr' failed at step \d+ \((it was removed|.*does not exist)\); "
                                         r"the store is gone"):
        sim.run(steps=6)


def test_a_read_error_is_not_taken_for_damage(two_checkpoints, monkeypatch):
    """An I/O error while reading (not a missing or corrupt chunk) reaches the caller, and neither
    slot is cleared for it."""
    import zarr.core.array

    original = zarr.core.array.Array.__getitem__

    def failing(self, selection):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(zarr.core.array.Array, "__getitem__", failing)
    with pytest.raises(OSError, match="Input/output error"):
        store.read_checkpoint(str(two_checkpoints))
    monkeypatch.setattr(zarr.core.array.Array, "__getitem__", original)
    assert store.read_checkpoint(str(two_checkpoints))[1]["step"] == 8
    assert store.read_clock(str(two_checkpoints), "a")["step"] == 4


def test_a_store_this_process_did_not_create_is_never_discarded(tmp_path):
    from daskflow.runner.execute import _discard_unstarted

    path = tmp_path / "theirs.zarr"
    zarr.open_group(str(path), mode="w").attrs.update({"made": "elsewhere"})  # no checkpoint, not made here
    _discard_unstarted(str(path))
    assert path.exists()
