"""Zarr output of a run, restart from checkpoints, crash safety."""

import copy
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import xarray as xr
from distributed import Client, LocalCluster

from daskflow import Simulation
from daskflow.backend import to_numpy
from daskflow.io import store
from tests.helpers import CHANNEL

OUTPUT = {"scalars_every": 1, "profiles_every": 2, "fields_every": 3, "checkpoint_every": 4}


def _config(path, **time):
    cfg = copy.deepcopy(CHANNEL)
    cfg["output"] = {**OUTPUT, "store": str(path)}
    cfg["time"].update(time)
    return cfg


def _open(path, group):
    """A group as a user opens it (the store's consolidated, committed view; a warning fails the test)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return xr.open_zarr(str(path), group=group)


def test_store_layout_opens_with_xarray(tmp_path):
    path = tmp_path / "run.zarr"
    sim = Simulation(_config(path)).run(steps=6)
    g = sim.grid
    root = json.loads(json.dumps(__import__("zarr").open_group(str(path), mode="r").attrs.asdict()))
    assert root["config"] == sim.config.to_dict() and root["grid"]["shape"] == list(g.shape)
    fields = _open(path, "fields")
    assert fields["u"].dims == ("time", "xf", "y", "z") and fields["w"].dims == ("time", "x", "y", "zf")
    assert fields["v"].dims == ("time", "x", "yf", "z") and fields["p"].dims == ("time", "x", "y", "z")
    np.testing.assert_array_equal(fields["zf"], g.zf[1:])
    np.testing.assert_array_equal(fields["xf"], g.xf[1:])
    np.testing.assert_array_equal(fields["z"], g.zc)
    assert list(fields["step"].values) == [0, 3, 6] and fields["u"].dtype == np.float64
    assert fields["time"].values[0] == 0.0  # the initial state is the first snapshot
    np.testing.assert_array_equal(fields["u"].isel(time=-1).values, to_numpy(sim.state.u))
    assert fields["u"].attrs == {"long_name": "streamwise velocity", "units": "L T-1"}
    assert fields["zf"].attrs["units"] == "L" and fields["time"].attrs["units"] == "T"
    scalars = _open(path, "scalars")
    assert list(scalars["step"].values) == [1, 2, 3, 4, 5, 6]
    assert float(scalars["div_max"].max()) < 1e-12
    np.testing.assert_allclose(scalars["time"].values[-1], sim.time)
    profiles = _open(path, "profiles")
    assert profiles["u"].dims == ("time", "z") and profiles["uw"].dims == ("time", "zf")
    np.testing.assert_allclose(profiles["u"].isel(time=-1).values, to_numpy(sim.state.u).mean(axis=(0, 1)),
                               rtol=1e-12)
    assert store.current_slot(str(path)) == "a"


def test_a_run_s_commits_leave_what_a_full_consolidation_gives(tmp_path, monkeypatch):
    """Flushes re-read only the groups they changed into the root's consolidated metadata; after
    runs with every kind of record and checkpoints, it is what consolidating the whole store gives."""
    import zarr

    from daskflow.io import access

    refreshed = []
    recommit = access._recommit
    monkeypatch.setattr(access, "_recommit", lambda root, groups: refreshed.append(recommit(root, groups)) or
                        refreshed[-1])
    path = tmp_path / "run.zarr"
    cfg = _config(path)
    cfg["output"].update({"slices_every": 2, "slices": {"z": [0.5]}})
    sim = Simulation(cfg).run(steps=5)
    sim.run(steps=4)
    root = path / "zarr.json"
    incremental = json.loads(root.read_text())
    zarr.consolidate_metadata(str(path))
    assert incremental == json.loads(root.read_text())
    assert list(_open(path, "scalars")["step"].values) == list(range(1, 10))
    assert len(refreshed) > 5 and all(refreshed)  # every flush took the incremental path


def test_a_commit_of_changed_groups_falls_back_to_a_full_one(tmp_path):
    """A group the root's consolidated metadata does not list yet is consolidated with the rest."""
    import zarr

    from daskflow.io.access import commit

    root = zarr.open_group(str(tmp_path / "s.zarr"), mode="w")
    root.create_array("a", shape=(2,), dtype="f8")
    commit(str(tmp_path / "s.zarr"))
    root.create_group("new").create_array("b", shape=(3,), dtype="f8")
    root["a"].resize((5,))
    commit(str(tmp_path / "s.zarr"), changed={"new"})
    view = zarr.open_group(str(tmp_path / "s.zarr"), mode="r")
    assert view["new/b"].shape == (3,) and view["a"].shape == (5,)


