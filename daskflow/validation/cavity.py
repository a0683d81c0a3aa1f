"""Lid-driven cavity at Re = 100 and 1000 against Ghia, Ghia & Shin (1982).

The cavity is the x-z plane (walls on x and z, the lid at z = 1 moving along +x with velocity 1)
with a thin periodic span of two cells in y; ``nu = 1 / Re``. Each run is the real command line
(``daskflow run``, in process) on ``examples/cavity{Re}.yaml`` (found by :mod:`daskflow.data`: the
checkout's or the installed copy) with the grid replaced by ``n x 2 x n``, writing a Zarr store. The
reduction reads the last field snapshot of the store:

* centreline profiles ``u(z)`` at ``x = 0.5`` (the x-face ``nx/2``) and ``w(x)`` at ``z = 0.5`` (the
  z-face ``nz/2``), with the wall values added;
* the streamfunction ``psi(x_f, z_f) = int_0^z u dz`` on the cell corners (exact for the discretely
  divergence-free field: ``w = -d psi / dx`` holds cell by cell), its minimum refined by a local
  quadratic fit (the primary vortex centre);
* the steady-state residuals: ``|dE/dt| / E`` of the kinetic energy over the last time unit (from the
  ``scalars`` group) and the largest velocity change between the last two snapshots per time unit.

Reference: U. Ghia, K. N. Ghia, C. T. Shin, "High-Re solutions for incompressible flow using the
Navier-Stokes equations and a multigrid method", J. Comput. Phys. 48 (1982) 387-411, Tables I and
II (centreline velocities, 129 x 129 grid) and Table V (primary vortex). Their ``v`` is our ``w``,
their ``y`` our ``z``.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from daskflow import data
from daskflow.validation import save_figure

REYNOLDS = (100, 1000)
STEADY_TOLERANCE = 1e-6  # relative kinetic-energy change per time unit that counts as steady
SIZES = (64, 128)

# Ghia et al. (1982), Table I: u along the vertical centreline x = 0.5
GHIA_Z = np.array([1.0000, 0.9766, 0.9688, 0.9609, 0.9531, 0.8516, 0.7344, 0.6172, 0.5000, 0.4531, 0.2813,
                   0.1719, 0.1016, 0.0703, 0.0625, 0.0547, 0.0000])
GHIA_U = {
    100: np.array([1.00000, 0.84123, 0.78871, 0.73722, 0.68717, 0.23151, 0.00332, -0.13641, -0.20581, -0.21090,
                   -0.15662, -0.10150, -0.06434, -0.04775, -0.04192, -0.03717, 0.00000]),
    1000: np.array([1.00000, 0.65928, 0.57492, 0.51117, 0.46604, 0.33304, 0.18719, 0.05702, -0.06080, -0.10648,
                    -0.27805, -0.38289, -0.29730, -0.22220, -0.20196, -0.18109, 0.00000]),
}
# Ghia et al. (1982), Table II: v (our w) along the horizontal centreline z = 0.5
GHIA_X = np.array([1.0000, 0.9688, 0.9609, 0.9531, 0.9453, 0.9063, 0.8594, 0.8047, 0.5000, 0.2344, 0.2266,
                   0.1563, 0.0938, 0.0781, 0.0703, 0.0625, 0.0000])
GHIA_W = {
    100: np.array([0.00000, -0.05906, -0.07391, -0.08864, -0.10313, -0.16914, -0.22445, -0.24533, 0.05454,
                   0.17527, 0.17507, 0.16077, 0.12317, 0.10890, 0.10091, 0.09233, 0.00000]),
    1000: np.array([0.00000, -0.21388, -0.27669, -0.33714, -0.39188, -0.51550, -0.42665, -0.31966, 0.02526,
                    0.32235, 0.33075, 0.37095, 0.32627, 0.30353, 0.29012, 0.27485, 0.00000]),
}
# Ghia et al. (1982), Table V: primary vortex (x, z, psi_min)
GHIA_VORTEX = {100: (0.6172, 0.7344, -0.103423), 1000: (0.5313, 0.5625, -0.117929)}

# Botella & Peyret (1998), Computers & Fluids 27, 421-433 (Chebyshev collocation, N = 160), Re = 1000:
# primary vortex (x, z, psi_min) and the centreline extrema (value, position)
BOTELLA_PEYRET_1000 = {"vortex": (0.5308, 0.5652, -0.1189366), "u_min": (-0.3885698, 0.1717),
                       "w_max": (0.3769447, 0.1578), "w_min": (-0.5270771, 0.9092)}

# ------------------------------------------------------------------------------------------------
# Reduction (pure functions on arrays, tested on analytic fields)
# ------------------------------------------------------------------------------------------------


def streamfunction(u: np.ndarray, dzf: np.ndarray) -> np.ndarray:
    """``psi`` on the cell corners ``(x_f, z_f)``, shape ``(nx + 1, nz + 1)`` including the walls
    ``x = 0`` and ``z = 0``: the cumulative sum of ``u dz`` up each x-face column. ``u`` has shape
    ``(nx, nz)`` (the x-faces 1..nx, the last one the wall) and ``dzf`` the cell heights."""
    nx, nz = u.shape
    psi = np.zeros((nx + 1, nz + 1))
    psi[1:, 1:] = np.cumsum(u * dzf[None, :], axis=1)
    return psi


def quadratic_extremum(x: np.ndarray, z: np.ndarray, values: np.ndarray) -> tuple[float, float, float]:
    """Stationary point of the least-squares quadratic ``a + b x + c z + d x^2 + e x z + f z^2``
    through the 3 x 3 points ``values[i, j]`` at ``(x[i], z[j])``; returns ``(x, z, value)``."""
    xx, zz = np.meshgrid(x - x[1], z - z[1], indexing="ij")
    basis = np.stack([np.ones(9), xx.ravel(), zz.ravel(), xx.ravel() ** 2, (xx * zz).ravel(), zz.ravel() ** 2], 1)
    a, b, c, d, e, f = np.linalg.lstsq(basis, values.ravel(), rcond=None)[0]
    dx, dz = np.linalg.solve([[2 * d, e], [e, 2 * f]], [-b, -c])
    value = a + b * dx + c * dz + d * dx**2 + e * dx * dz + f * dz**2
    return float(x[1] + dx), float(z[1] + dz), float(value)


def vortex_centre(psi: np.ndarray, xf: np.ndarray, zf: np.ndarray) -> tuple[float, float, float]:
    """Primary vortex centre ``(x, z, psi_min)``: the interior minimum of ``psi`` on the corners
    (coordinates ``xf``, ``zf`` including 0) refined by :func:`quadratic_extremum`."""
    interior = psi[1:-1, 1:-1]
    i, k = np.unravel_index(np.argmin(interior), interior.shape)
    i, k = i + 1, k + 1
    i, k = min(max(i, 1), len(xf) - 2), min(max(k, 1), len(zf) - 2)
    return quadratic_extremum(xf[i - 1:i + 2], zf[k - 1:k + 2], psi[i - 1:i + 2, k - 1:k + 2])


def centrelines(u: np.ndarray, w: np.ndarray, xc: np.ndarray, zc: np.ndarray, lid: float = 1.0):
    """``(z, u(0.5, z))`` and ``(x, w(x, 0.5))`` with the wall values, from ``u (nx, nz)`` on x-faces
    and ``w (nx, nz)`` on z-faces of a uniform ``nx`` (even) by ``nz`` (even, uniform) unit cavity."""
    nx, nz = u.shape
    z = np.concatenate([[0.0], zc, [1.0]])
    uz = np.concatenate([[0.0], u[nx // 2 - 1], [lid]])
    x = np.concatenate([[0.0], xc, [1.0]])
    wx = np.concatenate([[0.0], w[:, nz // 2 - 1], [0.0]])
    return (z, uz), (x, wx)


def ghia_deviation(coord: np.ndarray, profile: np.ndarray, ref_coord: np.ndarray, ref: np.ndarray) -> float:
    """Largest |profile - reference| at the reference points (cubic spline of the profile)."""
    from scipy.interpolate import CubicSpline

    return float(np.abs(CubicSpline(coord, profile)(ref_coord) - ref).max())


def settling_time(times: np.ndarray, energy: np.ndarray, tolerance: float = STEADY_TOLERANCE,
                  window: float = 1.0) -> float | None:
    """The time from which ``|E(t) - E(t - window)| / (window E(t))`` stays below ``tolerance``
    (``None`` if it never does by the last record)."""
    earlier = np.searchsorted(times, times - window)
    ok = times - times[0] >= window
    rate = np.full(len(times), np.inf)
    rate[ok] = np.abs(energy[ok] - energy[earlier[ok]]) / ((times[ok] - times[earlier[ok]]) * energy[ok])
    above = np.nonzero(rate >= tolerance)[0]
    if len(above) and above[-1] == len(times) - 1:
        return None
    return float(times[above[-1] + 1]) if len(above) else float(times[0])


def extremum(coord: np.ndarray, profile: np.ndarray, kind: str) -> tuple[float, float]:
    """``(value, position)`` of the minimum (``kind="min"``) or maximum of a cubic spline through
    the profile, searched around the extreme stored point."""
    from scipy.interpolate import CubicSpline
    from scipy.optimize import minimize_scalar

    sign = 1.0 if kind == "min" else -1.0
    spline = CubicSpline(coord, profile)
    k = int(np.argmin(sign * profile))
    lo, hi = coord[max(k - 1, 0)], coord[min(k + 1, len(coord) - 1)]
    best = minimize_scalar(lambda c: sign * spline(c), bounds=(lo, hi), method="bounded",
                           options={"xatol": 1e-10})
    return float(spline(best.x)), float(best.x)


def _last_two(store: str):
    """The last two states ``(time, step, u, w)`` (y-averaged ``(nx, nz)`` arrays): the field
    snapshots, and the latest checkpoint when it is newer than the last snapshot (a run stopped by
    SIGTERM, or an end time between snapshots)."""
    import zarr

    from daskflow.io import store as zstore

    fields = zarr.open_group(store, mode="r")["fields"]
    times, steps = fields["time"][:], fields["step"][:]
    states = [(float(times[i]), int(steps[i]), np.asarray(fields["u"][i]).mean(axis=1),
               np.asarray(fields["w"][i]).mean(axis=1)) for i in range(max(0, len(times) - 2), len(times))]
    if zstore.current_slot(store) is not None:
        saved, clock = zstore.read_checkpoint(store)
        if not states or clock["step"] > states[-1][1]:
            states.append((float(clock["time"]), int(clock["step"]), saved["u"].mean(axis=1), saved["w"].mean(axis=1)))
    if len(states) < 2:
        raise ValueError(f"{store}: needs two saved states (field snapshots or a checkpoint), has {len(states)}")
    return states[-2:]


def reduce_store(store: str | Path) -> dict:
    """The reduced data of one cavity run: profiles, streamfunction, vortex centre, residuals."""
    import zarr

    from daskflow.grid import Grid

    store = str(store)
    root = zarr.open_group(store, mode="r")
    config = dict(root.attrs["config"])
    g = config["grid"]
    grid = Grid(tuple(g["shape"]), tuple(g["lengths"]), g["z_stretch"], g["z_cluster"])
    re = round(1.0 / config["physics"]["nu"])
    (t0, _, u0, w0), (t1, step, u1, w1) = _last_two(store)
    (z, uz), (x, wx) = centrelines(u1, w1, grid.xc, grid.zc)
    xf, zf = np.concatenate([[0.0], grid.xf[1:]]), np.concatenate([[0.0], grid.zf[1:]])
    psi = streamfunction(u1, grid.dzf)
    vx, vz, vpsi = vortex_centre(psi, xf, zf)
    scalars = root["scalars"]
    ts, energy = scalars["time"][:], scalars["kinetic_energy"][:]
    written = int(np.argmin(np.diff(ts) > 0)) + 1 if np.any(np.diff(ts) <= 0) else len(ts)  # a live store
    ts, energy = ts[:written], energy[:written]
    before = np.searchsorted(ts, ts[-1] - 1.0)
    ke_rate = abs(energy[-1] - energy[before]) / ((ts[-1] - ts[before]) * energy[-1])
    steady_time = settling_time(ts, energy)
    velocity_rate = max(np.abs(u1 - u0).max(), np.abs(w1 - w0).max()) / (t1 - t0)
    stride = max(1, grid.shape[0] // 64)
    ref = GHIA_VORTEX[re] if re in GHIA_VORTEX else (np.nan, np.nan, np.nan)
    return {
        "re": re, "n": grid.shape[0], "time": t1, "end_time": float(ts[-1]),
        "steps": step, "previous_time": t0,
        "vortex": {"x": vx, "z": vz, "psi": vpsi},
        "vortex_ghia": {"x": ref[0], "z": ref[1], "psi": ref[2]},
        "ke_rate": float(ke_rate), "velocity_rate": float(velocity_rate), "steady_time": steady_time,
        "ghia_u_max_dev": ghia_deviation(z, uz, GHIA_Z, GHIA_U[re]) if re in GHIA_U else None,
        "ghia_w_max_dev": ghia_deviation(x, wx, GHIA_X, GHIA_W[re]) if re in GHIA_W else None,
        "extrema": {"u_min": extremum(z, uz, "min"), "w_max": extremum(x, wx, "max"),
                    "w_min": extremum(x, wx, "min")},
        "profiles": {"z": z, "u": uz, "x": x, "w": wx},
        "psi": {"x": xf[::stride], "z": zf[::stride], "psi": psi[::stride, ::stride]},
        "energy": {"time": ts, "kinetic_energy": energy},
    }


# ------------------------------------------------------------------------------------------------
# Files
# ------------------------------------------------------------------------------------------------


def _write_csv(path: Path, header: list[str], columns, digits: int = 8) -> None:
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        for row in zip(*columns, strict=True):
            writer.writerow([f"{v:.{digits}g}" for v in row])


def _read_csv(path: Path) -> dict[str, np.ndarray]:
    with path.open() as fh:
        rows = list(csv.reader(fh))
    return {name: np.array([float(r[i]) for r in rows[1:]]) for i, name in enumerate(rows[0])}


def read_psi(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(x, z, psi[x, z])`` from a ``-psi.csv`` file."""
    rows = np.genfromtxt(path, delimiter=",")
    return rows[1:, 0], rows[0, 1:], rows[1:, 1:]


