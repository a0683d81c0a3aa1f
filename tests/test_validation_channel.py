"""The turbulent-channel validation: reduction of a real run's store, the published reference data,
the statistical errors, the spectra, and the committed Re_tau 180 evidence."""

import contextlib
import copy
import io
import json
from pathlib import Path

import numpy as np
import pytest

from daskflow import Simulation
from daskflow.validation import channel
from tests.helpers import CHANNEL

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "docs" / "validation" / "data"
CHANNEL_FIGURES = ["channel180-history.png", "channel180-mean.png", "channel180-rms.png",
                   "channel180-stress-balance.png", "channel180-pressure.png", "channel180-streaks.png",
                   "channel180-spectra.png"]


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    """A real in-process channel run (flow-rate forcing) writing scalars, profiles and z slices."""
    path = tmp_path_factory.mktemp("channel") / "run.zarr"
    cfg = copy.deepcopy(CHANNEL)
    cfg["physics"] = {"nu": 1e-3, "forcing": {"kind": "flow_rate", "value": [1.0, 0.0]}}  # y+ reaches ~55
    cfg["output"] = {"store": str(path), "scalars_every": 1, "profiles_every": 2, "slices_every": 4,
                     "slices": {"z": [0.2, 1.0]}}
    Simulation(cfg).run(steps=12)
    return path


@pytest.fixture(scope="module")
def reference():
    return channel.read_reference(DATA / channel.REFERENCE)


@pytest.fixture(scope="module")
def committed():
    return channel.evaluate(DATA)


# ------------------------------------------------------------------------------------------------
# Reduction of a run's store
# ------------------------------------------------------------------------------------------------


def test_reduce_store_writes_the_small_files_and_consistent_numbers(small_run, tmp_path):
    summary = channel.reduce_store(small_run, tmp_path, t_start=0.0)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([
        "channel180-scalars.csv", "channel180-profiles-full.csv", "channel180-profiles-first_half.csv",
        "channel180-profiles-second_half.csv", "channel180-slice.npz", "channel180.json"])
    full, first, second = (summary["windows"][k] for k in ("full", "first_half", "second_half"))
    assert full["samples"] == 6 and first["samples"] + second["samples"] >= 6  # the middle sample may be in both
    assert full["re_b"] == pytest.approx(1.0 * 2.0 / 1e-3, rel=1e-10)  # bulk velocity held to round-off
    assert full["cf_dean"] == pytest.approx(0.073 * 2000.0 ** -0.25, rel=1e-12)
    assert full["balance_error_all"] >= full["balance_error_away"] >= 0.0
    profile = channel._read_csv(tmp_path / "channel180-profiles-full.csv")
    assert np.all(np.diff(profile["yplus"]) > 0) and profile["y_over_h"][-1] <= 1.0
    np.testing.assert_allclose(profile["total_stress_linear"], 1.0 - profile["y_over_h"], atol=1e-7)
    plane = np.load(tmp_path / "channel180-slice.npz")
    assert plane["u"].shape == (16, 8) and plane["u"].dtype == np.float16
    assert json.loads((tmp_path / "channel180.json").read_text())["steps"] == 12
    paths = channel.figures(tmp_path, tmp_path / "fig")
    names = [p.name for p in paths]
    assert names == CHANNEL_FIGURES
    assert all(p.stat().st_size > 5000 for p in paths)
    assert "| Re_tau |" in channel.table(tmp_path)  # a series too short for batch means: NaN error bars


