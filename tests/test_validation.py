"""The validation package: reductions on analytic fields and on a real (tiny) cavity run, the
reference tables, and the figures command on the committed data."""

import json
from pathlib import Path

import numpy as np
import pytest

from daskflow import Simulation
from daskflow.validation import CASES, cavity, laminar
from daskflow.validation.__main__ import main

DATA = Path(__file__).resolve().parents[1] / "docs" / "validation" / "data"


def test_ghia_tables_are_consistent():
    for re in cavity.REYNOLDS:
        u, w = cavity.GHIA_U[re], cavity.GHIA_W[re]
        assert len(u) == len(cavity.GHIA_Z) == len(w) == len(cavity.GHIA_X) == 17
        assert u[0] == 1.0 and u[-1] == 0.0 and w[0] == 0.0 and w[-1] == 0.0  # lid, walls
        assert np.all(np.diff(cavity.GHIA_Z) < 0) and np.all(np.diff(cavity.GHIA_X) < 0)
        assert np.all(np.abs(u) <= 1.0) and np.all(np.abs(w) < 0.6)
        x, z, psi = cavity.GHIA_VORTEX[re]
        assert 0.5 < x < 0.65 and 0.55 < z < 0.75 and -0.12 < psi < -0.1
    # a few entries against the paper's Tables I and II
    assert cavity.GHIA_U[100][8] == -0.20581 and cavity.GHIA_U[1000][11] == -0.38289
    assert cavity.GHIA_W[100][7] == -0.24533 and cavity.GHIA_W[1000][5] == -0.51550


@pytest.mark.parametrize("stretch", [0.0, 1.5])
def test_streamfunction_and_vortex_centre_on_an_analytic_field(stretch):
    from daskflow.grid import Grid

    grid = Grid((40, 2, 36), (1.0, 1.0, 1.0), z_stretch=stretch)
    xf = np.concatenate([[0.0], grid.xf[1:]])
    zf = np.concatenate([[0.0], grid.zf[1:]])

    def psi_exact(x, z):  # minimum -4/27 * 27/256 at (2/3, 3/4)
        return -(x**2) * (1 - x) * z**3 * (1 - z)

    corners = psi_exact(xf[:, None], zf[None, :])
    u = np.diff(corners, axis=1)[1:] / grid.dzf[None, :]  # discrete d psi / dz on the x-faces
    psi = cavity.streamfunction(u, grid.dzf)
    assert np.allclose(psi, corners, atol=1e-15)
    x, z, value = cavity.vortex_centre(psi, xf, zf)
    h = max(grid.dx, grid.dzf.max())
    assert abs(x - 2 / 3) < 0.1 * h and abs(z - 0.75) < 0.1 * h, (x, z)
    assert abs(value - psi_exact(2 / 3, 0.75)) < 1e-3 * abs(psi_exact(2 / 3, 0.75))
    # the plain minimum on the corners is further off than the refined one
    i, k = np.unravel_index(np.argmin(psi), psi.shape)
    assert np.hypot(x - 2 / 3, z - 0.75) < np.hypot(xf[i] - 2 / 3, zf[k] - 0.75)


def test_quadratic_extremum_is_exact_for_a_quadratic():
    x, z = np.array([0.1, 0.2, 0.35]), np.array([0.0, 0.4, 0.5])
    values = (x[:, None] - 0.23) ** 2 + 2 * (z[None, :] - 0.41) ** 2 - 0.5 * (x[:, None] - 0.23) * (z[None, :] - 0.41)
    values = values - 3.0
    assert np.allclose(cavity.quadratic_extremum(x, z, values), (0.23, 0.41, -3.0), atol=1e-12)


