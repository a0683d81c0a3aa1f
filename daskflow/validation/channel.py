"""Turbulent channel at Re_tau ~ 180 (``examples/channel180.yaml``) against the published DNS of
Moser, Kim & Mansour (1999), the laws of the wall, Dean's skin-friction correlation and the exact
mean stress balance, with statistical error bars from the sampling.

The run is the real command line on a GPU host, continued across commands through checkpoints
(``daskflow run examples/channel180.yaml`` then ``--restart``). The reduction (:func:`reduce_store`)
reads only the run's ``scalars`` and ``profiles`` groups (and one wall-parallel slice when the store
has slices):

* Re_tau and the two wall shear stresses versus time (the transient, then the statistically steady
  state);
* time- and plane-averaged profiles in wall units over the averaging window (from ``t_start`` to
  the end) and over its two halves, via :func:`daskflow.analysis.wall_units`: ``U+``, rms velocities,
  Reynolds shear stress, the total stress ``-<u'w'>+ + dU+/dy+`` (which must equal ``1 - y/h`` in a
  statistically steady channel) and, from the ``profiles`` group's plane means of ``p`` and ``p**2``,
  the pressure rms ``p_rms_plus`` (``p'/tau_w``);
* bulk numbers (:func:`daskflow.analysis.bulk_quantities`): Re_tau, Cf against Dean's correlation
  ``Cf = 0.073 Re_b^(-1/4)``, ``U_c / U_b``.

Everything else is computed from those small files when the figures are drawn (:func:`figures`,
:func:`table`):

* the reference: the published profiles of Moser, Kim & Mansour at Re_tau = 178.12
  (``channel180-reference-mkm1999.csv``, :func:`read_reference`; its header says where the numbers
  come from) and the bulk numbers they imply (:func:`reference_bulk`);
* error bars. Scalar series (Re_tau, Cf): batch means (:func:`batch_means`) with a batch of
  ``BATCH_PER_TAU`` integrated autocorrelation times (:func:`integrated_autocorrelation_time`,
  Sokal's automatic window). Profiles: only the whole window and its two halves are committed, so
  the standard error of a whole-window profile value is estimated as ``|first - second| / 2``
  (:func:`half_window_sigma`: the two halves are taken as independent estimates of equal variance;
  one degree of freedom, so the figures smooth it along the profile: the RMS over ``2 POOL + 1``
  neighbouring points);
* one-dimensional spectra (:func:`spectra_1d`) of the streamwise velocity in the committed slice;
* the grid resolution in wall units at the achieved Re_tau (:func:`resolution`).

References: Moser, Kim & Mansour (1999), Phys. Fluids 11, 943 (data set chan180); Dean (1978),
J. Fluids Eng. 100, 215 (Cf correlation); Sokal (1997), "Monte Carlo methods in statistical
mechanics", in Functional Integration (Springer), for the automatic windowing of the integrated
autocorrelation time.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from daskflow import data
from daskflow.validation import save_figure
from daskflow.validation.cavity import _read_csv, _write_csv

EXAMPLE = data.folder("examples") / "channel180.yaml"  # the checkout's or the installed copy (daskflow.data)
T_START = 100.0  # end of the transient in h/U_b (Re_tau within 1% of its final mean from here on)
MKM_RE_TAU = 178.12  # Moser, Kim & Mansour (1999), chan180: the Re_tau their files state
MKM = "Moser, Kim & Mansour (1999)"
REFERENCE = "channel180-reference-mkm1999.csv"  # their published profiles (see the file's header)
REFERENCE_COLUMNS = ("y_over_h", "yplus", "U_plus", "dUdy", "R_uu", "R_vv", "R_ww", "R_uv", "R_pp")
PROFILE_COLUMNS = ("yplus", "y_over_h", "U_plus", "u_rms_plus", "v_rms_plus", "w_rms_plus",
                   "reynolds_stress_plus", "dUdy_plus", "total_stress_plus", "total_stress_linear")
PRESSURE_COLUMN = "p_rms_plus"  # written after PROFILE_COLUMNS when the store's profiles hold p and pp
AWAY_FROM_WALL = 30.0  # y+ beyond which the stress balance is checked ("away from the wall")
BATCH_PER_TAU = 5.0  # batch length of the batch means in integrated autocorrelation times
POOL = 4  # profile error bars: RMS of the half-window estimates over the 2 * POOL + 1 nearest points
#: daskflow's profile -> (the reference column, how a value is formed from it). daskflow's axes are x
#: streamwise, y spanwise, z wall-normal; Moser, Kim & Mansour's are x, y wall-normal, z spanwise.
COMPARED = {
    "U_plus": ("U_plus", lambda r: r),
    "u_rms_plus": ("R_uu", np.sqrt),
    "w_rms_plus": ("R_vv", np.sqrt),
    "v_rms_plus": ("R_ww", np.sqrt),
    "reynolds_stress_plus": ("R_uv", np.negative),
    "p_rms_plus": ("R_pp", np.sqrt),
}
LABELS = {"U_plus": r"$U^+$", "u_rms_plus": r"$u'^+$ (streamwise)", "w_rms_plus": r"$w'^+$ (wall-normal)",
          "v_rms_plus": r"$v'^+$ (spanwise)", "reynolds_stress_plus": r"$-\langle u'w'\rangle^+$",
          "p_rms_plus": r"$p'^+$"}
NAMES = {"U_plus": "U+", "u_rms_plus": "u'+ (streamwise)", "w_rms_plus": "w'+ (wall-normal)",
         "v_rms_plus": "v'+ (spanwise)", "reynolds_stress_plus": "-<u'w'>+", "p_rms_plus": "p'+"}


# ------------------------------------------------------------------------------------------------
# Reduction
# ------------------------------------------------------------------------------------------------


def windows(t_end: float, t_start: float = T_START) -> dict[str, tuple[float, float]]:
    """The averaging window and its two halves."""
    middle = 0.5 * (t_start + t_end)
    return {"full": (t_start, t_end), "first_half": (t_start, middle), "second_half": (middle, t_end)}


def balance_error(wu, away: float = AWAY_FROM_WALL) -> float:
    """Largest ``|total stress - (1 - y/h)|`` (wall units, i.e. relative to the wall stress) at
    ``y+ > away`` (NaN when no point is that far from the wall)."""
    error = np.abs(wu.total_stress_plus.values - wu.total_stress_linear.values)[np.asarray(wu.yplus.values) > away]
    return float(error.max()) if error.size else float("nan")


def reduce_store(store: str | Path, data_dir: Path, t_start: float = T_START, run_info: dict | None = None) -> dict:
    """Reduce a channel run's store into ``data_dir``: ``channel180-scalars.csv`` (time series),
    ``channel180-profiles-{full,first_half,second_half}.csv`` (wall units; with a ``p_rms_plus``
    column when the store's ``profiles`` group holds the plane means of ``p`` and ``p**2``, as every
    store daskflow writes does), ``channel180-slice.npz`` (the last near-wall streamwise velocity
    plane, float16) and ``channel180.json`` (numbers)."""
    from daskflow import analysis

    data_dir = Path(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    run = analysis.open_run(store)
    scalars, profiles = run["scalars"], run["profiles"]
    t = scalars.time.values
    _write_csv(data_dir / "channel180-scalars.csv", ["time", "re_tau", "tau_wall_bottom", "tau_wall_top",
                                                     "kinetic_energy", "bulk_velocity", "dt"],
               [t] + [scalars[name].values for name in ("re_tau", "tau_wall_bottom", "tau_wall_top",
                                                        "kinetic_energy", "bulk_velocity", "dt")])
    t_end = float(profiles.time.values[-1])
    summary = {"t_start": t_start, "t_end": t_end, "steps": int(scalars.step.values[-1]),
               "grid": run["profiles"].attrs.get("run", {}).get("config", {}).get("grid"), "windows": {}}
    for name, window in windows(t_end, t_start).items():
        wu = analysis.wall_units(profiles, window=window)
        bulk = analysis.bulk_quantities(profiles, window=window)
        columns = PROFILE_COLUMNS + ((PRESSURE_COLUMN,) if PRESSURE_COLUMN in wu else ())
        _write_csv(data_dir / f"channel180-profiles-{name}.csv", list(columns),
                   [wu.coords[c].values if c in wu.coords else wu[c].values for c in columns])
        u_rms = wu.u_rms_plus.values
        peak = int(np.argmax(u_rms))
        summary["windows"][name] = {
            "window": list(window), "samples": int(wu.n_samples), "re_tau": bulk["Re_tau"], "cf": bulk["Cf"],
            "cf_dean": bulk["Cf_dean"], "re_b": bulk["Re_b"], "u_c_over_u_b": bulk["U_c_over_U_b"],
            "u_c_plus": bulk["U_c"] / bulk["u_tau"], "u_b_plus": bulk["U_b"] / bulk["u_tau"],
            "u_rms_peak_plus": float(u_rms[peak]), "u_rms_peak_yplus": float(wu.yplus.values[peak]),
            "balance_error_away": balance_error(wu), "balance_error_all": balance_error(wu, 0.0)}
        if PRESSURE_COLUMN in wu:
            p_rms = wu[PRESSURE_COLUMN].values
            summary["windows"][name].update({"p_rms_first_plus": float(p_rms[0]), "p_rms_max_plus": float(p_rms.max())})
    if "slices/z" in run:
        plane = run["slices/z"].isel(time=-1, z=0)
        np.savez_compressed(data_dir / "channel180-slice.npz", u=plane.u.values.astype(np.float16),
                            z=float(plane.z), time=float(plane.time))
    if run_info:
        summary["run"] = run_info
    (data_dir / "channel180.json").write_text(json.dumps(summary, indent=1, sort_keys=True) + "\n")
    return summary


def run(data_dir: Path, work_dir: Path = Path("/tmp/daskflow-validation"), seconds: float | None = None,
        t_start: float = T_START, **_) -> None:
    """Advance ``examples/channel180.yaml`` (a GPU host; starting, or continuing the store in
    ``work_dir`` from its last checkpoint), optionally stopping cleanly after ``seconds`` (SIGTERM,
    which checkpoints), then reduce the store into ``data_dir``."""
    from daskflow.io import store as stores

    _check_example()
    store = Path(work_dir) / "channel180.zarr"
    store.parent.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "daskflow", "run", str(EXAMPLE), "--output", str(store), "--report-every", "200"]
    if stores.exists(str(store)):
        command.append("--restart")
    start = time.perf_counter()
    process = subprocess.Popen(command)
    try:
        process.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        process.terminate()  # SIGTERM: the run finishes its segment and writes a checkpoint
        process.wait()
    if process.returncode not in (0, -15):
        raise RuntimeError(f"{' '.join(command)} failed with exit code {process.returncode}")
    reduce_store(store, Path(data_dir), t_start, {"wall_s": time.perf_counter() - start})


# ------------------------------------------------------------------------------------------------
# Reference data (Moser, Kim & Mansour 1999)
# ------------------------------------------------------------------------------------------------


def reference_path(data_dir: Path) -> Path:
    """The reference file: ``data_dir``'s copy if it has one, else the committed (shipped) one."""
    own = Path(data_dir) / REFERENCE
    return own if own.is_file() else data.path("validation", REFERENCE)