def test_existing_store_is_refused_before_anything_runs(tmp_path):
    path = tmp_path / "run.zarr"
    Simulation(_config(path)).run(steps=1)
    with pytest.raises(ValueError, match="output.store"):
        Simulation(_config(path))


@pytest.mark.parametrize("implicit", ["none", "z"])
def test_restart_is_bit_for_bit(tmp_path, implicit):
    straight = Simulation(_config(tmp_path / "a.zarr", implicit_diffusion=implicit)).run(steps=8)
    first = Simulation(_config(tmp_path / "b.zarr", implicit_diffusion=implicit)).run(steps=4)
    del first
    resumed = Simulation.restart(tmp_path / "b.zarr").run(steps=4)
    assert resumed.step == 8 and resumed.time == straight.time
    for name in "uvwp":
        np.testing.assert_array_equal(to_numpy(getattr(resumed.state, name)), to_numpy(getattr(straight.state, name)))
    a, b = _open(tmp_path / "a.zarr", "scalars"), _open(tmp_path / "b.zarr", "scalars")
    np.testing.assert_array_equal(a["step"].values, b["step"].values)
    np.testing.assert_array_equal(a["kinetic_energy"].values, b["kinetic_energy"].values)


def test_a_held_cfl_step_changes_at_multiples_of_cfl_every_and_restarts_bit_for_bit(tmp_path):
    """With ``time.cfl_every: 3`` the CFL limit is evaluated before steps 0, 3, 6, ... and the step
    size is held in between; a restart from the step-4 checkpoint (inside a hold) takes the same
    steps as the uninterrupted run. With 1, the limit moves at every step."""
    held = {"cfl_every": 3, "dt_max": 1.0, "implicit_diffusion": "xyz"}  # the advective limit sets dt
    straight = Simulation(_config(tmp_path / "a.zarr", **held)).run(steps=8)
    Simulation(_config(tmp_path / "b.zarr", **held)).run(steps=4)
    resumed = Simulation.restart(tmp_path / "b.zarr").run(steps=4)
    assert resumed.step == 8 and resumed.time == straight.time
    for name in "uvwp":
        np.testing.assert_array_equal(to_numpy(getattr(resumed.state, name)), to_numpy(getattr(straight.state, name)))
    dt = _open(tmp_path / "a.zarr", "scalars")["dt"].values  # the steps numbered 1 to 8
    np.testing.assert_array_equal(_open(tmp_path / "b.zarr", "scalars")["dt"].values, dt)
    assert [dt[i] == dt[i - 1] for i in range(1, 8)] == [True, True, False, True, True, False, True]
    every = _open(Simulation(_config(tmp_path / "c.zarr", **{**held, "cfl_every": 1})).run(steps=8).config.output.store,
                  "scalars")["dt"].values
    assert not any(every[i] == every[i - 1] for i in range(1, 8))


_CHILD = """
import sys, json
from daskflow import Simulation
cfg = json.loads(sys.argv[1])
Simulation(cfg).run(steps=12)
"""


