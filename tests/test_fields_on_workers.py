"""Fields enter a cluster on the workers: a restart's workers read their own regions of the
checkpoint from the store (the slot the client chose), and ``set()``'s functions are evaluated by
the workers on their own pencils; both equal what one process does, bit for bit, and the client's
process neither reads nor carries the fields."""

import copy
import shutil
from contextlib import contextmanager
from pathlib import Path

import distributed.comm.tcp
import numpy as np
import pytest
from distributed import Client, LocalCluster

from daskflow import Simulation
from daskflow.backend import to_numpy
from daskflow.io import store
from daskflow.ns.distributed import WorkerPencils
from tests.helpers import CHANNEL

SHAPE = (32, 32, 48)
FIELD_BYTES = int(np.prod(SHAPE)) * 8  # one float64 field


def _config(path: Path | None = None) -> dict:
    cfg = copy.deepcopy(CHANNEL)
    cfg["grid"]["shape"] = list(SHAPE)
    cfg["solver"] = {"pencils": [1, 2]}
    if path is not None:
        cfg["output"] = {"store": str(path), "scalars_every": 1, "checkpoint_every": 2}
    return cfg


@pytest.fixture(scope="module")
def client():
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as c:
        yield c


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A store whose run stopped at step 4: slot ``a`` holds step 2, slot ``b`` (current) step 4;
    its checkpoint chunks are the pencils of ``[1, 2]`` (halves of z)."""
    path = tmp_path_factory.mktemp("saved") / "run.zarr"
    Simulation(_config(path)).run(steps=4)
    assert store.current_slot(str(path)) == "b"
    return path


@pytest.fixture
def copies(saved, tmp_path):
    """``copies(n)``: ``n`` fresh copies of the saved store (a restart changes its store)."""
    def make(n: int) -> list[Path]:
        out = []
        for i in range(n):
            shutil.copytree(saved, tmp_path / f"copy{i}.zarr")
            out.append(tmp_path / f"copy{i}.zarr")
        return out

    return make


@contextmanager
def _client_traffic(monkeypatch):
    """Count the bytes this process (the client and the scheduler of a ``LocalCluster``) sends and
    receives over TCP while the block runs: ``{"bytes": n}``."""
    counted = {"bytes": 0}
    to_frames, from_frames = distributed.comm.tcp.to_frames, distributed.comm.tcp.from_frames

    async def counting_to_frames(msg, *args, **kwargs):
        frames = await to_frames(msg, *args, **kwargs)
        counted["bytes"] += sum(memoryview(frame).nbytes for frame in frames)
        return frames

    async def counting_from_frames(frames, *args, **kwargs):
        counted["bytes"] += sum(memoryview(frame).nbytes for frame in frames)
        return await from_frames(frames, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(distributed.comm.tcp, "to_frames", counting_to_frames)
        patch.setattr(distributed.comm.tcp, "from_frames", counting_from_frames)
        yield counted


def _fields_stay_away_from_the_client(monkeypatch):
    """The client's process may neither read a checkpoint's fields nor scatter whole states."""
    def no_read(*args, **kwargs):
        raise AssertionError("the client read checkpoint fields")

    def no_scatter(self, state):
        raise AssertionError("fields were sent from the client")

    monkeypatch.setattr(store, "read_region", no_read)
    monkeypatch.setattr(WorkerPencils, "scatter", no_scatter)


def _assert_same_fields(sim, reference) -> None:
    for name in "uvwp":
        np.testing.assert_array_equal(to_numpy(getattr(sim, name).compute()),
                                      to_numpy(getattr(reference.state, name)), err_msg=name)


@pytest.mark.parametrize("pencils", [[2, 1], [1, 2]], ids=["y-split", "z-split"])
def test_a_restart_on_the_cluster_equals_the_in_process_restart(client, copies, pencils):
    """Bit for bit, whether the workers' regions cut the checkpoint's chunks (``[2, 1]``: each
    worker reads half of every chunk) or match them; the run then goes on from the same clock."""
    here, there = copies(2)
    reference = Simulation.restart(str(here))
    sim = Simulation.restart(str(there), client=client, solver={"pencils": pencils})
    assert reference.step == 4
    assert (sim.step, sim.time, sim.dt) == (reference.step, reference.time, reference.dt)
    assert sim.state.forcing_gradient == reference.state.forcing_gradient
    _assert_same_fields(sim, reference)
    sim.run(steps=2)
    reference.run(steps=2)
    assert sim.step == reference.step == 6 and sim.time == pytest.approx(reference.time, rel=1e-14)
    ref = to_numpy(reference.state.u)
    np.testing.assert_allclose(to_numpy(sim.u.compute()), ref, rtol=0, atol=1e-12 * np.abs(ref).max())


def _started_on_the_workers(monkeypatch, start):
    """``start()`` (a simulation on the cluster) and a first task on its pencils (the diagnostics:
    where the pencils are not on the workers yet, they go there now). What this process sends and
    receives meanwhile stays below the size of one field: the four fields, read here and sent to
    the workers, would be many times it."""
    _fields_stay_away_from_the_client(monkeypatch)
    with _client_traffic(monkeypatch) as traffic:
        sim = start()
        sim.diagnostics()
    assert traffic["bytes"] < FIELD_BYTES, f"{traffic['bytes']} bytes passed through the client's process"
    return sim


def test_the_client_neither_reads_nor_carries_a_restart_s_fields(client, copies, monkeypatch):
    """No checkpoint field is read in the client's process, nor sent from it; the traffic count
    itself sees a field that is sent."""
    here, there = copies(2)
    reference = Simulation.restart(str(here))
    sim = _started_on_the_workers(
        monkeypatch, lambda: Simulation.restart(str(there), client=client, solver={"pencils": [2, 1]}))
    _assert_same_fields(sim, reference)
    with _client_traffic(monkeypatch) as traffic:
        [future] = client.scatter([np.ones(SHAPE)])
    del future
    assert traffic["bytes"] >= FIELD_BYTES


def _damage_slot_b(path: Path) -> None:
    """Slot ``b``: ``v``'s first chunk is deleted and one byte of ``u``'s last chunk flipped. A read
    of the whole slot meets ``u`` first; a worker holding the first half of z meets ``v``'s chunk."""
    folder = path / "checkpoint" / "b"
    [*_, last_u] = sorted(p for p in (folder / "u" / "c").rglob("*") if p.is_file())
    data = bytearray(last_u.read_bytes())
    data[len(data) // 2] ^= 0x01
    last_u.write_bytes(bytes(data))
    next(p for p in sorted((folder / "v" / "c").rglob("*")) if p.is_file()).unlink()


def test_a_damaged_slot_falls_back_on_the_cluster_with_the_in_process_warning(client, copies, caplog):
    here, there = copies(2)
    for path in (here, there):
        _damage_slot_b(path)

    def warnings(path) -> list[str]:
        return [r.getMessage().replace(str(path), "STORE") for r in caplog.records if r.name == "daskflow"]

    with caplog.at_level("WARNING", logger="daskflow"):
        reference = Simulation.restart(str(here))
    [expected] = warnings(here)
    caplog.clear()
    with caplog.at_level("WARNING", logger="daskflow"):
        sim = Simulation.restart(str(there), client=client)  # the store's pencils: the chunks, one per worker
    assert "slot a (step 2)" in expected and "checkpoint/b/u" in expected and "damaged" in expected, expected
    assert warnings(there) == [expected]
    assert sim.step == reference.step == 2 and store.current_slot(str(there)) == "a"
    _assert_same_fields(sim, reference)


def test_no_intact_slot_on_the_cluster_names_what_a_read_in_process_names(client, copies):
    here, there = copies(2)
    for path in (here, there):
        _damage_slot_b(path)
        (path / "checkpoint" / "a" / "p" / "zarr.json").unlink()
    with pytest.raises(store.CheckpointError) as in_process:
        Simulation.restart(str(here))
    with pytest.raises(store.CheckpointError) as on_cluster:
        Simulation.restart(str(there), client=client, solver={"pencils": [2, 1]})
    expected = str(in_process.value).replace(str(here), "STORE")
    assert "no intact checkpoint" in expected and "checkpoint/a/p/zarr.json" in expected, expected
    assert str(on_cluster.value).replace(str(there), "STORE") == expected


def test_a_new_run_from_a_checkpoint_reads_it_on_the_workers(client, saved, tmp_path, monkeypatch):
    """``initial: {kind: checkpoint}`` on a cluster: the workers read the other run's checkpoint."""
    cfg = _config(tmp_path / "here.zarr")
    cfg["initial"] = {"kind": "checkpoint", "path": str(saved)}
    reference = Simulation(cfg)
    cfg["output"]["store"] = str(tmp_path / "there.zarr")
    cfg["solver"] = {"pencils": [2, 1]}
    sim = _started_on_the_workers(monkeypatch, lambda: Simulation(cfg, client=client))
    assert (sim.step, sim.time) == (reference.step, reference.time) == (4, reference.time)
    _assert_same_fields(sim, reference)


def _profile(x, y, z):
    return 1.5 * z * (2.0 - z) + 0.1 * np.sin(np.pi * x) * np.cos(np.pi * y)


@pytest.mark.parametrize("after_a_run", [False, True], ids=["at-start", "after-a-run"])
def test_set_with_functions_on_the_cluster_equals_set_in_process(client, tmp_path, monkeypatch, after_a_run):
    """Functions (a module-level one and a lambda) are evaluated by the workers, each on its own
    pencil, wall faces reset as in process; the fields not given are kept, and no field passes
    through the client."""
    cfg = _config()
    reference = Simulation(cfg)
    cfg["solver"] = {"pencils": [2, 1]}
    sim = Simulation(cfg, client=client)
    if after_a_run:
        reference.run(steps=1)
        sim.run(steps=1)
        reference.set(**{name: to_numpy(getattr(sim, name).compute()) for name in "uvwp"})  # the same start
    _fields_stay_away_from_the_client(monkeypatch)
    functions = {"u": _profile, "w": lambda x, y, z: 0.01 * x * y + 0.0 * z, "p": lambda x, y, z: 2.0}

    def set_functions():
        sim.set(**functions)
        return sim

    _started_on_the_workers(monkeypatch, set_functions)
    reference.set(**functions)
    _assert_same_fields(sim, reference)


def test_set_mixes_functions_and_arrays_and_reports_a_bad_function(client):
    cfg = _config()
    reference = Simulation(cfg)
    cfg["solver"] = {"pencils": [1, 2]}
    sim = Simulation(cfg, client=client)
    v = np.random.default_rng(3).standard_normal(SHAPE)
    for s in (sim, reference):
        s.set(u=_profile, v=v)
    _assert_same_fields(sim, reference)
    with pytest.raises(ValueError, match="broadcast"):
        sim.set(w=lambda x, y, z: np.ones((3, 3, 3)))
    _assert_same_fields(sim, reference)  # the pencils are as they were