def save(reduced: dict, data_dir: Path, wall_s: float | None = None) -> None:
    """Write one run's reduced data: ``cavity{Re}-n{n}-{u,w,energy}.csv``, ``-psi.csv`` (the
    streamfunction on at most 65 x 65 corners) and the numbers into ``cavity.json``."""
    data_dir.mkdir(parents=True, exist_ok=True)
    stem = f"cavity{reduced['re']}-n{reduced['n']}"
    p = reduced["profiles"]
    _write_csv(data_dir / f"{stem}-u.csv", ["z", "u"], (p["z"], p["u"]))
    _write_csv(data_dir / f"{stem}-w.csv", ["x", "w"], (p["x"], p["w"]))
    e = reduced["energy"]
    keep = np.unique(np.linspace(0, len(e["time"]) - 1, 400).astype(int))
    _write_csv(data_dir / f"{stem}-energy.csv", ["time", "kinetic_energy"],
               (e["time"][keep], e["kinetic_energy"][keep]), digits=16)  # rates of change near round-off
    s = reduced["psi"]  # one row per x: x, then psi at every z of the header row
    with (data_dir / f"{stem}-psi.csv").open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["x\\z"] + [f"{z:.8g}" for z in s["z"]])
        for x, row in zip(s["x"], s["psi"], strict=True):
            writer.writerow([f"{x:.8g}"] + [f"{v:.6g}" for v in row])
    summary_path = data_dir / "cavity.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {"runs": {}}
    numbers = {k: v for k, v in reduced.items() if k not in ("profiles", "psi", "energy")}
    if wall_s is not None:
        numbers["wall_s"] = wall_s
    summary["runs"][stem] = numbers
    summary["reference"] = "Ghia, Ghia & Shin (1982), J. Comput. Phys. 48, 387-411, Tables I, II, V"
    summary_path.write_text(json.dumps(summary, indent=1, sort_keys=True) + "\n")


