"""Laminar plane Poiseuille and Couette flows started from rest, against the analytic solutions.

Both run in process (:class:`daskflow.Simulation`) on a ``2 x 2 x nz`` box of height ``h = 2``
(periodic x and y, walls at z = 0 and z = h), ``nu = 0.1`` (viscous time ``h^2 / nu = 40``), z-implicit
diffusion and a fixed time step per segment: ``dt = 0.01`` up to t = 2, ``0.1`` up to t = 8, ``0.4`` up
to t = 80 (two viscous times, when the slowest mode has decayed to ``exp(-pi^2 nu t / h^2) = 3e-9``).

* Poiseuille: constant pressure gradient ``-dp/dx = G = 0.2``; steady ``u = G z (h - z) / (2 nu)``
  (centreline velocity 1). From rest (the sine series of the parabola, odd modes only):
  ``u(z, t) = sum_n odd 4 G h^2 / (nu n^3 pi^3) sin(n pi z / h) (1 - exp(-n^2 pi^2 nu t / h^2))``.
* Couette: walls moving at -1 (bottom) and +1 (top); steady ``u = -1 + 2 z / h``; from rest
  ``u(z, t) = -1 + 2 z / h + sum_n even 4 / (n pi) sin(n pi z / h) exp(-n^2 pi^2 nu t / h^2)``.

Errors are the largest ``|u - u_exact|`` at the u points (velocity scale 1 in both flows), on uniform
and stretched (``z_stretch = 2``, clustered at both walls) grids with ``nz = 16, 32, 64``.
"""

from __future__ import annotations

import csv
import json
import time
from itertools import pairwise
from pathlib import Path

import numpy as np

from daskflow.validation import save_figure

H, NU, G = 2.0, 0.1, 0.2
SIZES = (16, 32, 64)
STRETCHES = (0.0, 2.0)
CASES = ("poiseuille", "couette")
SEGMENTS = ((0.01, (0.25, 0.5, 1.0, 2.0)), (0.1, (4.0, 8.0)), (0.4, (16.0, 32.0, 80.0)))
TRANSIENT_TIME = 1.0  # the time at which the transient error is compared across grids


def exact(case: str, z: np.ndarray, t: float, terms: int = 400) -> np.ndarray:
    """The analytic start-up profile at time ``t`` (``t = inf``: the steady profile)."""
    n = np.arange(1, terms + 1)[:, None]
    decay = np.zeros_like(n, dtype=float) if t == np.inf else np.exp(-(n * np.pi / H) ** 2 * NU * t)
    mode = np.sin(n * np.pi * z[None, :] / H)
    if case == "poiseuille":
        coefficient = np.where(n % 2 == 1, 4 * G * H**2 / (NU * (n * np.pi) ** 3), 0.0)
        if t == np.inf:
            return G * z * (H - z) / (2 * NU)
        return (coefficient * mode * (1 - decay)).sum(axis=0)
    steady = -1.0 + 2.0 * z / H
    coefficient = np.where(n % 2 == 0, 4 / (n * np.pi), 0.0)
    return steady + (coefficient * mode * decay).sum(axis=0)


def config(case: str, nz: int, stretch: float) -> dict:
    cfg = {"grid": {"shape": [2, 2, nz], "lengths": [1.0, 1.0, H], "z_stretch": stretch},
           "physics": {"nu": NU, "forcing": {"kind": "none"}},
           "boundaries": {"preset": "channel" if case == "poiseuille" else "couette"},
           "time": {"dt": SEGMENTS[0][0], "implicit_diffusion": "z"}, "initial": {"kind": "zero"},
           "solver": {"device": "cpu"}}
    if case == "poiseuille":
        cfg["physics"]["forcing"] = {"kind": "pressure_gradient", "value": [G, 0.0]}
    return cfg


def simulate(case: str, nz: int, stretch: float) -> dict:
    """One start-up run: the profile at every snapshot time and its errors."""
    from daskflow import Simulation
    from daskflow.backend import to_numpy

    sim = Simulation(config(case, nz, stretch))
    z = sim.grid.zc
    out = {"case": case, "nz": nz, "stretch": stretch, "z": z, "times": [], "profiles": [], "transient_error": [],
           "steady_error": []}
    start = time.perf_counter()
    for dt, times in SEGMENTS:
        sim.set_time(dt=dt)
        for t in times:
            sim.run(until=t)
            u = to_numpy(sim.u.compute()).mean(axis=(0, 1))
            out["times"].append(sim.time)
            out["profiles"].append(u)
            out["transient_error"].append(float(np.abs(u - exact(case, z, sim.time)).max()))
            out["steady_error"].append(float(np.abs(u - exact(case, z, np.inf)).max()))
    out["wall_s"] = time.perf_counter() - start
    return out


def _stem(case: str, nz: int, stretch: float) -> str:
    return f"{case}-nz{nz}-{'stretched' if stretch else 'uniform'}"


