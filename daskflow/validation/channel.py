"""Turbulent channel at Re_tau ~ 180 (``examples/channel180.yaml``) against the laws of the wall,
Dean's skin-friction correlation and the exact mean stress balance.

The run is the real command line on a GPU host, continued across commands through checkpoints
(``daskflow run examples/channel180.yaml`` then ``--restart``). The reduction reads only the run's
``scalars`` and ``profiles`` groups (and one wall-parallel slice when the store has slices):

* Re_tau and the two wall shear stresses versus time (the transient, then the statistically steady
  state);
* time- and plane-averaged profiles in wall units over the averaging window (from ``t_start`` to
  the end) and over its two halves (statistical convergence), via :func:`daskflow.analysis.wall_units`:
  ``U+``, rms velocities, Reynolds shear stress, and the total stress ``-<u'w'>+ + dU+/dy+``, which
  must equal ``1 - y/h`` in a statistically steady channel;
* bulk numbers (:func:`daskflow.analysis.bulk_quantities`): Re_tau, Cf against Dean's correlation
  ``Cf = 0.073 Re_b^(-1/4)``, ``U_c / U_b``.

References quoted in the tables: Dean (1978), J. Fluids Eng. 100, 215 (Cf correlation); Moser, Kim &
Mansour (1999), Phys. Fluids 11, 943 (Re_tau = 178.12 at Re_b = 5600 on the channel height).
"""

from __future__ import annotations

