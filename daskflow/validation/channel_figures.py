"""The turbulent channel's figures (see :mod:`daskflow.validation.channel`), drawn from the reduced
data only: what :func:`daskflow.validation.channel_comparison.evaluate` computes from them."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from daskflow.validation import save_figure
from daskflow.validation.channel_comparison import COMPARED, POOL, PRESSURE_COLUMN, evaluate, reference_profile

LABELS = {"U_plus": r"$U^+$", "u_rms_plus": r"$u'^+$ (streamwise)", "w_rms_plus": r"$w'^+$ (wall-normal)",
          "v_rms_plus": r"$v'^+$ (spanwise)", "reynolds_stress_plus": r"$-\langle u'w'\rangle^+$",
          "p_rms_plus": r"$p'^+$"}
#: how the reference points are drawn, in the order of the references (MKM: circles, LM: squares)
MARKERS = ("o", "s")
#: how the deviation panels draw daskflow minus each reference (MKM: solid, LM: dashed)
DEVIATION_STYLES = ("-", "--")
#: what the shaded bands of the comparison figures are
BAND = (f"shaded: $\\pm 2\\sigma$ (sampling), $\\sigma$ = |first half $-$ second half| / 2, "
        f"RMS over {2 * POOL + 1} neighbouring points")


def figures(data_dir: Path, fig_dir: Path) -> list[Path]:
    """Draw the channel figures from the reduced data in ``data_dir`` into ``fig_dir``: ``channel180-``
    ``history``, ``mean``, ``rms``, ``stress-balance`` (always), ``pressure`` (when the profiles carry
    ``p_rms_plus``), ``streaks`` and ``spectra`` (when the slice is committed)."""
    import matplotlib

    matplotlib.use("Agg")
    fig_dir = Path(fig_dir)
    fig_dir.mkdir(parents=True, exist_ok=True)
    ev = evaluate(data_dir)
    paths = [_history(ev, fig_dir), _mean_velocity(ev, fig_dir), _rms(ev, fig_dir), _stress_balance(ev, fig_dir)]
    if PRESSURE_COLUMN in ev["profiles"]["full"]:
        paths.append(_pressure(ev, fig_dir))
    if "slice" in ev:
        paths += [_streaks(ev, fig_dir), _spectra(ev, fig_dir)]
    return paths


def _profile_inputs(ev: dict) -> tuple[dict, list[tuple[dict, str, str]], dict, str]:
    """What every profile figure draws: the whole window's profiles, the references (each with how the
    legends name it, with its Re_tau, and its abbreviation), the statistical errors, and how the legends
    name daskflow's run."""
    ours = f"daskflow, $Re_\\tau$ = {ev['summary']['windows']['full']['re_tau']:.1f}"
    refs = [(r["reference"], f"{name}, $Re_\\tau$ = {r['bulk']['re_tau']:.2f}", r["short"])
            for name, r in ev["references"].items()]
    return ev["profiles"]["full"], refs, ev["sigma"], ours


def _history(ev: dict, fig_dir: Path) -> Path:
    """Re_tau versus time with the reference and the window mean's 2-sigma band, the wall stresses below;
    the averaging window shaded."""
    import matplotlib.pyplot as plt

    s, stat = ev["scalars"], ev["statistics"]["re_tau"]
    t0, t1 = ev["summary"]["windows"]["full"]["window"]
    fig, axes = plt.subplots(2, 1, figsize=(7.5, 5.5), sharex=True, layout="constrained")
    axes[0].plot(s["time"], s["re_tau"], lw=0.8, color="k", label="daskflow")
    for (name, r), colour, style in zip(ev["references"].items(), ("tab:red", "tab:green"), ("--", "-."),
                                        strict=False):
        axes[0].axhline(r["bulk"]["re_tau"], color=colour, ls=style, lw=0.8,
                        label=f"{name}: {r['bulk']['re_tau']:.2f} ($Re_b$ = {r['bulk']['Re_b']:.0f})")
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
    return save_figure(fig, fig_dir / "channel180-history.png")