def run(data_dir: Path, sizes=SIZES, stretches=STRETCHES, **_) -> None:
    """Every (case, stretch, nz): profiles at the snapshot times (CSV) and the errors (laminar.json)."""
    data_dir = Path(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    summary = {"runs": {}, "nu": NU, "h": H, "G": G, "segments": [[dt, list(t)] for dt, t in SEGMENTS]}
    for case in CASES:
        for stretch in stretches:
            for nz in sizes:
                r = simulate(case, int(nz), float(stretch))
                stem = _stem(case, nz, stretch)
                with (data_dir / f"{stem}.csv").open("w", newline="") as fh:
                    writer = csv.writer(fh)
                    writer.writerow(["z"] + [f"t={t:g}" for t in r["times"]])
                    for k, zk in enumerate(r["z"]):
                        writer.writerow([f"{zk:.10g}"] + [f"{p[k]:.10g}" for p in r["profiles"]])
                summary["runs"][stem] = {key: r[key] for key in ("case", "nz", "stretch", "times", "transient_error",
                                                                  "steady_error", "wall_s")}
    (data_dir / "laminar.json").write_text(json.dumps(summary, indent=1) + "\n")


def _load(data_dir: Path) -> dict:
    return json.loads((Path(data_dir) / "laminar.json").read_text())["runs"]


ROUND_OFF = 1e-12


def _order(coarse: float, fine: float) -> float:
    """``log2(coarse / fine)``, or NaN when either error is at round-off level (exact profiles)."""
    return float(np.log2(coarse / fine)) if min(coarse, fine) > ROUND_OFF else float("nan")


def orders(data_dir: Path) -> dict:
    """Errors per grid and observed orders ``log2(e_n / e_2n)``: the final (t = 80) error against the
    steady profile and the error at t = 1 against the transient solution."""
    runs = _load(data_dir)
    out = {}
    for case in CASES:
        for stretch in STRETCHES:
            stems = [_stem(case, n, stretch) for n in SIZES if _stem(case, n, stretch) in runs]
            if not stems:
                continue
            final = [runs[s]["steady_error"][-1] for s in stems]
            index = runs[stems[0]]["times"].index(TRANSIENT_TIME)
            transient = [runs[s]["transient_error"][index] for s in stems]
            out[(case, stretch)] = {
                "nz": [runs[s]["nz"] for s in stems], "final": final, "transient": transient,
                "final_orders": [_order(a, b) for a, b in pairwise(final)],
                "transient_orders": [_order(a, b) for a, b in pairwise(transient)],
                "wall_s": sum(runs[s]["wall_s"] for s in stems)}
    return out


def figures(data_dir: Path, fig_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data_dir, fig_dir = Path(data_dir), Path(fig_dir)
    fig_dir.mkdir(parents=True, exist_ok=True)
    runs = _load(data_dir)
    paths = []
    for case in CASES:
        fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4), dpi=100)
        stem = _stem(case, 32, 2.0)
        with (data_dir / f"{stem}.csv").open() as fh:
            rows = list(csv.reader(fh))
        header, values = rows[0], np.array([[float(v) for v in r] for r in rows[1:]])
        z = values[:, 0]
        fine = np.linspace(0, H, 201)
        colours = plt.cm.viridis(np.linspace(0, 0.9, len(header) - 1))
        for j, (label, colour) in enumerate(zip(header[1:], colours, strict=True)):
            t = float(label[2:])
            a.plot(exact(case, fine, t), fine, "-", color=colour, lw=1)
            a.plot(values[:, j + 1], z, "o", color=colour, ms=3, label=label)
        a.set(xlabel="u", ylabel="z", title=f"{case.capitalize()} from rest (32 cells, stretched z): "
              "daskflow (dots), exact (lines)")
        a.title.set_fontsize(9)
        a.legend(fontsize=7, ncol=2)
        for stretch, line in ((0.0, "--"), (2.0, "-")):
            for n, colour in zip(SIZES, ("tab:blue", "tab:orange", "tab:green"), strict=True):
                r = runs.get(_stem(case, n, stretch))
                if r is None:
                    continue
                b.semilogy(r["times"], r["steady_error"], line + "o", color=colour, ms=3,
                           label=f"nz {n}, {'stretched' if stretch else 'uniform'}")
        b.set(xlabel="t", ylabel="max |u - u_steady|", title=f"{case.capitalize()}: distance to the steady profile")
        b.grid(alpha=0.3)
        b.legend(fontsize=7)
        fig.tight_layout()
        path = save_figure(fig, fig_dir / f"laminar-{case}.png")
        paths.append(path)
    fig, ax = plt.subplots(figsize=(5.5, 4), dpi=100)
    for (case, stretch), o in orders(data_dir).items():
        kind = "stretched" if stretch else "uniform"
        marker = "o" if case == "poiseuille" else "s"
        line = "-" if stretch else "--"
        if case == "poiseuille":
            ax.loglog(o["nz"], o["final"], marker + line, label=f"Poiseuille steady, {kind}")
        ax.loglog(o["nz"], o["transient"], marker + line, mfc="none",
                  label=f"{case.capitalize()} at t = {TRANSIENT_TIME:g}, {kind}")
    n = np.array(SIZES, dtype=float)
    ax.loglog(n, 0.5 * (n / n[0]) ** -2 * 1e-2, "k:", label="slope -2")
    ax.set(xlabel="nz", ylabel="max error", title="Laminar flows: error versus nz")
    ax.set_xticks(SIZES, [str(n) for n in SIZES])
    ax.minorticks_off()
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    fig.tight_layout()
    path = save_figure(fig, fig_dir / "laminar-orders.png")
    paths.append(path)
    return paths


def _fmt(order: float) -> str:
    return "round-off" if order != order else f"{order:.2f}"


def table(data_dir: Path) -> str:
    lines = ["| flow | z grid | nz | final error (t = 80) | order | error at t = 1 (vs transient) | order "
             "| wall time, 3 grids (s) |", "|---|---|---|---|---|---|---|---|"]
    for (case, stretch), o in orders(data_dir).items():
        for i, n in enumerate(o["nz"]):
            fo = _fmt(o["final_orders"][i - 1]) if i else ""
            to = _fmt(o["transient_orders"][i - 1]) if i else ""
            wall = f"{o['wall_s']:.0f}" if i == 0 else ""
            lines.append(f"| {case} | {'stretched' if stretch else 'uniform'} | {n} | {o['final'][i]:.2e} | {fo} "
                         f"| {o['transient'][i]:.2e} | {to} | {wall} |")
    return "\n".join(lines)