def convergence(data_dir: Path) -> dict:
    """Grid convergence per Reynolds number from the saved files: the largest difference of the
    coarse and fine centreline profiles (fine spline at the coarse points) and the vortex shift."""
    from scipy.interpolate import CubicSpline

    runs = json.loads((data_dir / "cavity.json").read_text())["runs"]
    out = {}
    for re in REYNOLDS:
        coarse, fine = (f"cavity{re}-n{n}" for n in SIZES)
        if coarse not in runs or fine not in runs:
            continue
        diffs = []
        for var, coord in (("u", "z"), ("w", "x")):
            a, b = _read_csv(data_dir / f"{coarse}-{var}.csv"), _read_csv(data_dir / f"{fine}-{var}.csv")
            diffs.append(float(np.abs(CubicSpline(b[coord], b[var])(a[coord]) - a[var]).max()))
        va, vb = runs[coarse]["vortex"], runs[fine]["vortex"]
        out[re] = {"u_diff": diffs[0], "w_diff": diffs[1],
                   "vortex_shift": float(np.hypot(va["x"] - vb["x"], va["z"] - vb["z"]))}
    return out


# ------------------------------------------------------------------------------------------------
# Interface
# ------------------------------------------------------------------------------------------------


def config_for(re: int, n: int, store: Path) -> dict:
    """``examples/cavity{re}.yaml`` on an ``n x 2 x n`` grid writing ``store``, in process."""
    import yaml

    cfg = yaml.safe_load(data.path("examples", f"cavity{re}.yaml").read_text())
    cfg["grid"]["shape"] = [n, 2, n]
    if n > 64:  # fewer, equally spaced snapshots on the finer grid (twice the steps)
        cfg["output"]["fields_every"] = cfg["output"]["checkpoint_every"] = 2 * cfg["output"]["fields_every"]
    cfg["output"]["store"] = str(store)
    cfg["cluster"] = {"kind": "none"}
    return cfg