def _mean_velocity(ev: dict, fig_dir: Path) -> Path:
    """U+ against the reference and the laws of the wall, and its difference from the reference."""
    import matplotlib.pyplot as plt

    from daskflow.analysis import KAPPA, LOG_LAW_B

    full, refs, sigma, ours = _profile_inputs(ev)
    yp = full["yplus"]
    fig, axes = plt.subplots(2, 1, figsize=(7, 6.5), sharex=True, height_ratios=(2.2, 1), layout="constrained")
    ax = axes[0]
    ax.plot(yp, full["U_plus"], "k.-", ms=3.5, lw=1.2, label=f"{ours} (dots: grid points)")
    for (ref, theirs, _), marker, colour in zip(refs, MARKERS, ("tab:red", "tab:blue"), strict=False):
        ax.plot(ref["yplus"][1:], ref["U_plus"][1:], marker, mfc="none", mec=colour, ms=4.5 if marker == "o" else 3.5,
                label=theirs)
    fine = np.geomspace(0.5, 200.0, 400)
    ax.plot(fine[fine < 12], fine[fine < 12], "b--", lw=0.8, label=r"$U^+ = y^+$")
    ax.plot(fine[fine > 10], np.log(fine[fine > 10]) / KAPPA + LOG_LAW_B, "g--", lw=0.8,
            label=rf"$U^+ = \ln(y^+)/{KAPPA} + {LOG_LAW_B}$")
    ax.set_ylabel(r"$U^+ = U/u_\tau$")
    ax.legend(fontsize=8, loc="upper left")
    ax.set_title(f"Mean velocity against {' and '.join(ev['references'])}", fontsize=10)
    ax = axes[1]
    for (ref, _, short), style in zip(refs, DEVIATION_STYLES, strict=False):
        _deviation(ax, full, ref, "U_plus", sigma.get("U_plus"), "k", style, f"$-$ {short}")
    ax.set_ylabel(r"$U^+ - U^+_{\rm ref}$")
    ax.legend(fontsize=8, loc="lower left", title=BAND, title_fontsize=7)
    for ax in axes:
        _log_yplus_axis(ax)
    axes[0].set_xlabel("")
    return save_figure(fig, fig_dir / "channel180-mean.png")


def _rms(ev: dict, fig_dir: Path) -> Path:
    """The rms velocities and the Reynolds shear stress against the reference, and their differences."""
    import matplotlib.pyplot as plt

    full, refs, sigma, ours = _profile_inputs(ev)
    yp = full["yplus"]
    fig, axes = plt.subplots(2, 1, figsize=(7.5, 8), sharex=True, height_ratios=(2, 1.3), layout="constrained")
    colours = {"u_rms_plus": "tab:blue", "w_rms_plus": "tab:orange", "v_rms_plus": "tab:green",
               "reynolds_stress_plus": "tab:purple"}
    for name, colour in colours.items():
        column, form = COMPARED[name]
        axes[0].plot(yp, full[name], ".-", color=colour, ms=3, lw=1.2, label=f"{LABELS[name]} daskflow")
        for (ref, _, short), marker, style in zip(refs, MARKERS, DEVIATION_STYLES, strict=False):
            axes[0].plot(ref["yplus"][1:], form(ref[column][1:]), marker, mfc="none", mec=colour,
                         ms=4 if marker == "o" else 3, label=f"{LABELS[name]} {short}")
            _deviation(axes[1], full, ref, name, sigma.get(name), colour, style, f"$-$ {short}")
    markers = "; ".join(f"{'circles' if m == 'o' else 'squares'}: {theirs}" for (_, theirs, _), m in
                        zip(refs, MARKERS, strict=False))
    axes[0].set_ylabel("wall units ($u_\\tau$, $u_\\tau^2$)")
    axes[0].set_ylim(top=1.4 * max(np.nanmax(full[name]) for name in colours))  # room for the legend
    axes[0].legend(fontsize=7, ncol=3, loc="upper left")
    axes[0].set_title(f"rms velocities and Reynolds shear stress\nlines: {ours}\n{markers}", fontsize=9)
    axes[1].set_ylabel("daskflow $-$ reference")
    axes[1].set_title(f"solid: daskflow $-$ {refs[0][2]}, dashed: daskflow $-$ {refs[-1][2]}\n{BAND}", fontsize=7.5)
    axes[1].legend(fontsize=7, ncol=4, loc="lower left")
    for ax in axes:
        _log_yplus_axis(ax)
    axes[0].set_xlabel("")
    return save_figure(fig, fig_dir / "channel180-rms.png")