def test_reduction_writes_the_pressure_rms_a_store_holds(small_run, tmp_path):
    """Every store's profiles hold the plane means of p and p**2: the reduction turns them into
    p'/tau_w (the committed Re_tau 180 reduction has that column too)."""
    from daskflow import analysis

    summary = channel.reduce_store(small_run, tmp_path, t_start=0.0)
    profile = channel._read_csv(tmp_path / "channel180-profiles-full.csv")
    assert list(profile)[-1] == channel.PRESSURE_COLUMN
    profiles = analysis.open_run(small_run)["profiles"]
    wu = analysis.wall_units(profiles, window=tuple(summary["windows"]["full"]["window"]))
    np.testing.assert_allclose(profile["p_rms_plus"], wu.p_rms_plus.values, rtol=1e-7)
    # by hand: the time mean of the plane means of p**2 minus the square of the time mean of p
    mean = profiles.mean("time")
    p_rms = np.sqrt(np.maximum(mean["pp"].values - mean["p"].values ** 2, 0.0))
    half = (p_rms.size + 1) // 2
    by_hand = 0.5 * (p_rms[:half] + p_rms[::-1][:half]) / float(wu.tau_wall)  # the two walls folded
    np.testing.assert_allclose(profile["p_rms_plus"], by_hand, rtol=1e-6)
    assert np.all(profile["p_rms_plus"] > 0)
    assert summary["windows"]["full"]["p_rms_first_plus"] == pytest.approx(profile["p_rms_plus"][0], rel=1e-7)


def test_windows_split_the_average_in_halves():
    w = channel.windows(300.0, 100.0)
    assert w == {"full": (100.0, 300.0), "first_half": (100.0, 200.0), "second_half": (200.0, 300.0)}


# ------------------------------------------------------------------------------------------------
# The reference: Moser, Kim & Mansour (1999), chan180
# ------------------------------------------------------------------------------------------------


def test_reference_file_parses_with_the_documented_columns_and_says_where_it_comes_from(reference):
    text = (DATA / channel.REFERENCE).read_text()
    for source in ("Moser, J. Kim & N. N. Mansour", "Phys. Fluids 11(4), 943-945 (1999)",
                   "chan180/profiles/chan180.means", "chan180.reystress", "chan180.velp",
                   "brent10holladay/DNSValidation", "03197f18e0b05895933978ba16211fc5874819b5"):
        assert source in text
    for column in channel.REFERENCE_COLUMNS:  # every column is described in the header
        assert f"#   {column} " in text
    assert set(reference) == {*channel.REFERENCE_COLUMNS, "re_tau"}
    assert reference["re_tau"] == channel.MKM_RE_TAU == 178.12
    assert all(reference[c].shape == (65,) for c in channel.REFERENCE_COLUMNS)
    # rows: the Chebyshev-Gauss-Lobatto points of ny = 129 from the wall to the centre, y+ = Re_tau y/h
    np.testing.assert_allclose(reference["y_over_h"], 1 - np.cos(np.pi * np.arange(65) / 128), atol=5e-5)
    np.testing.assert_allclose(reference["yplus"][1:], 178.12 * reference["y_over_h"][1:], rtol=1e-4)
    assert reference["U_plus"][-1] == 18.301 and reference["R_uu"][-1] == 0.66256 and reference["R_pp"][0] == 2.3506


def test_reference_columns_are_where_the_header_says(reference):
    """Physics the published columns must satisfy, so a column read from the wrong place fails."""
    # mean momentum: -<u'v'>+ + dU+/dy+ = 1 - y/h, with dU+/dy+ = (dU/dy in u_tau/h) / Re_tau
    total = -reference["R_uv"] + reference["dUdy"] / reference["re_tau"]
    np.testing.assert_allclose(total, 1.0 - reference["y_over_h"], atol=4e-3)
    # viscous sublayer: U+ = y+ and dU+/dy+ = 1 at the wall
    np.testing.assert_allclose(reference["U_plus"][:4], reference["yplus"][:4], rtol=2e-3)
    assert reference["dUdy"][0] == pytest.approx(reference["re_tau"], rel=1e-4)
    # wall-normal fluctuations vanish like y^4 (continuity), streamwise and spanwise like y^2
    near = slice(1, 4)
    assert np.all(reference["R_vv"][near] < 1e-3 * reference["R_ww"][near])
    assert np.all(reference["R_ww"][near] < reference["R_uu"][near])
    assert reference["R_uv"][-1] == 0.0 and np.all(reference["R_uv"][1:-1] < 0)