def simulate(re: int, n: int, work_dir: Path, end_time: float | None = None) -> tuple[Path, float]:
    """Run one cavity with ``daskflow run`` (reusing a finished store in ``work_dir``); returns the
    store and the wall time in seconds."""
    import yaml

    work_dir.mkdir(parents=True, exist_ok=True)
    stem = f"cavity{re}-n{n}"
    store, timing = work_dir / f"{stem}.zarr", work_dir / f"{stem}.json"
    if timing.exists() and store.exists():
        return store, json.loads(timing.read_text())["wall_s"]
    cfg = config_for(re, n, store)
    if end_time is not None:
        cfg["time"]["end_time"] = end_time
    path = work_dir / f"{stem}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "daskflow", "run", str(path), "--report-every", "500"], check=True)
    wall = time.perf_counter() - start
    timing.write_text(json.dumps({"wall_s": wall}))
    return store, wall


def run(data_dir: Path, work_dir: Path = Path("/tmp/daskflow-validation"), reynolds=REYNOLDS, sizes=SIZES,
        end_time: float | None = None, **_) -> None:
    """Run (or reuse) every cavity in ``work_dir`` and reduce each into ``data_dir``."""
    for re in reynolds:
        for n in sizes:
            store, wall = simulate(int(re), int(n), Path(work_dir), end_time)
            save(reduce_store(store), Path(data_dir), wall)