import json
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
MKM_RE_TAU = 178.12  # Moser, Kim & Mansour (1999) at Re_b = 5600
PROFILE_COLUMNS = ("yplus", "y_over_h", "U_plus", "u_rms_plus", "v_rms_plus", "w_rms_plus",
                   "reynolds_stress_plus", "dUdy_plus", "total_stress_plus", "total_stress_linear")
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
    ``channel180-profiles-{full,first_half,second_half}.csv`` (wall units), ``channel180-slice.npz``
    (the last near-wall streamwise velocity plane, float16) and ``channel180.json`` (numbers)."""
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
        _write_csv(data_dir / f"channel180-profiles-{name}.csv", list(PROFILE_COLUMNS),
                   [wu.coords[c].values if c in wu.coords else wu[c].values for c in PROFILE_COLUMNS])
        u_rms = wu.u_rms_plus.values
        peak = int(np.argmax(u_rms))
        summary["windows"][name] = {
            "window": list(window), "samples": int(wu.n_samples), "re_tau": bulk["Re_tau"], "cf": bulk["Cf"],
            "cf_dean": bulk["Cf_dean"], "re_b": bulk["Re_b"], "u_c_over_u_b": bulk["U_c_over_U_b"],
            "u_c_plus": bulk["U_c"] / bulk["u_tau"], "u_b_plus": bulk["U_b"] / bulk["u_tau"],
            "u_rms_peak_plus": float(u_rms[peak]), "u_rms_peak_yplus": float(wu.yplus.values[peak]),
            "balance_error_away": balance_error(wu), "balance_error_all": balance_error(wu, 0.0)}
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


def figures(data_dir: Path, fig_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from daskflow.analysis import KAPPA, LOG_LAW_B

    data_dir, fig_dir = Path(data_dir), Path(fig_dir)
    fig_dir.mkdir(parents=True, exist_ok=True)
    summary = json.loads((data_dir / "channel180.json").read_text())
    s = _read_csv(data_dir / "channel180-scalars.csv")
    profiles = {name: _read_csv(data_dir / f"channel180-profiles-{name}.csv") for name in summary["windows"]}
    t0, t1 = summary["windows"]["full"]["window"]
    paths = []

    fig, axes = plt.subplots(2, 1, figsize=(7, 5), sharex=True, layout="constrained")
    axes[0].plot(s["time"], s["re_tau"], lw=0.8, color="k")
    axes[0].axhline(MKM_RE_TAU, color="tab:red", ls="--", lw=0.8, label=f"Moser, Kim & Mansour: {MKM_RE_TAU}")
    axes[0].set_ylabel(r"$Re_\tau$")
    axes[0].legend(loc="lower right")
    axes[1].plot(s["time"], s["tau_wall_bottom"], lw=0.6, label="bottom wall")
    axes[1].plot(s["time"], s["tau_wall_top"], lw=0.6, label="top wall")
    axes[1].set_ylabel(r"$\tau_w$ (kinematic, $U_b^2$)")
    axes[1].set_xlabel(r"$t\,U_b/h$")
    axes[1].legend(loc="lower right")
    for ax in axes:
        ax.axvspan(t0, t1, color="0.9", zorder=0)
    axes[0].set_title("Transient and statistically steady state (grey: averaging window)")
    paths.append(save_figure(fig, fig_dir / "channel180-history.png"))

    full = profiles["full"]
    fig, ax = plt.subplots(figsize=(6, 4.5), layout="constrained")
    yp = full["yplus"]
    ax.semilogx(yp, full["U_plus"], "k-", label="daskflow")
    ax.semilogx(yp[yp < 12], yp[yp < 12], "b--", lw=0.8, label=r"$U^+ = y^+$")
    ax.semilogx(yp[yp > 10], np.log(yp[yp > 10]) / KAPPA + LOG_LAW_B, "r--", lw=0.8,
                label=rf"$U^+ = \ln(y^+)/{KAPPA} + {LOG_LAW_B}$")
    ax.set_xlabel(r"$y^+$")
    ax.set_ylabel(r"$U^+$")
    ax.legend()
    ax.set_title(rf"Mean velocity, $Re_\tau$ = {summary['windows']['full']['re_tau']:.1f}")
    paths.append(save_figure(fig, fig_dir / "channel180-mean.png"))

    fig, ax = plt.subplots(figsize=(6, 4.5), layout="constrained")
    for name, label in (("u_rms_plus", r"$u'^+$"), ("v_rms_plus", r"$v'^+$ (spanwise)"),
                        ("w_rms_plus", r"$w'^+$ (wall-normal)"), ("reynolds_stress_plus", r"$-\langle u'w'\rangle^+$")):
        line, = ax.plot(profiles["first_half"]["yplus"], profiles["first_half"][name], "--", lw=0.8)
        ax.plot(full["yplus"], full[name], color=line.get_color(), label=label)
    ax.set_xlim(0, float(yp.max()))
    ax.set_xlabel(r"$y^+$")
    ax.set_title("Fluctuations (solid: whole window, dashed: first half)")
    ax.legend()
    paths.append(save_figure(fig, fig_dir / "channel180-rms.png"))

    fig, axes = plt.subplots(1, 2, figsize=(10, 4), layout="constrained")
    ax = axes[0]
    ax.plot(full["y_over_h"], full["reynolds_stress_plus"], label=r"$-\langle u'w'\rangle^+$")
    ax.plot(full["y_over_h"], full["dUdy_plus"], label=r"$dU^+/dy^+$")
    ax.plot(full["y_over_h"], full["total_stress_plus"], "k", label="total")
    ax.plot(full["y_over_h"], full["total_stress_linear"], "r--", lw=0.8, label=r"$1 - y/h$")
    ax.set_xlabel(r"$y/h$")
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

    slice_path = data_dir / "channel180-slice.npz"
    if slice_path.exists():
        plane = np.load(slice_path)
        u = plane["u"].astype(np.float64)
        lx, ly = summary["grid"]["lengths"][:2] if summary.get("grid") else (u.shape[0], u.shape[1])
        fig, ax = plt.subplots(figsize=(9, 4.2), layout="constrained")
        image = ax.imshow((u - u.mean()).T, origin="lower", extent=(0, lx, 0, ly), cmap="RdBu_r", aspect="equal")
        fig.colorbar(image, ax=ax, shrink=0.8, label=r"$u - \overline{u}$ ($U_b$)")
        ax.set_xlabel("x / h")
        ax.set_ylabel("y / h (spanwise)")
        ax.set_title(f"Near-wall streaks: streamwise velocity at z = {float(plane['z']):.3f} h, "
                     f"t = {float(plane['time']):.0f} h/U_b")
        paths.append(save_figure(fig, fig_dir / "channel180-streaks.png", dpi=60))
    return paths


def table(data_dir: Path) -> str:
    """The statistics of the averaging window and its halves, then the recorded reproductions."""
    summary = json.loads((Path(data_dir) / "channel180.json").read_text())
    rows = ["| window (t U_b/h) | samples | Re_tau | Cf | Cf Dean | U_c/U_b | U_c+ | peak u'+ (y+) "
            "| max balance error, y+ > 30 | max balance error, all y |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for name, w in summary["windows"].items():
        rows.append(f"| {name}: {w['window'][0]:.0f}-{w['window'][1]:.0f} | {w['samples']} | {w['re_tau']:.2f} | "
                    f"{w['cf']:.5f} | {w['cf_dean']:.5f} ({100 * (w['cf'] / w['cf_dean'] - 1):+.1f}%) | "
                    f"{w['u_c_over_u_b']:.4f} | {w['u_c_plus']:.2f} | {w['u_rms_peak_plus']:.3f} "
                    f"({w['u_rms_peak_yplus']:.1f}) | {100 * w['balance_error_away']:.2f}% | "
                    f"{100 * w['balance_error_all']:.2f}% |")
    reproductions = reproduction_table(data_dir)
    if reproductions:
        rows += ["", "Reproductions of the run's first steps:", "", reproductions]
    return "\n".join(rows)
