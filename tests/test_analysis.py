"""daskflow.analysis on synthetic run stores with known profiles.

Two kinds of known profile, both checked to round-off:

- the continuous laminar Poiseuille parabola U = G / (2 nu) z (lz - z) sampled at the centres: the
  second-order one-sided wall gradient (``gradient_order=2``) and the quadratic centreline
  interpolation are exact for it, so tau_w = G h, u_tau, Re_tau, U+, y+, U_c, Re_c are exact; the
  first-order wall flux gives G (h - d1 / 2) exactly; the midpoint-rule bulk velocity has the known
  error (G / nu) sum(dz^3) / (24 lz), which the test adds back;
- the solver's discrete steady state (the cell balances of its finite-difference scheme solved
  exactly, with or without a prescribed Reynolds stress): the default first-order wall flux gives
  tau_w = G h and the stress balance -u'w'+ + dU+/dy+ = 1 - y/h exactly.
"""

import dask.array as da
import numpy as np
import pytest
import xarray as xr
import zarr

from daskflow import Grid
from daskflow.analysis import bulk_quantities, open_run, plot_scalars, plot_wall_units, time_average, wall_units

NU = 0.01
G = 0.02  # mean pressure gradient (kinematic): U = G / (2 nu) z (lz - z)
LENGTHS = (4.0, 2.0, 2.0)
C_UU, C_VV, C_PP = 0.04, 0.01, 0.09  # constant variances: uu = u^2 + c


def poiseuille(z, lz):
    return G / (2.0 * NU) * z * (lz - z)


def config(grid: Grid) -> dict:
    return {
        "grid": {"shape": list(grid.shape), "lengths": list(grid.lengths), "z_stretch": grid.z_stretch,
                 "z_cluster": grid.z_cluster},
        "physics": {"nu": NU, "forcing": {"kind": "pressure_gradient", "value": [G, 0.0]}},
    }


def ww_face(zf, lz):
    """A w variance vanishing at both walls."""
    return 0.3 * zf * (lz - zf) / lz**2


def uw_face(zf, lz):
    """A <u'w'> covariance vanishing at both walls, odd about the centre."""
    return -0.05 * zf * (lz - zf) * (0.5 * lz - zf) / lz**3


def mean_to_faces(u, top):
    """The writer's centre -> face interpolation (mean of neighbouring centres, wall value on top)."""
    return np.concatenate([0.5 * (u[:-1] + u[1:]), [top]])


def reynolds_stress(zf, lz):
    """A prescribed -<u'w'> on faces: G (h - z) s(z), s vanishing at the walls and symmetric."""
    return G * (lz / 2 - zf) * 0.7 * np.sin(np.pi * zf / lz) ** 2


def discrete_channel(grid: Grid, stress=None) -> np.ndarray:
    """The solver's discrete steady state: per cell, (F + R)[k+1] - (F + R)[k] = -G dz_k with the viscous
    face fluxes F = nu (U[k+1] - U[k]) / (zc[k+1] - zc[k]) inside, nu U[0] / d_bottom and -nu U[-1] / d_top
    on the walls (ghost-cell flux), R = ``stress`` on all nz + 1 faces (zero: laminar)."""
    zc, nz = grid.zc, grid.shape[2]
    lz = grid.lengths[2]
    d = np.zeros((nz + 1, nz))  # F = d @ U
    d[0, 0] = NU / zc[0]
    d[nz, nz - 1] = -NU / (lz - zc[-1])
    for k in range(1, nz):
        d[k, k] = NU / (zc[k] - zc[k - 1])
        d[k, k - 1] = -d[k, k]
    r = np.zeros(nz + 1) if stress is None else stress
    return np.linalg.solve(d[1:] - d[:-1], -G * grid.dzf - np.diff(r))