#: colour and line style of each grid size in the figures
STYLES = {SIZES[0]: ("tab:blue", "--"), SIZES[1]: ("tab:red", "-")}


def figures(data_dir: Path, fig_dir: Path) -> list[Path]:
    """Draw the cavity figures from the reduced data in ``data_dir`` into ``fig_dir``: for each Reynolds
    number with data, ``cavity{re}-centrelines`` and ``cavity{re}-streamfunction``, then
    ``cavity-steady-state``."""
    import matplotlib

    matplotlib.use("Agg")
    data_dir, fig_dir = Path(data_dir), Path(fig_dir)
    fig_dir.mkdir(parents=True, exist_ok=True)
    runs = json.loads((data_dir / "cavity.json").read_text())["runs"]
    paths = []
    for re in REYNOLDS:
        stems = [(n, f"cavity{re}-n{n}") for n in SIZES if f"cavity{re}-n{n}" in runs]
        if not stems:
            continue
        paths.append(_centrelines(re, stems, data_dir, fig_dir))
        paths.append(_streamfunction(re, stems, runs, data_dir, fig_dir))
    paths.append(_steady_state(runs, data_dir, fig_dir))
    return paths


def _centrelines(re: int, stems: list, data_dir: Path, fig_dir: Path) -> Path:
    """u on the vertical and w on the horizontal centreline of every grid (``stems``: ``(n, stem)``)
    against Ghia et al."""
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 4), dpi=100)
    for n, stem in stems:
        colour, line = STYLES.get(n, ("k", "-"))
        pu, pw = _read_csv(data_dir / f"{stem}-u.csv"), _read_csv(data_dir / f"{stem}-w.csv")
        a.plot(pu["u"], pu["z"], line, color=colour, label=f"daskflow {n}$^2$")
        b.plot(pw["x"], pw["w"], line, color=colour, label=f"daskflow {n}$^2$")
    a.plot(GHIA_U[re], GHIA_Z, "ko", mfc="none", label="Ghia et al. (1982)")
    b.plot(GHIA_X, GHIA_W[re], "ko", mfc="none", label="Ghia et al. (1982)")
    a.set(xlabel="u(x = 0.5, z)", ylabel="z", title=f"Re = {re}: u on the vertical centreline")
    b.set(xlabel="x", ylabel="w(x, z = 0.5)", title=f"Re = {re}: w on the horizontal centreline")
    for ax in (a, b):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    return save_figure(fig, fig_dir / f"cavity{re}-centrelines.png")


