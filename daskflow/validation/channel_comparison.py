"""The turbulent channel's comparison with Moser, Kim & Mansour (1999) and Lee & Moser (2015) and its
statistics (see :mod:`daskflow.validation.channel` for the case): the reference profiles and the bulk
numbers they imply, the statistical errors of the sampled series and profiles, one-dimensional spectra, the grid
resolution in wall units, and :func:`evaluate`, everything the figures and the table show, computed
from the reduced data."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np

from daskflow import data
from daskflow.validation.cavity import _read_csv

MKM_RE_TAU = 178.12  # Moser, Kim & Mansour (1999), chan180: the Re_tau their files state
MKM = "Moser, Kim & Mansour (1999)"
REFERENCE = "channel180-reference-mkm1999.csv"  # their published profiles (see the file's header)
LM_RE_TAU = 182.088  # Lee & Moser (2015), their Re_tau 180 case: the Re_tau their files state
LM = "Lee & Moser (2015)"
LM_REFERENCE = "channel180-reference-lm2015.csv"  # their published profiles (see the file's header)
#: every reference the run is compared with, by name: its file (the first is the primary reference)
REFERENCES = {MKM: REFERENCE, LM: LM_REFERENCE}
#: how the figures and tables abbreviate the references
SHORT = {MKM: "MKM", LM: "LM"}
REFERENCE_COLUMNS = ("y_over_h", "yplus", "U_plus", "dUdy", "R_uu", "R_vv", "R_ww", "R_uv", "R_pp")
PROFILE_COLUMNS = ("yplus", "y_over_h", "U_plus", "u_rms_plus", "v_rms_plus", "w_rms_plus",
                   "reynolds_stress_plus", "dUdy_plus", "total_stress_plus", "total_stress_linear")
PRESSURE_COLUMN = "p_rms_plus"  # written after PROFILE_COLUMNS when the store's profiles hold p and pp
BATCH_PER_TAU = 5.0  # batch length of the batch means in integrated autocorrelation times
POOL = 4  # profile error bars: RMS of the half-window estimates over the 2 * POOL + 1 nearest points
#: daskflow's profile -> (the reference column, how a value is formed from it). daskflow's axes are x
#: streamwise, y spanwise, z wall-normal; those of both references are x, y wall-normal, z spanwise.
COMPARED = {
    "U_plus": ("U_plus", lambda r: r),
    "u_rms_plus": ("R_uu", np.sqrt),
    "w_rms_plus": ("R_vv", np.sqrt),
    "v_rms_plus": ("R_ww", np.sqrt),
    "reynolds_stress_plus": ("R_uv", np.negative),
    "p_rms_plus": ("R_pp", np.sqrt),
}


# ------------------------------------------------------------------------------------------------
# Reference data (Moser, Kim & Mansour 1999; Lee & Moser 2015)
# ------------------------------------------------------------------------------------------------


def reference_path(data_dir: Path, name: str = REFERENCE) -> Path:
    """The reference file ``name``: ``data_dir``'s copy if it has one, else the committed (shipped) one."""
    own = Path(data_dir) / name
    return own if own.is_file() else data.path("validation", name)


#: the Re_tau line of a quoted published header: MKM's ``# Re_tau = 178.12``, Lee & Moser's
#: ``%  Re_tau              Re_tau =  182.088``
_STATED_RE_TAU = re.compile(r"#\s*(?:#\s*Re_tau|%\s*Re_tau\s+Re_tau)\s*=\s*([0-9.]+)")