def test_cavity_reduction_of_a_real_run(tmp_path):
    cfg = cavity.config_for(100, 16, tmp_path / "c.zarr")
    cfg["output"].update(fields_every=20, scalars_every=1, checkpoint_every=0)
    cfg.pop("cluster")
    sim = Simulation(cfg)
    sim.run(steps=60)
    r = cavity.reduce_store(tmp_path / "c.zarr")
    assert r["re"] == 100 and r["n"] == 16 and r["steps"] == 60 and r["time"] == pytest.approx(sim.time)
    p = r["profiles"]
    assert p["u"][-1] == 1.0 and p["u"][0] == 0.0 and p["w"][0] == 0.0 and p["w"][-1] == 0.0
    assert len(p["z"]) == 18 and p["z"][1] == pytest.approx(1 / 32)
    u = np.asarray(sim.u.compute()).mean(axis=1)
    w = np.asarray(sim.w.compute()).mean(axis=1)
    assert np.allclose(p["u"][1:-1], u[7]) and np.allclose(p["w"][1:-1], w[:, 7])
    # psi from u alone: zero along the lid (no net flux through any x-face column) and w = -d psi / dx
    psi = cavity.streamfunction(u, sim.grid.dzf)
    assert np.abs(psi[:, -1]).max() < 1e-12
    assert np.allclose(-(psi[1:, 1:] - psi[:-1, 1:]) / sim.grid.dx, w, atol=1e-12)
    assert r["psi"]["psi"].shape == (17, 17)
    # the young vortex sits below the lid, turning clockwise (psi < 0)
    v = r["vortex"]
    assert 0.3 < v["x"] < 1.0 and 0.5 < v["z"] < 1.0 and v["psi"] < 0
    assert r["ke_rate"] > 0 and r["velocity_rate"] > 0
    assert 0 < r["ghia_u_max_dev"] < 1.0
    cavity.save(r, tmp_path / "data", wall_s=1.0)
    table = cavity.table(tmp_path / "data")
    assert "| 100 | 16² |" not in table  # the table lists the campaign's grids only
    assert (tmp_path / "data" / "cavity100-n16-u.csv").read_text().startswith("z,u\n")


def test_laminar_exact_solutions():
    z = np.linspace(0.05, laminar.H - 0.05, 41)
    for case in laminar.CASES:
        assert np.abs(laminar.exact(case, z, 1e-6, terms=20000)).max() < 0.05  # from rest
        steady = laminar.exact(case, z, np.inf)
        assert np.allclose(laminar.exact(case, z, 1e4), steady, atol=1e-12)
    assert laminar.exact("poiseuille", np.array([1.0]), np.inf)[0] == pytest.approx(1.0)  # centreline velocity
    assert np.allclose(laminar.exact("couette", np.array([0.0, 2.0]), np.inf), [-1.0, 1.0])


