"""Figures of a run: :func:`plot_wall_units` (a :func:`daskflow.analysis.wall_units` result against
the laws of the wall) and :func:`plot_scalars` (the run's time series). matplotlib is imported
lazily, and pyplot never: no global state, and no display needed."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import xarray as xr

KAPPA = 0.41
"""von Kármán constant of the log-law line in :func:`plot_wall_units`."""
LOG_LAW_B = 5.2
"""Additive constant of the log-law line ``U+ = ln(y+) / KAPPA + LOG_LAW_B``."""

SCALARS_ORDER = ("dt", "cfl", "div_max", "bulk_velocity", "kinetic_energy", "re_tau", "tau_wall_bottom", "tau_wall_top")

#: short symbols (matplotlib mathtext) of the stored scalars, for axis labels; the long names and units
#: come from the store's ``long_name`` and ``units`` attributes
_SCALAR_SYMBOLS = {
    "dt": r"$\Delta t$", "cfl": "CFL", "div_max": r"$\max|\nabla\cdot\mathbf{u}|$", "bulk_velocity": r"$U_b$",
    "kinetic_energy": r"$E_k$", "re_tau": r"$Re_\tau$", "tau_wall_bottom": r"$\tau_w$ (bottom)",
    "tau_wall_top": r"$\tau_w$ (top)", "tau_wall": r"$\tau_w$", "time": r"$t$",
}

_FIGURE_CLASS = None


def _figure_class():
    """A matplotlib ``Figure`` that Jupyter shows inline as a PNG (``_repr_png_``), also when pyplot and
    its inline backend were never loaded (the figures here are not pyplot's)."""
    global _FIGURE_CLASS
    if _FIGURE_CLASS is None:
        try:
            from matplotlib.figure import Figure
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ImportError("plotting needs matplotlib (pip install matplotlib)") from exc

        class PlotFigure(Figure):
            def _repr_png_(self) -> bytes:
                import io

                buffer = io.BytesIO()
                self.savefig(buffer, format="png", dpi=80)
                return buffer.getvalue()

        _FIGURE_CLASS = PlotFigure
    return _FIGURE_CLASS


def _figure(nrows: int, ncols: int, size: tuple[float, float]):
    fig = _figure_class()(figsize=size, layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False)
    return fig, axes


def _finish(fig, path: str | os.PathLike | None):
    """Save ``fig`` as a PNG at ``path`` and return the path, or return the figure when ``path`` is None
    (a matplotlib ``Figure``: the last expression of a notebook cell shows it inline)."""
    if path is None:
        return fig
    path = Path(path)
    fig.savefig(path, dpi=110)
    return path


def _per_wall(ds: xr.Dataset):
    """(wall name or "", dataset of one profile set) for a two-wall or a folded ``wall_units`` result."""
    if "wall" in ds.dims:
        return [(str(w), ds.sel(wall=w)) for w in ds["wall"].values]
    return [("", ds)]


def _decade_label(value: float, _pos=None) -> str:
    """Tick label of a power of ten: plain numbers from 0.001 to 10000 (``1``, ``10``, ``100``), ``10^k``
    outside; empty for anything else (a log axis labels its decades only)."""
    if not value > 0:
        return ""
    k = np.log10(value)
    if abs(k - round(k)) > 1e-6:
        return ""
    k = int(round(k))
    return f"{10.0 ** k:g}" if -3 <= k <= 4 else rf"$10^{{{k}}}$"


def _log_axis(ax, values: np.ndarray, axis: str = "x") -> None:
    """A log axis labelled at its decades only (``0.1, 1, 10, 100``), unlabelled minor ticks, and limits
    from the decade below the smallest value to the largest value (extended to the next decade when
    no labelled decade would be inside), so every plot has at least two labelled ticks."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    values = np.asarray(values, dtype=float)
    values = values[np.isfinite(values) & (values > 0)]
    scale = ax.set_xscale if axis == "x" else ax.set_yscale
    scale("log")
    target = ax.xaxis if axis == "x" else ax.yaxis
    target.set_major_locator(LogLocator(base=10.0, numticks=12))
    target.set_major_formatter(FuncFormatter(_decade_label))
    target.set_minor_locator(LogLocator(base=10.0, subs=np.arange(2, 10), numticks=12))
    target.set_minor_formatter(NullFormatter())
    if values.size:
        lo = 10.0 ** np.floor(np.log10(values.min()))
        hi = max(values.max() * 1.15, 10.0 * lo)
        (ax.set_xlim if axis == "x" else ax.set_ylim)(lo, hi)


def _units_label(units: str) -> str:
    """CF-style units of the store (``"L T-1"``, ``"L2 T-2"``, ``"1"``) as a mathtext bracket for an axis
    label (``" [L T^-1]"``); empty for dimensionless quantities; other strings as they are."""
    import re

    units = str(units).strip()
    if units in ("", "1"):
        return ""
    parts = []
    for token in units.split():
        m = re.fullmatch(r"([A-Za-z]+)(-?\d+)?", token)
        if m is None:
            return f" [{units}]"
        parts.append(m.group(1) if m.group(2) in (None, "1") else f"{m.group(1)}^{{{m.group(2)}}}")
    return r" [$\mathrm{" + r"\,".join(parts) + "}$]"


def _axis_label(var: xr.DataArray | None, name: str) -> str:
    """``symbol [units]`` from the variable's ``units`` attribute (the symbol from :data:`_SCALAR_SYMBOLS`,
    else ``long_name``, else the variable name)."""
    attrs = {} if var is None else var.attrs
    symbol = _SCALAR_SYMBOLS.get(name) or attrs.get("long_name") or name
    return symbol + _units_label(attrs.get("units", ""))


def _panel_title(var: xr.DataArray | None, name: str) -> str:
    """The variable's ``long_name`` with a capital first letter (the variable name when it has none)."""
    long_name = None if var is None else var.attrs.get("long_name")
    if not long_name:
        return name
    return long_name[0].upper() + long_name[1:]