def test_kill_during_checkpoint_keeps_the_previous_one(tmp_path):
    """SIGKILL after the step-8 checkpoint's data, before its switch: restart from step 4."""
    path = tmp_path / "crash.zarr"
    env = {**os.environ, "DASKFLOW_TEST_KILL_AT_CHECKPOINT_STEP": "8"}
    proc = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(_config(path))], env=env, timeout=300,
                          capture_output=True, text=True)
    assert proc.returncode == -9, proc.stderr
    assert store.current_slot(str(path)) == "a"  # the step-4 checkpoint
    resumed = Simulation.restart(path)
    assert resumed.step == 4
    resumed.run(steps=8)
    straight = Simulation(_config(tmp_path / "straight.zarr")).run(steps=12)
    for name in "uvwp":
        np.testing.assert_array_equal(to_numpy(getattr(resumed.state, name)), to_numpy(getattr(straight.state, name)))
    steps = _open(path, "scalars")["step"].values
    assert list(steps) == list(range(1, 13))  # nothing lost, nothing duplicated
    assert list(_open(path, "fields")["step"].values) == [0, 3, 6, 9, 12], list(_open(path, "fields")["step"].values)


def test_distributed_run_writes_the_same_store(tmp_path):
    local = Simulation(_config(tmp_path / "local.zarr", implicit_diffusion="z")).run(steps=6)
    cfg = _config(tmp_path / "dist.zarr", implicit_diffusion="z")
    cfg["solver"] = {"pencils": [2, 2]}
    with LocalCluster(n_workers=4, threads_per_worker=1, dashboard_address=None) as cluster, Client(cluster) as c:
        sim = Simulation(cfg, client=c).run(steps=6)
        resumed_fields = to_numpy(sim.u.compute())
    np.testing.assert_allclose(resumed_fields, to_numpy(local.state.u), rtol=0, atol=1e-12)
    for group, names in (("fields", "uvwp"), ("scalars", ["bulk_velocity", "kinetic_energy", "cfl"]),
                         ("profiles", ["u", "uu", "uw", "w"])):
        a, b = _open(tmp_path / "local.zarr", group), _open(tmp_path / "dist.zarr", group)
        np.testing.assert_array_equal(a["step"].values, b["step"].values)
        for name in names:
            np.testing.assert_allclose(b[name].values, a[name].values, rtol=1e-11, atol=1e-12)
    assert store.current_slot(str(tmp_path / "dist.zarr")) == "a"
    fields, clock = store.read_checkpoint(str(tmp_path / "dist.zarr"))
    assert clock["step"] == 4
    # the cluster-written store, group by group: dims, coordinates, attributes, dtypes
    g = local.grid
    ds = _open(tmp_path / "dist.zarr", "fields")
    assert ds["u"].dims == ("time", "xf", "y", "z") and ds["w"].dims == ("time", "x", "y", "zf")
    assert ds["u"].dtype == np.float64 and ds["step"].dtype == np.int64
    np.testing.assert_array_equal(ds["zf"], g.zf[1:])
    np.testing.assert_array_equal(ds["yf"], g.yf[1:])
    np.testing.assert_array_equal(ds["x"], g.xc)
    import zarr

    root = zarr.open_group(str(tmp_path / "dist.zarr"), mode="r").attrs.asdict()
    assert root["config"]["solver"]["pencils"] == [2, 2] and root["grid"]["shape"] == list(g.shape)


def test_distributed_restart_and_no_field_reaches_the_client(tmp_path):
    """Restart a 2x2 run from its checkpoint (equal to an uninterrupted in-process run to 1e-12; a
    restart on another decomposition is accepted), and read every worker's outgoing-transfer log:
    during runs with output nothing larger than the clock ever leaves a worker through Dask (pencils
    travel only worker to worker)."""
    cfg = _config(tmp_path / "d.zarr", implicit_diffusion="z")
    cfg["solver"] = {"pencils": [2, 2]}
    with LocalCluster(n_workers=4, threads_per_worker=1, dashboard_address=None) as cluster, Client(cluster) as c:
        c.run(lambda dask_worker: dask_worker.transfer_outgoing_log.clear())
        Simulation(cfg, client=c).run(steps=4)
        resumed = Simulation.restart(tmp_path / "d.zarr", client=c).run(steps=4)
        logs = c.run(lambda dask_worker: [entry["total"] for entry in dask_worker.transfer_outgoing_log])
        assert max((t for totals in logs.values() for t in totals), default=0) < 2000
        u_dist = to_numpy(resumed.u.compute())
    straight = Simulation(_config(tmp_path / "s.zarr", implicit_diffusion="z")).run(steps=8)
    np.testing.assert_allclose(u_dist, to_numpy(straight.state.u), rtol=0, atol=1e-12)
    other = Simulation.restart(tmp_path / "d.zarr", solver={"pencils": [1, 1]})  # another decomposition
    assert other.step == 8