def test_figures_command_redraws_everything_from_the_committed_data(tmp_path, capsys):
    assert main(["figures", "--data", str(DATA), "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    pngs = sorted(tmp_path.glob("*.png"))
    names = {p.name for p in pngs}
    assert {"cavity100-centrelines.png", "cavity1000-centrelines.png", "laminar-poiseuille.png",
            "taylor-green-orders.png"} <= names
    for png in pngs:
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and 10_000 < png.stat().st_size < 200_000
    for name in CASES:
        assert f"## {name}" in out
    assert "| 1000 | 128² |" in out and "| poiseuille | stretched | 64 |" in out


def test_settling_time_of_an_exponential_approach():
    t = np.linspace(0.0, 30.0, 3001)
    energy = 1.0 + np.exp(-t)  # relative rate over one time unit: (e - 1) e^{-t} / E
    settled = cavity.settling_time(t, energy, tolerance=1e-6)
    assert settled == pytest.approx(np.log((np.e - 1) / 1e-6), abs=0.02)
    assert cavity.settling_time(t[:1000], energy[:1000], tolerance=1e-6) is None  # still moving at t = 10


def test_profile_extremum_between_the_stored_points():
    z = np.linspace(0.0, 1.0, 21)
    profile = -np.sin(np.pi * z) ** 2 * (1 + z)  # minimum between stored points
    value, where = cavity.extremum(z, profile, "min")
    fine = np.linspace(0.0, 1.0, 200001)
    exact = -np.sin(np.pi * fine) ** 2 * (1 + fine)
    assert where == pytest.approx(fine[np.argmin(exact)], abs=2e-3)
    assert value == pytest.approx(exact.min(), abs=1e-4) and value < profile.min()
    assert cavity.extremum(z, -profile, "max")[0] == pytest.approx(-value)


def _committed_channel_scalars() -> dict:
    from daskflow.validation.cavity import _read_csv

    return _read_csv(DATA / "channel180-scalars.csv")


def test_channel_scalars_compared_sample_by_sample():
    from daskflow.validation import channel

    reference = _committed_channel_scalars()
    same = channel.compare_scalars(reference, reference)
    assert same["reproduces"] and same["samples"] == len(reference["time"]) == same["steps"] // 20
    assert set(same["max_relative_deviation"].values()) == {0.0}
    # a run of the first 1000 steps, equal up to the committed series' 8 digits, reproduces it
    short = {k: v[:50] * (1 + 4e-8) for k, v in reference.items()}
    result = channel.compare_scalars(short, reference)
    assert result["reproduces"] and result["samples"] == 50 and result["steps"] == 1000
    assert all(3e-8 < d < 5e-8 for d in result["max_relative_deviation"].values())
    # a trajectory that leaves the reference at sample 11 (step 220) is caught there
    drifted = {k: v[:50].copy() for k, v in reference.items()}
    drifted["re_tau"][10:] *= 1 + 1e-5
    result = channel.compare_scalars(drifted, reference)
    assert not result["reproduces"] and result["first_step_beyond_tolerance"]["re_tau"] == 220
    assert result["first_step_beyond_tolerance"]["time"] is None
    assert result["max_relative_deviation"]["re_tau"] == pytest.approx(1e-5, rel=1e-6)
    # a NaN never counts as within the tolerance, on either side
    broken = {k: v[:50].copy() for k, v in reference.items()}
    broken["kinetic_energy"][5:] = np.nan
    result = channel.compare_scalars(broken, reference)
    assert not result["reproduces"] and result["first_step_beyond_tolerance"]["kinetic_energy"] == 120
    assert np.isnan(result["max_relative_deviation"]["kinetic_energy"])
    # a run that stopped early agrees where it ran, but does not reproduce the steps it was asked for
    early = channel.compare_scalars({k: v[:3] for k, v in reference.items()}, reference, expected_samples=50)
    assert early["first_step_beyond_tolerance"]["re_tau"] is None
    assert not early["complete"] and not early["reproduces"]
    with pytest.raises(ValueError, match="no common scalar samples"):
        channel.compare_scalars({k: v[:0] for k, v in reference.items()}, reference)


def test_reproduce_runs_the_command_line_and_records_the_comparison(tmp_path, monkeypatch):
    """The real ``daskflow run`` on a tiny channel: against a foreign reference it fails and says
    so; against its own series (8 digits, as committed) it reproduces; both runs are recorded."""
    import yaml

    from daskflow.validation import channel
    from daskflow.validation.cavity import _write_csv

    example = tmp_path / "tiny.yaml"
    example.write_text(yaml.safe_dump({
        "grid": {"shape": [12, 8, 10], "lengths": [4.0, 2.0, 2.0], "z_stretch": 1.5, "z_cluster": "both"},
        "physics": {"nu": 0.01, "forcing": {"kind": "flow_rate", "value": [1.0, 0.0]}},
        "boundaries": {"preset": "channel"},
        "time": {"steps": 100, "cfl": 0.8, "dt_max": 0.05, "implicit_diffusion": "z"},
        "initial": {"kind": "turbulent_channel", "amplitude": 0.3, "seed": 0},
        "solver": {"poisson": "ptdma", "pencils": [1, 1], "device": "cpu"},
        "output": {"store": "unused.zarr", "scalars_every": 20, "profiles_every": 0, "checkpoint_every": 0}}))
    monkeypatch.setattr(channel, "EXAMPLE", example)
    data = tmp_path / "data"
    data.mkdir()
    reference = _committed_channel_scalars()  # the 512 x 256 x 144 run: a different flow
    columns = list(channel.SCALAR_COLUMNS)
    _write_csv(data / "channel180-scalars.csv", columns, [reference[c] for c in columns])
    foreign = channel.reproduce(data, tmp_path / "work", steps=60)
    assert not foreign["reproduces"] and foreign["samples"] == 3 and foreign["cluster"] == "none"
    assert foreign["first_step_beyond_tolerance"]["re_tau"] == 20

    from daskflow import analysis

    own = analysis.open_run(tmp_path / "work" / "channel180-reproduce.zarr")["scalars"]
    _write_csv(data / "channel180-scalars.csv", columns, [own[c].values for c in columns])
    again = channel.reproduce(data, tmp_path / "work", steps=60)
    assert again["reproduces"] and again["samples"] == 3
    assert max(again["max_relative_deviation"].values()) <= 5e-8
    records = json.loads((data / "channel180-reproduction.json").read_text())
    assert [r["reproduces"] for r in records] == [False, True]
    assert records[1]["command"].startswith("daskflow run ") and "--steps 60 " in records[1]["command"]
    table = channel.reproduction_table(data)
    assert table.count("\n") == 3 and "| no |" in table and "| yes |" in table