def test_reference_bulk_numbers(reference):
    bulk = channel.reference_bulk(reference)
    trapezoid = np.trapezoid(reference["U_plus"], reference["y_over_h"])
    assert bulk["U_b_plus"] == pytest.approx(trapezoid, rel=2e-4)  # the two quadratures agree
    assert round(bulk["Re_b"]) == 5586  # not 5600: the reference ran at Re_tau 178.12, slightly lower Re_b
    assert bulk["Cf"] == pytest.approx(2.0 / bulk["U_b_plus"] ** 2)
    assert bulk["Cf"] == pytest.approx(8.134e-3, abs=1e-6)
    assert bulk["U_c_plus"] == 18.301


def test_read_reference_rejects_malformed_files(tmp_path):
    good = (DATA / channel.REFERENCE).read_text()
    (tmp_path / "columns.csv").write_text(good.replace("y_over_h,yplus,U_plus", "y_over_h,U_plus,yplus"))
    with pytest.raises(ValueError, match="columns"):
        channel.read_reference(tmp_path / "columns.csv")
    (tmp_path / "re_tau.csv").write_text(good.replace("# # Re_tau = 178.12", "# # Re_tau = 180", 1))
    with pytest.raises(ValueError, match="Re_tau"):
        channel.read_reference(tmp_path / "re_tau.csv")


def test_clenshaw_curtis_is_exact_for_polynomials_up_to_its_degree():
    n = 16
    x = np.cos(np.pi * np.arange(n + 1) / n)
    w = channel.clenshaw_curtis_weights(n)
    for degree in range(n + 1):
        exact = 0.0 if degree % 2 else 2.0 / (degree + 1)
        assert w @ x**degree == pytest.approx(exact, abs=1e-13)
    with pytest.raises(ValueError):
        channel.clenshaw_curtis_weights(7)


# ------------------------------------------------------------------------------------------------
# The second reference: Lee & Moser (2015), their Re_tau 180 case
# ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def lee_moser():
    return channel.read_reference(DATA / channel.LM_REFERENCE)


def test_lee_moser_file_parses_and_says_where_it_comes_from(lee_moser):
    text = (DATA / channel.LM_REFERENCE).read_text()
    for source in ("M. Lee & R. D. Moser", "J. Fluid Mech. 774, 395-415 (2015)",
                   "https://turbulence.oden.utexas.edu/channel2015/", "LM_Channel_0180_mean_prof.dat",
                   "LM_Channel_0180_vel_fluc_prof.dat", "LM_Channel_0180_vor_pres_fluc_prof.dat",
                   "xcompact3d/Py4Incompact3D", "c6985461a58265957e6419788ee41caad6578103",
                   "filippo-moroni/Incompact3d", "10ac1939bce323d106c87b880d470792574e18db"):
        assert source in text
    for column in channel.REFERENCE_COLUMNS:  # every column is described in the header
        assert f"#   {column} " in text
    assert set(lee_moser) == {*channel.REFERENCE_COLUMNS, "re_tau"}
    assert lee_moser["re_tau"] == channel.LM_RE_TAU == 182.088  # stated by all three quoted headers
    assert all(lee_moser[c].shape == (96,) for c in channel.REFERENCE_COLUMNS)
    # rows: the B-spline points from the wall to short of the centre (y = h is not in the files)
    assert lee_moser["y_over_h"][0] < 1e-15 and lee_moser["y_over_h"][-1] == 9.915979301650304e-01
    np.testing.assert_allclose(lee_moser["yplus"][1:], 182.088 * lee_moser["y_over_h"][1:], rtol=5e-6)
    assert lee_moser["U_plus"][-1] == 1.826830831045079e+01 and lee_moser["R_pp"][0] == 2.411154896078003e+00
    k = int(np.argmax(lee_moser["R_uu"]))  # u'u' peaks at 7.137 near y+ = 14.6
    assert lee_moser["R_uu"][k] == 7.137185486976591 and 14 < lee_moser["yplus"][k] < 15