def read_reference(path: Path) -> dict:
    """The published profiles of Moser, Kim & Mansour at Re_tau = 178.12 (``REFERENCE``): one array
    per column of :data:`REFERENCE_COLUMNS` (wall to centre, normalised by u_tau and h; the file's
    header says which published column each is) and ``re_tau``, the value every quoted file header
    states (they must agree). Raises ``ValueError`` for a file that does not have this form."""
    lines = Path(path).read_text().splitlines()
    stated = {float(m.group(1)) for line in lines if (m := re.match(r"#\s*#\s*Re_tau\s*=\s*([0-9.]+)", line))}
    if len(stated) != 1:
        raise ValueError(f"{path}: the quoted headers state Re_tau {sorted(stated)}, expected one value")
    rows = [line for line in lines if line.strip() and not line.startswith("#")]
    if not rows or tuple(rows[0].split(",")) != REFERENCE_COLUMNS:
        raise ValueError(f"{path}: the columns must be {','.join(REFERENCE_COLUMNS)}")
    table = np.array([[float(v) for v in row.split(",")] for row in rows[1:]])
    if table.ndim != 2 or table.shape[1] != len(REFERENCE_COLUMNS) or not np.all(np.diff(table[:, 1]) > 0):
        raise ValueError(f"{path}: expected rows of {len(REFERENCE_COLUMNS)} numbers with increasing y+")
    ref = {name: table[:, i] for i, name in enumerate(REFERENCE_COLUMNS)}
    ref["re_tau"] = stated.pop()
    return ref