def _stress_balance(ev: dict, fig_dir: Path) -> Path:
    """The mean stress balance of the whole window, and its error for the window and its halves."""
    import matplotlib.pyplot as plt

    profiles = ev["profiles"]
    full = profiles["full"]
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
    return save_figure(fig, fig_dir / "channel180-stress-balance.png")


def _pressure(ev: dict, fig_dir: Path) -> Path:
    """The pressure rms against the reference, with its 2-sigma band."""
    import matplotlib.pyplot as plt

    full, refs, sigma, ours = _profile_inputs(ev)
    yp = full["yplus"]
    fig, ax = plt.subplots(figsize=(7, 4.5), layout="constrained")
    ax.plot(yp, full[PRESSURE_COLUMN], "k-", lw=1.4, label=ours)
    if PRESSURE_COLUMN in sigma:
        ax.fill_between(yp, full[PRESSURE_COLUMN] - 2 * sigma[PRESSURE_COLUMN],
                        full[PRESSURE_COLUMN] + 2 * sigma[PRESSURE_COLUMN], color="0.7", lw=0)
    for (ref, theirs, _), marker, colour in zip(refs, MARKERS, ("tab:red", "tab:blue"), strict=False):
        ax.plot(ref["yplus"], np.sqrt(ref["R_pp"]), marker, mfc="none", mec=colour, ms=4 if marker == "o" else 3,
                label=theirs)
    _log_yplus_axis(ax)
    ax.set_ylabel(r"$p'^+ = p_{\rm rms}/(\rho u_\tau^2)$")
    ax.set_title("Pressure fluctuations")
    ax.legend(fontsize=8)
    return save_figure(fig, fig_dir / "channel180-pressure.png")


def _streaks(ev: dict, fig_dir: Path) -> Path:
    """The committed near-wall plane of the streamwise velocity, in wall units."""
    import matplotlib.pyplot as plt

    w_full = ev["summary"]["windows"]["full"]
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
    return save_figure(fig, fig_dir / "channel180-streaks.png", dpi=60)


def _spectra(ev: dict, fig_dir: Path) -> Path:
    """The premultiplied streamwise and spanwise spectra of the committed plane."""
    import matplotlib.pyplot as plt

    w_full = ev["summary"]["windows"]["full"]
    sl = ev["slice"]
    (lx, ly), re_tau, h = sl["lengths"], w_full["re_tau"], sl["h"]
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
    return save_figure(fig, fig_dir / "channel180-spectra.png")


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


def _deviation(ax, full: dict, ref: dict, name: str, sigma: np.ndarray | None, colour: str, style: str = "-",
               suffix: str = "") -> None:
    """Plot daskflow's profile ``name`` minus the reference at daskflow's points (line ``style``), with a
    +-2 sigma band around the solid (primary) one."""
    yp = full["yplus"]
    difference = full[name] - reference_profile(ref, name, yp)
    ax.plot(yp, difference, style, color=colour, lw=1.2 if style == "-" else 1.0,
            label=f"{LABELS[name]} {suffix}".strip())
    if sigma is not None and style == "-":
        ax.fill_between(yp, difference - 2 * sigma, difference + 2 * sigma, color=colour, alpha=0.2, lw=0)
    ax.axhline(0.0, color="0.4", lw=0.6)