def test_restart_refuses_an_incompatible_configuration(tmp_path):
    Simulation(_config(tmp_path / "r.zarr")).run(steps=4)
    with pytest.raises(ValueError, match=r"config grid.shape is \[8, 8, 24\], the store's run has \[16, 8, 24\]"):
        Simulation.restart(tmp_path / "r.zarr", grid={"shape": [8, 8, 24]})
    with pytest.raises(ValueError, match="config solver.dtype is 'float32'"):
        Simulation.restart(tmp_path / "r.zarr", solver={"dtype": "float32"})
    assert Simulation.restart(tmp_path / "r.zarr", solver={"poisson": "ftm", "pencils": [2, 1]}).step == 4


def test_slices_on_the_cluster_equal_the_fields(tmp_path):
    """Planes by coordinate, written by the pencils that hold them (2x2), match the fields."""
    cfg = _config(tmp_path / "s.zarr")
    cfg["output"].update({"slices_every": 3, "slices": {"z": [0.05, 1.0], "y": [1.1], "x": [2.0]}})
    cfg["solver"] = {"pencils": [2, 2]}
    with LocalCluster(n_workers=4, threads_per_worker=1, dashboard_address=None) as cluster, Client(cluster) as c:
        Simulation(cfg, client=c).run(steps=6)
    fields = _open(tmp_path / "s.zarr", "fields").isel(time=-1)
    g = Simulation(_config(tmp_path / "unused.zarr")).grid
    z = _open(tmp_path / "s.zarr", "slices/z").isel(time=-1)
    assert z.sizes["z"] == 2 and z["u"].dims == ("xf", "y", "z")
    for n, value in enumerate([0.05, 1.0]):
        k = int(np.argmin(np.abs(g.zc - value)))
        assert z["z"].values[n] == g.zc[k]
        np.testing.assert_array_equal(z["u"].values[:, :, n], fields["u"].values[:, :, k])
        w = fields["w"].values
        below = w[:, :, k - 1] if k > 0 else 0.0
        np.testing.assert_allclose(z["w"].values[:, :, n], 0.5 * (below + w[:, :, k]), atol=1e-15)
    y = _open(tmp_path / "s.zarr", "slices/y").isel(time=-1)
    j = int(np.argmin(np.abs(g.yc - 1.1)))
    np.testing.assert_allclose(y["v"].values[:, 0, :], 0.5 * (fields["v"].values[:, j - 1, :] +
                                                              fields["v"].values[:, j, :]), atol=1e-15)
    x = _open(tmp_path / "s.zarr", "slices/x").isel(time=-1)
    i = int(np.argmin(np.abs(g.xc - 2.0)))
    np.testing.assert_array_equal(x["p"].values[0], fields["p"].values[i])


def test_bad_slices_are_rejected():
    cfg = _config("unused.zarr")
    cfg["output"]["slices"] = {"z": [5.0]}
    with pytest.raises(ValueError, match=r"output.slices.z\[0\]"):
        Simulation(cfg)