def clenshaw_curtis_weights(n: int) -> np.ndarray:
    """Weights of the Clenshaw-Curtis rule for ``integral_{-1}^{1} f(x) dx`` on the Chebyshev-Gauss-
    Lobatto points ``x_j = cos(pi j / n)``, ``j = 0..n`` (``n`` even); exact for polynomials of
    degree ``n``, spectrally accurate for smooth ``f``."""
    if n < 2 or n % 2:
        raise ValueError(f"n must be even and >= 2, got {n}")
    theta = np.pi * np.arange(n + 1) / n
    j = np.arange(1, n // 2 + 1)
    b = np.where(j == n // 2, 1.0, 2.0)
    w = (1.0 - (b / (4.0 * j**2 - 1.0)) @ np.cos(2.0 * np.outer(j, theta))) * 2.0 / n
    w[[0, -1]] /= 2.0
    return w


def reference_bulk(ref: dict) -> dict[str, float]:
    """Bulk numbers of the reference flow, which its files do not state: ``U_b_plus`` (the channel
    integral of U+ over 2h, by Clenshaw-Curtis on its Chebyshev-Gauss-Lobatto points, mirrored about
    the centre), ``Re_b = 2 h U_b / nu = 2 Re_tau U_b+``, ``Cf = tau_w / (U_b^2 / 2) = 2 / U_b+^2``,
    ``U_c_plus`` (the centre value) and ``U_c_over_U_b``."""
    y, u = ref["y_over_h"], ref["U_plus"]
    n = 2 * (y.size - 1)
    if not np.allclose(y, 1.0 - np.cos(np.pi * np.arange(y.size) / n), rtol=1e-4, atol=5e-5):
        raise ValueError("the reference rows are not the Chebyshev-Gauss-Lobatto points from the wall to the centre")
    u_b = 0.5 * float(clenshaw_curtis_weights(n) @ np.concatenate([u, u[-2::-1]]))
    return {"re_tau": ref["re_tau"], "U_b_plus": u_b, "Re_b": 2.0 * ref["re_tau"] * u_b, "Cf": 2.0 / u_b**2,
            "U_c_plus": float(u[-1]), "U_c_over_U_b": float(u[-1]) / u_b}


def reference_profile(ref: dict, name: str, yplus: np.ndarray) -> np.ndarray:
    """The reference value of daskflow's profile ``name`` (a key of :data:`COMPARED`) at ``yplus``:
    a cubic spline through the published points in y+ (NaN beyond the reference's centre)."""
    from scipy.interpolate import CubicSpline

    column, form = COMPARED[name]
    spline = CubicSpline(ref["yplus"], form(ref[column]), extrapolate=False)
    return spline(np.asarray(yplus, dtype=np.float64))


def compare_profile(ours: dict, ref: dict, name: str, sigma: np.ndarray | None = None) -> dict:
    """Largest ``|ours - reference|`` of profile ``name`` over daskflow's points (the reference
    interpolated by :func:`reference_profile`), where it is, the reference's peak (for relative
    figures) and, with ``sigma`` (the 1-sigma statistical error at each point), that largest
    difference in units of ``sigma`` at its point (``over_sigma``)."""
    yplus, values = ours["yplus"], ours[name]
    difference = values - reference_profile(ref, name, yplus)
    worst = int(np.nanargmax(np.abs(difference)))
    column, form = COMPARED[name]
    out = {"max_abs": float(abs(difference[worst])), "at_yplus": float(yplus[worst]),
           "difference": float(difference[worst]), "reference_peak": float(np.max(np.abs(form(ref[column]))))}
    if sigma is not None:
        out["sigma"] = float(sigma[worst])
        out["over_sigma"] = float(abs(difference[worst]) / sigma[worst]) if sigma[worst] > 0 else float("inf")
    return out


def reference_peak(ref: dict, name: str = "u_rms_plus") -> tuple[float, float]:
    """The reference profile's maximum and its y+ (the spline of :func:`reference_profile` on a fine grid)."""
    yplus = np.linspace(ref["yplus"][1], ref["yplus"][-1], 20001)
    values = reference_profile(ref, name, yplus)
    k = int(np.nanargmax(values))
    return float(values[k]), float(yplus[k])


# ------------------------------------------------------------------------------------------------
# Statistical errors
# ------------------------------------------------------------------------------------------------


def autocorrelation(x: np.ndarray) -> np.ndarray:
    """Normalised autocorrelation ``rho(lag)``, ``lag = 0..n-1``, of a series (mean removed; the
    biased estimator, by FFT)."""
    x = np.asarray(x, dtype=np.float64) - np.mean(x)
    n = x.size
    f = np.fft.rfft(x, 2 * n)
    acov = np.fft.irfft(f * np.conj(f))[:n]
    if acov[0] <= 0:
        raise ValueError("a constant series has no autocorrelation")
    return acov / acov[0]


def integrated_autocorrelation_time(x: np.ndarray, c: float = 5.0) -> float:
    """``tau_int = 1 + 2 sum_{t=1}^{M} rho(t)`` in samples, with Sokal's automatic window: the
    smallest ``M >= c tau_int(M)`` (the variance of the mean of ``n`` samples is ``var tau_int / n``;
    an AR(1) series with coefficient ``phi`` has ``tau_int = (1 + phi) / (1 - phi)``)."""
    rho = autocorrelation(x)
    tau = 1.0 + 2.0 * np.cumsum(rho[1:])
    window = np.arange(1, rho.size)
    ok = np.flatnonzero(window >= c * tau)
    return float(tau[ok[0]] if ok.size else tau[-1])


def batch_means(x: np.ndarray, batch: int | None = None, per_tau: float = BATCH_PER_TAU) -> dict:
    """Mean of a correlated series and its standard error by batch means: the series is cut into
    ``batches`` consecutive batches of ``batch`` samples (by default ``ceil(per_tau tau_int)``, long
    enough for the batch means to be nearly independent; the earliest ``n mod batch`` samples are
    left out of the batches), and the standard error is the standard deviation of the batch means
    (``ddof = 1``) over ``sqrt(batches)``. Also returned: ``tau_int`` (samples), ``stderr_tau``
    (``sqrt(var tau_int / n)``, the same error from the autocorrelation time, a cross-check) and
    ``samples``. The mean is that of all samples."""
    x = np.asarray(x, dtype=np.float64)
    tau = integrated_autocorrelation_time(x)
    b = int(batch) if batch is not None else max(1, math.ceil(per_tau * tau))
    count = x.size // b
    if count < 2:
        raise ValueError(f"{x.size} samples make fewer than two batches of {b}")
    means = x[x.size - count * b:].reshape(count, b).mean(axis=1)
    return {"mean": float(x.mean()), "stderr": float(means.std(ddof=1) / np.sqrt(count)), "batch": b,
            "batches": count, "tau_int": tau, "stderr_tau": float(np.sqrt(x.var() * tau / x.size)),
            "samples": int(x.size)}


def scalar_statistics(scalars: dict[str, np.ndarray], window: tuple[float, float]) -> dict[str, dict]:
    """Batch-means statistics (:func:`batch_means`) of the scalar series in ``window`` (inclusive, up
    to the rounding of the committed times): ``re_tau`` and ``cf`` (``(tau_bottom + tau_top) / 2 /
    (U_b^2 / 2)`` per sample), each with ``sample_dt`` (the mean time between samples, to put
    ``tau_int`` and the batch in time units) and the ``first`` and ``last`` sample times. A series
    too short for two batches gets NaN errors."""
    t = np.asarray(scalars["time"])
    slack = [1e-7 * max(1.0, abs(end)) for end in window]  # the committed times have 8 significant digits
    inside = (t >= window[0] - slack[0]) & (t <= window[1] + slack[1])
    tau_w = 0.5 * (scalars["tau_wall_bottom"][inside] + scalars["tau_wall_top"][inside])
    series = {"re_tau": scalars["re_tau"][inside], "cf": tau_w / (0.5 * scalars["bulk_velocity"][inside] ** 2)}
    sample_dt = float(np.mean(np.diff(t[inside]))) if inside.sum() > 1 else float("nan")
    out = {}
    for name, x in series.items():
        try:
            stats = batch_means(x)
        except ValueError:  # too short a series for two batches (a test run): no error bar
            stats = {"mean": float(np.mean(x)), "stderr": float("nan"), "batch": 0, "batches": 0,
                     "tau_int": float("nan"), "stderr_tau": float("nan"), "samples": int(x.size)}
        out[name] = {**stats, "sample_dt": sample_dt, "first": float(t[inside][0]), "last": float(t[inside][-1])}
    return out


def half_window_sigma(first: np.ndarray, second: np.ndarray, pool: int = 0) -> np.ndarray:
    """Standard error of a whole-window average estimated from its two halves: ``|first - second| / 2``
    (for two independent half-window means of variance ``s2`` each, the whole-window mean has variance
    ``s2 / 2`` and ``E (first - second)^2 = 2 s2``). One degree of freedom per value, so at a single
    point the estimate can be near zero by chance; ``pool = m`` smooths it along a profile: the root
    mean square of the point estimates over the ``2 m + 1`` nearest points (fewer at the ends)."""
    sigma = 0.5 * np.abs(np.asarray(first, dtype=np.float64) - np.asarray(second, dtype=np.float64))
    if pool <= 0:
        return sigma
    squares = np.concatenate([[0.0], np.cumsum(sigma**2)])
    lower = np.maximum(np.arange(sigma.size) - pool, 0)
    upper = np.minimum(np.arange(sigma.size) + pool + 1, sigma.size)
    return np.sqrt((squares[upper] - squares[lower]) / (upper - lower))


# ------------------------------------------------------------------------------------------------
# Spectra and resolution
# ------------------------------------------------------------------------------------------------


def spectra_1d(u: np.ndarray, lengths: tuple[float, float]) -> dict[str, np.ndarray]:
    """One-dimensional spectra of a doubly periodic plane ``u[x, y]`` (period ``lengths``), about its
    plane mean: ``kx``, ``E_x`` (one-sided, averaged over the y lines) and ``ky``, ``E_y`` (averaged
    over the x lines), normalised so that ``sum(E_x) dkx = sum(E_y) dky = var(u)`` (Parseval;
    ``dk = 2 pi / length``, the ``k = 0`` bin holding the variance of the line means)."""
    u = np.asarray(u, dtype=np.float64)
    u = u - u.mean()
    out = {}
    for axis, (k_name, e_name) in enumerate((("kx", "E_x"), ("ky", "E_y"))):
        n = u.shape[axis]
        power = np.mean(np.abs(np.fft.rfft(u, axis=axis) / n) ** 2, axis=1 - axis)
        weight = np.full(power.size, 2.0)
        weight[0] = 1.0
        if n % 2 == 0:
            weight[-1] = 1.0
        dk = 2.0 * np.pi / lengths[axis]
        out[k_name], out[e_name] = dk * np.arange(power.size), weight * power / dk
    return out


def resolution(grid: dict, re_tau: float) -> dict[str, float]:
    """Grid spacings in wall units at ``re_tau`` (lengths of the configuration in units of the half
    height ``h = lz / 2``): ``dx_plus``, ``dy_plus``, the smallest and largest wall-normal cell
    ``dz_plus_min``, ``dz_plus_max``, the first cell centre ``z1_plus``, and the box ``lx_plus``, ``ly_plus``."""
    from daskflow.grid import Grid

    g = Grid(shape=tuple(grid["shape"]), lengths=tuple(grid["lengths"]), z_stretch=grid.get("z_stretch", 0.0),
             z_cluster=grid.get("z_cluster", "both"))
    scale = re_tau / (0.5 * g.lengths[2])
    dz = np.diff(np.asarray(g.zf))  # the nz cell widths (zf: all nz + 1 faces, walls included)
    return {"dx_plus": g.lengths[0] / g.shape[0] * scale, "dy_plus": g.lengths[1] / g.shape[1] * scale,
            "dz_plus_min": float(dz.min()) * scale, "dz_plus_max": float(dz.max()) * scale,
            "z1_plus": float(np.asarray(g.zc)[0]) * scale, "lx_plus": g.lengths[0] * scale,
            "ly_plus": g.lengths[1] * scale}


# ------------------------------------------------------------------------------------------------
# Reproduction of the committed run
# ------------------------------------------------------------------------------------------------

SCALAR_COLUMNS = ("time", "re_tau", "tau_wall_bottom", "tau_wall_top", "kinetic_energy", "bulk_velocity", "dt")
SAMPLE_EVERY = 20  # steps between the committed scalars (output.scalars_every of the example)
# The committed series is printed with 8 significant digits: a run that repeats the committed one
# operation for operation differs from it by that rounding, 5e-8 relative at most.
REPRODUCTION_TOLERANCE = 1e-7


def compare_scalars(run: dict[str, np.ndarray], reference: dict[str, np.ndarray],
                    tolerance: float = REPRODUCTION_TOLERANCE, expected_samples: int | None = None) -> dict:
    """Sample-by-sample relative deviation of a run's scalar series from the reference series (both
    sampled every :data:`SAMPLE_EVERY` steps from step 20 on, compared over the common samples):
    the largest deviation per quantity, the first step where it exceeds ``tolerance`` (a NaN on
    either side counts as exceeding it), and whether every quantity stays within it. With
    ``expected_samples``, a run that wrote fewer samples (it stopped early) does not reproduce."""
    samples = min(len(run["time"]), len(reference["time"]))
    if samples == 0:
        raise ValueError("no common scalar samples to compare (the run wrote none)")
    worst, first = {}, {}
    for name in SCALAR_COLUMNS:
        a, b = np.asarray(run[name][:samples], float), np.asarray(reference[name][:samples], float)
        deviation = np.abs(a - b) / np.maximum(np.abs(b), np.finfo(float).tiny)
        worst[name] = float(np.nan if np.isnan(deviation).any() else deviation.max())
        beyond = np.flatnonzero(~(deviation <= tolerance))
        first[name] = int((beyond[0] + 1) * SAMPLE_EVERY) if beyond.size else None
    complete = expected_samples is None or len(run["time"]) >= expected_samples
    return {"samples": samples, "steps": samples * SAMPLE_EVERY, "tolerance": tolerance,
            "max_relative_deviation": worst, "first_step_beyond_tolerance": first, "complete": complete,
            "reproduces": complete and all(step is None for step in first.values())}


def reproduce(data_dir: Path, work_dir: Path = Path("/tmp/daskflow-validation"), steps: int = 1000,
              cluster: str = "none", pencils: tuple[int, int] | None = None, record_dir: Path | None = None) -> dict:
    """Run the first ``steps`` steps of ``examples/channel180.yaml`` with this installation (the real
    command line; ``cluster`` and ``pencils`` as ``daskflow run`` takes them) and compare its scalars
    with the committed run's (``data_dir/channel180-scalars.csv``, :func:`compare_scalars`). The
    result, with the device (this host's first GPU, or its CPU), the commit (or the installed
    version) and the wall time, is appended to ``channel180-reproduction.json`` in ``record_dir``
    (default: ``data_dir``). The scratch store ``work_dir/channel180-reproduce.zarr`` is replaced."""
    import shutil

    from daskflow import analysis

    _check_example()
    data_dir, store = Path(data_dir), Path(work_dir) / "channel180-reproduce.zarr"
    record_dir = Path(record_dir) if record_dir is not None else data_dir
    reference = _read_csv(data_dir / "channel180-scalars.csv")
    shutil.rmtree(store, ignore_errors=True)
    store.parent.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "daskflow", "run", str(EXAMPLE), "--steps", str(steps), "--output", str(store),
               "--cluster", cluster, "--report-every", str(10 * SAMPLE_EVERY)]
    if pencils:
        command += ["--pencils", *map(str, pencils)]
    start = time.perf_counter()
    subprocess.run(command, check=True)
    wall = time.perf_counter() - start
    scalars = analysis.open_run(store)["scalars"]
    result = compare_scalars({name: scalars[name].values for name in SCALAR_COLUMNS}, reference,
                             expected_samples=min(steps // SAMPLE_EVERY, len(reference["time"])))
    result.update({"device": _device(), "commit": _commit(), "version": _installed_version(), "cluster": cluster,
                   "pencils": list(pencils) if pencils else [1, 1], "wall_s": round(wall, 1),
                   "command": " ".join(["daskflow", "run", str(EXAMPLE.relative_to(EXAMPLE.parent.parent)),
                                        *command[5:]])})
    record_dir.mkdir(parents=True, exist_ok=True)
    path = record_dir / "channel180-reproduction.json"
    records = json.loads(path.read_text()) if path.exists() else []
    path.write_text(json.dumps(records + [result], indent=1) + "\n")
    return result


def _check_example() -> None:
    if not EXAMPLE.is_file():
        raise FileNotFoundError(f"{EXAMPLE}: no such example configuration")


def _device() -> str:
    from daskflow.backend import cupy_or_none, device_name

    cp = cupy_or_none()
    return device_name(cp if cp is not None else np)


def _commit() -> str | None:
    """The git commit of the source tree daskflow is imported from (``-dirty`` when tracked files
    differ from it), or None when it is not a git checkout of its own (an installed package, or an
    exported tree inside some other repository)."""
    root = data.source_tree()
    if root is None:
        return None
    try:
        top = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True, cwd=root,
                             check=True).stdout.strip()
        if Path(top).resolve() != root.resolve():
            return None
        return subprocess.run(["git", "describe", "--always", "--abbrev=7", "--dirty"], capture_output=True,
                              text=True, cwd=root, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def _installed_version() -> str | None:
    """The version of the installed daskflow distribution (None when it is not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("daskflow")
    except PackageNotFoundError:
        return None


def reproduction_table(data_dir: Path) -> str:
    """Markdown table of the recorded reproductions (empty when there are none)."""
    path = Path(data_dir) / "channel180-reproduction.json"
    if not path.exists():
        return ""
    rows = ["| device | commit | cluster, pencils | steps | wall time (s) | max rel. deviation: Re_tau | "
            "tau_w (bottom, top) | kinetic energy | dt | within 1e-7 |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in json.loads(path.read_text()):
        w = r["max_relative_deviation"]
        commit = r["commit"] or (f"v{r['version']} (installed)" if r.get("version") else "-")
        rows.append(f"| {r['device']} | {commit} | {r['cluster']}, {tuple(r['pencils'])} | {r['steps']} | "
                    f"{r['wall_s']} | {w['re_tau']:.1e} | {w['tau_wall_bottom']:.1e}, {w['tau_wall_top']:.1e} | "
                    f"{w['kinetic_energy']:.1e} | {w['dt']:.1e} | {'yes' if r['reproduces'] else 'no'} |")
    return "\n".join(rows)


# ------------------------------------------------------------------------------------------------
# Figures and table
# ------------------------------------------------------------------------------------------------


def evaluate(data_dir: Path) -> dict:
    """Everything the figures and the table show, computed from the reduced data in ``data_dir`` and
    the reference file (:func:`reference_path`): ``summary`` (``channel180.json``), ``scalars``,
    ``profiles`` (per window), ``sigma`` (per profile column, :func:`half_window_sigma` of the halves),
    ``reference`` and ``reference_bulk``, ``compared`` (:func:`compare_profile` per profile of
    :data:`COMPARED` that the data have), ``statistics`` (:func:`scalar_statistics` over the whole
    window), ``window_h_over_u_tau`` (the window's length in h/u_tau, with its u_tau),
    ``resolution`` (when the summary has the grid) and ``slice`` (with its spectra, when committed)."""
    data_dir = Path(data_dir)
    summary = json.loads((data_dir / "channel180.json").read_text())
    profiles = {name: _read_csv(data_dir / f"channel180-profiles-{name}.csv") for name in summary["windows"]}
    full, windows_ = profiles["full"], summary["windows"]
    sigma = {}
    if "first_half" in profiles and "second_half" in profiles:
        sigma = {name: half_window_sigma(profiles["first_half"][name], profiles["second_half"][name], POOL)
                 for name in full if name in profiles["first_half"] and name in profiles["second_half"]}
    ref = read_reference(reference_path(data_dir))
    out = {"summary": summary, "scalars": _read_csv(data_dir / "channel180-scalars.csv"), "profiles": profiles,
           "sigma": sigma, "reference": ref, "reference_bulk": reference_bulk(ref)}
    out["compared"] = {name: compare_profile(full, ref, name, sigma.get(name)) for name in COMPARED if name in full}
    t0, t1 = windows_["full"]["window"]
    out["statistics"] = scalar_statistics(out["scalars"], (t0, t1))
    out["window_h_over_u_tau"] = (t1 - t0) / windows_["full"]["u_b_plus"]  # t u_tau / h = (t U_b / h) / U_b+
    re_tau = windows_["full"]["re_tau"]
    if summary.get("grid"):
        out["resolution"] = resolution(summary["grid"], re_tau)
    slice_path = data_dir / "channel180-slice.npz"
    if slice_path.exists():
        plane = np.load(slice_path)
        u = plane["u"].astype(np.float64)
        grid = summary.get("grid") or {"lengths": [float(u.shape[0]), float(u.shape[1]), 2.0]}
        lengths, h = tuple(grid["lengths"][:2]), 0.5 * grid["lengths"][2]
        spectra = spectra_1d(u, lengths)
        u_b_plus = windows_["full"]["u_b_plus"]  # u_tau = U_b / U_b+: E+ = E U_b+^2 (velocities in U_b)
        peaks, zero = {}, {}
        for axis, length in zip(("x", "y"), lengths, strict=True):
            zero[axis] = float(spectra[f"E_{axis}"][0] * 2.0 * np.pi / length / u.var())
            k, e = spectra[f"k{axis}"][1:], spectra[f"E_{axis}"][1:]
            premultiplied = k * e * u_b_plus**2
            peaks[axis] = float(2.0 * np.pi / k[int(np.argmax(premultiplied))] * re_tau / h)
        out["slice"] = {"u": u, "z": float(plane["z"]), "time": float(plane["time"]), "lengths": lengths,
                        "yplus": float(plane["z"]) * re_tau / h, "spectra": spectra, "h": h,
                        "variance_plus": float(u.var()) * u_b_plus**2, "peak_wavelength_plus": peaks,
                        "zero_mode_fraction": zero}
    return out


def _log_yplus_axis(ax, lower: float = 0.5, upper: float = 200.0) -> None:
    """A readable logarithmic y+ axis: labels 1, 10, 100 as plain numbers, unlabelled minor ticks."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    ax.set_xscale("log")
    ax.set_xlim(lower, upper)
    ax.xaxis.set_major_locator(LogLocator(base=10.0))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    ax.xaxis.set_minor_locator(LogLocator(base=10.0, subs=np.arange(2, 10)))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel(r"$y^+ = y\,u_\tau/\nu$ (wall units)")
    ax.grid(True, which="major", color="0.9", lw=0.6)


def figures(data_dir: Path, fig_dir: Path) -> list[Path]:
    """Draw the channel figures from the reduced data in ``data_dir`` into ``fig_dir``: ``channel180-``
    ``history``, ``mean``, ``rms``, ``stress-balance`` (always), ``pressure`` (when the profiles carry
    ``p_rms_plus``), ``streaks`` and ``spectra`` (when the slice is committed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from daskflow.analysis import KAPPA, LOG_LAW_B

    fig_dir = Path(fig_dir)
    fig_dir.mkdir(parents=True, exist_ok=True)
    ev = evaluate(data_dir)
    summary, s, profiles, sigma, ref = ev["summary"], ev["scalars"], ev["profiles"], ev["sigma"], ev["reference"]
    bulk = ev["reference_bulk"]
    full = profiles["full"]
    w_full = summary["windows"]["full"]
    t0, t1 = w_full["window"]
    stat = ev["statistics"]["re_tau"]
    ours = f"daskflow, $Re_\\tau$ = {w_full['re_tau']:.1f}"
    theirs = f"{MKM}, $Re_\\tau$ = {bulk['re_tau']:.2f}"
    band = (f"shaded: $\\pm 2\\sigma$ (sampling), $\\sigma$ = |first half $-$ second half| / 2, "
            f"RMS over {2 * POOL + 1} neighbouring points")
    paths = []

    fig, axes = plt.subplots(2, 1, figsize=(7.5, 5.5), sharex=True, layout="constrained")
    axes[0].plot(s["time"], s["re_tau"], lw=0.8, color="k", label="daskflow")
    axes[0].axhline(bulk["re_tau"], color="tab:red", ls="--", lw=0.8,
                    label=f"{MKM}: {bulk['re_tau']:.2f} ($Re_b$ = {bulk['Re_b']:.0f})")
    if np.isfinite(stat["stderr"]):
        label = f"window mean {stat['mean']:.2f} $\\pm$ {2 * stat['stderr']:.2f} (2$\\sigma$, batch means)"
        axes[0].axhspan(stat["mean"] - 2 * stat["stderr"], stat["mean"] + 2 * stat["stderr"], color="tab:blue",
                        alpha=0.25, lw=0, label=label)
    axes[0].set_ylabel(r"$Re_\tau = u_\tau h/\nu$")
    axes[0].legend(loc="lower right", fontsize=8)
    axes[1].plot(s["time"], s["tau_wall_bottom"], lw=0.6, label="bottom wall")
    axes[1].plot(s["time"], s["tau_wall_top"], lw=0.6, label="top wall")
    axes[1].set_ylabel(r"$\tau_w/\rho$ ($U_b^2$)")
    axes[1].set_xlabel(r"$t\,U_b/h$")
    axes[1].legend(loc="lower right", fontsize=8)
    for ax in axes:
        ax.axvspan(t0, t1, color="0.92", zorder=0)
    axes[0].set_title(f"Transient and statistically steady state\n(grey: averaging window t = {t0:.0f}–{t1:.2f} "
                      f"$h/U_b$, {t1 - t0:.2f} $h/U_b$ = {ev['window_h_over_u_tau']:.2f} $h/u_\\tau$)", fontsize=10)
    paths.append(save_figure(fig, fig_dir / "channel180-history.png"))

    yp = full["yplus"]
    fig, axes = plt.subplots(2, 1, figsize=(7, 6.5), sharex=True, height_ratios=(2.2, 1), layout="constrained")
    ax = axes[0]
    ax.plot(yp, full["U_plus"], "k.-", ms=3.5, lw=1.2, label=f"{ours} (dots: grid points)")
    ax.plot(ref["yplus"][1:], ref["U_plus"][1:], "o", mfc="none", mec="tab:red", ms=4.5, label=theirs)
    fine = np.geomspace(0.5, 200.0, 400)
    ax.plot(fine[fine < 12], fine[fine < 12], "b--", lw=0.8, label=r"$U^+ = y^+$")
    ax.plot(fine[fine > 10], np.log(fine[fine > 10]) / KAPPA + LOG_LAW_B, "g--", lw=0.8,
            label=rf"$U^+ = \ln(y^+)/{KAPPA} + {LOG_LAW_B}$")
    ax.set_ylabel(r"$U^+ = U/u_\tau$")
    ax.legend(fontsize=8, loc="upper left")
    ax.set_title(f"Mean velocity against {MKM}", fontsize=11)
    ax = axes[1]
    _deviation(ax, full, ref, "U_plus", sigma.get("U_plus"), "k")
    ax.set_ylabel(r"$U^+ - U^+_{\rm MKM}$")
    ax.legend(fontsize=8, loc="lower left", title=band, title_fontsize=7)
    for ax in axes:
        _log_yplus_axis(ax)
    axes[0].set_xlabel("")
    paths.append(save_figure(fig, fig_dir / "channel180-mean.png"))

    fig, axes = plt.subplots(2, 1, figsize=(7.5, 7.5), sharex=True, height_ratios=(2, 1.2), layout="constrained")
    colours = {"u_rms_plus": "tab:blue", "w_rms_plus": "tab:orange", "v_rms_plus": "tab:green",
               "reynolds_stress_plus": "tab:purple"}
    for name, colour in colours.items():
        column, form = COMPARED[name]
        axes[0].plot(yp, full[name], ".-", color=colour, ms=3, lw=1.2, label=f"{LABELS[name]} daskflow")
        axes[0].plot(ref["yplus"][1:], form(ref[column][1:]), "o", mfc="none", mec=colour, ms=4,
                     label=f"{LABELS[name]} MKM")
        _deviation(axes[1], full, ref, name, sigma.get(name), colour)
    axes[0].set_ylabel("wall units ($u_\\tau$, $u_\\tau^2$)")
    axes[0].legend(fontsize=7.5, ncol=2, loc="upper left")
    axes[0].set_title(f"rms velocities and Reynolds shear stress\nlines: {ours}; circles: {theirs}", fontsize=10)
    axes[1].set_ylabel("daskflow $-$ MKM")
    axes[1].set_title(band, fontsize=8)
    axes[1].legend(fontsize=7.5, ncol=2, loc="lower left")
    for ax in axes:
        _log_yplus_axis(ax)
    axes[0].set_xlabel("")
    paths.append(save_figure(fig, fig_dir / "channel180-rms.png"))

    fig, axes = plt.subplots(1, 2, figsize=(10, 4), layout="constrained")
    ax = axes[0]
    ax.plot(full["y_over_h"], full["reynolds_stress_plus"], label=r"$-\langle u'w'\rangle^+$")
    ax.plot(full["y_over_h"], full["dUdy_plus"], label=r"$dU^+/dy^+$")
    ax.plot(full["y_over_h"], full["total_stress_plus"], "k", label="total")
    ax.plot(full["y_over_h"], full["total_stress_linear"], "r--", lw=0.8, label=r"$1 - y/h$")
    ax.set_xlabel(r"$y/h$")
    ax.set_ylabel(r"stress / $\tau_w$")
    ax.set_title("Mean stress balance")
    ax.legend()
    ax = axes[1]
    for name, style in (("first_half", "--"), ("second_half", ":"), ("full", "-")):
        p = profiles[name]
        ax.plot(p["y_over_h"], 100 * (p["total_stress_plus"] - p["total_stress_linear"]), style, label=name)
    ax.axhspan(-2, 2, color="0.92", zorder=0)
    ax.set_xlabel(r"$y/h$")
    ax.set_ylabel(r"total $-$ $(1 - y/h)$, % of $\tau_w$")
    ax.set_ylim(-2.5, 2.5)
    ax.set_title("Balance error (grey: the 2% band)")
    ax.legend()
    paths.append(save_figure(fig, fig_dir / "channel180-stress-balance.png"))

    if PRESSURE_COLUMN in full:
        fig, ax = plt.subplots(figsize=(7, 4.5), layout="constrained")
        ax.plot(yp, full[PRESSURE_COLUMN], "k-", lw=1.4, label=ours)
        if PRESSURE_COLUMN in sigma:
            ax.fill_between(yp, full[PRESSURE_COLUMN] - 2 * sigma[PRESSURE_COLUMN],
                            full[PRESSURE_COLUMN] + 2 * sigma[PRESSURE_COLUMN], color="0.7", lw=0)
        ax.plot(ref["yplus"], np.sqrt(ref["R_pp"]), "o", mfc="none", mec="tab:red", ms=4, label=theirs)
        _log_yplus_axis(ax)
        ax.set_ylabel(r"$p'^+ = p_{\rm rms}/(\rho u_\tau^2)$")
        ax.set_title("Pressure fluctuations")
        ax.legend(fontsize=8)
        paths.append(save_figure(fig, fig_dir / "channel180-pressure.png"))

    if "slice" in ev:
        sl = ev["slice"]
        u, (lx, ly), re_tau, h = sl["u"], sl["lengths"], w_full["re_tau"], sl["h"]
        fig, ax = plt.subplots(figsize=(9, 4.4), layout="constrained")
        image = ax.imshow((u - u.mean()).T, origin="lower", extent=(0, lx * re_tau / h, 0, ly * re_tau / h),
                          cmap="RdBu_r", aspect="equal")
        fig.colorbar(image, ax=ax, shrink=0.8, label=r"$u - \overline{u}$ ($U_b$)")
        ax.set_xlabel(r"$x^+$ (streamwise, wall units)")
        ax.set_ylabel(r"$y^+$ (spanwise, wall units)")
        ax.set_title(f"Near-wall streaks: streamwise velocity in the plane {sl['yplus']:.1f} wall units from the wall\n"
                     f"(z = {sl['z']:.4f} h), one snapshot at t = {sl['time']:.1f} h/U_b", fontsize=10)
        paths.append(save_figure(fig, fig_dir / "channel180-streaks.png", dpi=60))

        spectra, u_b_plus = sl["spectra"], w_full["u_b_plus"]
        fig, axes = plt.subplots(1, 2, figsize=(10, 4.3), layout="constrained")
        for ax, axis, length, name in ((axes[0], "x", lx, "streamwise"), (axes[1], "y", ly, "spanwise")):
            k, e = spectra[f"k{axis}"][1:], spectra[f"E_{axis}"][1:]
            wavelength = 2.0 * np.pi / k * re_tau / h
            ax.semilogx(wavelength, k * e * u_b_plus**2, "k.-", ms=3, lw=0.8)
            ax.axvline(sl["peak_wavelength_plus"][axis], color="tab:red", ls=":", lw=0.8,
                       label=f"peak at $\\lambda^+$ = {sl['peak_wavelength_plus'][axis]:.0f}")
            ax.axvline(length * re_tau / h, color="0.5", ls="--", lw=0.8, label=f"box length {length * re_tau / h:.0f}")
            ax.set_xlabel(rf"$\lambda_{axis}^+ = 2\pi/k_{axis} \cdot u_\tau/\nu$ ({name} wavelength, wall units)")
            ax.set_ylabel(rf"$k_{axis} E_{{uu}}(k_{axis}) / u_\tau^2$")
            ax.set_title(f"Premultiplied {name} spectrum of $u'$", fontsize=10)
            ax.legend(fontsize=8)
        fig.suptitle(f"One snapshot (t = {sl['time']:.1f} h/U_b) of the plane {sl['yplus']:.1f} wall units from the "
                     f"wall (z = {sl['z']:.4f} h)\nThe area under each curve in ln λ plus its k = 0 bin (not drawn; "
                     f"x: {100 * sl['zero_mode_fraction']['x']:.0f}%, y: {100 * sl['zero_mode_fraction']['y']:.0f}%) "
                     f"is the plane's $\\overline{{u'^2}}/u_\\tau^2$ = {sl['variance_plus']:.2f}", fontsize=10)
        paths.append(save_figure(fig, fig_dir / "channel180-spectra.png"))
    return paths


def _deviation(ax, full: dict, ref: dict, name: str, sigma: np.ndarray | None, colour: str) -> None:
    """Plot daskflow's profile ``name`` minus the reference at daskflow's points, with a +-2 sigma band."""
    yp = full["yplus"]
    difference = full[name] - reference_profile(ref, name, yp)
    ax.plot(yp, difference, color=colour, lw=1.2, label=LABELS[name])
    if sigma is not None:
        ax.fill_between(yp, difference - 2 * sigma, difference + 2 * sigma, color=colour, alpha=0.2, lw=0)
    ax.axhline(0.0, color="0.4", lw=0.6)


def _pm(value: float, sigma: float, digits: int) -> str:
    return f"{value:.{digits}f} ± {sigma:.{digits}f}"


def table(data_dir: Path) -> str:
    """The numbers of the channel validation as markdown: the windows, the statistical errors of the
    scalar series, the comparison with Moser, Kim & Mansour, the resolution, the spectra, and the
    recorded reproductions."""
    ev = evaluate(data_dir)
    summary, bulk, stats = ev["summary"], ev["reference_bulk"], ev["statistics"]
    full = summary["windows"]["full"]
    rows = ["| window (t U_b/h) | samples | Re_tau | Cf | Cf Dean | U_c/U_b | U_c+ | peak u'+ (y+) "
            "| max balance error, y+ > 30 | max balance error, all y |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for name, w in summary["windows"].items():
        rows.append(f"| {name}: {w['window'][0]:.2f}-{w['window'][1]:.2f} | {w['samples']} | {w['re_tau']:.2f} | "
                    f"{w['cf']:.5f} | {w['cf_dean']:.5f} ({100 * (w['cf'] / w['cf_dean'] - 1):+.1f}%) | "
                    f"{w['u_c_over_u_b']:.4f} | {w['u_c_plus']:.2f} | {w['u_rms_peak_plus']:.3f} "
                    f"({w['u_rms_peak_yplus']:.1f}) | {100 * w['balance_error_away']:.2f}% | "
                    f"{100 * w['balance_error_all']:.2f}% |")
    t0, t1 = full["window"]
    rows += ["", f"Averaging window: t U_b/h = {t0:.2f} to {t1:.5f} (the last record), {t1 - t0:.2f} h/U_b = "
                 f"{ev['window_h_over_u_tau']:.2f} h/u_tau (u_tau/U_b = 1/{full['u_b_plus']:.3f} of the window); "
                 f"{full['samples']} profile samples.", ""]

    rows += ["| scalar series | samples (t U_b/h) | mean | tau_int (samples; h/U_b) | batch (samples; h/U_b) "
             "| batches | sigma, batch means | sigma from tau_int | sigma from the halves |",
             "|---|---|---|---|---|---|---|---|---|"]
    halves = summary["windows"].get("first_half"), summary["windows"].get("second_half")
    for name, key, fmt in (("Re_tau", "re_tau", ".2f"), ("Cf", "cf", ".3e")):
        st = stats[name.lower()]
        half = f"{0.5 * abs(halves[0][key] - halves[1][key]):{fmt}}" if all(halves) else "-"
        rows.append(f"| {name} | {st['samples']} ({st['first']:.2f}-{st['last']:.2f}) | {st['mean']:{fmt}} | "
                    f"{st['tau_int']:.1f}; {st['tau_int'] * st['sample_dt']:.1f} | {st['batch']}; "
                    f"{st['batch'] * st['sample_dt']:.1f} | {st['batches']} | {st['stderr']:{fmt}} | "
                    f"{st['stderr_tau']:{fmt}} | {half} |")

    re_tau, cf = stats["re_tau"], stats["cf"]
    sig = {key: 0.5 * abs(halves[0][key] - halves[1][key]) if all(halves) else float("nan")
           for key in ("u_c_plus", "u_c_over_u_b", "u_b_plus", "u_rms_peak_plus")}
    peak, peak_y = reference_peak(ev["reference"])
    re_b = full["re_b"]
    ratio = re_b / bulk["Re_b"]  # Dean's Cf ~ Re_b^(-1/4), i.e. Re_tau ~ Re_b^(7/8), carries MKM to our Re_b
    scaled = {"re_tau": bulk["re_tau"] * ratio**0.875, "cf": bulk["Cf"] * ratio**-0.25}
    rows += ["", f"| quantity | daskflow (± 1 sigma) | {MKM} | difference |", "|---|---|---|---|",
             f"| Re_b = 2h U_b/nu | {re_b:.0f} (imposed) | {bulk['Re_b']:.0f} (from its U+) | "
             f"{100 * (re_b / bulk['Re_b'] - 1):+.2f}% |",
             f"| Re_tau | {_pm(re_tau['mean'], re_tau['stderr'], 2)} (profile mean: {full['re_tau']:.2f}) | "
             f"{bulk['re_tau']:.2f} ({scaled['re_tau']:.2f} at Re_b {re_b:.0f}, scaled as Re_b^(7/8)) | "
             f"{re_tau['mean'] - bulk['re_tau']:+.2f} ({re_tau['mean'] - scaled['re_tau']:+.2f} scaled) |",
             f"| Cf | {cf['mean']:.3e} ± {cf['stderr']:.1e} | {bulk['Cf']:.3e} ({scaled['cf']:.3e} at Re_b "
             f"{re_b:.0f}, scaled as Re_b^(-1/4)) | {100 * (cf['mean'] / bulk['Cf'] - 1):+.2f}% "
             f"({100 * (cf['mean'] / scaled['cf'] - 1):+.2f}% scaled) |",
             f"| Cf / Dean's 0.073 Re_b^(-1/4) | {100 * (cf['mean'] / full['cf_dean'] - 1):+.1f}% | "
             f"{100 * (bulk['Cf'] / (0.073 * bulk['Re_b'] ** -0.25) - 1):+.1f}% | |",
             f"| U_b+ | {_pm(full['u_b_plus'], sig['u_b_plus'], 3)} | {bulk['U_b_plus']:.3f} | "
             f"{100 * (full['u_b_plus'] / bulk['U_b_plus'] - 1):+.2f}% |",
             f"| U_c+ | {_pm(full['u_c_plus'], sig['u_c_plus'], 3)} | {bulk['U_c_plus']:.3f} | "
             f"{100 * (full['u_c_plus'] / bulk['U_c_plus'] - 1):+.2f}% |",
             f"| U_c/U_b | {_pm(full['u_c_over_u_b'], sig['u_c_over_u_b'], 4)} | {bulk['U_c_over_U_b']:.4f} | "
             f"{100 * (full['u_c_over_u_b'] / bulk['U_c_over_U_b'] - 1):+.2f}% |",
             f"| peak u'+ (y+) | {_pm(full['u_rms_peak_plus'], sig['u_rms_peak_plus'], 3)} "
             f"({full['u_rms_peak_yplus']:.1f}) | {peak:.3f} ({peak_y:.1f}, spline) | "
             f"{100 * (full['u_rms_peak_plus'] / peak - 1):+.2f}% |"]
    rows += ["", "| profile | max \\|daskflow - MKM\\| | at y+ | % of the MKM peak "
                 "| sigma there | difference / sigma |", "|---|---|---|---|---|---|"]
    for name, c in ev["compared"].items():
        rows.append(f"| {NAMES[name]} | {c['max_abs']:.3f} ({c['difference']:+.3f}) | {c['at_yplus']:.1f} | "
                    f"{100 * c['max_abs'] / c['reference_peak']:.1f}% | {c.get('sigma', float('nan')):.4f} | "
                    f"{c.get('over_sigma', float('nan')):.1f} |")
    if PRESSURE_COLUMN not in ev["profiles"]["full"]:
        rows += ["", "The committed profiles have no pressure rms (p'+): the reduction of this run did not write it."]
    if "resolution" in ev:
        r = ev["resolution"]
        rows += ["", f"Resolution at Re_tau = {full['re_tau']:.2f}: dx+ = {r['dx_plus']:.2f}, "
                     f"dy+ = {r['dy_plus']:.2f}, dz+ = {r['dz_plus_min']:.2f} (wall) to {r['dz_plus_max']:.2f} "
                     f"(centre), first cell centre z+ = {r['z1_plus']:.2f}; box {r['lx_plus']:.0f} x "
                     f"{r['ly_plus']:.0f} x {2 * full['re_tau']:.0f} wall units."]
    if "slice" in ev:
        sl, peaks = ev["slice"], ev["slice"]["peak_wavelength_plus"]
        rows += ["", f"Slice: one snapshot at t = {sl['time']:.2f} h/U_b, plane z = {sl['z']:.5f} h "
                     f"(y+ = {sl['yplus']:.2f}), u'+^2 = {sl['variance_plus']:.3f}; premultiplied spectra peak "
                     f"at lambda_x+ = {peaks['x']:.0f} and lambda_y+ = {peaks['y']:.0f}; the k = 0 bins hold "
                     f"{100 * sl['zero_mode_fraction']['x']:.1f}% (x) and "
                     f"{100 * sl['zero_mode_fraction']['y']:.1f}% (y) of the variance."]
    reproductions = reproduction_table(data_dir)
    if reproductions:
        rows += ["", "Reproductions of the run's first steps:", "", reproductions]
    return "\n".join(rows)
