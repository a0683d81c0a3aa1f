"""Decaying 2-D Taylor-Green vortex: spatial and temporal order of accuracy.

The vortex ``u = sin x cos z e^{-2 nu t}``, ``w = -cos x sin z e^{-2 nu t}``,
``p = (cos 2x + cos 2z) / 4 e^{-4 nu t}`` in a periodic ``2 pi x 1 x 2 pi`` box (two cells in y)
is an exact Navier-Stokes solution, run in process (:class:`daskflow.Simulation`,
``initial.kind: taylor_green``). :func:`simulate` also runs it with one cell across the plane
(``thin=1``: the flow is uniform along that axis, so one cell gives the same fields as two) and in
the x-y plane (``plane="xy"``: ``u = sin x cos y``, ``v = -cos x sin y``, z the thin axis).

* Space: ``n x 2 x n`` cells, ``n = 16, 32, 64``, ``nu = 0.05``, to t = 0.4 with ``dt = 6.4 / n^2`` (the
  time error falls with the spatial one); errors are the largest ``|u - u_exact|`` and
  ``|p - p_exact|`` (both with zero mean).
* Time: ``24 x 2 x 24`` cells, ``nu = 0.2``, to t = 0.8 with 8 to 64 steps, against a 640-step run
  on the same grid (so only the time error is measured), for explicit, z-implicit and fully
  implicit diffusion.
"""

from __future__ import annotations

import json
import time
from itertools import pairwise
from pathlib import Path

import numpy as np

from daskflow.validation import save_figure

SPACE_SIZES = (16, 32, 64)
TIME_STEPS = (8, 16, 32, 64)
REFERENCE_STEPS = 640
IMPLICIT = ("none", "z", "xyz")
TIME_N, TIME_END, TIME_NU = 24, 0.8, 0.2
SPACE_END, SPACE_NU = 0.4, 0.05


PLANES = ("xz", "xy")


def config(n: int, dt: float, nu: float = 0.05, implicit: str = "none", plane: str = "xz", thin: int = 2,
           **solver) -> dict:
    """The configuration of a Taylor-Green run in ``plane`` on ``n x n`` cells and ``thin`` cells
    across it (``solver``: entries of the config's ``solver`` section)."""
    if plane not in PLANES:
        raise ValueError(f"plane must be one of {PLANES}, got {plane!r}")
    shape, lengths = [n, n, n], [2 * np.pi] * 3
    across = 1 if plane == "xz" else 2
    shape[across], lengths[across] = thin, 1.0
    return {"grid": {"shape": shape, "lengths": lengths},
            "physics": {"nu": nu, "forcing": {"kind": "none", "value": [0.0, 0.0]}},
            "boundaries": {"preset": "periodic"},
            "initial": {"kind": "taylor_green" if plane == "xz" else "zero", "amplitude": 1.0},
            "time": {"dt": dt, "implicit_diffusion": implicit}, "solver": solver}


def simulate(n: int, dt: float, steps: int, nu: float = 0.05, implicit: str = "none", plane: str = "xz",
             thin: int = 2, client=None, **solver):
    """A Taylor-Green run in ``plane`` on ``n x n`` cells (``thin`` across it: ``n x 2 x n`` by
    default) advanced ``steps`` steps of ``dt``; on ``client``'s workers when given."""
    from daskflow import Simulation

    sim = Simulation(config(n, dt, nu, implicit, plane, thin, **solver), client=client)
    if plane == "xy":
        sim.set(u=lambda x, y, z: np.sin(x) * np.cos(y), v=lambda x, y, z: -np.cos(x) * np.sin(y))
    sim.run(steps=steps)
    return sim


def exact(sim, plane: str = "xz"):
    """The exact in-plane velocity along x (at the ``u`` points) and the pressure at the time of
    ``sim``, arrays of the grid's shape."""
    t, nu, g = sim.time, sim.config.physics.nu, sim.grid
    decay = np.exp(-2 * nu * t)
    second = g.zc[None, None, :] if plane == "xz" else g.yc[None, :, None]
    u_exact = np.sin(g.xf[1:, None, None]) * np.cos(second) * decay
    p_exact = (np.cos(2 * g.xc[:, None, None]) + np.cos(2 * second)) / 4 * decay**2
    return np.broadcast_to(u_exact, g.shape), np.broadcast_to(p_exact, g.shape)


def field(sim, name: str):
    """Field ``name`` of ``sim`` as one array (gathered from the workers of a cluster run)."""
    return getattr(sim.state, name) if sim.client is None else getattr(sim, name).compute()


def errors(sim, plane: str = "xz") -> tuple[float, float]:
    """Largest velocity (``u``) and pressure errors against the exact decaying vortex in ``plane``
    (the pressure compared up to its mean)."""
    from daskflow.backend import to_numpy

    u_exact, p_exact = exact(sim, plane)
    p = to_numpy(field(sim, "p"))
    u_err = np.abs(to_numpy(field(sim, "u")) - u_exact).max()
    p_err = np.abs((p - p.mean()) - (p_exact - p_exact.mean())).max()
    return float(u_err), float(p_err)


def space_errors(sizes=SPACE_SIZES, plane: str = "xz", thin: int = 2, end: float = SPACE_END,
                 **solver) -> list[tuple[float, float]]:
    """``(u error, p error)`` per grid of the spatial study (``dt = 6.4 / n^2`` to time ``end``)."""
    out = []
    for n in sizes:
        dt = 0.4 / n**2 * 16
        out.append(errors(simulate(n, dt, int(round(end / dt)), SPACE_NU, plane=plane, thin=thin, **solver), plane))
    return out