def read_reference(path: Path) -> dict:
    """The published profiles of a reference (``REFERENCE``: Moser, Kim & Mansour at Re_tau = 178.12;
    ``LM_REFERENCE``: Lee & Moser at Re_tau = 182.088): one array per column of
    :data:`REFERENCE_COLUMNS` (wall to centre, normalised by u_tau and h; the file's header says which
    published column each is) and ``re_tau``, the value every quoted file header states (they must
    agree). Raises ``ValueError`` for a file that does not have this form."""
    lines = Path(path).read_text().splitlines()
    stated = {float(m.group(1)) for line in lines if (m := _STATED_RE_TAU.match(line))}
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
    """Bulk numbers of the reference flow, which its files do not state: ``U_b_plus`` (the mean of U+
    over the channel), ``Re_b = 2 h U_b / nu = 2 Re_tau U_b+``, ``Cf = tau_w / (U_b^2 / 2) = 2 / U_b+^2``,
    ``U_c_plus`` (the centre value) and ``U_c_over_U_b``. Rows on the Chebyshev-Gauss-Lobatto points
    from the wall to the centre (MKM) are integrated by Clenshaw-Curtis, mirrored about the centre;
    other rows (Lee & Moser's B-spline points, which stop short of the centre) by a cubic spline through
    the rows and their mirror images, whose value at the centre is ``U_c_plus``."""
    y, u = ref["y_over_h"], ref["U_plus"]
    n = 2 * (y.size - 1)
    if np.allclose(y, 1.0 - np.cos(np.pi * np.arange(y.size) / n), rtol=1e-4, atol=5e-5):
        u_b = 0.5 * float(clenshaw_curtis_weights(n) @ np.concatenate([u, u[-2::-1]]))
        u_c = float(u[-1])
    else:
        from scipy.interpolate import CubicSpline

        if not (y[0] < 1e-12 and np.all(np.diff(y) > 0) and y[-1] < 1.0):
            raise ValueError("the reference rows must run from the wall towards the centre, short of it or on "
                             "the Chebyshev-Gauss-Lobatto points")
        spline = CubicSpline(np.concatenate([y, 2.0 - y[::-1]]), np.concatenate([u, u[::-1]]))
        u_b, u_c = float(spline.integrate(0.0, 1.0)), float(spline(1.0))
    return {"re_tau": ref["re_tau"], "U_b_plus": u_b, "Re_b": 2.0 * ref["re_tau"] * u_b, "Cf": 2.0 / u_b**2,
            "U_c_plus": u_c, "U_c_over_U_b": u_c / u_b}


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
# The reduced data against the reference
# ------------------------------------------------------------------------------------------------


def compare_references(data_dir: Path, full: dict, sigma: dict) -> dict[str, dict]:
    """Each reference of :data:`REFERENCES` (by name, in that order) against the whole window's profiles
    ``full`` with their errors ``sigma``: ``reference`` (:func:`read_reference`), ``bulk``
    (:func:`reference_bulk`), ``peak`` (:func:`reference_peak` of u'+: value and y+), ``short`` (the
    abbreviation the figures use) and ``compared`` (:func:`compare_profile` per profile of :data:`COMPARED`
    that both the data and the reference have)."""
    out = {}
    for name, file in REFERENCES.items():
        ref = read_reference(reference_path(data_dir, file))
        out[name] = {"reference": ref, "bulk": reference_bulk(ref), "peak": reference_peak(ref), "short": SHORT[name],
                     "compared": {p: compare_profile(full, ref, p, sigma.get(p)) for p in COMPARED if p in full}}
    return out


def evaluate(data_dir: Path) -> dict:
    """Everything the figures and the table show, computed from the reduced data in ``data_dir`` and
    the reference files (:func:`reference_path`): ``summary`` (``channel180.json``), ``scalars``,
    ``profiles`` (per window), ``sigma`` (per profile column, :func:`half_window_sigma` of the halves),
    ``references`` (per name of :data:`REFERENCES`: :func:`compare_references`), and for the primary
    reference (Moser, Kim & Mansour) also ``reference``, ``reference_bulk`` and ``compared``, its
    entries there, ``statistics`` (:func:`scalar_statistics` over the whole window),
    ``window_h_over_u_tau`` (the window's length in h/u_tau, with its u_tau), ``resolution`` (when the
    summary has the grid) and ``slice`` (with its spectra, when committed)."""
    data_dir = Path(data_dir)
    summary = json.loads((data_dir / "channel180.json").read_text())
    profiles = {name: _read_csv(data_dir / f"channel180-profiles-{name}.csv") for name in summary["windows"]}
    full, windows_ = profiles["full"], summary["windows"]
    sigma = {}
    if "first_half" in profiles and "second_half" in profiles:
        sigma = {name: half_window_sigma(profiles["first_half"][name], profiles["second_half"][name], POOL)
                 for name in full if name in profiles["first_half"] and name in profiles["second_half"]}
    references = compare_references(data_dir, full, sigma)
    primary = references[next(iter(REFERENCES))]
    out = {"summary": summary, "scalars": _read_csv(data_dir / "channel180-scalars.csv"), "profiles": profiles,
           "sigma": sigma, "references": references, "reference": primary["reference"],
           "reference_bulk": primary["bulk"], "compared": primary["compared"]}
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
