"""``pencils: auto`` / ``poisson: auto``: candidates, timing on a real cluster, the cache, the CLI."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from daskflow import Grid
from daskflow import autotune as at
from daskflow.config import load

ROOT = Path(__file__).resolve().parents[1]
BC = ("PP", "PP", "NN")


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("DASKFLOW_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_decompositions():
    assert at.decompositions(1) == [(1, 1)]
    assert at.decompositions(4) == [(1, 4), (2, 2), (4, 1)]
    assert at.decompositions(6) == [(1, 6), (2, 3), (3, 2), (6, 1)]
    assert at.decompositions(7) == [(1, 7), (7, 1)]
    with pytest.raises(ValueError):
        at.decompositions(0)


def test_candidates_follow_the_plan_limits():
    g = Grid((16, 16, 16), (1.0, 1.0, 1.0))
    assert at.candidates(g, BC, 4) == [((1, 4), "ptdma"), ((1, 4), "ftm"), ((2, 2), "ptdma"), ((2, 2), "ftm"),
                                       ((4, 1), "ptdma")]  # pz = 1: both methods run the same stages
    assert len(at.candidates(g, BC, 4, distinct=False)) == 6
    # P-TDMA needs two z points per chunk: nz = 6 on 4 z-pencils is FTM only
    thin = Grid((8, 8, 6), (1.0, 1.0, 1.0))
    assert ((1, 4), "ptdma") not in at.candidates(thin, BC, 4) and ((1, 4), "ftm") in at.candidates(thin, BC, 4)
    # every chunk at least one point: ny = 4 cannot be cut in 8; FTM's z-pencils cut the 4 y modes in pz
    flat = Grid((16, 4, 16), (1.0, 1.0, 1.0))
    assert at.candidates(flat, BC, 8) == [((1, 8), "ptdma"), ((2, 4), "ptdma"), ((2, 4), "ftm"), ((4, 2), "ptdma"),
                                          ((4, 2), "ftm")]
    assert at.candidates(flat, BC, 8, methods=("ftm",)) == [((2, 4), "ftm"), ((4, 2), "ftm")]
    # a prime worker count on a small grid: only the z-slabs fit, and only P-TDMA (8 y modes < 11)
    assert at.candidates(Grid((8, 8, 32), (1.0, 1.0, 1.0)), BC, 11) == [((1, 11), "ptdma")]
    assert at.candidates(Grid((8, 8, 8), (1.0, 1.0, 1.0)), BC, 11) == []
    assert at.candidates(g, BC, 4, accept=lambda p: p[1] == 1) == [((4, 1), "ptdma")]


def test_in_process_auto_is_one_pencil(cache_dir):
    g = Grid((16, 8, 8), (1.0, 1.0, 1.0))
    before = at.timed_solves
    r = at.autotune(g, BC)
    assert (r.pencils, r.method, r.table, r.cached) == ((1, 1), "ptdma", [], False)
    assert at.timed_solves == before and not cache_dir.exists()  # one candidate: nothing to time or cache
    with pytest.raises(ValueError, match="solver.pencils"):
        at.autotune(Grid((8, 8, 8), (1.0, 1.0, 1.0)), BC, pencils=(1, 16))


def test_fixed_pencils_auto_method_in_process(cache_dir):
    g = Grid((16, 8, 8), (1.0, 1.0, 1.0))
    r = at.autotune(g, BC, pencils=(1, 2), repeats=2, rounds=2)
    assert r.pencils == (1, 2) and r.method in ("ptdma", "ftm") and not r.cached
    assert {row["method"] for row in r.table} == {"ptdma", "ftm"}
    assert at.autotune(g, BC, pencils=(1, 2), repeats=2).cached


def test_autotuner_on_a_local_cluster_and_its_cache(cache_dir, monkeypatch):
    from distributed import Client, LocalCluster

    g = Grid((16, 8, 16), (2.0, 1.0, 2.0), z_stretch=1.5)
    with LocalCluster(n_workers=4, threads_per_worker=1, dashboard_address=None) as cluster, Client(cluster) as client:
        before = at.timed_solves
        r = at.autotune(g, BC, client=client, repeats=2, rounds=2)
        cands = at.candidates(g, BC, 4)
        comms = r.key["comms"]  # every backend usable here: the mailbox, and UCX where UCXX is installed
        assert comms[-1] == "mailbox" and set(comms) <= {"ucx", "mailbox"}
        assert not r.cached and (r.pencils, r.method) in cands and r.comm in comms
        rows = [(tuple(row["pencils"]), row["method"], row["comm"]) for row in r.table]
        assert rows == [(p, m, c) for p, m in cands for c in comms]  # a full table
        assert all(row["repeats"] == 2 and 0 < row["min_ms"] <= row["median_ms"] <= row["max_ms"] for row in r.table)
        assert r.table[rows.index((r.pencils, r.method, r.comm))]["median_ms"] == min(row["median_ms"]
                                                                                     for row in r.table)
        assert at.timed_solves - before == len(cands) * len(comms) * (2 + 2 * at.WARMUP)
        assert r.key["cluster"]["workers"] == 4 and r.key["grid"] == [16, 8, 16] and r.key["dtype"] == "float64"
        entries = json.loads((cache_dir / "autotune.json").read_text())["entries"]
        assert len(entries) == 1 and next(iter(entries.values()))["pencils"] == list(r.pencils)

        before = at.timed_solves
        calls = []

        def fake_timing(grid, bc, dtype, cands, *args):
            calls.append(cands)
            return [at._row(p, m, [1e-3 * (i + 1)], 0.0, c) for i, (p, m, c) in
                    enumerate((p, m, c) for p, m in cands for c in args[-1])]

        with monkeypatch.context() as m:
            m.setattr(at, "time_candidates", fake_timing)
            hit = at.autotune(g, BC, client=client)
            assert hit.cached and (hit.pencils, hit.method, hit.comm) == (r.pencils, r.method, r.comm)
            assert hit.table == r.table
            assert calls == [] and at.timed_solves == before
            # lengths and stretching are not in the key
            assert at.autotune(Grid((16, 8, 16), (1.0, 1.0, 1.0)), BC, client=client).cached
            # another dtype, grid, boundary conditions or candidate set: misses (the timing runs)
            for args in [dict(dtype="float32"), dict(grid=Grid((16, 8, 32), (1.0, 1.0, 1.0))),
                         dict(bc=("PP", "NN", "NN")), dict(method="ftm")]:
                assert not at.autotune(args.pop("grid", g), args.pop("bc", BC), client=client, **args).cached
            assert len(calls) == 4 and calls[3] == [(p, "ftm") for p in at.decompositions(4)]
    with LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None) as cluster, Client(cluster) as client:
        two = at.autotune(g, BC, client=client, repeats=1, rounds=1)  # another worker count: a miss
        assert not two.cached and two.pencils in [(1, 2), (2, 1)] and two.key["cluster"]["workers"] == 2
    assert len(json.loads((cache_dir / "autotune.json").read_text())["entries"]) == 6


def test_config_accepts_auto_and_names_bad_values():
    cfg = load({"grid": {"shape": [8, 8, 8]}, "physics": {"nu": 0.1, "forcing": {"kind": "none"}},
                "solver": {"pencils": "auto", "poisson": "auto"}})
    assert cfg["solver"]["pencils"] == "auto" and cfg["solver"]["poisson"] == "auto"
    assert cfg["solver"]["z_solve"] == "direct"
    for bad, setting, allowed in [({"pencils": "best"}, "solver.pencils", "auto or 2 positive integers"),
                                  ({"pencils": [2, 0]}, "solver.pencils", "auto or 2 positive integers"),
                                  ({"pencils": [2]}, "solver.pencils", "auto or 2 positive integers"),
                                  ({"poisson": "fastest"}, "solver.poisson", "ptdma, ftm, auto")]:
        with pytest.raises(ValueError) as err:
            load({"solver": bad})
        assert setting in str(err.value) and allowed in str(err.value)


def test_simulation_in_process_resolves_auto(tmp_path, cache_dir):
    from daskflow import Simulation
    from daskflow.io import store

    cfg = {"grid": {"shape": [8, 8, 8]}, "physics": {"nu": 0.01, "forcing": {"kind": "none"}},
           "solver": {"pencils": "auto", "poisson": "auto"}, "time": {"steps": 1},
           "output": {"store": str(tmp_path / "s.zarr"), "checkpoint_every": 1}}
    sim = Simulation(cfg)
    assert sim.config.solver.pencils == (1, 1) and sim.config.solver.poisson == "ptdma"
    assert store.root_config(str(tmp_path / "s.zarr"))["solver"]["pencils"] == [1, 1]  # concrete in the store
    sim.run(1)
    again = Simulation.restart(str(tmp_path / "s.zarr"), solver={"pencils": "auto", "poisson": "auto"})
    assert again.config.solver.pencils == (1, 1) and "checkpoint" in again.autotune.note


def test_daskflow_run_with_auto(tmp_path):
    cfg = yaml.safe_load((ROOT / "examples" / "channel-small.yaml").read_text())
    cfg["grid"]["shape"] = [16, 8, 16]
    cfg["time"]["steps"] = 2
    cfg["solver"].update(pencils="auto", poisson="auto")
    cfg["cluster"] = {"workers": 2}
    cfg["output"] = {"store": str(tmp_path / "run.zarr"), "checkpoint_every": 2, "fields_every": 2}
    path = tmp_path / "auto.yaml"
    path.write_text(yaml.safe_dump(cfg))
    env = {**os.environ, "DASKFLOW_CACHE_DIR": str(tmp_path / "cache"),
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}

    def daskflow(*args):
        return subprocess.run([sys.executable, "-m", "daskflow", *args], capture_output=True, text=True, timeout=300,
                              cwd=tmp_path, env=env)

    proc = daskflow("validate", str(path))
    assert proc.returncode == 0 and "pencils auto" in proc.stdout, proc.stderr
    proc = daskflow("run", str(path), "--report-every", "2")
    assert proc.returncode == 0, proc.stderr
    timed = re.search(r"autotune: (\d+) candidates, timed", proc.stderr)
    # three (pencils, poisson) pairs, each over every backend usable here: the mailbox, and UCX where it installs
    assert "2 workers" in proc.stderr and timed and int(timed[1]) in (3, 6) and "<- chosen" in proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1])["steps"] == 2
    from daskflow.io import store

    solver = store.root_config(str(tmp_path / "run.zarr"))["solver"]
    assert solver["pencils"] in ([1, 2], [2, 1]) and solver["poisson"] in ("ptdma", "ftm")
    proc = daskflow("run", str(path), "--restart", "--steps", "1")  # same cluster shape: the checkpoint's choice
    assert proc.returncode == 0 and "kept from the checkpoint" in proc.stderr, proc.stderr
    assert store.root_config(str(tmp_path / "run.zarr"))["solver"] == solver
    proc = daskflow("run", str(path), "--restart", "--steps", "3", "--cluster", "none")  # in process: one pencil
    assert proc.returncode == 0 and "pencils [1, 1]" in proc.stderr, proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1])["steps"] == 3  # from the checkpoint of step 2 to step 3
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({**cfg, "solver": {"pencils": "fastest"}}))
    proc = daskflow("validate", str(bad))
    assert proc.returncode == 2 and "solver.pencils" in proc.stderr and "auto" in proc.stderr
