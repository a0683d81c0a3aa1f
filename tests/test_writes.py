"""The store's write queue: order, failures and the bound on waiting writes; a run of one pencil
writing from its own thread leaves the same store as one that waits for every write."""

import copy
import threading

import dask
import numpy as np
import pytest
import xarray as xr
import zarr

from daskflow import Simulation
from daskflow.io import store
from daskflow.io.output import StoreError
from daskflow.io.writes import WriteQueue
from tests.helpers import CHANNEL


@pytest.mark.parametrize("background", [True, False])
def test_writes_run_in_submission_order(background):
    queue, done = WriteQueue(background), []
    for i in range(20):
        queue.submit(lambda i=i: done.append((i, threading.current_thread().name)))
    queue.close()
    assert [i for i, _ in done] == list(range(20))
    assert {name.startswith("daskflow-store") for _, name in done} == {background}


def test_a_failed_write_fails_the_run_and_the_writes_after_it_do_not_run():
    """A checkpoint queued after a lost record must not become the one a restart continues from."""
    queue, done = WriteQueue(True), []
    gate = threading.Event()

    def failing():
        gate.wait()
        raise OSError("disk full")

    queue.submit(lambda: done.append(0))
    queue.submit(failing)
    queue.submit(lambda: done.append(2))
    gate.set()
    with pytest.raises(OSError, match="disk full"):
        queue.drain()
    queue.submit(lambda: done.append(3))
    queue.close()
    assert done == [0]


def test_close_without_raising_logs_the_failure(caplog):
    queue = WriteQueue(True)
    queue.submit(lambda: 1 / 0)
    queue.close(raise_errors=False)
    assert "a store write failed" in caplog.text


def test_the_loop_waits_once_depth_writes_are_waiting():
    queue, gate = WriteQueue(True), threading.Event()
    queue.submit(gate.wait)  # the thread is busy until the gate opens
    for _ in range(WriteQueue.depth - 1):
        queue.submit(lambda: None)
    entering, submitted = threading.Event(), threading.Event()

    def one_more():
        entering.set()
        queue.submit(lambda: None)
        submitted.set()

    caller = threading.Thread(target=one_more)
    caller.start()
    entering.wait()
    assert not submitted.wait(0.2)  # held back while depth writes wait (a slow machine only holds it longer)
    gate.set()
    caller.join()
    assert submitted.is_set()
    queue.close()


def _config(path):
    cfg = copy.deepcopy(CHANNEL)
    cfg["time"].update(implicit_diffusion="z")
    cfg["output"] = {"store": str(path), "scalars_every": 1, "profiles_every": 2, "fields_every": 3,
                     "checkpoint_every": 4, "slices_every": 2, "slices": {"z": [0.5], "y": [1.0]}}
    return cfg


def _records(path):
    groups = ["scalars", "profiles", "fields", "slices/z", "slices/y"]
    return {group: xr.open_zarr(str(path), group=group).load() for group in groups}


def test_the_store_thread_writes_what_the_waiting_loop_writes(tmp_path):
    with dask.config.set({"daskflow.output-thread": False}):
        Simulation(_config(tmp_path / "waiting.zarr")).run(steps=9).run(steps=4)
    Simulation(_config(tmp_path / "thread.zarr")).run(steps=9).run(steps=4)
    waiting, thread = _records(tmp_path / "waiting.zarr"), _records(tmp_path / "thread.zarr")
    assert list(thread["fields"]["step"].values) == [0, 3, 6, 9, 12]
    for group in waiting:
        xr.testing.assert_identical(thread[group], waiting[group])
    clocks = [store.read_clock(str(tmp_path / name), store.current_slot(str(tmp_path / name)))
              for name in ("waiting.zarr", "thread.zarr")]
    assert clocks[0] == clocks[1] and clocks[0]["step"] == 12
    for name in store.FIELD_DIMS:
        slots = [zarr.open_group(str(tmp_path / run), mode="r")["checkpoint"][clock_slot][name][...]
                 for run, clock_slot in (("waiting.zarr", store.current_slot(str(tmp_path / "waiting.zarr"))),
                                         ("thread.zarr", store.current_slot(str(tmp_path / "thread.zarr"))))]
        np.testing.assert_array_equal(slots[0], slots[1])