def _streamfunction(re: int, stems: list, runs: dict, data_dir: Path, fig_dir: Path) -> Path:
    """Streamlines of the finest grid with every grid's vortex centre and Ghia et al.'s."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4.6, 4.2), dpi=100)
    n, stem = stems[-1]
    x, z, psi = read_psi(data_dir / f"{stem}-psi.csv")
    levels = np.concatenate([np.linspace(psi.min(), 0, 12)[:-1], np.array([1e-5, 1e-4, 5e-4, 1e-3, 2e-3])])
    ax.contour(x, z, psi.T, levels=np.unique(levels), colors="k", linewidths=0.7)
    for n2, stem2 in stems:
        v = runs[stem2]["vortex"]
        ax.plot(v["x"], v["z"], "+", color=STYLES.get(n2, ("k", ""))[0], ms=12, label=f"centre {n2}$^2$")
    gx, gz, _ = GHIA_VORTEX[re]
    ax.plot(gx, gz, "ko", mfc="none", label="Ghia et al.")
    ax.set(xlabel="x", ylabel="z", title=f"Re = {re}: streamfunction ({n}$^2$)", aspect="equal")
    ax.legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    return save_figure(fig, fig_dir / f"cavity{re}-streamfunction.png")


def _steady_state(runs: dict, data_dir: Path, fig_dir: Path) -> Path:
    """The relative rate of change of the kinetic energy of every run versus time."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.8), dpi=100)
    for re in REYNOLDS:
        for n in SIZES:
            stem = f"cavity{re}-n{n}"
            if stem not in runs:
                continue
            e = _read_csv(data_dir / f"{stem}-energy.csv")
            rate = np.abs(np.diff(e["kinetic_energy"]) / np.diff(e["time"])) / e["kinetic_energy"][1:]
            ax.semilogy(e["time"][1:], rate, STYLES.get(n, ("k", "-"))[1],
                        color="tab:green" if re == 100 else "tab:purple", label=f"Re {re}, {n}$^2$")
    ax.axhline(1e-6, color="k", lw=0.8, ls=":")
    ax.set(xlabel="t (lid velocity and cavity side = 1)", ylabel="|dE/dt| / E",
           title="Approach to the steady state (kinetic energy)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return save_figure(fig, fig_dir / "cavity-steady-state.png")


def table(data_dir: Path) -> str:
    data_dir = Path(data_dir)
    runs = json.loads((data_dir / "cavity.json").read_text())["runs"]
    lines = ["| Re | grid | t (snapshot) | step | wall time (s) | vortex x | vortex z | psi min | Ghia (x, z, psi) "
             "| max dev. u | max dev. w | KE rate dE/dt/E | velocity change / t | rate < 1e-6 from t |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for re in REYNOLDS:
        for n in SIZES:
            r = runs.get(f"cavity{re}-n{n}")
            if r is None:
                continue
            v, g = r["vortex"], r["vortex_ghia"]
            wall = f"{r['wall_s']:.0f}" if "wall_s" in r else "-"
            lines.append(f"| {re} | {n}² | {r['time']:.1f} | {r['steps']} | {wall} | {v['x']:.4f} | {v['z']:.4f} "
                         f"| {v['psi']:.6f} | ({g['x']}, {g['z']}, {g['psi']}) | {r['ghia_u_max_dev']:.4f} "
                         f"| {r['ghia_w_max_dev']:.4f} | {r['ke_rate']:.1e} | {r['velocity_rate']:.1e} "
                         f"| {'never' if r.get('steady_time') is None else format(r['steady_time'], '.1f')} |")
    bp = BOTELLA_PEYRET_1000
    lines += ["", "Re = 1000 against Botella & Peyret (1998):", "",
              "| grid | psi min | u min (z) | w max (x) | w min (x) |", "|---|---|---|---|---|",
              "| " + " | ".join(["Botella & Peyret", f"{bp['vortex'][2]:.6f} at ({bp['vortex'][0]}, {bp['vortex'][1]})"]
                                + [f"{bp[k][0]:.5f} ({bp[k][1]})" for k in ("u_min", "w_max", "w_min")]) + " |"]
    for n in SIZES:
        r = runs.get(f"cavity1000-n{n}")
        if r is None or "extrema" not in r:
            continue
        v = r["vortex"]
        lines.append(f"| {n}² | {v['psi']:.6f} at ({v['x']:.4f}, {v['z']:.4f}) | "
                     + " | ".join(f"{r['extrema'][k][0]:.5f} ({r['extrema'][k][1]:.4f})"
                                  for k in ("u_min", "w_max", "w_min")) + " |")
    conv = convergence(data_dir)
    if conv:
        lines += ["", "| Re | max \\|u₆₄ − u₁₂₈\\| | max \\|w₆₄ − w₁₂₈\\| | vortex centre shift |", "|---|---|---|---|"]
        for re, c in conv.items():
            lines.append(f"| {re} | {c['u_diff']:.4f} | {c['w_diff']:.4f} | {c['vortex_shift']:.4f} |")
    return "\n".join(lines)