def test_uneven_pencils_write_the_same_store(tmp_path):
    """Pencils of 3, 3, 2 planes along y (ny = 8, py = 3) write the same store as one pencil."""
    Simulation(_config(tmp_path / "l.zarr")).run(steps=6)
    cfg = _config(tmp_path / "u.zarr")
    cfg["solver"] = {"pencils": [3, 1], "poisson": "ftm"}
    with LocalCluster(n_workers=3, threads_per_worker=1, dashboard_address=None) as cluster, Client(cluster) as c:
        Simulation(cfg, client=c).run(steps=6)
    a, b = _open(tmp_path / "l.zarr", "fields"), _open(tmp_path / "u.zarr", "fields")
    for name in "uvwp":
        np.testing.assert_allclose(b[name].values, a[name].values, rtol=0, atol=1e-12)
    np.testing.assert_allclose(store.read_checkpoint(str(tmp_path / "u.zarr"))[0]["u"],
                               store.read_checkpoint(str(tmp_path / "l.zarr"))[0]["u"], rtol=0, atol=1e-12)
    assert Simulation.restart(tmp_path / "l.zarr", solver={"pencils": [3, 1]}).step == 4  # any split writes it


def test_a_failing_disk_stops_cleanly_and_keeps_the_checkpoint(tmp_path, monkeypatch):
    """An OSError from the storage layer (here a disk that fills after step 9) stops the run with a
    message naming the store and the last checkpoint, which stays readable and restartable. Small
    records are buffered, so the failure may surface at a later step of the segment."""
    import errno

    import zarr.storage

    path = tmp_path / "full.zarr"
    sim = Simulation(_config(path)).run(steps=9)
    original = zarr.storage.LocalStore.set

    async def full_disk(self, key, value):
        raise OSError(errno.ENOSPC, "No space left on device", key)

    monkeypatch.setattr(zarr.storage.LocalStore, "set", full_disk)
    with pytest.raises(RuntimeError, match=r"full.zarr.*failed at step 1[012].*checkpoint of step 8 is kept"):
        sim.run(steps=3)
    monkeypatch.setattr(zarr.storage.LocalStore, "set", original)
    resumed = Simulation.restart(path)
    assert resumed.step == 8
    resumed.run(steps=4)
    straight = Simulation(_config(tmp_path / "ok.zarr")).run(steps=12)
    np.testing.assert_array_equal(to_numpy(resumed.state.u), to_numpy(straight.state.u))


def test_fsspec_url_store(tmp_path):
    """A store given as an fsspec URL (in-memory filesystem here): written, read by xarray, restarted;
    a small snapshot is one chunk, unsharded (output.shards is accepted, checked, and needs nothing)."""
    import zarr

    url = f"memory://daskflow-{tmp_path.name}/run.zarr"
    cfg = _config(url)
    sim = Simulation(cfg).run(steps=8)
    assert store.current_slot(url) == "b"  # steps 4 then 8
    fields = xr.open_zarr(url, group="fields", consolidated=False)
    assert list(fields["step"].values) == [0, 3, 6] and np.isfinite(fields["u"].values).all()
    u = zarr.open_group(url, mode="r")["fields"]["u"]
    assert u.shards is None and u.chunks == (1, *sim.grid.shape)
    scalars = xr.open_zarr(url, group="scalars", consolidated=False)
    np.testing.assert_allclose(scalars["time"].values[-1], sim.time)
    resumed = Simulation.restart(url)
    assert resumed.step == 8
    with pytest.raises(ValueError, match="output.shards"):
        Simulation(_config(tmp_path / "x.zarr") | {"output": {**_config(tmp_path / "x.zarr")["output"],
                                                              "shards": "yes"}})