def test_a_store_removed_under_the_thread_fails_the_run_naming_it(tmp_path):
    import shutil

    path = tmp_path / "gone.zarr"
    sim = Simulation(_config(path)).run(steps=2)
    shutil.rmtree(path)
    with pytest.raises(StoreError, match="gone.zarr"):
        sim.run(steps=6)


def test_grow_time_and_write_together_in_one_round_trip_each(tmp_path):
    group = zarr.open_group(str(tmp_path / "g.zarr"), mode="w")
    for name, dtype in (("time", "f8"), ("step", "i8")):
        group.create_array(name, shape=(0,), chunks=(4,), dtype=dtype)
    group.create_array("u", shape=(0, 3, 2), chunks=(1, 3, 2), dtype="f8")
    arrays = {name: group[name] for name in ("time", "step", "u")}
    for k in range(3):
        index = store.grow_time(arrays, ("time", "step", "u"), 0.5 * k, 10 + k)
        assert index == k and arrays["u"].shape == (k + 1, 3, 2)  # the arrays held open know their length
        store.write_together([(arrays["u"], (index, slice(0, 3), slice(0, 2)), np.full((3, 2), float(k)))])
    reread = zarr.open_group(str(tmp_path / "g.zarr"), mode="r")
    np.testing.assert_array_equal(reread["time"][:], [0.0, 0.5, 1.0])
    np.testing.assert_array_equal(reread["step"][:], [10, 11, 12])
    np.testing.assert_array_equal(reread["u"][:, 0, 0], [0.0, 1.0, 2.0])


def test_a_store_that_fails_mid_run_keeps_the_last_good_checkpoint_and_its_records(tmp_path, monkeypatch):
    """A record flush fails (a full disk, say) inside the step-8 checkpoint: no later write runs,
    the writer's thread ends, and the store still restarts from step 4 with no record skipped."""
    from daskflow.io import output

    path = tmp_path / "full.zarr"
    sim = Simulation(_config(path)).run(steps=5)  # checkpoint of step 4 on disk
    calls = []

    def full_disk(arrays, records):
        calls.append(len(records))
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(output.store, "append_records", full_disk)
    with pytest.raises(StoreError, match="full.zarr"):
        sim.run(steps=9)
    assert len(calls) == 1  # the writes queued after the failed one never ran
    assert not any(t.name.startswith("daskflow-store") for t in threading.enumerate())
    monkeypatch.undo()
    assert store.read_clock(str(path), store.current_slot(str(path)))["step"] == 4
    resumed = Simulation.restart(path)
    assert resumed.step == 4
    steps = xr.open_zarr(str(path), group="scalars")["step"].values
    assert list(steps) == list(range(1, 5))


def test_a_checkpoint_of_all_zero_fields_has_every_chunk_on_disk(tmp_path):
    """The pressure is zero at the start: its checkpoint chunks are written all the same (a missing
    chunk marks a damaged checkpoint), without zarr's process-wide setting."""
    path = tmp_path / "zero.zarr"
    sim = Simulation(_config(path))
    sim.checkpoint()
    slot = store.current_slot(str(path))
    pressure = zarr.open_group(str(path), mode="r")["checkpoint"][slot]["p"]
    assert not pressure[...].any()
    chunk_files = [f for f in (path / "checkpoint" / slot / "p").rglob("*") if f.is_file() and f.name != "zarr.json"]
    assert len(chunk_files) == pressure.nchunks
    assert zarr.config.get("array.write_empty_chunks") is False
    assert Simulation.restart(path).step == 0