def _run_summary(ds: xr.Dataset) -> str:
    """``grid nx × ny × nz, nu = ...`` from a dataset's ``attrs["run"]["config"]`` (empty when absent)."""
    try:
        config = ds.attrs["run"]["config"]
        shape = " × ".join(str(int(n)) for n in config["grid"]["shape"])
        return rf"grid {shape}, $\nu$ = {float(config['physics']['nu']):g}"
    except (KeyError, TypeError, ValueError):
        return ""


#: the quantities of the middle and right panels of :func:`plot_wall_units`, one colour each
_RMS_LINES = (("u_rms_plus", r"$u'^+$ (streamwise)"), ("v_rms_plus", r"$v'^+$ (spanwise)"),
              ("w_rms_plus", r"$w'^+$ (wall-normal)"), ("reynolds_stress_plus", r"$-\langle u'w'\rangle^+$"))
_STRESS_LINES = (("dUdy_plus", r"viscous $dU^+/dy^+$"),
                 ("reynolds_stress_plus", r"Reynolds $-\langle u'w'\rangle^+$"), ("total_stress_plus", "total"))


def plot_wall_units(ds: xr.Dataset, path: str | os.PathLike | None = None):
    """Plot a :func:`wall_units` result in three panels: the mean velocity ``U+`` versus ``y+`` on a log
    axis with the viscous sublayer ``U+ = y+`` and the log law ``U+ = ln(y+) / 0.41 + 5.2``; the rms
    velocities and the Reynolds shear stress versus ``y+`` (log axis); the mean stress balance versus
    ``y/h`` with the steady-state line ``1 - y/h``. A two-wall (unfolded) result draws both walls.

    With ``path``, saves a PNG there and returns the path; without, returns the matplotlib ``Figure``
    (shown inline as the last expression of a notebook cell)."""
    fig, axes = _figure(1, 3, (15.0, 4.6))
    ax_u, ax_rms, ax_stress = axes[0]
    yp_all = np.asarray(ds["yplus"].values, dtype=float)
    yp_all = yp_all[np.isfinite(yp_all) & (yp_all > 0)]
    _draw_walls(ax_u, ax_rms, ax_stress, _per_wall(ds))
    _log_axis(ax_u, yp_all)
    _log_axis(ax_rms, yp_all)
    if yp_all.size:
        _draw_laws_of_the_wall(ax_u, float(np.nanmax(ds["U_plus"].values)))
    ax_stress.plot([0.0, 1.0], [1.0, 0.0], "k--", lw=1, label=r"$1 - y/h$ (steady state)")
    ax_stress.set_xlim(0.0, 1.0)
    _label_wall_unit_panels(ax_u, ax_rms, ax_stress)
    fig.suptitle(_wall_units_title(ds))
    return _finish(fig, path)