def test_record_chunks_are_whole_planes_of_at_least_a_mebibyte():
    """Snapshot and slice chunks: whole x-y planes up to the target size, evenly split; a record
    below the target is one chunk; a plane above it is cut along y; nothing below 1 MiB where the
    record is larger."""
    mib = 1 << 20
    assert store.record_chunks((48, 32, 32), 8) == (48, 32, 32)  # 384 KiB: one chunk
    assert store.record_chunks((512, 256, 144), 8) == (512, 256, 16)  # 16 MiB of 1 MiB planes, 9 chunks
    assert store.record_chunks((512, 256, 17), 8) == (512, 256, 9)  # evenly: 9 + 8 planes, not 16 + 1
    assert store.record_chunks((4096, 4096, 8), 8) == (4096, 512, 1)  # a 128 MiB plane, cut along y
    assert store.record_chunks((1, 2048, 2048), 4) == (1, 2048, 2048)  # an x slice: one 16 MiB plane
    for shape in [(512, 256, 144), (512, 256, 17), (4096, 4096, 8), (2048, 3, 2048), (96, 7, 1000), (768, 512, 1)]:
        for itemsize in (4, 8):
            chunk = store.record_chunks(shape, itemsize)
            nbytes = int(np.prod(chunk)) * itemsize
            assert chunk[0] == shape[0] and nbytes <= store.CHUNK_BYTES
            assert nbytes >= min(mib, int(np.prod(shape)) * itemsize), (shape, itemsize, chunk)
            assert chunk[1] == shape[1] or chunk[2] == 1  # whole x-y planes, or one plane cut along y


def test_snapshots_open_as_few_analysis_sized_chunks(tmp_path):
    """A user opening ``open_run(store)["fields"]`` gets one Dask chunk per snapshot of a small run
    (not one per pencil-sized Zarr chunk), and reductions are a handful of tasks."""
    from daskflow.analysis import open_run

    path = tmp_path / "run.zarr"
    cfg = _config(path)
    cfg["output"].update({"slices_every": 3, "slices": {"z": [0.05, 1.0], "x": [2.0]}})
    sim = Simulation(cfg).run(steps=6)
    ds = open_run(str(path))["fields"]
    assert ds["u"].data.chunks == ((1, 1, 1), (16,), (8,), (24,))
    assert ds["u"].data.npartitions == 3 and len(ds["u"].mean().data.__dask_graph__()) < 12
    np.testing.assert_array_equal(ds["u"].isel(time=-1).values, to_numpy(sim.state.u))
    z = open_run(str(path))["slices/z"]
    assert z["w"].data.chunks == ((1, 1), (16,), (8,), (2,))  # steps 3 and 6


def test_chunks_spanning_pencils_are_gathered_by_one_writer_on_any_decomposition(tmp_path, monkeypatch):
    """Zarr chunks that cut across pencils (forced small here: 2 y rows by 1 z plane, against uneven
    pencils of 3, 3, 2 rows) are each assembled by one worker and written once; a restart on
    another decomposition (1 x 2 pencils) writes into the same chunks. The store holds exactly the
    run's fields, equal to an uninterrupted in-process run, and slices equal the fields."""
    monkeypatch.setattr(store, "CHUNK_BYTES", 300)  # read when the store is created (here, in the client)
    out = {"slices_every": 3, "slices": {"z": [0.05, 1.0], "y": [1.1]}}
    cfg = _config(tmp_path / "c.zarr")
    cfg["output"].update(out)
    cfg["solver"] = {"pencils": [3, 1], "poisson": "ftm"}
    with LocalCluster(n_workers=3, threads_per_worker=1, dashboard_address=None) as cluster, Client(cluster) as c:
        Simulation(cfg, client=c).run(steps=4)
    with LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None) as cluster, Client(cluster) as c:
        resumed = Simulation.restart(tmp_path / "c.zarr", client=c, solver={"pencils": [1, 2], "poisson": "ptdma"})
        resumed.run(steps=5)
        final = {name: to_numpy(getattr(resumed, name).compute()) for name in "uvwp"}
    straight = _config(tmp_path / "s.zarr")
    straight["output"].update(out)
    Simulation(straight).run(steps=9)
    a, b = _open(tmp_path / "s.zarr", "fields"), _open(tmp_path / "c.zarr", "fields")
    assert b["u"].encoding["chunks"] == (1, 16, 2, 1) and b["p"].encoding["chunks"] == (1, 16, 2, 1)
    assert list(b["step"].values) == [0, 3, 6, 9]
    for name in "uvwp":
        np.testing.assert_array_equal(b[name].isel(time=-1).values, final[name])  # exactly the pencils' values
        np.testing.assert_allclose(b[name].values, a[name].values, rtol=0, atol=1e-12)
    for axis in "zy":
        sa, sb = _open(tmp_path / "s.zarr", f"slices/{axis}"), _open(tmp_path / "c.zarr", f"slices/{axis}")
        for name in "uvwp":
            np.testing.assert_allclose(sb[name].values, sa[name].values, rtol=0, atol=1e-12)
    k = int(np.argmin(np.abs(resumed.grid.zc - 1.0)))
    np.testing.assert_array_equal(_open(tmp_path / "c.zarr", "slices/z")["u"].isel(time=-1).values[:, :, 1],
                                  final["u"][:, :, k])