def profiles_dataset(grid: Grid, times, amplitude=None, w_mean=0.0, u=None, stress=None) -> xr.Dataset:
    """The ``profiles`` group of the store contract: U = amplitude(t) * profile (default the parabola),
    uu = u^2 + c, ...; <u'w'> = -``stress`` on the faces if given, else ``uw_face``."""
    lz = grid.lengths[2]
    zc, zf = grid.zc, grid.zf[1:]
    times = np.asarray(times, dtype=float)
    amp = np.ones_like(times) if amplitude is None else amplitude(times)
    u = amp[:, None] * (poiseuille(zc, lz) if u is None else u)[None, :]
    v = np.full_like(u, 0.1)
    p = np.full_like(u, -0.3)
    w = np.full((times.size, zf.size), w_mean)
    u_f = np.stack([mean_to_faces(ui, 0.0) for ui in u])
    cov_uw = uw_face(zf, lz) if stress is None else -stress[1:]
    tz, tf = ("time", "z"), ("time", "zf")
    return xr.Dataset(
        {
            "u": (tz, u), "v": (tz, v), "p": (tz, p),
            "uu": (tz, u * u + C_UU), "vv": (tz, v * v + C_VV), "pp": (tz, p * p + C_PP), "uv": (tz, u * v),
            "w": (tf, w), "ww": (tf, w * w + ww_face(zf, lz)[None, :]),
            "uw": (tf, u_f * w + cov_uw[None, :]), "vw": (tf, 0.1 * w),
        },
        coords={"time": times, "z": zc, "zf": zf},
    )


def scalars_dataset(times) -> xr.Dataset:
    n = len(times)
    rng = np.random.default_rng(0)
    return xr.Dataset(
        {
            "step": ("time", np.arange(n) * 10),
            "dt": ("time", np.full(n, 0.01)),
            "cfl": ("time", 0.5 + 0.01 * rng.standard_normal(n)),
            "div_max": ("time", 10.0 ** rng.uniform(-14, -11, n)),
            "bulk_velocity": ("time", np.ones(n)),
            "tau_wall_bottom": ("time", np.full(n, 0.02)),
            "tau_wall_top": ("time", np.full(n, 0.02)),
            "re_tau": ("time", np.full(n, 14.1)),
            "kinetic_energy": ("time", np.linspace(0.5, 0.6, n)),
        },
        coords={"time": np.asarray(times, dtype=float)},
    )


def fields_dataset(grid: Grid, times) -> xr.Dataset:
    nx, ny, nz = grid.shape
    nt = len(times)
    rng = np.random.default_rng(1)
    return xr.Dataset(
        {
            "u": (("time", "xf", "y", "z"), rng.standard_normal((nt, nx, ny, nz))),
            "v": (("time", "x", "yf", "z"), rng.standard_normal((nt, nx, ny, nz))),
            "w": (("time", "x", "y", "zf"), rng.standard_normal((nt, nx, ny, nz))),
            "p": (("time", "x", "y", "z"), rng.standard_normal((nt, nx, ny, nz))),
        },
        coords={"time": np.asarray(times, dtype=float), "x": grid.xc, "xf": grid.xf[1:], "y": grid.yc,
                "yf": grid.yf[1:], "z": grid.zc, "zf": grid.zf[1:]},
    )


def write_store(path, grid: Grid, groups: dict[str, xr.Dataset], checkpoint: bool = True) -> str:
    store = str(path)
    for name, ds in groups.items():
        ds.to_zarr(store, group=name, mode="a", zarr_format=3, consolidated=False)
    root = zarr.open_group(store, mode="a")
    if checkpoint:  # raw restart arrays, not an xarray group
        ck = root.create_group("checkpoint")
        ck.create_array("u", shape=grid.shape, dtype="f8")
    root.attrs.update({
        "config": config(grid),
        "grid": {"shape": list(grid.shape), "lengths": list(grid.lengths), "z_stretch": grid.z_stretch,
                 "z_cluster": grid.z_cluster},
        "daskflow_version": "0.1.0",
    })
    return store


@pytest.fixture
def grid():
    return Grid((8, 4, 16), LENGTHS, z_stretch=1.8, z_cluster="both")


@pytest.fixture
def run(tmp_path, grid):
    times = np.arange(6) * 0.5
    store = write_store(tmp_path / "run.zarr", grid, {
        "profiles": profiles_dataset(grid, times),
        "scalars": scalars_dataset(times),
        "fields": fields_dataset(grid, times[:2]),
    })
    return open_run(store)


# ------------------------------------------------------------------------------------------------
# open_run
# ------------------------------------------------------------------------------------------------