def _draw_walls(ax_u, ax_rms, ax_stress, walls: list) -> None:
    """Each wall's ``U+`` (dots), rms velocities and Reynolds stress versus ``y+``, and stress balance
    versus ``y/h``: one colour per quantity; with two walls, the top wall dashed, the quantities named
    once and the walls named by their line style."""
    for index, (wall, one) in enumerate(walls):
        style = "-" if index == 0 else "--"
        yp = np.asarray(one["yplus"].values, dtype=float)
        ok = np.isfinite(yp) & (yp > 0)
        yp = yp[ok]
        ax_u.plot(yp, np.asarray(one["U_plus"].values)[ok], "o" + style, ms=3, color="C0",
                  label="daskflow" + (f" ({wall} wall)" if wall else ""))
        yh = np.asarray(one["y_over_h"].values, dtype=float)[ok]
        for ax, x, lines in ((ax_rms, yp, _RMS_LINES), (ax_stress, yh, _STRESS_LINES)):
            for colour, (name, label) in enumerate(lines):
                if name in one:
                    ax.plot(x, np.asarray(one[name].values)[ok], style, color=f"C{colour}",
                            label=label if index == 0 else None)
    if len(walls) > 1:
        for ax in (ax_rms, ax_stress):
            for index, (wall, _) in enumerate(walls):
                ax.plot([], [], "-" if index == 0 else "--", color="0.45", label=f"{wall} wall")


def _draw_laws_of_the_wall(ax_u, umax: float) -> None:
    """The viscous sublayer ``U+ = y+`` (up to ``y+ = 15``) and the log law (from ``y+ = 5``) across the
    log axis's limits, and the ``U+`` range from 0 to 1.2 times the largest ``U+`` (``umax``)."""
    lo, hi = ax_u.get_xlim()
    sub = np.geomspace(lo, min(hi, 15.0), 100)
    ax_u.plot(sub, sub, "k--", lw=1, label=r"viscous sublayer $U^+ = y^+$")
    if hi > 5.0:
        log = np.geomspace(max(lo, 5.0), hi, 100)
        ax_u.plot(log, np.log(log) / KAPPA + LOG_LAW_B, "k:", lw=1.2,
                  label=rf"log law $U^+ = \ln(y^+)/{KAPPA:g} + {LOG_LAW_B:g}$")
    ax_u.set_ylim(0.0, 1.2 * umax if umax > 0 else 1.0)


def _label_wall_unit_panels(ax_u, ax_rms, ax_stress) -> None:
    """Axis labels, titles, grids and legends of the three panels of :func:`plot_wall_units`."""
    ax_u.set(xlabel=r"$y^+ = y\,u_\tau/\nu$", ylabel=r"$U^+ = U/u_\tau$", title="Mean velocity")
    ax_rms.set(xlabel=r"$y^+ = y\,u_\tau/\nu$", ylabel=r"rms velocity / $u_\tau$, stress / $u_\tau^2$",
               title="Velocity fluctuations")
    ax_stress.set(xlabel=r"$y/h$", ylabel=r"shear stress / $\tau_w$", title="Mean shear stress balance")
    for ax in (ax_u, ax_rms, ax_stress):
        ax.grid(True, which="major", alpha=0.35)
        ax.grid(True, which="minor", alpha=0.12)
        ax.legend(fontsize="small")