def test_lee_moser_columns_are_where_the_header_says(lee_moser):
    """The physics of :func:`test_reference_columns_are_where_the_header_says`, on Lee & Moser's columns."""
    total = -lee_moser["R_uv"] + lee_moser["dUdy"] / lee_moser["re_tau"]
    np.testing.assert_allclose(total, 1.0 - lee_moser["y_over_h"], atol=2.5e-3)
    np.testing.assert_allclose(lee_moser["U_plus"][1:6], lee_moser["yplus"][1:6], rtol=2e-3)
    assert lee_moser["dUdy"][0] == pytest.approx(lee_moser["re_tau"], rel=1e-12)  # dU+/dy+ = 1 at the wall
    near = slice(1, 6)  # wall-normal (their v) like y^4, spanwise (their w) and streamwise like y^2
    assert np.all(lee_moser["R_vv"][near] < 1e-3 * lee_moser["R_ww"][near])
    assert np.all(lee_moser["R_ww"][near] < lee_moser["R_uu"][near])
    assert np.all(lee_moser["R_uv"][1:] < 0)


def test_lee_moser_bulk_numbers(lee_moser):
    bulk = channel.reference_bulk(lee_moser)
    # their files state U_mean = 1 and u_tau = 0.0637309 (nu = 3.5e-4): U_b+ = 15.691, Re_b = 2/nu
    assert bulk["U_b_plus"] == pytest.approx(1 / 0.0637309, rel=2e-6)
    assert bulk["Re_b"] == pytest.approx(2 / 3.5e-4, rel=5e-6)  # Re_tau is printed to 6 digits
    assert bulk["U_c_plus"] == pytest.approx(18.2688, abs=1e-4)  # a little above the last row's 18.2683
    peak, at = channel.reference_peak(lee_moser)
    assert peak == pytest.approx(np.sqrt(7.137185486976591), rel=2e-3) and 14 < at < 15


def test_reference_bulk_of_rows_short_of_the_centre():
    y = np.concatenate([[0.0], np.geomspace(1e-3, 0.99, 60)])  # not Chebyshev points, no centre row
    bulk = channel.reference_bulk({"y_over_h": y, "U_plus": 1.0 - (1.0 - y) ** 2, "re_tau": 100.0})
    assert bulk["U_b_plus"] == pytest.approx(2 / 3, rel=1e-6) and bulk["U_c_plus"] == pytest.approx(1.0, rel=1e-6)
    with pytest.raises(ValueError, match="wall"):
        channel.reference_bulk({"y_over_h": y[::-1], "U_plus": y, "re_tau": 100.0})


def test_read_reference_checks_the_lee_moser_headers_agree(tmp_path):
    good = (DATA / channel.LM_REFERENCE).read_text()
    (tmp_path / "lm.csv").write_text(good.replace("Re_tau              Re_tau =  182.088", "Re_tau  Re_tau = 180", 1))
    with pytest.raises(ValueError, match="Re_tau"):
        channel.read_reference(tmp_path / "lm.csv")


def test_the_comparison_includes_both_references(committed):
    assert list(committed["references"]) == [channel.MKM, channel.LM]
    mkm, lm = (committed["references"][name] for name in (channel.MKM, channel.LM))
    assert mkm["compared"] == committed["compared"] and mkm["bulk"] == committed["reference_bulk"]
    assert lm["bulk"]["re_tau"] == 182.088 and lm["short"] == "LM"
    assert set(lm["compared"]) == set(mkm["compared"])
    assert set(mkm["compared"]) == set(channel.COMPARED) and channel.PRESSURE_COLUMN in channel.COMPARED
    # velocities within 3.5% of Lee & Moser's peaks up to y+ = 150 (the mean within 1%); nearer the centre
    # their higher Re_tau (182.09 against 178.28) shows: at equal y+ their -<u'v'>+ is farther from its zero
    # at y = h. The pressure rms has its own criterion (test_committed_re_tau_180_run_meets_the_validation_criteria).
    for name, c in lm["compared"].items():
        if name == channel.PRESSURE_COLUMN:
            continue
        limit = 0.01 if name == "U_plus" else 0.035
        assert c["max_abs"] < limit * c["reference_peak"] or c["at_yplus"] > 150, name
    text = channel.table(DATA)
    for row in ("| quantity | daskflow (± 1 sigma) | Moser, Kim & Mansour (1999) | difference | Lee & Moser (2015) "
                "| difference |", "| U+ | LM |", "| U_b+ | 15.706 ± 0.003 | 15.680 | +0.16% | 15.691 | +0.09% |",
                "| p'+ | LM | 0.101 (-0.101) | 26.7 | 5.3% |"):
        assert row in text