def test_open_run_lazy_with_root_attrs(run, grid):
    assert set(run) == {"profiles", "scalars", "fields"}  # checkpoint skipped, slices absent
    for ds in run.values():
        assert ds.attrs["run"]["config"]["physics"]["nu"] == NU
        assert ds.attrs["run"]["grid"]["shape"] == list(grid.shape)
        assert ds.attrs["run"]["daskflow_version"] == "0.1.0"
        for var in ds.data_vars.values():
            assert isinstance(var.data, da.Array), var.name  # lazy, nothing loaded
    fields = run["fields"]
    assert fields["u"].dims == ("time", "xf", "y", "z")
    assert fields["w"].sizes["zf"] == grid.shape[2]
    np.testing.assert_allclose(fields["z"].values, grid.zc)
    # attrs are copies: editing one dataset's does not touch another's
    run["profiles"].attrs["run"]["config"]["physics"]["nu"] = 1.0
    assert run["scalars"].attrs["run"]["config"]["physics"]["nu"] == NU


def test_open_run_missing_groups(tmp_path, grid):
    store = write_store(tmp_path / "s.zarr", grid, {"scalars": scalars_dataset([0.0, 1.0])}, checkpoint=False)
    run = open_run(store)
    assert list(run) == ["scalars"]
    assert run["scalars"]["step"].values.tolist() == [0, 10]


def test_open_run_nested_and_foreign_groups(tmp_path, grid):
    """A group of sub-groups opens per sub-group; a non-xarray group other than checkpoint is skipped with a warning."""
    plane = xr.Dataset({"u": (("time", "xf", "y"), np.ones((2, 8, 4)))}, coords={"time": [0.0, 1.0]})
    store = write_store(tmp_path / "n.zarr", grid, {"slices/xy_k1": plane, "scalars": scalars_dataset([0.0, 1.0])})
    zarr.open_group(store, mode="a").create_group("foreign").create_array("a", shape=(3,), dtype="f8")
    with pytest.warns(UserWarning, match="foreign"):
        run = open_run(store)
    assert set(run) == {"slices/xy_k1", "scalars"}
    assert run["slices/xy_k1"].attrs["run"]["daskflow_version"] == "0.1.0"


def test_nu_lz_from_run_attrs(run, grid):
    a = wall_units(run["profiles"])
    b = wall_units(run["profiles"], NU, grid.lengths[2])
    xr.testing.assert_identical(a, b)
    with pytest.raises(ValueError, match="nu and lz"):
        wall_units(profiles_dataset(grid, [0.0]))


# ------------------------------------------------------------------------------------------------
# wall units: laminar Poiseuille channel (exact)
# ------------------------------------------------------------------------------------------------


def test_wall_units_poiseuille(run, grid):
    lz = grid.lengths[2]
    h = lz / 2
    ds = wall_units(run["profiles"], NU, lz, gradient_order=2)
    tau = G * h
    u_tau = np.sqrt(tau)
    assert ds.attrs["folded"] == 1 and ds["U_plus"].dims == ("k",)
    assert int(ds["n_samples"]) == 6
    for name in ("tau_wall_bottom", "tau_wall_top", "tau_wall"):
        assert float(ds[name]) == pytest.approx(tau, rel=1e-12)  # exact for a parabola
    assert float(ds["u_tau"]) == pytest.approx(u_tau, rel=1e-12)
    assert float(ds["re_tau"]) == pytest.approx(u_tau * h / NU, rel=1e-12)
    assert float(ds["delta_nu"]) == pytest.approx(NU / u_tau, rel=1e-12)

    n = grid.shape[2] // 2
    y = grid.zc[:n]
    np.testing.assert_allclose(ds["y"].values, y, rtol=1e-12)
    np.testing.assert_allclose(ds["yplus"].values, y * u_tau / NU, rtol=1e-12)
    np.testing.assert_allclose(ds["U_plus"].values, poiseuille(y, lz) / u_tau, rtol=1e-12)
    # laminar: U+ = y+ - y+^2 / (2 Re_tau)
    yp, re = ds["yplus"].values, float(ds["re_tau"])
    np.testing.assert_allclose(ds["U_plus"].values, yp - yp**2 / (2 * re), rtol=1e-12)
    # the solver's compact face differences are second order, not exact, for the parabola
    np.testing.assert_allclose(ds["dUdy_plus"].values, 1.0 - y / h, atol=5e-3)

    np.testing.assert_allclose(ds["u_rms_plus"].values, np.sqrt(C_UU) / u_tau, rtol=1e-10)
    np.testing.assert_allclose(ds["v_rms_plus"].values, np.sqrt(C_VV) / u_tau, rtol=1e-10)
    np.testing.assert_allclose(ds["p_rms_plus"].values, np.sqrt(C_PP) / tau, rtol=1e-10)
    np.testing.assert_allclose(ds["u_rms"].values, np.sqrt(C_UU), rtol=1e-10)

    # face quantities: face values (0 at the bottom wall) averaged onto the centres
    zf_all = grid.zf
    ww_c = 0.5 * (ww_face(zf_all[:-1], lz) + ww_face(zf_all[1:], lz))
    np.testing.assert_allclose(ds["w_rms"].values, np.sqrt(ww_c), rtol=1e-10)
    uw_c = 0.5 * (uw_face(zf_all[:-1], lz) + uw_face(zf_all[1:], lz))
    np.testing.assert_allclose(ds["uw"].values, uw_c, rtol=1e-10, atol=1e-15)
    np.testing.assert_allclose(ds["reynolds_stress_plus"].values, -uw_c[:n] / tau, rtol=1e-10, atol=1e-15)
    np.testing.assert_allclose(ds["total_stress_plus"].values,
                               ds["dUdy_plus"].values + ds["reynolds_stress_plus"].values, rtol=1e-14)
    np.testing.assert_allclose(ds["total_stress_linear"].values, 1.0 - y / h, rtol=1e-12)