def test_a_new_run_starts_from_another_runs_checkpoint(tmp_path):
    """``initial: {kind: checkpoint, path}``: a new run (its own store) continues the fields and
    the clock of another run's latest checkpoint bit-for-bit; a wrong grid or a store without a
    checkpoint is refused before anything is written."""
    straight = Simulation(_config(tmp_path / "a.zarr")).run(steps=8)
    Simulation(_config(tmp_path / "b.zarr")).run(steps=4)  # its checkpoint: step 4
    cfg = _config(tmp_path / "c.zarr")
    cfg["initial"] = {"kind": "checkpoint", "path": str(tmp_path / "b.zarr")}
    child = Simulation(cfg)
    assert child.step == 4
    child.run(steps=4)
    assert child.step == 8 and child.time == straight.time
    for name in "uvwp":
        np.testing.assert_array_equal(to_numpy(getattr(child.state, name)), to_numpy(getattr(straight.state, name)))
    wrong = _config(tmp_path / "d.zarr")
    wrong["grid"]["shape"] = [16, 8, 12]
    wrong["initial"] = cfg["initial"]
    with pytest.raises(ValueError, match=r"initial\.path: the checkpoint's grid is \[16, 8, 24\]"):
        Simulation(wrong)
    empty = _config(tmp_path / "e.zarr")
    empty["initial"] = {"kind": "checkpoint", "path": str(tmp_path / "nowhere.zarr")}
    with pytest.raises(ValueError, match="initial.path: .* holds no complete checkpoint"):
        Simulation(empty)
    missing = _config(tmp_path / "f.zarr")
    missing["initial"] = {"kind": "checkpoint"}
    with pytest.raises(ValueError, match="config initial.path: must be the store"):
        Simulation(missing)
    assert not (tmp_path / "d.zarr").exists() and not (tmp_path / "e.zarr").exists()


def test_records_append_to_a_group_or_its_arrays_alike(tmp_path):
    """Appends with every array's resize and write in flight together: given the group itself or
    its arrays by name, the records land in order, scalars and profiles alike."""
    import zarr

    from daskflow.io.records import append_records

    written = []
    for by_name in (False, True):
        group = zarr.open_group(str(tmp_path / f"r{by_name}.zarr"), mode="w")
        group.create_array("time", shape=(0,), chunks=(4,), dtype="f8")
        group.create_array("u", shape=(0, 3), chunks=(4, 3), dtype="f8")
        arrays = {name: group[name] for name in ("time", "u")} if by_name else group
        for start in (0, 5):
            append_records(arrays, [{"time": float(t), "u": np.full(3, t + 0.5)} for t in range(start, start + 5)])
        written.append(zarr.open_group(str(tmp_path / f"r{by_name}.zarr"), mode="r"))
    for group in written:
        np.testing.assert_array_equal(group["time"][:], np.arange(10.0))
        np.testing.assert_array_equal(group["u"][:, 1], np.arange(10.0) + 0.5)