def test_reference_profile_maps_the_components_and_interpolates(reference):
    y = reference["yplus"][1:-1]
    np.testing.assert_allclose(channel.reference_profile(reference, "w_rms_plus", y),
                               np.sqrt(reference["R_vv"][1:-1]), rtol=1e-12)  # daskflow's w is MKM's v
    np.testing.assert_allclose(channel.reference_profile(reference, "v_rms_plus", y),
                               np.sqrt(reference["R_ww"][1:-1]))  # and its w daskflow's v
    np.testing.assert_allclose(channel.reference_profile(reference, "reynolds_stress_plus", y),
                               -reference["R_uv"][1:-1])
    between = 0.5 * (reference["yplus"][20:40] + reference["yplus"][21:41])
    interpolated = channel.reference_profile(reference, "U_plus", between)
    assert np.all((interpolated > reference["U_plus"][20:40]) & (interpolated < reference["U_plus"][21:41]))
    peak, at = channel.reference_peak(reference)
    assert 2.6 < peak < 2.7 and 13 < at < 16 and peak >= np.sqrt(reference["R_uu"]).max()


# ------------------------------------------------------------------------------------------------
# Statistical errors
# ------------------------------------------------------------------------------------------------


def _ar1(phi: float, n: int, rng, count: int = 1) -> np.ndarray:
    """``count`` stationary AR(1) series ``x_t = phi x_{t-1} + e_t`` (unit innovations)."""
    from scipy.signal import lfilter

    e = rng.standard_normal((count, n))
    e[:, 0] /= np.sqrt(1 - phi**2)  # start in the stationary distribution
    return lfilter([1.0], [1.0, -phi], e, axis=1)


def test_batch_means_on_an_ar1_series_gives_the_known_error():
    """AR(1): tau_int = (1 + phi) / (1 - phi) and var(mean) -> tau_int / ((1 - phi^2) n)."""
    phi, n = 0.9, 400_000
    x = _ar1(phi, n, np.random.default_rng(1))[0]
    tau = (1 + phi) / (1 - phi)
    exact = np.sqrt(tau / ((1 - phi**2) * n))
    result = channel.batch_means(x)
    assert result["tau_int"] == pytest.approx(tau, rel=0.1)
    assert result["batch"] == int(np.ceil(channel.BATCH_PER_TAU * result["tau_int"]))
    assert result["batches"] == n // result["batch"] and result["samples"] == n
    assert result["stderr"] == pytest.approx(exact, rel=0.15)
    assert result["stderr_tau"] == pytest.approx(exact, rel=0.1)
    assert abs(result["mean"]) < 4 * exact
    white = channel.batch_means(np.random.default_rng(2).standard_normal(100_000))
    assert white["tau_int"] == pytest.approx(1.0, abs=0.1)
    with pytest.raises(ValueError):
        channel.batch_means(x[:10], batch=6)


def test_batch_means_error_bars_cover_the_true_mean_as_often_as_they_should():
    phi, n, runs = 0.8, 4000, 300
    series = _ar1(phi, n, np.random.default_rng(3), runs)
    inside = [abs(r["mean"]) < r["stderr"] for r in map(channel.batch_means, series)]
    assert 0.6 < np.mean(inside) < 0.76  # a 1-sigma interval covers 68% (t-distributed with ~40 batches)