def test_mean_w_is_removed_from_uw(tmp_path, grid):
    """uw - u_f w: a (non-physical) constant mean w must not change <u'w'>."""
    lz = grid.lengths[2]
    a = wall_units(profiles_dataset(grid, [0.0, 1.0]), NU, lz)
    b = wall_units(profiles_dataset(grid, [0.0, 1.0], w_mean=0.7), NU, lz)
    np.testing.assert_allclose(b["uw"].values, a["uw"].values, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(b["reynolds_stress_plus"].values, a["reynolds_stress_plus"].values, atol=1e-9)


def test_first_order_gradient_on_parabola(grid):
    """Default gradient_order=1: U1 / d1, for a parabola (G / nu)(h - d1 / 2) exactly."""
    lz = grid.lengths[2]
    ds = wall_units(profiles_dataset(grid, [0.0]), NU, lz)
    d1 = grid.zc[0]
    assert ds.attrs["gradient_order"] == 1
    assert float(ds["tau_wall_bottom"]) == pytest.approx(G * (lz / 2 - d1 / 2), rel=1e-12)


@pytest.mark.parametrize("turbulent", [False, True])
def test_discrete_steady_state_stress_balance(grid, turbulent):
    """On the solver's discrete steady state the default wall flux gives tau_w = G h and the stress balance
    -u'w'+ + dU+/dy+ = 1 - y/h exactly; the second-order fit does not (it is O(d1 / h) high)."""
    lz = grid.lengths[2]
    h = lz / 2
    stress = reynolds_stress(grid.zf, lz) if turbulent else np.zeros(grid.shape[2] + 1)
    u = discrete_channel(grid, stress)
    prof = profiles_dataset(grid, [0.0, 1.0], u=u, stress=stress)
    ds = wall_units(prof, NU, lz)
    assert float(ds["tau_wall_bottom"]) == pytest.approx(G * h, rel=1e-10)
    assert float(ds["tau_wall_top"]) == pytest.approx(G * h, rel=1e-10)
    assert float(ds["re_tau"]) == pytest.approx(np.sqrt(G * h) * h / NU, rel=1e-10)
    y = ds["y"].values
    np.testing.assert_allclose(ds["total_stress_plus"].values, 1.0 - y / h, atol=1e-10)
    if turbulent:
        r = reynolds_stress(grid.zf, lz)
        n = ds.sizes["k"]
        np.testing.assert_allclose(ds["reynolds_stress_plus"].values, 0.5 * (r[:-1] + r[1:])[:n] / (G * h),
                                   atol=1e-12)
        assert float(ds["reynolds_stress_plus"].max()) > 0.1
    second = wall_units(prof, NU, lz, gradient_order=2)
    assert float(second["tau_wall"]) > 1.005 * G * h
    b = bulk_quantities(prof, NU, lz)
    assert b["tau_w"] == pytest.approx(G * h, rel=1e-10)


def test_unfolded_and_asymmetric_grid(tmp_path):
    lz = LENGTHS[2]
    h = lz / 2
    g = Grid((4, 4, 15), LENGTHS, z_stretch=1.5, z_cluster="lower")
    prof = profiles_dataset(g, [0.0, 1.0])
    ds = wall_units(prof, NU, lz, gradient_order=2)  # not symmetric: both halves kept
    assert ds.attrs["folded"] == 0
    assert ds["U_plus"].dims == ("wall", "k")
    assert list(ds["wall"].values) == ["bottom", "top"]
    assert float(ds["tau_wall_bottom"]) == pytest.approx(G * h, rel=1e-11)
    assert float(ds["tau_wall_top"]) == pytest.approx(G * h, rel=1e-11)
    u_tau = np.sqrt(G * h)
    nb = int(np.sum(g.zc <= h))
    bottom = ds.sel(wall="bottom")
    np.testing.assert_allclose(bottom["y"].values[:nb], g.zc[:nb], rtol=1e-12)
    assert np.all(np.isnan(bottom["y"].values[nb:]))
    top = ds.sel(wall="top")
    ok = np.isfinite(top["y"].values)
    np.testing.assert_allclose(top["y"].values[ok], (lz - g.zc[::-1])[: ok.sum()], rtol=1e-12)
    for one in (bottom, top):
        ok = np.isfinite(one["y"].values)
        y = one["y"].values[ok]
        np.testing.assert_allclose(one["U_plus"].values[ok], poiseuille(y, lz) / u_tau, rtol=1e-11)
        np.testing.assert_allclose(one["dUdy_plus"].values[ok], 1.0 - y / h, atol=1e-2)
        np.testing.assert_allclose(one["yplus"].values[ok], y * u_tau / NU, rtol=1e-12)
    with pytest.raises(ValueError, match="symmetric"):
        wall_units(prof, NU, lz, fold=True)
    # the discrete steady state on this grid: per wall, total stress = (tau_wall_w - G y) / tau_w exactly
    stress = reynolds_stress(g.zf, lz)
    ds = wall_units(profiles_dataset(g, [0.0], u=discrete_channel(g, stress), stress=stress), NU, lz)
    tau = float(ds["tau_wall"])
    assert tau == pytest.approx(G * h, rel=1e-10)  # tau_b + tau_t = G lz: the integral balance
    for wall in ("bottom", "top"):
        one = ds.sel(wall=wall)
        ok = np.isfinite(one["y"].values)
        expected = (float(ds[f"tau_wall_{wall}"]) - G * one["y"].values[ok]) / tau
        np.testing.assert_allclose(one["total_stress_plus"].values[ok], expected, atol=1e-10)


def test_fold_false_on_symmetric_grid_matches_folded(grid):
    lz = grid.lengths[2]
    prof = profiles_dataset(grid, [0.0])
    folded = wall_units(prof, NU, lz)
    both = wall_units(prof, NU, lz, fold=False)
    for name in ("U_plus", "u_rms_plus", "w_rms_plus", "reynolds_stress_plus", "dUdy_plus", "yplus"):
        np.testing.assert_allclose(both[name].sel(wall="bottom").values, folded[name].values, rtol=1e-10, atol=1e-13)
        np.testing.assert_allclose(both[name].sel(wall="top").values, folded[name].values, rtol=1e-10, atol=1e-13)


def test_odd_nz_centre_point(tmp_path):
    lz = LENGTHS[2]
    g = Grid((4, 4, 11), LENGTHS, z_stretch=1.2)
    ds = wall_units(profiles_dataset(g, [0.0]), NU, lz)
    assert ds.sizes["k"] == 6
    assert float(ds["y"][-1]) == pytest.approx(lz / 2, rel=1e-12)
    assert float(ds["reynolds_stress_plus"][-1]) == pytest.approx(0.0, abs=1e-14)
    assert float(ds["dUdy_plus"][-1]) == pytest.approx(0.0, abs=1e-10)


# ------------------------------------------------------------------------------------------------
# time window
# ------------------------------------------------------------------------------------------------


def test_window_average(grid):
    lz = grid.lengths[2]
    h = lz / 2
    a = 0.2
    times = np.arange(10.0)
    prof = profiles_dataset(grid, times, amplitude=lambda t: 1.0 + a * t)
    ds = wall_units(prof, NU, lz, window=(2.0, 5.0), gradient_order=2)  # inclusive: t = 2, 3, 4, 5
    factor = 1.0 + a * 3.5
    assert int(ds["n_samples"]) == 4
    assert float(ds["tau_wall"]) == pytest.approx(G * h * factor, rel=1e-12)
    np.testing.assert_allclose(ds["U"].values, factor * poiseuille(grid.zc, lz), rtol=1e-12)
    # covariances after the time average: the drift of U within the window is a fluctuation
    var_t = np.var([2.0, 3.0, 4.0, 5.0])
    np.testing.assert_allclose(ds["u_rms"].values ** 2, C_UU + (a * poiseuille(grid.zc, lz)) ** 2 * var_t, rtol=1e-9)
    whole = wall_units(prof, NU, lz, gradient_order=2)
    assert float(whole["tau_wall"]) == pytest.approx(G * h * (1 + a * 4.5), rel=1e-12)
    assert int(wall_units(prof, NU, lz, window=(None, 1.0))["n_samples"]) == 2
    assert int(wall_units(prof, NU, lz, window=(7.0, None))["n_samples"]) == 3
    b = bulk_quantities(prof, NU, lz, window=(2.0, 5.0), gradient_order=2)
    assert b["tau_w"] == pytest.approx(G * h * factor, rel=1e-12)
    assert b["n_samples"] == 4
    mean = time_average(prof, (2.0, 5.0))
    assert "time" not in mean.dims
    with pytest.raises(ValueError, match="no stored sample"):
        wall_units(prof, NU, lz, window=(20.0, 30.0))
    # stored times carry round-off (0.1 * 3 = 0.30000000000000004): window ends are inclusive anyway
    steps = profiles_dataset(grid, 0.1 * np.arange(10))
    assert int(wall_units(steps, NU, lz, window=(0.3, 0.6))["n_samples"]) == 4


def test_lazy_input_stays_lazy_until_reduced(run):
    prof = run["profiles"]
    mean = time_average(prof, (0.5, 2.0))
    assert isinstance(mean["u"].data, da.Array)
    assert mean.attrs["run"]["config"]["physics"]["nu"] == NU


# ------------------------------------------------------------------------------------------------
# bulk quantities
# ------------------------------------------------------------------------------------------------


def test_bulk_quantities_poiseuille(run, grid):
    lz = grid.lengths[2]
    h = lz / 2
    b = bulk_quantities(run["profiles"], NU, lz, gradient_order=2)
    u_b_exact = G * h * h / (3 * NU)
    midpoint_error = (G / NU) * np.sum(grid.dzf**3) / (24 * lz)  # sum U_k dz_k = integral + f'' dz^3 / 24
    assert b["U_b"] == pytest.approx(u_b_exact + midpoint_error, rel=1e-12)
    assert b["U_b"] == pytest.approx(u_b_exact, rel=1e-2)  # second order, 16 cells
    assert b["Re_b"] == pytest.approx(b["U_b"] * 2 * h / NU, rel=1e-14)
    u_c = G * h * h / (2 * NU)
    assert b["U_c"] == pytest.approx(u_c, rel=1e-12)  # quadratic interpolation: exact
    assert b["Re_c"] == pytest.approx(u_c * h / NU, rel=1e-12)
    assert b["tau_w"] == pytest.approx(G * h, rel=1e-12)
    assert b["Re_tau"] == pytest.approx(np.sqrt(G * h) * h / NU, rel=1e-12)
    assert b["Cf"] == pytest.approx(b["tau_w"] / (0.5 * b["U_b"] ** 2), rel=1e-14)
    assert b["Cf_dean"] == pytest.approx(0.073 * b["Re_b"] ** -0.25, rel=1e-14)
    # laminar: Cf = 12 / Re_b with the exact U_b; up to the midpoint-rule error with the computed one
    re_b_exact = u_b_exact * 2 * h / NU
    assert G * h / (0.5 * u_b_exact**2) == pytest.approx(12 / re_b_exact, rel=1e-14)
    assert b["Cf"] == pytest.approx(12 / b["Re_b"], rel=2e-2)
    assert b["Cf_laminar"] == pytest.approx(12 / b["Re_b"], rel=1e-14)
    assert b["U_c_over_U_b"] == pytest.approx(1.5, rel=1e-2)


# ------------------------------------------------------------------------------------------------
# plots
# ------------------------------------------------------------------------------------------------


def rendered(fig):
    """Draw ``fig`` with the Agg renderer (text extents as a PNG would have them); returns the renderer."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return canvas.get_renderer()


def visible_tick_labels(axis, which: str):
    """(location, label) of the ticks of ``axis`` ('major' or 'minor') inside the view interval."""
    lo, hi = sorted(axis.get_view_interval())
    if which == "major":
        locs, labels = axis.get_majorticklocs(), axis.get_majorticklabels()
    else:
        locs, labels = axis.get_minorticklocs(), axis.get_minorticklabels()
    assert len(locs) == len(labels)
    return [(loc, label) for loc, label in zip(locs, labels, strict=True)
            if lo * (1 - 1e-9) <= loc <= hi * (1 + 1e-9) and label.get_visible()]


def assert_readable_log_axis(axis, renderer):
    """Labelled decades only (plain numbers: 0.1, 1, 10, 100), at least two of them, unlabelled minor
    ticks, and no two tick labels overlapping on the rendered figure."""
    major = [(loc, label) for loc, label in visible_tick_labels(axis, "major") if label.get_text()]
    assert len(major) >= 2, [label.get_text() for _, label in major]
    for loc, label in major:
        assert np.log10(loc) == pytest.approx(round(np.log10(loc)), abs=1e-9)
        assert float(label.get_text()) == pytest.approx(loc, rel=1e-12)  # "10", not "$10^{1}$"
    assert all(not label.get_text() for _, label in visible_tick_labels(axis, "minor"))
    boxes = [label.get_window_extent(renderer) for _, label in major]
    for i in range(len(boxes)):
        assert boxes[i].width > 0
        for j in range(i + 1, len(boxes)):
            assert not boxes[i].overlaps(boxes[j]), (major[i][1].get_text(), major[j][1].get_text())


@pytest.mark.parametrize("nu_factor, decades", [(1.0, ["0.1", "1", "10"]), (1 / 30, ["1", "10"]),
                                                (1 / 2000, ["10", "100"])])
def test_plot_wall_units_figure(grid, nu_factor, decades):
    """What a talk needs: wall-unit labels and titles, the reference laws labelled, a log y+ axis labelled
    at its decades with non-overlapping labels, for y+ ranges from 0.6-13 to 26-580."""
    pytest.importorskip("matplotlib")
    ds = wall_units(profiles_dataset(grid, [0.0, 1.0]), NU * nu_factor, grid.lengths[2])
    fig = plot_wall_units(ds)
    renderer = rendered(fig)
    ax_u, ax_rms, ax_stress = fig.axes[:3]
    assert "wall units" in fig.get_suptitle() and f"{float(ds['re_tau']):.1f}" in fig.get_suptitle()
    assert "2 samples" in fig.get_suptitle()
    assert [ax.get_title() for ax in (ax_u, ax_rms, ax_stress)] == [
        "Mean velocity", "Velocity fluctuations", "Mean shear stress balance"]
    assert ax_u.get_xlabel().startswith("$y^+") and ax_u.get_ylabel().startswith("$U^+")
    assert ax_rms.get_xlabel().startswith("$y^+") and "u_\\tau" in ax_rms.get_ylabel()
    assert ax_stress.get_xlabel() == "$y/h$" and "tau_w" in ax_stress.get_ylabel()
    legend = [t.get_text() for t in ax_u.get_legend().get_texts()]
    assert any("viscous sublayer" in t and "U^+ = y^+" in t for t in legend)
    assert any("log law" in t and "0.41" in t and "5.2" in t for t in legend)
    assert any("1 - y/h" in t for t in (t.get_text() for t in ax_stress.get_legend().get_texts()))
    for ax in (ax_u, ax_rms):
        assert ax.get_xscale() == "log"
        assert_readable_log_axis(ax.xaxis, renderer)
        assert [label.get_text() for _, label in visible_tick_labels(ax.xaxis, "major")
                if label.get_text()] == decades
        lo, hi = ax.get_xlim()
        assert lo <= float(ds["yplus"].min()) and hi >= float(ds["yplus"].max())  # every point shown


def test_plot_wall_units_saves_png(tmp_path, run):
    pytest.importorskip("matplotlib")
    path = plot_wall_units(wall_units(run["profiles"]), tmp_path / "wall.png")
    assert path == tmp_path / "wall.png"
    assert path.stat().st_size > 1000
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    g = Grid((4, 4, 15), LENGTHS, z_stretch=1.5, z_cluster="lower")  # two walls, NaN-padded
    two = wall_units(profiles_dataset(g, [0.0]), NU, LENGTHS[2])
    path2 = plot_wall_units(two, tmp_path / "wall2.png")
    assert path2.stat().st_size > 1000
    fig = plot_wall_units(two)
    assert fig._repr_png_().startswith(b"\x89PNG\r\n\x1a\n")  # what Jupyter shows of the returned figure
    assert f"= {NU:g}" in fig.get_suptitle()  # nu of the analysis
    renderer = rendered(fig)
    ax_u, ax_rms, ax_stress = fig.axes[:3]
    assert {"daskflow (bottom wall)", "daskflow (top wall)"} <= {t.get_text() for t in ax_u.get_legend().get_texts()}
    for ax in (ax_rms, ax_stress):  # quantities named once, the walls by line style
        texts = [t.get_text() for t in ax.get_legend().get_texts()]
        assert texts.count("bottom wall") == 1 and texts.count("top wall") == 1
        assert not any("(top wall)" in t for t in texts)
    assert_readable_log_axis(ax_u.xaxis, renderer)


def store_scalars(times) -> xr.Dataset:
    """Synthetic scalars with the store's CF attributes (long_name, units) and run attributes."""
    from daskflow.io.store import attributes

    ds = scalars_dataset(times)
    for name in ds.variables:
        ds[name].attrs.update(attributes(name))
    ds.attrs["run"] = {"config": config(Grid((8, 4, 16), LENGTHS, z_stretch=1.8))}
    return ds


def test_plot_scalars_figure():
    """Every panel: the variable's long_name as title, a label with its units (L, T: the configuration's
    units), time with its units on x; the two wall stresses share a panel; div_max on a readable log axis."""
    pytest.importorskip("matplotlib")
    scalars = store_scalars(np.linspace(0.0, 4.0, 41))
    fig = plot_scalars(scalars)
    renderer = rendered(fig)
    axes = {ax.get_title(): ax for ax in fig.axes if ax.get_visible()}
    assert set(axes) == {
        "Time step", "Courant number (advective)", "Largest absolute divergence of the velocity",
        "Volume-averaged streamwise velocity", "Mean kinetic energy per unit volume",
        "Friction Reynolds number (half height)", "Kinematic wall shear stress"}
    for ax in axes.values():
        assert ax.get_xlabel() == r"$t$ [$\mathrm{T}$]"
        assert ax.get_ylabel()
    assert axes["Volume-averaged streamwise velocity"].get_ylabel() == r"$U_b$ [$\mathrm{L\,T^{-1}}$]"
    assert axes["Kinematic wall shear stress"].get_ylabel() == r"$\tau_w$ [$\mathrm{L^{2}\,T^{-2}}$]"
    assert axes["Friction Reynolds number (half height)"].get_ylabel() == r"$Re_\tau$"  # dimensionless
    assert axes["Courant number (advective)"].get_ylabel() == "CFL"
    walls = axes["Kinematic wall shear stress"]
    assert [t.get_text() for t in walls.get_legend().get_texts()] == ["bottom wall", "top wall"]
    assert len(walls.get_lines()) == 2
    div = axes["Largest absolute divergence of the velocity"]
    assert div.get_yscale() == "log" and "T^{-1}" in div.get_ylabel()
    major = [label.get_text() for _, label in visible_tick_labels(div.yaxis, "major") if label.get_text()]
    assert len(major) >= 2
    boxes = [label.get_window_extent(renderer) for _, label in visible_tick_labels(div.yaxis, "major")
             if label.get_text()]
    assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])
    assert "Run time series" in fig.get_suptitle() and "8 × 4 × 16" in fig.get_suptitle()
    assert "length and time units" in fig.get_supxlabel()
    # titles and axis labels never overlap one another on the rendered figure
    texts = [t for ax in axes.values() for t in (ax.title, ax.xaxis.label, ax.yaxis.label)]
    boxes = [t.get_window_extent(renderer) for t in texts]
    clashes = [(texts[i].get_text(), texts[j].get_text()) for i in range(len(boxes)) for j in range(i + 1, len(boxes))
               if boxes[i].overlaps(boxes[j])]
    assert not clashes


def test_plot_scalars_without_attributes_and_chosen_variables(tmp_path, run):
    """Datasets without CF attributes fall back to the variable names; ``variables`` picks the panels."""
    pytest.importorskip("matplotlib")
    path = plot_scalars(run["scalars"], str(tmp_path / "scalars.png"))
    assert path.stat().st_size > 1000
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    fig = plot_scalars(scalars_dataset([0.0, 1.0, 2.0]), variables=["cfl", "re_tau"])
    shown = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in shown] == ["cfl", "re_tau"]
    assert [ax.get_ylabel() for ax in shown] == ["CFL", r"$Re_\tau$"]
    with pytest.raises(ValueError, match="no scalar"):
        plot_scalars(scalars_dataset([0.0]), variables=[])