def time_errors(implicit: str, steps=TIME_STEPS, n: int = TIME_N) -> list[tuple[float, float]]:
    """``(u error, p error)`` per step count against the ``REFERENCE_STEPS`` run (same grid)."""
    from daskflow.backend import to_numpy

    ref = simulate(n, TIME_END / REFERENCE_STEPS, REFERENCE_STEPS, TIME_NU, implicit)
    u_ref, p_ref = to_numpy(ref.state.u), to_numpy(ref.state.p)
    out = []
    for count in steps:
        sim = simulate(n, TIME_END / count, count, TIME_NU, implicit)
        u, p = to_numpy(sim.state.u), to_numpy(sim.state.p)
        out.append((float(np.abs(u - u_ref).max()), float(np.abs((p - p.mean()) - (p_ref - p_ref.mean())).max())))
    return out


def observed_orders(errors_: list[float], ratio: float = 2.0) -> list[float]:
    """``log(e_i / e_{i+1}) / log(ratio)`` for successive refinements."""
    return [float(np.log(a / b) / np.log(ratio)) for a, b in pairwise(errors_)]


def run(data_dir: Path, **_) -> None:
    data_dir = Path(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    space = space_errors()
    out = {"space": {"n": list(SPACE_SIZES), "u_error": [e[0] for e in space], "p_error": [e[1] for e in space],
                     "nu": SPACE_NU, "end_time": SPACE_END, "wall_s": time.perf_counter() - start},
           "time": {"n": TIME_N, "nu": TIME_NU, "end_time": TIME_END, "steps": list(TIME_STEPS),
                    "reference_steps": REFERENCE_STEPS}}
    for implicit in IMPLICIT:
        start = time.perf_counter()
        errs = time_errors(implicit)
        out["time"][implicit] = {"u_error": [e[0] for e in errs], "p_error": [e[1] for e in errs],
                                 "wall_s": time.perf_counter() - start}
    (data_dir / "taylor_green.json").write_text(json.dumps(out, indent=1) + "\n")


def _load(data_dir: Path) -> dict:
    return json.loads((Path(data_dir) / "taylor_green.json").read_text())


def figures(data_dir: Path, fig_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    d = _load(data_dir)
    fig_dir = Path(fig_dir)
    fig_dir.mkdir(parents=True, exist_ok=True)
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4), dpi=100)
    n = np.array(d["space"]["n"], dtype=float)
    a.loglog(n, d["space"]["u_error"], "o-", label="velocity u")
    a.loglog(n, d["space"]["p_error"], "s-", label="pressure p")
    a.loglog(n, d["space"]["u_error"][0] * (n / n[0]) ** -2, "k:", label="slope -2")
    a.set(xlabel="n (cells per side)", ylabel="max error", title="Taylor-Green: spatial convergence")
    a.set_xticks(SPACE_SIZES, [str(n) for n in SPACE_SIZES])
    a.minorticks_off()
    t = d["time"]
    dt = t["end_time"] / np.array(t["steps"], dtype=float)
    for implicit, marker in zip(IMPLICIT, "o^s", strict=True):
        b.loglog(dt, t[implicit]["u_error"], marker + "-", label=f"u, implicit diffusion: {implicit}")
    b.loglog(dt, t["none"]["u_error"][0] * (dt / dt[0]) ** 3, "k:", label="slope 3")
    b.loglog(dt, t["z"]["u_error"][0] * (dt / dt[0]) ** 2, "k--", lw=0.8, label="slope 2")
    b.set(xlabel="dt", ylabel="max error vs 640-step run", title="Taylor-Green: temporal convergence (24² cells)")
    for ax in (a, b):
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
    fig.tight_layout()
    path = save_figure(fig, fig_dir / "taylor-green-orders.png")
    return [path]


def table(data_dir: Path) -> str:
    d = _load(data_dir)
    s = d["space"]
    uo, po = observed_orders(s["u_error"]), observed_orders(s["p_error"])
    lines = [f"Space (nu = {s['nu']}, t = {s['end_time']}, dt = 6.4/n²; wall time {s['wall_s']:.0f} s):", "",
             "| n | max u error | order | max p error | order |", "|---|---|---|---|---|"]
    for i, n in enumerate(s["n"]):
        lines.append(f"| {n} | {s['u_error'][i]:.3e} | {uo[i - 1]:.2f} | {s['p_error'][i]:.3e} | {po[i - 1]:.2f} |"
                     if i else f"| {n} | {s['u_error'][i]:.3e} | | {s['p_error'][i]:.3e} | |")
    t = d["time"]
    lines += ["", f"Time ({t['n']}² cells, nu = {t['nu']}, t = {t['end_time']}, against a {t['reference_steps']}-step "
              "run):", "", "| implicit diffusion | steps | max u error | order | max p error | order | wall time (s) |",
              "|---|---|---|---|---|---|---|"]
    for implicit in IMPLICIT:
        e = t[implicit]
        uo, po = observed_orders(e["u_error"]), observed_orders(e["p_error"])
        for i, steps in enumerate(t["steps"]):
            orders = f"{uo[i - 1]:.2f}" if i else "", f"{po[i - 1]:.2f}" if i else ""
            wall = f"{e['wall_s']:.0f}" if i == 0 else ""
            lines.append(f"| {implicit} | {steps} | {e['u_error'][i]:.3e} | {orders[0]} | {e['p_error'][i]:.3e} "
                         f"| {orders[1]} | {wall} |")
    return "\n".join(lines)