def test_half_window_sigma_and_its_pooling():
    first, second = np.array([1.0, 2.0, 3.0, 4.0]), np.array([1.2, 2.0, 2.4, 4.0])
    np.testing.assert_allclose(channel.half_window_sigma(first, second), [0.1, 0.0, 0.3, 0.0], atol=1e-15)
    pooled = channel.half_window_sigma(first, second, pool=1)
    np.testing.assert_allclose(pooled, np.sqrt([0.01 / 2, 0.1 / 3, 0.09 / 3, 0.09 / 2]))
    # statistically: two independent half means of variance s2 -> E sigma^2 = s2 / 2 = var(whole mean)
    rng = np.random.default_rng(4)
    a, b = rng.normal(0, 1, 200_000), rng.normal(0, 1, 200_000)
    assert np.mean(channel.half_window_sigma(a, b) ** 2) == pytest.approx(0.5, rel=0.02)


# ------------------------------------------------------------------------------------------------
# Spectra and resolution
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(64, 48), (63, 47)])
def test_spectra_satisfy_parseval(shape):
    rng = np.random.default_rng(5)
    u = 1.0 + rng.standard_normal(shape) + np.linspace(0, 1, shape[1])[None, :]
    lengths = (12.0, 6.0)
    s = channel.spectra_1d(u, lengths)
    assert s["kx"].size == shape[0] // 2 + 1 and s["ky"].size == shape[1] // 2 + 1
    assert s["kx"][1] == pytest.approx(2 * np.pi / 12.0) and s["ky"][1] == pytest.approx(2 * np.pi / 6.0)
    variance = u.var()
    assert np.sum(s["E_x"]) * s["kx"][1] == pytest.approx(variance, rel=1e-12)
    assert np.sum(s["E_y"]) * s["ky"][1] == pytest.approx(variance, rel=1e-12)


def test_spectra_put_a_single_mode_at_its_wavenumber():
    nx, ny, lx, ly, amplitude = 64, 32, 12.0, 6.0, 0.3
    x = np.arange(nx) * lx / nx
    u = 2.0 + amplitude * np.cos(2 * np.pi * 5 * x / lx)[:, None] * np.ones(ny)
    s = channel.spectra_1d(u, (lx, ly))
    dk = 2 * np.pi / lx
    assert np.argmax(s["E_x"]) == 5
    assert s["E_x"][5] * dk == pytest.approx(amplitude**2 / 2, rel=1e-12)
    assert np.sum(np.delete(s["E_x"], 5)) < 1e-12
    assert s["E_y"][0] * 2 * np.pi / ly == pytest.approx(amplitude**2 / 2, rel=1e-12)  # constant along y


def test_resolution_in_wall_units_of_the_example_grid():
    import yaml

    grid = yaml.safe_load((ROOT / "examples" / "channel180.yaml").read_text())["grid"]
    r = channel.resolution(grid, 180.0)
    assert r["dx_plus"] == pytest.approx(12.0 / 512 * 180.0) and r["dy_plus"] == pytest.approx(6.0 / 256 * 180.0)
    assert r["z1_plus"] == pytest.approx(0.5 * r["dz_plus_min"])  # the first centre is mid-cell
    assert r["dz_plus_min"] < 1.5 < 3.0 < r["dz_plus_max"] < 3.5
    assert r["lx_plus"] == pytest.approx(12.0 * 180.0)


# ------------------------------------------------------------------------------------------------
# The committed Re_tau 180 run (512 x 256 x 144, one H100): the numbers docs/validation.md states
# ------------------------------------------------------------------------------------------------