def _wall_units_title(ds: xr.Dataset) -> str:
    """The figure title of :func:`plot_wall_units`: ``Re_tau``, ``u_tau``, the number of samples and the
    run (its grid and ``nu``, or the ``nu`` of the analysis)."""
    samples = int(ds["n_samples"]) if "n_samples" in ds else None
    details = [rf"$Re_\tau$ = {float(ds['re_tau']):.1f}", rf"$u_\tau$ = {float(ds['u_tau']):.4g}"]
    if samples is not None:
        details.append(f"{samples} sample{'s' if samples != 1 else ''}")
    summary = _run_summary(ds) or (rf"$\nu$ = {float(ds.attrs['nu']):g}" if "nu" in ds.attrs else "")
    return "Channel statistics in wall units: " + ", ".join(details) + (f" ({summary})" if summary else "")


def plot_scalars(scalars: xr.Dataset, path: str | os.PathLike | None = None, variables: list[str] | None = None):
    """Plot the run's scalar time series (every 1-D numeric variable on ``time`` except ``step``, or
    ``variables``) versus ``time``, one panel each (the two wall shear stresses share one), titled with the
    variable's ``long_name`` and labelled with its ``units`` attribute (powers of the configuration's
    length L and time T); positive series spanning more than two decades (``div_max``) on a log axis.

    With ``path``, saves a PNG there and returns the path; without, returns the matplotlib ``Figure``."""
    if variables is None:
        found = [name for name, var in scalars.data_vars.items()
                 if var.dims == ("time",) and name != "step" and np.issubdtype(var.dtype, np.number)]
        variables = [name for name in SCALARS_ORDER if name in found] + sorted(set(found) - set(SCALARS_ORDER))
        walls = ("tau_wall_bottom", "tau_wall_top")
        both = all(name in variables for name in walls)
        panels = [walls if both and name == walls[0] else (name,) for name in variables
                  if not (both and name == walls[1])]
    else:
        panels = [(name,) for name in variables]
    if not panels:
        raise ValueError("no scalar time series to plot")
    ncols = 2 if len(panels) > 1 else 1
    nrows = -(-len(panels) // ncols)
    fig, axes = _figure(nrows, ncols, (6.4 * ncols, 2.9 * nrows + 0.5))
    t = np.asarray(scalars["time"].values)
    units_used = False
    for ax, group in zip(axes.ravel(), panels, strict=False):
        values = []
        for name in group:
            y = np.asarray(scalars[name].values, dtype=float)
            label = {"tau_wall_bottom": "bottom wall", "tau_wall_top": "top wall"}.get(name, name)
            ax.plot(t, y, lw=1, label=label)
            values.append(y)
        finite = np.concatenate(values)
        finite = finite[np.isfinite(finite)]
        if finite.size and finite.min() > 0 and finite.max() > 100 * finite.min():
            _log_axis(ax, finite, axis="y")
        first = scalars[group[0]]
        name = "tau_wall" if len(group) > 1 and group[0].startswith("tau_wall") else group[0]
        title = "Kinematic wall shear stress" if name == "tau_wall" else _panel_title(first, group[0])
        ax.set(xlabel=_axis_label(scalars["time"], "time"), ylabel=_axis_label(first, name), title=title)
        units_used = units_used or bool(_units_label(first.attrs.get("units", "")))
        if len(group) > 1:
            ax.legend(fontsize="small")
        ax.grid(True, alpha=0.3)
    for ax in axes.ravel()[len(panels):]:
        ax.set_visible(False)
    summary = _run_summary(scalars)
    fig.suptitle("Run time series" + (f" ({summary})" if summary else ""))
    if units_used:
        fig.supxlabel("units: L and T are the length and time units of the configuration", fontsize="small")
    return _finish(fig, path)
