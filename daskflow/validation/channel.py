"""Turbulent channel at Re_tau ~ 180 (``examples/channel180.yaml``) against the published DNS of
Moser, Kim & Mansour (1999) and of Lee & Moser (2015), the laws of the wall, Dean's skin-friction
correlation and the exact mean stress balance, with statistical error bars from the sampling.

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

* the references: the published profiles of Moser, Kim & Mansour at Re_tau = 178.12
  (``channel180-reference-mkm1999.csv``) and of Lee & Moser at Re_tau = 182.088
  (``channel180-reference-lm2015.csv``), both read by :func:`read_reference` (each file's header says
  where its numbers come from), and the bulk numbers they imply (:func:`reference_bulk`);
* error bars. Scalar series (Re_tau, Cf): batch means (:func:`batch_means`) with a batch of
  ``BATCH_PER_TAU`` integrated autocorrelation times (:func:`integrated_autocorrelation_time`,
  Sokal's automatic window). Profiles: only the whole window and its two halves are committed, so
  the standard error of a whole-window profile value is estimated as ``|first - second| / 2``
  (:func:`half_window_sigma`: the two halves are taken as independent estimates of equal variance;
  one degree of freedom, so the figures smooth it along the profile: the RMS over ``2 POOL + 1``
  neighbouring points);
* one-dimensional spectra (:func:`spectra_1d`) of the streamwise velocity in the committed slice;
* the grid resolution in wall units at the achieved Re_tau (:func:`resolution`).

References: Moser, Kim & Mansour (1999), Phys. Fluids 11, 943 (data set chan180); Lee & Moser (2015),
J. Fluid Mech. 774, 395 (their Re_tau 180 case, https://turbulence.oden.utexas.edu/channel2015/); Dean (1978),
J. Fluids Eng. 100, 215 (Cf correlation); Sokal (1997), "Monte Carlo methods in statistical
mechanics", in Functional Integration (Springer), for the automatic windowing of the integrated
autocorrelation time.

The case is split in four modules: this one runs the case, reduces its store and reproduces the
committed run; :mod:`daskflow.validation.channel_comparison` holds the reference, the statistics and
:func:`evaluate`; :mod:`daskflow.validation.channel_figures` draws the figures and
:mod:`daskflow.validation.channel_report` writes the table. Their public names are importable from here.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from daskflow import data
from daskflow.validation.cavity import _read_csv, _write_csv
from daskflow.validation.channel_comparison import (
    BATCH_PER_TAU,
    COMPARED,
    LM,
    LM_RE_TAU,
    LM_REFERENCE,
    MKM,
    MKM_RE_TAU,
    POOL,
    PRESSURE_COLUMN,
    PROFILE_COLUMNS,
    REFERENCE,
    REFERENCE_COLUMNS,
    REFERENCES,
    autocorrelation,
    batch_means,
    clenshaw_curtis_weights,
    compare_profile,
    compare_references,
    evaluate,
    half_window_sigma,
    integrated_autocorrelation_time,
    read_reference,
    reference_bulk,
    reference_path,
    reference_peak,
    reference_profile,
    resolution,
    scalar_statistics,
    spectra_1d,
)
from daskflow.validation.channel_figures import figures
from daskflow.validation.channel_report import reproduction_table, table

__all__ = [
    "AWAY_FROM_WALL", "BATCH_PER_TAU", "COMPARED", "EXAMPLE", "LM", "LM_REFERENCE", "LM_RE_TAU", "MKM",
    "MKM_RE_TAU", "POOL", "PRESSURE_COLUMN", "PROFILE_COLUMNS", "REFERENCE", "REFERENCES", "REFERENCE_COLUMNS",
    "REPRODUCTION_TOLERANCE", "SAMPLE_EVERY", "SCALAR_COLUMNS", "T_START", "autocorrelation", "balance_error",
    "batch_means", "clenshaw_curtis_weights", "compare_profile", "compare_references", "compare_scalars",
    "evaluate", "figures", "half_window_sigma", "integrated_autocorrelation_time", "read_reference", "reduce_store",
    "reference_bulk", "reference_path", "reference_peak", "reference_profile", "reproduce", "reproduction_table",
    "resolution", "run", "scalar_statistics", "spectra_1d", "table", "windows",
]

EXAMPLE = data.folder("examples") / "channel180.yaml"  # the checkout's or the installed copy (daskflow.data)
T_START = 100.0  # end of the transient in h/U_b (Re_tau within 1% of its final mean from here on)
AWAY_FROM_WALL = 30.0  # y+ beyond which the stress balance is checked ("away from the wall")


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