def test_committed_re_tau_180_run_meets_the_validation_criteria():
    summary = json.loads((DATA / "channel180.json").read_text())
    for w in summary["windows"].values():
        assert abs(w["re_tau"] - channel.MKM_RE_TAU) < 0.01 * channel.MKM_RE_TAU
        assert w["balance_error_away"] < 0.02  # total stress within 2% of 1 - y/h away from the wall
        assert abs(w["cf"] / w["cf_dean"] - 1) < 0.06
        assert 13 < w["u_rms_peak_yplus"] < 16 and 2.5 < w["u_rms_peak_plus"] < 2.9
    halves = summary["windows"]["first_half"], summary["windows"]["second_half"]
    assert abs(halves[0]["re_tau"] - halves[1]["re_tau"]) < 0.005 * channel.MKM_RE_TAU  # converged statistics
    mean = channel._read_csv(DATA / "channel180-profiles-full.csv")
    sublayer = mean["yplus"] < 6  # the first points: the linear law, bending below it from y+ ~ 5
    np.testing.assert_allclose(mean["U_plus"][sublayer], mean["yplus"][sublayer], rtol=0.06)
    # Re_tau 180 has no true log layer: U+ lies a few percent above the log law there (as in the DNS
    # of Moser, Kim & Mansour); within 6% over 40 < y+ < 120.
    log = (mean["yplus"] > 40) & (mean["yplus"] < 120)
    np.testing.assert_allclose(mean["U_plus"][log], np.log(mean["yplus"][log]) / 0.41 + 5.2, rtol=0.06)
    # The pressure rms p'+ (from the stored plane means of p and p**2): its shape is the references' (a
    # plateau at the wall, a peak near y+ = 30, the centre about half the peak) and it lies below both spectral
    # DNS by up to 0.075 (4.0% of the peak) against MKM and 0.101 (5.3%) against LM. The criterion is 6% of
    # the reference's peak: wider than the velocities' (3%, unchanged) by the measured deviation.
    p = mean[channel.PRESSURE_COLUMN]
    assert p[0] == pytest.approx(1.475, abs=5e-4) and p[-1] == pytest.approx(0.717, abs=5e-4)
    k = int(np.argmax(p))
    assert p[k] == pytest.approx(1.808, abs=5e-4) and 29 < mean["yplus"][k] < 32
    assert np.all(np.abs(np.diff(p[mean["yplus"] < 3])) < 2e-3)  # the plateau at the wall
    assert summary["windows"]["full"]["p_rms_first_plus"] == pytest.approx(p[0], rel=1e-6)
    assert summary["windows"]["full"]["p_rms_max_plus"] == pytest.approx(p[k], rel=1e-6)
    for name in (channel.REFERENCE, channel.LM_REFERENCE):
        ref = channel.read_reference(DATA / name)
        peak = np.sqrt(ref["R_pp"]).max()
        difference = p - channel.reference_profile(ref, channel.PRESSURE_COLUMN, mean["yplus"])
        assert np.all(difference < 0), name  # below the reference everywhere
        assert np.abs(difference).max() < 0.06 * peak, name
        ref_k = int(np.argmax(ref["R_pp"]))
        assert abs(ref["yplus"][ref_k] - mean["yplus"][k]) < 1.0, name  # the peak at the same place


def test_committed_window_and_error_bars(committed):
    full = committed["summary"]["windows"]["full"]
    assert full["window"] == [100.0, pytest.approx(377.249035, abs=1e-6)] and full["samples"] == 148
    assert committed["window_h_over_u_tau"] == pytest.approx(17.65, abs=0.005)  # 277.25 h/U_b over U_b+ 15.706
    re_tau, cf = committed["statistics"]["re_tau"], committed["statistics"]["cf"]
    assert re_tau["samples"] == 740 and re_tau["batches"] == 6 and re_tau["batch"] == 111
    assert re_tau["mean"] == pytest.approx(178.29, abs=0.005) and re_tau["stderr"] == pytest.approx(0.25, abs=0.005)
    assert 8 < re_tau["tau_int"] * re_tau["sample_dt"] < 8.6  # h/U_b
    # the estimate from tau_int agrees with the batch means; the one from the two halves (one degree of
    # freedom) happens to be much smaller here: the two half means differ by 0.06 only
    assert 0.5 < re_tau["stderr_tau"] / re_tau["stderr"] < 2
    halves = [committed["summary"]["windows"][k]["re_tau"] for k in ("first_half", "second_half")]
    assert 0.5 * abs(halves[0] - halves[1]) == pytest.approx(0.03, abs=0.005)
    assert cf["stderr"] / cf["mean"] == pytest.approx(2 * re_tau["stderr"] / re_tau["mean"], rel=0.05)


def test_committed_run_against_moser_kim_mansour(committed):
    bulk, stats = committed["reference_bulk"], committed["statistics"]
    re_tau = stats["re_tau"]
    assert abs(re_tau["mean"] - bulk["re_tau"]) < re_tau["stderr"]  # +0.17 +- 0.25
    scaled = bulk["re_tau"] * (5600 / bulk["Re_b"]) ** 0.875  # MKM carried to our Re_b by Dean's law
    assert 0.8 < (scaled - re_tau["mean"]) / re_tau["stderr"] < 1  # 0.23 below: 0.9 sigma
    assert stats["cf"]["mean"] / bulk["Cf"] - 1 == pytest.approx(-0.0031, abs=0.0005)
    compared = committed["compared"]
    assert set(compared) == {"U_plus", "u_rms_plus", "v_rms_plus", "w_rms_plus", "reynolds_stress_plus",
                             channel.PRESSURE_COLUMN}
    assert compared["U_plus"]["max_abs"] < 0.1 and 30 < compared["U_plus"]["at_yplus"] < 35
    for name in ("u_rms_plus", "v_rms_plus", "w_rms_plus", "reynolds_stress_plus"):
        assert compared[name]["max_abs"] < 0.03 * compared[name]["reference_peak"]
    # the mean and u'+ about 2 sigma from MKM; the other profiles beyond the sampling error: systematic
    # (documented), not noise
    assert compared["U_plus"]["over_sigma"] == pytest.approx(2.1, abs=0.05)
    assert compared["u_rms_plus"]["over_sigma"] == pytest.approx(2.0, abs=0.05)
    assert all(compared[name]["over_sigma"] > 5
               for name in ("v_rms_plus", "w_rms_plus", "reynolds_stress_plus", channel.PRESSURE_COLUMN))
    assert compared[channel.PRESSURE_COLUMN]["difference"] == pytest.approx(-0.075, abs=5e-4)


def test_committed_slice_spectra(committed):
    sl = committed["slice"]
    assert sl["yplus"] == pytest.approx(14.33, abs=0.01) and sl["time"] == pytest.approx(375.38, abs=0.01)
    spectra = sl["spectra"]
    for axis, length in zip("xy", sl["lengths"], strict=True):
        assert np.sum(spectra[f"E_{axis}"]) * 2 * np.pi / length == pytest.approx(sl["u"].var(), rel=1e-12)
    assert 80 < sl["peak_wavelength_plus"]["y"] < 200  # the near-wall streak spacing
    assert sl["peak_wavelength_plus"]["x"] == pytest.approx(535, abs=1)  # a quarter of the box length


def test_figures_command_draws_the_channel_figures_from_the_committed_data(tmp_path):
    from daskflow.validation.__main__ import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        assert main(["figures", "--out", str(tmp_path)]) == 0
    drawn = {p.name for p in tmp_path.glob("channel180-*.png")}
    assert drawn == set(CHANNEL_FIGURES)  # the pressure figure too: the committed profiles have p'+
    assert all((tmp_path / name).stat().st_size > 20_000 for name in CHANNEL_FIGURES)
    text = out.getvalue()
    assert "no pressure rms" not in text
    for row in ("| Re_tau | 178.29 ± 0.25", "| Re_b = 2h U_b/nu | 5600 (imposed) | 5586", "17.65 h/u_tau",
                "dx+ = 4.18", "| p'+ | MKM | 0.075 (-0.075) | 176.7 | 4.0% |", "y+ = 14.33",
                "| Re_b = 2h U_b/nu | 5600 (imposed) | 5586 (from its U+) | +0.25% | 5714 (from its U+) | -2.00% |"):
        assert row in text


def test_the_documented_channel_tables_are_the_generated_ones():
    """docs/validation.md section 4 quotes the tables `figures` prints: every row must be there as printed."""
    doc = (ROOT / "docs" / "validation.md").read_text()
    section = doc[doc.index("## 4. Turbulent channel"):]
    rows = [line for line in channel.table(DATA).splitlines() if line.startswith("| ")]
    assert len(rows) >= 25
    missing = [row for row in rows if row not in section]
    assert not missing, missing
